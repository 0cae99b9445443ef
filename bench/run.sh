#!/bin/sh
# The kernel benchmark in one GPU call: Qwen3-Embedding-0.6B layer 0 at seq_len 512, emmy's chosen variant and
# the best of an exhaustive tile sweep (--tiles: every warp-tier tile of each contraction, every flash point;
# each variant checked against the CPU reference before it is timed) beside PyTorch eager and torch.compile,
# for the default kernel set (dual k/v and gate/up, TMA), merged siblings, and the tiers written without a GPU run.
# Full tables go to ${OUT:-/tmp}/bench_*.txt, every variant's row to bench_*.json; the last lines repeat each
# configuration's whole-layer times. About 8 minutes in all on the H200 (the default configuration, with
# torch.compile, is most of it): `sh bench/run.sh default` … runs only the named configurations.
BIN=${EMMY_BIN:-./emmy}
ONLY="$*"
LOG=${OUT:-/tmp}
run() { # name, env... (skipped when configuration names were given and this is not one of them)
  name=$1; shift
  if [ -n "$ONLY" ]; then case " $ONLY " in *" $name "*) ;; *) CEIL= TORCH=; return 0;; esac; fi
  env "$@" "$BIN" bench/kernels.lua --seq-len ${SEQ:-512} --tiles ${TORCH:+--torch} ${CEIL:+--ceilings} --json "$LOG/bench_$name.json" \
    > "$LOG/bench_$name.txt" 2>&1
  echo "== $name ($*)"; tail -n 45 "$LOG/bench_$name.txt"
  CEIL= TORCH=
}
# torch.compile compiles every reproducer (tens of seconds each): the default set only. Tiers not yet run on a
# GPU (WGMMA=1, KVSPLIT=2) get their own processes, so a faulting variant cannot take the others' context down.
CEIL=1 TORCH=1 run default EMMY_KNOBS=WGMMA=0,k_sdpa:KVSPLIT=1
run merged EMMY_MERGE_SIBLINGS=1 EMMY_DUAL_GATE=0 EMMY_KNOBS=WGMMA=0,k_sdpa:KVSPLIT=1
run wgmma EMMY_KNOBS=WGMMA=1,k_sdpa:KVSPLIT=1
run kvsplit EMMY_KNOBS=WGMMA=0,k_sdpa:KVSPLIT=2
echo
for f in ${ONLY:-default merged wgmma kvsplit}; do
  echo "== $f"; grep -E '^(whole layer|emmy )' "$LOG/bench_$f.txt" || echo 'failed: see the table above'
done
