#!/bin/sh
# The kernel benchmark in one GPU call: Qwen3-Embedding-0.6B layer 0 at seq_len 512, emmy's chosen variant and
# the best of an exhaustive tile sweep (--tiles: every warp-tier tile of each contraction, every flash point;
# each variant checked against the CPU reference before it is timed) beside PyTorch eager and torch.compile,
# for the default kernel set (dual k/v and gate/up, wgmma on TMA tiles, flash with KVSPLIT=2), the mma.sync tier,
# merged siblings, and attention at seq_len 2048.
# Full tables go to ${OUT:-/tmp}/bench_*.txt, every variant's row to bench_*.json; the last lines repeat each
# configuration's whole-layer times. About 8 minutes in all on the H200 (the default configuration, with
# torch.compile, is most of it): `sh bench/run.sh default` … runs only the named configurations.
BIN=${EMMY_BIN:-./emmy}
ONLY="$*"
LOG=${OUT:-/tmp}
run() { # name, env... (skipped when configuration names were given and this is not one of them)
  name=$1; shift
  if [ -n "$ONLY" ]; then case " $ONLY " in *" $name "*) ;; *) CEIL= TORCH= SEQ= KERNEL= MODEL= SWEEP=; return 0;; esac; fi
  tiles=--tiles; [ -n "$SWEEP" ] && tiles=
  env "$@" "$BIN" bench/kernels.lua --seq-len ${SEQ:-512} ${SWEEP:+--sweep $SWEEP} $tiles ${TORCH:+--torch} \
    ${CEIL:+--ceilings} ${MODEL:+--model $MODEL} ${KERNEL:+--kernel $KERNEL} --json "$LOG/bench_$name.json" > "$LOG/bench_$name.txt" 2>&1
  echo "== $name ($*)"; tail -n 45 "$LOG/bench_$name.txt"
  CEIL= TORCH= SEQ= KERNEL= MODEL= SWEEP=
}
# torch.compile compiles every reproducer (tens of seconds each): the default set, merged siblings, attention at 2048.
# mma: the mma.sync warp tier (WGMMA=0) with its own sweep; merged: sibling projections side by side.
CEIL=1 TORCH=1 run default
run mma EMMY_KNOBS=WGMMA=0
TORCH=1 run merged EMMY_MERGE_SIBLINGS=1 EMMY_DUAL_GATE=0
SEQ=2048 TORCH=1 KERNEL=k_sdpa run sdpa2048
# Qwen3 layer 0 with q_norm/k_norm + RoPE in the q/k projections' epilogue (NORM_EPI=1, off by default)
run norm_epi EMMY_NORM_EPI=1
# TinyLlama layer 0 (RoPE as the q/k projections' epilogue, ROPE_EPI=1) against the same layer with RoPE's
# rotate_half in pointwise kernels (ROPE_EPI=0); a 24-point sweep per kernel instead of --tiles
MODEL=TinyLlama/TinyLlama-1.1B-Chat-v1.0 SWEEP=24 run llama
MODEL=TinyLlama/TinyLlama-1.1B-Chat-v1.0 SWEEP=24 run llama_unfused EMMY_ROPE_EPI=0
echo
for f in ${ONLY:-default mma merged sdpa2048 norm_epi llama llama_unfused}; do
  echo "== $f"; grep -E '^(whole layer|emmy |k_sdpa)' "$LOG/bench_$f.txt" || echo 'failed: see the table above'
done
