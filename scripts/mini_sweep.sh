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
#    document). Into data/prepared/ by scripts/prepare_data.sh, skipped when done;
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

mkdir -p docs/results
case "$TABLE" in
  table5|table6|table7) THX="$THX" WIKI="$WIKI" BOOKS="$BOOKS" scripts/prepare_data.sh wiki-books-albert ;;
  *) THX="$THX" WIKI="$WIKI" scripts/prepare_data.sh enwiki ;;
esac

name=$(sed -n 's/^sweep: *//p' "$SWEEP")
"$THX" sweep --config "$SWEEP" --jobs 2
"$THX" table --sweep "runs/$name" --layout "$TABLE" > "docs/results/$name.md"
"$THX" claims --sweep "runs/$name" > "docs/results/$name-claims.md"
/usr/bin/python3 scripts/plot_curves.py "runs/$name" --out "docs/results/$name-curves.png"
echo "mini_sweep: docs/results/$name.md, $name-claims.md, $name-curves.png"
