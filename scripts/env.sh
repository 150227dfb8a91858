#!/bin/sh
# Prints the exports that make `require "stagehand"` work from any directory
# against this tree, for one runtime: sh scripts/env.sh luajit|lua5.4|lua5.3|lua5.2|lua5.1
rt=${1:-luajit}
case "$rt" in luajit|lua5.[1-4]) ;; *) echo "unknown runtime '$rt' (luajit, lua5.4, lua5.3, lua5.2, lua5.1)" >&2; exit 1 ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
echo "export LUA_PATH='$top/lua/?.lua;$top/lua/?/init.lua;;'"
echo "export LUA_CPATH='$top/build/$rt/?.so;;'"
