#!/usr/bin/env bash
# Set up (scripts/setup.sh test) and run the fast test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. .venv/bin/activate
# Two test processes on two cores, one thread each: more threads per process only
# oversubscribe the cores and make tiny ops spin.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec python -m pytest -q -p no:cacheprovider -n 2 "$@"
