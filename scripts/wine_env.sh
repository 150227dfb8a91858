# Sourced (with $top set) by the scripts that run Windows programs under
# wine: stagehand's own prefix (the Makefile says why), exported, and
# `wine`, the command for 64-bit programs, which go straight to wine64 (as
# the Makefile's WINE says why).
: "${WINEPREFIX:=$top/build/wine}"
export WINEPREFIX
[ -x /usr/lib/wine/wine64 ] && : "${WINE:=/usr/lib/wine/wine64}"
wine=${WINE:-wine}
# A new prefix is made by the first program wine runs, while that program
# runs (wineboot, beside it): a first run in a new prefix once lost its
# wineserver mid-run ("wine client error:0: recvmsg: Connection reset by
# peer") with every test passed. So a new prefix is made here, before any
# program, and waited for.
if [ ! -f "$WINEPREFIX/system.reg" ]; then
  mkdir -p "$WINEPREFIX"
  WINEDEBUG=-all "$wine" wineboot --init >/dev/null 2>&1 || true
  WINEDEBUG=-all "${WINESERVER:-wineserver}" -w >/dev/null 2>&1 || true
fi
