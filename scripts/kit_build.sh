#!/bin/sh
# Builds stagehand's native core on the system it runs on, for a LÖVE game
# whose system the kit carries no core for (macOS, a BSD, another
# processor): from the kit's src folder,
#   sh build.sh
# writes ../stagehand/native/OS-ARCH/_core.so, named as stagehand looks
# for it there (osx-arm64, osx-x64, linux-arm64, bsd-x64...). On a Mac it
# builds one universal core, for Apple silicon and Intel Macs alike (LÖVE
# for macOS is universal: a player's Mac may be either), and writes it as
# both osx-arm64 and osx-x64; a compiler that cannot make one builds for
# this Mac only, and says so. It needs a C
# compiler (CC, default cc: Xcode's command line tools on a Mac) and
# nothing else: LuaJIT's headers come with it, and the core finds Lua's
# functions in the game's LÖVE when it is loaded. For Android, point CC
# at the NDK's clang for the device (and set SYSTEM=linux-arm64: LuaJIT
# names Android Linux); iOS loads no library at run time (the guide's
# "Shipping a game").
set -e
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
os=$(uname -s)
case "$os" in
  Darwin) sys=osx; link="-bundle -undefined dynamic_lookup" ;;
  Linux) sys=linux; link="-shared" ;;
  *BSD | DragonFly) sys=bsd; link="-shared" ;;
  *) echo "stagehand: build.sh knows no $os; on Windows, the kit's windows-x64 and windows-x86 cores serve" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=x64 ;;
  arm64 | aarch64) arch=arm64 ;;
  i?86) arch=x86 ;;
  *) arch=$(uname -m) ;;
esac
system=${SYSTEM:-$sys-$arch}
native="$here/../stagehand/native"
# (what this system's C library has: each tried by compiling a few lines)
plat=$(sh "$here/probe.sh" "$cc")
libs="-lm -lpthread"
[ "$os" = Linux ] && libs="$libs -ldl"
build() { # $1: the file to write, then extra compiler flags
  to=$1
  shift
  # shellcheck disable=SC2086
  "$cc" "$@" -std=c99 -O2 -fPIC $plat -I"$here/include" $link -o "$to" \
    "$here"/csrc/core/*.c "$here/csrc/platform/unix/sh_unix.c" "$here"/csrc/lua/*.c $libs
}
if [ "$sys" = osx ] && [ -z "$SYSTEM" ]; then
  tmp="$native/.universal.so"
  mkdir -p "$native"
  if build "$tmp" -arch arm64 -arch x86_64 2>/dev/null; then
    for system in osx-arm64 osx-x64; do
      mkdir -p "$native/$system"
      cp "$tmp" "$native/$system/_core.so"
      echo "stagehand/native/$system/_core.so"
    done
    rm -f "$tmp"
    exit 0
  fi
  rm -f "$tmp"
  echo "stagehand: this compiler made no universal core (arm64 and x86_64): built for this Mac's" \
    "processor only; Macs of the other kind need a build of their own" >&2
fi
mkdir -p "$native/$system"
build "$native/$system/_core.so"
echo "stagehand/native/$system/_core.so"
