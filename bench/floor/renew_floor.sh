#!/bin/bash
# renew_floor.sh: the Redis instructions per renewed hold of five ways to
# renew 1,024 held Mutex keys, counted by callgrind (processInputBuffer, as
# bench -instr-renew counts), 3 rounds after one warm-up round, batches of
# 256 keys as the renewer sends them (issue 40: how far a per-hold batch can
# go below today's, without a session):
#   today   mutex_renew_many.lua (lib.lua + its body): MGET, check, PEXPIREAT
#   blind   a Lua batch that only runs PEXPIREAT per key (no read, no check:
#           the least any per-hold write in a script costs; values still sent)
#   keys    the same batch sent without the values: PEXPIREAT per key and
#           nothing else, the floor of a renewal that writes every hold
#   joined  a check without an argument per hold: the values sent as one
#           argument, joined by newlines, compared with MGET's values joined
#           by table.concat; PEXPIREAT per key when they are equal (the
#           common round; the script replies {} then, checked)
#   plain   one PEXPIREAT command per key, no script
# Needs valgrind, redis-server, redis-cli. Run from the repository root:
#   bash bench/floor/renew_floor.sh
set -euo pipefail
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
N=1024
cat "$root/internal/scripts/lib.lua" "$root/internal/scripts/mutex_renew_many.lua" > "$tmp/today.lua"
cat > "$tmp/blind.lua" <<'LUA'
local t = redis.call('time')
local at = string.format('%d', t[1] * 1000 + 30000)
local keys, call = KEYS, redis.call
for i = 1, #keys do call('pexpireat', keys[i], at) end
return {}
LUA
cp "$tmp/blind.lua" "$tmp/keys.lua"
{ cat "$root/internal/scripts/lib.lua"; cat <<'LUA'
local at = fmt(server_now() + tonumber(ARGV[1]))
local keys, call = KEYS, redis.call
local ok, all = pcall(table.concat, call('mget', unpack(keys)), '\n')
if ok and all == ARGV[2] then
  for i = 1, #keys do call('pexpireat', keys[i], at) end
  return {}
end
return {-1}
LUA
} > "$tmp/joined.lua"
VAL="host:1234/0123456789abcdef0123456789abcdef 1733300000123456 1"
count() { # mode -> instructions per hold
  local mode=$1 port
  port=$(( 20000 + RANDOM % 20000 ))
  valgrind --tool=callgrind --toggle-collect=processInputBuffer --callgrind-out-file="$tmp/cg.$mode" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/vg.$mode.log" 2>&1 &
  local vp=$!
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done
  for i in $(seq 1 $N); do echo "SET dsync:{n$i}:mutex \"$VAL\" PX 60000"; done | redis-cli -p "$port" >/dev/null
  local sha=""
  if [ "$mode" != plain ]; then sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$tmp/$mode.lua")"); fi
  round() {
    if [ "$mode" = plain ]; then
      local at=$(( $(date +%s) * 1000 + 30000 ))
      for i in $(seq 1 $N); do echo "PEXPIREAT dsync:{n$i}:mutex $at"; done | redis-cli -p "$port" >/dev/null
      return
    fi
    for b in 0 1 2 3; do
      local keys=() args=() joined="" r
      for i in $(seq $((b * 256 + 1)) $((b * 256 + 256))); do
        keys+=("dsync:{n$i}:mutex"); args+=("$VAL")
        joined="${joined:+$joined$'\n'}$VAL"
      done
      case $mode in
      keys) r=$(redis-cli -p "$port" EVALSHA "$sha" 256 "${keys[@]}" 30000) ;;
      joined) r=$(redis-cli -p "$port" EVALSHA "$sha" 256 "${keys[@]}" 30000 "$joined") ;;
      *) r=$(redis-cli -p "$port" EVALSHA "$sha" 256 "${keys[@]}" 30000 "${args[@]}") ;;
      esac
      if [ -n "$r" ]; then echo "$mode: a hold not renewed: $r" >&2; kill "$vp"; exit 1; fi
    done
  }
  round
  callgrind_control -z "$vp" >/dev/null 2>&1
  round; round; round
  callgrind_control -d "$vp" >/dev/null 2>&1
  local f total
  f=$(ls -t "$tmp"/cg."$mode".* | head -1)
  total=$(callgrind_annotate --inclusive=yes --threshold=100 "$f" | grep -m1 'PROGRAM TOTALS' | awk '{gsub(",","",$1); print $1}')
  kill "$vp"; wait "$vp" 2>/dev/null || true
  echo $(( total / (N * 3) ))
}
echo "| way | Redis instructions per renewed hold |"
echo "| --- | ---: |"
for m in today blind keys joined plain; do echo "| $m | $(count $m) |"; done
