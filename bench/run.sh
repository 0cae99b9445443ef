#!/bin/sh
# The kernel benchmark in one GPU call: Qwen3-Embedding-0.6B layer 0 at seq_len 512, emmy's chosen and
# best-of-20 variants beside PyTorch eager and torch.compile, for the default kernel set and the structural
# forks (merged qkv, dual gate/up with SiLU·mul, attention written in o_proj's layout + flash attention).
# Full tables go to ${OUT:-/tmp}/bench_*.txt; the last lines repeat each configuration's whole-layer time.
BIN=${EMMY_BIN:-./emmy}
LOG=${OUT:-/tmp}
run() { # name, env...
  name=$1; shift
  env "$@" "$BIN" bench/kernels.lua --seq-len 512 --sweep 20 --torch ${CEIL:+--ceilings} > "$LOG/bench_$name.txt" 2>&1
  echo "== $name ($*)"; tail -n 40 "$LOG/bench_$name.txt"
  CEIL=
}
CEIL=1 run default EMMY_BENCH=1
run merged EMMY_MERGE_SIBLINGS=1
run dual EMMY_DUAL_GATE=1
run flash EMMY_VIEW_OUT=1 EMMY_KNOBS=k_sdpa:FLASH=1
echo
for f in default merged dual flash; do
  printf '%-8s %s\n' "$f" "$(grep 'whole layer' "$LOG/bench_$f.txt" || echo 'failed: see the table above')"
done
