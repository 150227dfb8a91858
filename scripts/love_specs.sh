#!/bin/sh
# Runs the LÖVE specs (spec/love: worker pools on love.thread; or the game
# named, as spec/love_pure: the pure-Lua core, with the arguments that
# follow it) headless under Xvfb; their last line is "love: N passed, N
# failed" (love-pure:, love-luv: ...), or busted's summary (spec/love_busted:
# the thread specs under busted inside LÖVE). Fails when LÖVE does not get
# that far (a crash, a hang). SANITIZED=DIR: against the core built with
# ASan and UBSan in DIR (make sanitize-love).
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
game=${1:-spec/love}
[ $# -gt 0 ] && shift
if [ -n "${SANITIZED:-}" ]; then # (make sanitize-love: the core built with ASan and UBSan, in $SANITIZED)
  export LUA_CPATH="$top/$SANITIZED/?.so;;"
  out=$(LD_PRELOAD="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    timeout 300 xvfb-run -a love "$game" "$@" 2>&1)
else
  out=$(timeout 300 xvfb-run -a love "$game" "$@" 2>&1)
fi
rc=$?
echo "$out" | grep -v -e "^ALSA lib" -e "^AL lib" -e "^Could not open device" -e "^XIO: " -e "after [0-9]* requests"
echo "$out" | grep -Eq "^love(-pure|-luv)?: [0-9]+ passed, [0-9]+ failed|^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors?" || { echo "!! LÖVE ended (status $rc) before its summary"; exit 1; }
exit $rc
