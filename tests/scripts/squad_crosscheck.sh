#!/bin/sh
# Cross-check `thx score squad` with SQuAD v1.1 scoring written in Python from the published
# definition (tests/scripts/squad_crosscheck.py), on the real dev set and predictions made
# hard on purpose: gold answers with case, punctuation, articles, extra and missing words,
# Unicode, empty and missing predictions. Exit 77 (skipped) without ../shared/data.
set -eu
thx="$1"
py=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
dev="$here/../../../shared/data/squad/v1.1/dev-v1.1.json"
if [ ! -f "$dev" ]; then
  echo "SKIP: $dev is absent"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$py" - "$dev" "$dir/p.json" <<'PY'
import json, random, sys
random.seed(7)
data = json.load(open(sys.argv[1]))["data"]
out = {}
for article in data:
    for para in article["paragraphs"]:
        ctx = para["context"]
        for qa in para["qas"]:
            g = random.choice(qa["answers"])["text"]
            k = random.randrange(9)
            if k == 0: p = g.upper() + "!"
            elif k == 1: p = "The " + g + ", " + "an answer"
            elif k == 2: p = " ".join(g.split()[:-1])
            elif k == 3: p = ctx[max(0, len(ctx) // 2 - 20): len(ctx) // 2 + 20]
            elif k == 4: p = ""
            elif k == 5: continue  # missing
            elif k == 6: p = g.replace(" ", "\u00a0") + " é"
            elif k == 7: p = "a " + g + " the"
            else: p = g
            out[qa["id"]] = p
json.dump(out, open(sys.argv[2], "w"), ensure_ascii=False)
PY
want=$("$py" "$here/squad_crosscheck.py" "$dev" "$dir/p.json")
got=$("$thx" score squad --data "$dev" --predictions "$dir/p.json" 2>/dev/null)
echo "python: $want"
echo "thx:    $got"
[ "$want" = "$got" ]
