#!/usr/bin/env bash
# Every command line of the README after the translation quickstart (the LM, ViT, Image
# Transformer, music, captioning, text-to-image and BERT blocks), run as written, in order, at
# its own budget, each timed; after each training line, the scoring the README does not show
# (`attnlab evaluate --model DIR`, the LM's n-gram baselines). The protocol and the results:
# docs/results.md, "The README's training lines at their own budgets".
#
#   bash scripts/recipes/readme_lines.sh /tmp/readme-lines            # from the repository root
#   CPU=0 bash scripts/recipes/readme_lines.sh /tmp/readme-lines      # pinned to one core (taskset)
#   FROM="train vit" bash scripts/recipes/readme_lines.sh DIR          # start at the first line matching
#
# Lines skipped: the explorer server (it waits for Ctrl-C) and `attnlab data get jsb` (it needs
# the internet: set ATTNLAB_DATA to a root holding jsb_chorales/, e.g. ../shared/data here).
# DIR gets a copy of examples/ and every runs/ directory; log.txt holds each line's output.
set -euo pipefail
OUT="${1:?usage: readme_lines.sh DIR}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$OUT"
[ -e "$OUT/examples" ] || cp -r "$REPO/examples" "$OUT/examples"
cd "$OUT"
PIN=()
[ -n "${CPU:-}" ] && PIN=(taskset -c "$CPU")

# The README's lines from the LM block on, in order, comments kept (bash ignores them).
mapfile -t LINES < <(awk '/^attnlab train lm --out runs\/shakespeare/{on=1} on' "$REPO/README.md" |
  grep -E '^(attnlab |MINILM=)' | grep -vE '^attnlab (explore --model [^ ]+ *(#.*)?$|data get )')

extra() {  # the scoring after a training line: evaluate its model, and the LM baselines
  local model="$1"
  run "attnlab evaluate --model $model"
  case "$2" in lm) run "python $REPO/scripts/recipes/lm_ngram_baseline.py $model" ;; esac
}

run() {
  local line="$1" start end rc
  start=$(date +%s.%N)
  echo "=== $(date -u +%H:%M:%S) $line" | tee -a log.txt
  set +e
  "${PIN[@]}" bash -c "$line" >>log.txt 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  printf '=== rc %s, %.1f s, load %s\n' "$rc" "$(echo "$end - $start" | bc)" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a log.txt
}

started=${FROM:+no}
for line in "${LINES[@]}"; do
  if [ "${started:-yes}" = no ]; then
    case "$line" in *"$FROM"*) started=yes ;; *) continue ;; esac
  fi
  case "$line" in
    MINILM=*) eval "$line"; export MINILM; echo "=== $line -> $MINILM" | tee -a log.txt; continue ;;
  esac
  run "$line"
  if [[ "$line" =~ ^attnlab\ train\ ([a-z-]+)\ .*--out\ ([^ ]+) ]]; then
    extra "${BASH_REMATCH[2]}/model" "${BASH_REMATCH[1]}"
  fi
done
