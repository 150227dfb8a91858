#!/bin/sh
# Runs the guide's LÖVE programs as a reader would copy them: its worker
# module ("decode.lua: runs on LÖVE threads"), its folder of textures behind
# a bar ("in full") and its screen-first loop, each taken from
# docs/guide.md as it stands, in a game folder of their own with
# examples/love's textures (one of them corrupt), headless under Xvfb. The
# screen-first loop gets six large visible textures and thirty small
# background ones (made by scripts/textures), so that background decodes
# finish first and only the loop's wait for the screen keeps their uploads
# back. The checks that follow each program (spec/love_guide/check.lua) say
# whether it did what the guide says: every good texture uploaded, the
# corrupt ones failed and named, the bar never moving back and ending at 1,
# and, for the screen-first loop, every visible texture up before any other.
# Each program runs twice: on the native core, and on the pure-Lua core
# (STAGEHAND_BACKEND=lua, as on a Mac or a phone with no core for it),
# whose pools run on LÖVE's threads too.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
work=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-guide.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "guide check: $1"; exit 1; }

# block MARK: the ```lua block of docs/guide.md holding MARK (a fixed string)
block() {
  awk -v mark="$1" '
    /^```lua$/ { inside = 1; body = ""; next }
    /^```$/ && inside { inside = 0; if (index(body, mark)) { printf "%s", body; found = 1; exit } next }
    inside { body = body $0 "\n" }
    END { if (!found) exit 1 }' docs/guide.md
}

status=0
for program in full screen_first; do
  game="$work/$program"
  mkdir -p "$game/textures"
  case $program in
    full) cp examples/love/textures/*.png "$game/textures/" ;;
    screen_first)
      { love scripts/textures "$game/textures" 6 768 tile && love scripts/textures "$game/textures" 30 48 bg; } \
        >/dev/null 2>&1 || fail "scripts/textures could not write the textures" ;;
  esac
  block '-- decode.lua: runs on LÖVE threads' >"$game/decode.lua" || fail "no decode.lua block in the guide"
  cp spec/love_guide/conf.lua "$game/conf.lua"
  {
    echo "-- $program: from docs/guide.md (scripts/guide_love_check.sh)"
    echo 'local check = require "check"'
    case $program in
      full)
        block 'local orch = require("stagehand.love").new' || fail "no 'in full' block in the guide" ;;
      screen_first)
        # (the loop needs what the full program sets up: its first lines)
        # (with 3 workers, as on a 4-core machine: on one worker decodes end
        # in priority order whatever the loop does)
        block 'local orch = require("stagehand.love").new' | sed -n '1,5p' |
          sed 's/{ module = "decode" }/{ module = "decode", size = 3 }/'
        echo 'local textures = check.textures(love.filesystem.getDirectoryItems("textures"))'
        block 'local screen, screen_up = {}, nil' || fail "no screen-first block in the guide" ;;
    esac
    echo "check.watch(\"$program\", orch, images, load)"
  } >"$game/main.lua"
  [ $program = full ] || grep -q 'size = 3 }' "$game/main.lua" || fail "the guide's pool is no longer { module = \"decode\" }"
  cp spec/love_guide/check.lua "$game/check.lua"
  for backend in "" lua; do
    out=$(STAGEHAND_BACKEND=$backend timeout 120 xvfb-run -a love "$game" 2>&1)
    rc=$?
    echo "$out" | grep -v -e "^ALSA lib" -e "^AL lib" -e "^Could not open device" -e "^XIO: " -e "after [0-9]* requests" \
      -e "^$"
    want=${backend:-"(ffi|c)"}
    echo "$out" | grep -Eq "^guide $program: .* on the $want core$" ||
      { echo "!! the guide's $program program ran on another core than ${backend:-the native one}"; status=1; }
    echo "$out" | grep -Eq "^guide $program: ok" ||
      { echo "!! the guide's $program program${backend:+ on the pure-Lua core} (status $rc)"; status=1; }
  done
done
[ $status -eq 0 ] && echo "the guide's LÖVE programs ran as written and did what it says, on the native and the pure-Lua core"
exit $status
