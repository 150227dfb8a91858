# shellcheck shell=sh
# Sourced by scripts/love_check.sh (under Xvfb) and scripts/browser_check.sh
# (in a web browser): what examples/love must have printed, run with
# --screenshot and --loading-screenshot. The caller defines fail().
#
#   example_said OUTPUT LOADED [corrupt]
#
# LOADED: an extended regular expression for the rest of its "loaded ..."
# line (how many textures, how many stand-ins, where they were decoded);
# "corrupt": its corrupt PNG was there, and its failure must be named.
# Then: the missing file's failure named, the visible row uploaded first
# (in whatever order its decodes finished), the bar never moved back, and
# both screenshots taken and not blank (a blank capture holds one colour).
example_said() { # $1: output, $2: LOADED, $3: "corrupt" or nothing
  echo "$1" | grep -Eq "^loaded $2" || fail "the game did not load every texture (loaded $2)"
  if [ "$3" = corrupt ]; then
    echo "$1" | grep -Eq "^stand-in for tile-corrupt.png: Decoding tile-corrupt.png failed: .*tile-corrupt.png" ||
      fail "no reason logged for the corrupt PNG"
  fi
  echo "$1" | grep -Eq "^stand-in for missing.png: Decoding missing.png failed: no such file: textures/missing.png" ||
    fail "no reason logged for the missing file"
  first=$(echo "$1" | sed -n 's/^uploaded first: //p' | tr -d ' ' | tr ',' '\n' | sort | tr '\n' ' ')
  [ "$first" = "tile1.png tile2.png tile3.png tile4.png tile5.png tile6.png " ] ||
    fail "the visible row was not uploaded first (first: $first)"
  echo "$1" | grep -Eq "^the bar moved back 0 times" || fail "the loading bar moved back"
  for what in loading scene; do
    line=$(echo "$1" | grep -E "^$what screenshot: ") || fail "no $what screenshot"
    colours=$(echo "$line" | sed -E 's/.*\(([0-9]+) colours\).*/\1/')
    [ "$colours" -gt 1 ] || fail "the $what screenshot is blank ($colours colour)"
  done
}
