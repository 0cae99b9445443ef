#!/bin/sh
# The kernel benchmark in one GPU call: Qwen3-Embedding-0.6B layer 0 at seq_len 512, emmy's chosen variant and
# the best of an exhaustive tile sweep (--tiles: every warp-tier tile of each contraction, every flash point;
# each variant checked against the CPU reference before it is timed) beside PyTorch eager and torch.compile,
# for the default kernel set and the structural forks (merged qkv and gate/up; dual gate/up with SiLU·mul).
# Full tables go to ${OUT:-/tmp}/bench_*.txt, every variant's row to bench_*.json; the last lines repeat each
# configuration's whole-layer times.
BIN=${EMMY_BIN:-./emmy}
LOG=${OUT:-/tmp}
run() { # name, env...
  name=$1; shift
  env "$@" "$BIN" bench/kernels.lua --seq-len ${SEQ:-512} --tiles ${TORCH:+--torch} ${CEIL:+--ceilings} --json "$LOG/bench_$name.json" \
    > "$LOG/bench_$name.txt" 2>&1
  echo "== $name ($*)"; tail -n 45 "$LOG/bench_$name.txt"
  CEIL= TORCH=
}
# torch.compile compiles every reproducer (tens of seconds each): the default set only
CEIL=1 TORCH=1 run default EMMY_BENCH=1
run merged EMMY_MERGE_SIBLINGS=1
run dual EMMY_DUAL_GATE=1
echo
for f in default merged dual; do
  echo "== $f"; grep -E '^(whole layer|emmy )' "$LOG/bench_$f.txt" || echo 'failed: see the table above'
done
