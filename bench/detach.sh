#!/bin/sh
# bench/detach.sh — a GPU job longer than one call of the GPU machine (a command there runs 10 minutes at most; the
# machine stays warm a short while between calls): the job starts in a session of its own, so it outlives the call
# that started it, and later calls on the same warm machine wait for it and bring back its log and files.
#   sh bench/detach.sh start NAME CMD…    start CMD in the repository's folder (stdout and stderr to
#                                         $DETACH_DIR/NAME.log, its status to NAME.rc when it ends); returns at once
#   sh bench/detach.sh wait NAME S [F…]   wait up to S seconds for NAME to end; copy its log and the files F (those
#                                         that exist) to ${OUT:-/tmp}; print the log's last 40 lines and "NAME: rc N"
#                                         (exit 0) or "NAME: still running after S s" (exit 2)
# Issue 23's 10-minute soak, for one: call 1 `sh bench/detach.sh start soak ./emmy serve Qwen/Qwen3-Embedding-0.6B
# --bench --soak 600 --max-concurrency 64 --random-range-ratio 0.5; sh bench/detach.sh wait soak 560`, call 2 (while
# the machine is warm) `sh bench/detach.sh wait soak 300`.
D=${DETACH_DIR:-/tmp/detach}
usage() { echo "usage: sh bench/detach.sh start NAME CMD… | wait NAME SECONDS [FILE…]" >&2; exit 1; }
[ $# -ge 2 ] || usage
verb=$1 name=$2
case "$name" in *[!A-Za-z0-9_.-]*|'') echo "detach: NAME '$name': letters, digits, '.', '_' and '-' only" >&2; exit 1;; esac
shift 2
case "$verb" in
start)
  [ $# -ge 1 ] || usage
  mkdir -p "$D"
  if [ -f "$D/$name.pid" ] && [ ! -f "$D/$name.rc" ] && kill -0 "$(cat "$D/$name.pid")" 2>/dev/null; then
    echo "detach: $name is already running (pid $(cat "$D/$name.pid"))" >&2; exit 1
  fi
  rm -f "$D/$name.rc" "$D/$name.log"
  # (setsid: a session of its own, which the end of the starting call does not end)
  setsid sh -c '"$@" > "$0.log" 2>&1; echo $? > "$0.rc"' "$D/$name" "$@" < /dev/null > /dev/null 2>&1 &
  echo $! > "$D/$name.pid"
  echo "$name: started (pid $!; log $D/$name.log)"
  ;;
wait)
  [ $# -ge 1 ] || usage
  secs=$1; shift
  case "$secs" in *[!0-9]*|'') echo "detach: SECONDS '$secs': a whole number" >&2; exit 1;; esac
  [ -f "$D/$name.pid" ] || { echo "detach: no job $name (start it first)" >&2; exit 1; }
  t=0
  while [ ! -f "$D/$name.rc" ] && [ "$t" -lt "$secs" ]; do sleep 1; t=$((t + 1)); done
  out=${OUT:-/tmp}
  mkdir -p "$out"
  [ -f "$D/$name.log" ] && cp "$D/$name.log" "$out/$name.log" 2>/dev/null
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$out/" 2>/dev/null; done
  [ -f "$D/$name.log" ] && tail -n 40 "$D/$name.log"
  if [ -f "$D/$name.rc" ]; then echo "$name: rc $(cat "$D/$name.rc")"; exit 0; fi
  echo "$name: still running after $secs s"; exit 2
  ;;
*) usage ;;
esac
