#!/usr/bin/env bash
# Fetches the agent frameworks' own test suites that tests/integrations runs against
# convostore's adapters (tests/integrations/upstream.py finds them; they are never
# committed): Strands Agents' tests
# from its sdist on PyPI, into .cache/framework-tests (or $CONVOSTORE_FRAMEWORK_TESTS).
# A source that cannot be reached is reported and skipped: its runner then skips too,
# saying why. The suites that come only from a repository snapshot (ADK's session
# contract tests, LlamaIndex's and Agent Framework's) are read where such a snapshot was
# brought to this machine; their runners say where they look.
set -uo pipefail
cd "$(dirname "$0")/.."
cache="${CONVOSTORE_FRAMEWORK_TESTS:-.cache/framework-tests}"
python="${PYTHON:-.venv/bin/python}"
mkdir -p "$cache"

# Strands Agents: the sdist of the installed version ships its tests.
version="$("$python" -c 'import importlib.metadata as m; print(m.version("strands-agents"))' 2>/dev/null)"
if [ -n "$version" ] && [ ! -f "$cache/strands_agents-$version.tar.gz" ]; then
  "$python" -m pip download --quiet --no-deps --no-binary :all: "strands-agents==$version" -d "$cache" \
    || echo "fetch_framework_tests: strands-agents $version sdist not downloaded" >&2
fi

exit 0
