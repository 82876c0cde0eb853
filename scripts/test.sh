#!/usr/bin/env bash
# Sets up, then runs every check: lint, formatting, strict typing and the whole test
# suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
.venv/bin/mypy
# Every backend runs strictly, as in CI: one that cannot run fails the run. A laptop
# without a server opts out by name, e.g. CONVOSTORE_SKIP_BACKENDS=postgresql,falkordb
# (each skip says why in the summary).
export CI=true
if [ -n "${CONVOSTORE_SKIP_BACKENDS:-}" ]; then
  echo "Skipping the backends named in CONVOSTORE_SKIP_BACKENDS: ${CONVOSTORE_SKIP_BACKENDS}"
fi
# Two workers (CONVOSTORE_TEST_WORKERS=0 runs in this process), the tests of one server
# on one of them (see tests/conftest.py): much of the suite waits on fsync, replication
# and the servers' start, so two workers gain even on two cores.
.venv/bin/pytest -n "${CONVOSTORE_TEST_WORKERS:-2}" --dist loadgroup --durations=30 "$@"
