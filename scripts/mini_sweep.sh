#!/usr/bin/env bash
# mini_sweep.sh TABLE: one of the paper's tables at mini scale, end to end, on this machine.
#
#   scripts/mini_sweep.sh table1        # configs/mini/table1.yaml; about 2.1 hours on 2 cores
#   scripts/mini_sweep.sh table5        # ALBERT, configs/mini/table5.yaml; about 45 minutes
#
# 1. T5 tables (1-4, 8-10): SentencePiece (8000 pieces, T5's ids) and shards of English
#    Wikipedia (../shared/data/pretrain/enwiki, WikiExtractor format; 1% held out).
#    ALBERT/BERT tables (5-7): SentencePiece (30000 pieces, ALBERT's ids) and shards of the
#    Wikipedia extract plus the Gutenberg books (../shared/data/pretrain/gutenberg, one book per
#    document). Into data/prepared/, skipped when done;
# 2. thx sweep --jobs 2 (one thread per run; a re-run resumes what did not finish);
# 3. the table and the claims report into docs/results/<table>-mini{,-claims}.md and the loss
#    curves into docs/results/<table>-mini-curves.png.
set -euo pipefail
cd "$(dirname "$0")/.."
TABLE=${1:?usage: scripts/mini_sweep.sh TABLE (table1, table2, ...)}
THX=${THX:-build/thx}
WIKI=${WIKI:-../shared/data/pretrain/enwiki}
BOOKS=${BOOKS:-../shared/data/pretrain/gutenberg}
SWEEP=configs/mini/$TABLE.yaml
[ -f "$SWEEP" ] || { echo "mini_sweep: $SWEEP does not exist" >&2; exit 2; }
[ -d "$WIKI" ] || { echo "mini_sweep: $WIKI is missing (the shared Wikipedia extract)" >&2; exit 2; }

mkdir -p data/prepared docs/results
case "$TABLE" in
  table5|table6|table7)
    [ -d "$BOOKS" ] || { echo "mini_sweep: $BOOKS is missing (the shared Gutenberg books)" >&2; exit 2; }
    if [ ! -f data/prepared/wiki-books-albert30k.model ]; then
      "$THX" spm-train --convention albert --input "$WIKI" --input "$BOOKS" --pieces 30000 \
        --max-sentences 400000 --out data/prepared/wiki-books-albert30k
    fi
    "$THX" prepare --input "$WIKI" --input "books:$BOOKS/book_*.txt" \
      --tokenizer data/prepared/wiki-books-albert30k.model --out data/prepared/wiki-books-albert
    ;;
  *)
    if [ ! -f data/prepared/enwiki-spm8k.model ]; then
      "$THX" spm-train --input "$WIKI" --format wikiextractor --pieces 8000 --max-sentences 300000 \
        --out data/prepared/enwiki-spm8k
    fi
    "$THX" prepare --input "$WIKI" --format wikiextractor --tokenizer data/prepared/enwiki-spm8k.model \
      --out data/prepared/enwiki --heldout-fraction 0.01
    ;;
esac

name=$(sed -n 's/^sweep: *//p' "$SWEEP")
"$THX" sweep --config "$SWEEP" --jobs 2
"$THX" table --sweep "runs/$name" --layout "$TABLE" > "docs/results/$name.md"
"$THX" claims --sweep "runs/$name" > "docs/results/$name-claims.md"
/usr/bin/python3 scripts/plot_curves.py "runs/$name" --out "docs/results/$name-curves.png"
echo "mini_sweep: docs/results/$name.md, $name-claims.md, $name-curves.png"
