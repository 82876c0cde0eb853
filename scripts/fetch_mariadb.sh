#!/usr/bin/env bash
# Unpacks Debian trixie's MariaDB 11.8 server into .venv/mariadb-11.8, for the tests of
# the MySQL backend's native vector index (VECTOR columns and VECTOR INDEX arrived in
# MariaDB 11.7; Debian 12 ships 10.11).
#
# Nothing is installed into the system: the packages are fetched with a private apt
# sources list and unpacked with dpkg -x. Trixie's mariadbd needs a newer C and C++
# runtime than Debian 12's, so trixie's glibc, libstdc++, libgcc, libaio and libssl are
# unpacked beside it and trixie's own dynamic loader runs it (see the mariadbd wrapper
# written below); every other library it links comes from the system, where Debian's
# mariadb-server (10.11, installed first by scripts/setup.sh) put it. It runs once per
# .venv: a marker file records the unpacked version.
set -euo pipefail
cd "$(dirname "$0")/.."

MARIADB_SUITE="trixie"
# The exact package versions of trixie's main archive (bump them together when trixie's
# point releases replace them).
PACKAGES=(
  "mariadb-server-core=1:11.8.9+ds-0+deb13u1"
  "libc6=2.41-12+deb13u5"
  "libstdc++6=14.2.0-19"
  "libgcc-s1=14.2.0-19"
  "libaio1t64=0.3.113-8+b1"
  "libssl3t64=3.5.9-1~deb13u1"
)

home=".venv/mariadb-11.8"
marker="$home/installed"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "${PACKAGES[*]}" ]; then
  exit 0
fi
if [ ! -x /usr/bin/my_print_defaults ]; then
  echo "fetch_mariadb: install Debian's mariadb-server first (scripts/setup.sh does)" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/debs"
echo "deb http://deb.debian.org/debian $MARIADB_SUITE main" > "$work/sources.list"
apt_options=(
  -o "Dir::Etc::sourcelist=$work/sources.list"
  -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$work/lists"
  -o "APT::Sandbox::User=root"
)
apt-get "${apt_options[@]}" -qq update
(cd "$work/debs" && apt-get "${apt_options[@]}" -qq download "${PACKAGES[@]}")

rm -rf "$home"
mkdir -p "$home/root" "$home/base/sbin" "$home/base/bin" "$home/base/share" "$home/plugin"
for deb in "$work"/debs/*.deb; do
  dpkg -x "$deb" "$home/root"
done
# mariadb-install-db --basedir=base finds mariadbd in sbin, my_print_defaults in bin and
# its SQL scripts in share/mariadb. The plugin directory is an empty one of its own, so
# the system's 10.11 plugins are never loaded into 11.8.
ln -s /usr/bin/my_print_defaults "$home/base/bin/my_print_defaults"
ln -s ../../root/usr/share/mariadb "$home/base/share/mariadb"
cat > "$home/base/sbin/mariadbd" <<'EOF'
#!/bin/sh
# Trixie's mariadbd, run by trixie's dynamic loader with trixie's runtime libraries first.
root="$(cd "$(dirname "$0")/../../root" && pwd)"
lib="$root/usr/lib/x86_64-linux-gnu"
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu" \
  "$root/usr/sbin/mariadbd" "$@"
EOF
chmod +x "$home/base/sbin/mariadbd"

version=$("$home/base/sbin/mariadbd" --version)
case "$version" in
  *11.8.*) ;;
  *) echo "fetch_mariadb: the unpacked server does not run: $version" >&2; exit 1 ;;
esac
echo "${PACKAGES[*]}" > "$marker"
echo "fetch_mariadb: $version in $home"
