#!/usr/bin/env bash
# prepare_data.sh NAME: the prepared data (SentencePiece model and HDF5 shards) that the shipped
# configs name as data.prepared, into data/prepared/NAME. Skipped when done: spm-train runs once,
# and `thx prepare` skips unchanged inputs. `thx sweep` names this command for a run whose data
# is missing.
#
#   quickstart          the Linux kernel's documentation (linux-doc-6.1), 8000 pieces, T5's ids;
#                       configs/t5/mini.yaml (scripts/quickstart.sh runs this)
#   enwiki              English Wikipedia (../shared/data/pretrain/enwiki, WikiExtractor format),
#                       8000 pieces, T5's ids, 1% held out; configs/mini/t5.yaml and the mini T5 sweeps
#   wiki-books-albert   Wikipedia and the Gutenberg books (../shared/data/pretrain/gutenberg),
#                       30000 pieces, ALBERT's ids; configs/{albert,bert}/*.yaml and the mini
#                       Tables 5-7
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${1:?usage: scripts/prepare_data.sh quickstart | enwiki | wiki-books-albert}
THX=${THX:-build/thx}
WIKI=${WIKI:-../shared/data/pretrain/enwiki}
BOOKS=${BOOKS:-../shared/data/pretrain/gutenberg}
P=data/prepared
mkdir -p "$P"
case "$NAME" in
  quickstart)
    corpus=$(ls -d /usr/share/doc/linux-doc-*/html/_sources 2>/dev/null | head -n 1 || true)
    [ -n "$corpus" ] || { echo "prepare_data: the kernel documentation is missing (package linux-doc-6.1); run scripts/setup.sh" >&2; exit 2; }
    [ -f "$P/quickstart-spm8k.model" ] ||
      "$THX" spm-train --input "$corpus" --format text_files --pieces 8000 --max-sentences 200000 \
        --out "$P/quickstart-spm8k"
    "$THX" prepare --input "$corpus" --format text_files --tokenizer "$P/quickstart-spm8k.model" \
      --out "$P/quickstart" --heldout-fraction 0.02
    ;;
  enwiki)
    [ -d "$WIKI" ] || { echo "prepare_data: $WIKI is missing (the shared Wikipedia extract)" >&2; exit 2; }
    [ -f "$P/enwiki-spm8k.model" ] ||
      "$THX" spm-train --input "$WIKI" --format wikiextractor --pieces 8000 --max-sentences 300000 \
        --out "$P/enwiki-spm8k"
    "$THX" prepare --input "$WIKI" --format wikiextractor --tokenizer "$P/enwiki-spm8k.model" \
      --out "$P/enwiki" --heldout-fraction 0.01
    ;;
  wiki-books-albert)
    [ -d "$WIKI" ] || { echo "prepare_data: $WIKI is missing (the shared Wikipedia extract)" >&2; exit 2; }
    [ -d "$BOOKS" ] || { echo "prepare_data: $BOOKS is missing (the shared Gutenberg books)" >&2; exit 2; }
    [ -f "$P/wiki-books-albert30k.model" ] ||
      "$THX" spm-train --convention albert --input "$WIKI" --input "$BOOKS" --pieces 30000 \
        --max-sentences 400000 --out "$P/wiki-books-albert30k"
    "$THX" prepare --input "$WIKI" --input "books:$BOOKS/book_*.txt" \
      --tokenizer "$P/wiki-books-albert30k.model" --out "$P/wiki-books-albert"
    ;;
  *) echo "prepare_data: '$NAME' is not a shipped data set; one of: quickstart, enwiki, wiki-books-albert" >&2; exit 2 ;;
esac
