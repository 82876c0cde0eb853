#!/usr/bin/env bash
# Sets up, then runs the demo on the embedded default (SQLite, ./convostore.db).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/convostore demo "$@"
