#!/bin/sh
# Installs the Debian/Ubuntu packages gtlua needs, if any are missing
# (lua-dkjson: tree:json and the bench read and write JSON through it).
# Says what to do when it cannot (no apt-get, not root and no sudo).
set -eu
need=""
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in luajit libluajit-5.1-dev lua-busted lua-dkjson libedit-dev g++ make pkg-config; do
  have_pkg "$p" || need="$need $p"
done
[ -z "$need" ] && exit 0
echo "gtlua: installing missing packages:$need"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "gtlua: no apt-get here; install these packages by hand:$need" >&2; exit 1
fi
if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"
else echo "gtlua: not root and no sudo; run as root: apt-get install -y$need" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "gtlua: apt-get update failed (network?); install:$need" >&2; exit 1; }
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $need >/dev/null || {
  echo "gtlua: apt-get install failed; install by hand:$need" >&2; exit 1; }
