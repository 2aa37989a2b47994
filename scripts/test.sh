#!/usr/bin/env bash
# Set up (scripts/setup.sh test) and run the fast test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. .venv/bin/activate
exec python -m pytest -q -p no:cacheprovider -n 2 "$@"
