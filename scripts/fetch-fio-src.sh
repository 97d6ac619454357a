#!/usr/bin/env bash
# Fetches Debian's source of the installed fio into a cache directory and
# configures it once (fio's ./configure writes config-host.h), so that the
# fio engine (apps/fio) builds against the headers of exactly the fio that
# will load it: fio's engine structure (struct ioengine_ops) and its
# version (FIO_IOOPS_VERSION) change between fio releases.
#
# Prints the source directory on stdout; also points
# $CACHE/current at it, where apps/fio/build.rs looks when FIO_SRC is unset:
#   FIO_SRC=$(scripts/fetch-fio-src.sh) cargo build --release -p bdevkit-fio
#
# Needs root for apt (installs fio and dpkg-dev when missing, and adds a
# deb-src entry for Debian's archive when apt has none). Idempotent: a
# configured source of the installed version is reused at once.
# Environment: BDEVKIT_FIO_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/bdevkit-fio).
set -euo pipefail

CACHE=${BDEVKIT_FIO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bdevkit-fio}
say() { echo "fetch-fio-src: $*" >&2; }
apt_quiet() { DEBIAN_FRONTEND=noninteractive apt-get -qq "$@" >/dev/null; }

if ! command -v fio >/dev/null 2>&1; then
    say "installing fio from Debian's packages"
    apt_quiet update
    apt_quiet install -y fio
fi
version=$(dpkg-query -W -f='${Version}' fio)   # e.g. 3.33-3
dir="$CACHE/fio-$version"
mkdir -p "$CACHE"

if [ -f "$dir/config-host.h" ] && [ -f "$dir/ioengines.h" ]; then
    ln -sfn "fio-$version" "$CACHE/current"
    echo "$dir"
    exit 0
fi

# apt-get source needs a deb-src entry. Add one for Debian's archive,
# derived from the deb822 file the system has (same URIs, suites, key).
if ! apt-cache showsrc fio 2>/dev/null | grep -q '^Package: fio'; then
    src=/etc/apt/sources.list.d/debian.sources
    [ -f "$src" ] || { say "no $src to derive a deb-src entry from; add one for fio's source"; exit 1; }
    say "adding deb-src entries (/etc/apt/sources.list.d/bdevkit-deb-src.sources)"
    sed 's/^Types: deb$/Types: deb-src/' "$src" > /etc/apt/sources.list.d/bdevkit-deb-src.sources
    apt_quiet update
fi
command -v dpkg-source >/dev/null 2>&1 || { say "installing dpkg-dev (dpkg-source)"; apt_quiet install -y dpkg-dev; }

work=$(mktemp -d "$CACHE/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "downloading Debian's source of fio $version"
(cd "$work" && apt-get -qq source --download-only "fio=$version" >/dev/null 2>&1) \
    || { say "apt-get source --download-only fio=$version failed"; exit 1; }
dsc=$(ls "$work"/fio_*.dsc)
dpkg-source --no-check -x "$dsc" "$work/src" >/dev/null
say "configuring (once)"
(cd "$work/src" && ./configure --disable-native >"$work/configure.log" 2>&1) \
    || { cat "$work/configure.log" >&2; say "fio's ./configure failed"; exit 1; }
rm -rf "$dir"
mv "$work/src" "$dir"
ln -sfn "fio-$version" "$CACHE/current"
echo "$dir"
