# Sourced (with $top set) by the scripts that run Windows programs under
# wine: stagehand's own prefix (the Makefile says why), exported, and
# `wine`, the command for 64-bit programs, which go straight to wine64 (as
# the Makefile's WINE says why).
: "${WINEPREFIX:=$top/build/wine}"
export WINEPREFIX
[ -x /usr/lib/wine/wine64 ] && : "${WINE:=/usr/lib/wine/wine64}"
wine=${WINE:-wine}
