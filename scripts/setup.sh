#!/usr/bin/env bash
# Creates .venv (if missing) and installs convostore with its development tools, every
# backend's driver, the agent frameworks the adapters plug into, the database servers the
# tests start themselves, and the real
# embedding model.
#
# The slow steps that need nothing of each other run at once: pip (torch above all) in
# the foreground, while the system packages (apt-get, then MariaDB 11.8) and Neo4j's
# Maven resolution run in the background, each into a log of its own. Setup waits for
# them at the end and fails, printing the log, when one of them failed. A rerun finds
# everything done and does nothing slow.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi

logs=$(mktemp -d)
# Setup ends only once its background steps have (a failure in the foreground waits for
# them too: an apt-get is never cut short).
trap 'wait; rm -rf "$logs"' EXIT
background=()
# Run "$@" in the background as the step NAME, its output in $logs/NAME.log.
in_background() {
  local name=$1
  shift
  "$@" >"$logs/$name.log" 2>&1 &
  background+=("$!:$name")
}
# Wait for the background steps named (every one if none is); print the log of each one
# that failed, and fail then.
wait_for() {
  local entry failed=0
  for entry in "${background[@]}"; do
    if [ "$#" -gt 0 ] && [[ " $* " != *" ${entry#*:} "* ]]; then
      continue
    fi
    if ! wait "${entry%%:*}"; then
      echo "setup: ${entry#*:} failed:" >&2
      cat "$logs/${entry#*:}.log" >&2
      failed=1
    fi
  done
  return "$failed"
}

# Neo4j Community for the Neo4j backend's tests: its jars from Maven Central, resolved
# once into Maven's local repository (~/.m2), and the small launcher compiled against
# them (see tests/servers/neo4j.py; a rerun finds it built and does nothing). Maven's
# resolution needs nothing from pip (tests.servers.neo4j imports the standard library
# only), so it starts first.
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    maven openjdk-17-jdk-headless >/dev/null
fi
in_background neo4j .venv/bin/python -c "from tests.servers.neo4j import build_launcher; build_launcher()"

# The system's packages, installed one after the other (apt-get takes dpkg's lock), in
# the background while pip runs.
system_packages() {
# The web inspector's test drives Debian's Chromium with its driver (never a downloaded
# browser).
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# wrk, the load generator benchmarks/server_load.py drives the server with.
if ! command -v wrk >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
# MariaDB for the MySQL backend's tests, from Debian (the tests start their own server
# on a temporary data directory; the package's own service is not used).
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server
  else
    echo "setup: install mariadb-server (Debian) for the MySQL backend's tests" >&2
  fi
fi
# Galera 4 beside it, and rsync (the state transfer a joining node uses), for the 3-node
# MariaDB Galera cluster the galera tests start (tests/servers/galera.py).
if [ ! -e /usr/lib/galera/libgalera_smm.so ] || ! command -v rsync >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends galera-4 rsync
  else
    echo "setup: install galera-4 and rsync (Debian) for the Galera tests" >&2
  fi
fi
# MariaDB 11.8 (native vector index) beside it, unpacked from Debian trixie into .venv
# for the mariadb11 tests (see the script).
scripts/fetch_mariadb.sh
}
in_background system-packages system_packages

.venv/bin/python -m pip install --quiet --upgrade pip
# torch for sentence-transformers, pinned. The package index reached here has only the
# CUDA build for Linux (about 4 GB with its nvidia wheels): the largest part of a first
# setup.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==2.13.0"
fi
.venv/bin/python -m pip install --quiet -e '.[dev,embeddings,postgresql,mysql,server,metrics,tracing,falkordb,neo4j,redis,test-servers,openai-agents,adk,langchain,langgraph,strands,llama-index,agent-framework,pydantic-ai,framework-peers,bench]'
# The frameworks' own test suites the adapters are run against (never committed).
scripts/fetch_framework_tests.sh
# The test server's pgvector, rebuilt once for any x86-64 processor (see the script):
# its apt-get runs after the system's.
wait_for system-packages
scripts/build_pgvector.sh
wait_for neo4j
