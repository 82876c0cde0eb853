#!/usr/bin/env bash
# Sets up, then runs every check: lint, formatting, strict typing and the whole test
# suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
.venv/bin/mypy
.venv/bin/pytest "$@"
