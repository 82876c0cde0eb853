#!/usr/bin/env bash
# Fetches the agent frameworks' own test suites that the runners in tests/integrations
# run against convostore's adapters (they are never committed): Strands Agents' tests
# from its sdist on PyPI, and Google ADK's session contract tests from adk-python on
# GitHub. Each lands in .cache/framework-tests (or $CONVOSTORE_FRAMEWORK_TESTS). A
# source that cannot be reached is reported and skipped: its runner then skips too,
# saying why.
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

# Google ADK: the session contract tests with their backend registry (ADK 2.7.1; the
# fork CloudEngineHub/adk-python has them at this commit).
adk_commit=d9f4d3d288257593471fc708a9ab851779005ca5
adk="$cache/adk-python"
if [ ! -f "$adk/tests/unittests/sessions/_conformance.py" ]; then
  rm -rf "$adk.tmp"
  if GIT_TERMINAL_PROMPT=0 timeout 120 git clone --quiet --filter=blob:none --no-checkout \
      https://github.com/CloudEngineHub/adk-python "$adk.tmp" 2>/dev/null \
    && git -C "$adk.tmp" checkout --quiet "$adk_commit" -- tests/unittests; then
    rm -rf "$adk" && mv "$adk.tmp" "$adk"
  else
    rm -rf "$adk.tmp"
    echo "fetch_framework_tests: github.com unreachable, ADK's session tests not fetched" >&2
  fi
fi
exit 0
