#!/bin/sh
# Fetches Debian's own sources of the runtimes stagehand's Windows build
# cross-compiles (LuaJIT, Lua 5.4) into $1, unpacked: `apt-get source`,
# after adding a deb-src entry for the same suites when the system has
# none. Does nothing for a package already there.
set -e
dest=$1
mkdir -p "$dest"
cd "$dest"
have_src() { grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; }
sudo=""
[ "$(id -u)" != 0 ] && sudo=sudo
if ! have_src; then
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    # (the same archives, suites and keys as the binary entries: deb822)
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
      $sudo tee /etc/apt/sources.list.d/stagehand-src.sources >/dev/null
  else
    grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' | $sudo tee /etc/apt/sources.list.d/stagehand-src.list >/dev/null
  fi
  # (a list that fails to update, a mirror caught mid-sync, say, need not
  # be the sources' list: apt-get source below says if it is)
  $sudo apt-get update -qq || echo "stagehand: apt-get update failed (above); fetching the sources anyway" >&2
fi
for pkg in luajit lua5.4; do
  ls -d "$pkg"-*/ >/dev/null 2>&1 && continue
  apt-get source -qq "$pkg" >/dev/null 2>&1 && continue
  # (once more, after a second update a little later)
  sleep 20
  $sudo apt-get update -qq >/dev/null 2>&1 || true
  apt-get source -qq "$pkg" >/dev/null 2>&1 || { echo "stagehand: apt-get source $pkg failed" >&2; exit 1; }
done
ls -d luajit-*/ lua5.4-*/
