#!/bin/sh
# Where emmy stands against torch, in one GPU call: the numbers issues 19 and 20 are judged by (docs/performance.md
# leads with them). Sections, all by default, or the ones named: `sh bench/status.sh layers attention gemm`.
#   check      the defaults' correctness at the edges before any number (tests/gpu/run.sh: Qwen3-Embedding-0.6B layer 0
#              at 1, 7, 513 and 2048 tokens and swept at 513, TinyLlama swept at 513, Qwen3-4B at 513, the whole
#              Qwen3 model at 37, every op case and wide softmax / F.normalize rows, and the cases whose names contain
#              these (run.sh selects by substring); about 300 s):
#              the benches below check each kernel at 512 tokens only
#   layers     Qwen3-Embedding-0.6B and TinyLlama-1.1B layer 0 (dynamic seq_len, 512 tokens), emmy against eager and
#              torch.compile: whole layer, by-kind rows, every kernel alone (about 250 s)
#   attention  issue 20's table: b1 s512, b8 s512, b1 s2048, b1 s8192; causal and not; d128 16/8 and d64 32/4; the
#              rules' chosen variant against torch's fastest SDPA (about 60 s)
#   gemm       issue 19's projections at 512 and 4096 tokens against torch eager (cuBLAS) and torch.compile (the chosen
#              variant and the first persistent candidate; about 130 s)
#   squares    4096³ and 8192³ against cuBLAS (the chosen variant)
#   qwen4b     Qwen3-4B (issue 22's third model, not in the default set): layer 0 against eager and torch.compile, and
#              its 512-token projections against torch (about 150 s)
#   rows       the row-kernel experiments (not in the default set): EMMY_ROW_PRELOAD's GPU cases, then the A/B of
#              none / EMMY_ROW_PRELOAD=1 / =2 / =1 with RoPE's norms chunked (EMMY_ROW_VEC=1), emmy's kernels in the
#              program, Qwen3-Embedding-0.6B at batch 1 and 8 and TinyLlama (about 250 s)
#   kvmc       the attention experiment EMMY_KVMC=1 (not in the default set): its fixture cases, then the A/B on issue 20's
#              two non-causal rows over torch (b1 s2048 d64, b8 s512 d128): the chosen persistent leads and their
#              APERSIST=0 twins, each with and without (about 250 s)
#   kvmcprof   why EMMY_KVMC lost (not in the default set): Nsight Compute on the two non-causal rows over torch (b8 s512
#              d128, b1 s2048 d64), emmy's chosen lead without and with EMMY_KVMC=1 beside torch's kernels
#              (`emmy run --ir GRAPH --profile`; about 300 s)
#   ppcarry    PINGPONG's turns carried from item to item (EMMY_PP_CARRY, the default since the fifty-sixth session; not
#              in the default set): its GPU cases, then the A/B on the non-causal rows whose leads may be persistent
#              ping-pong (b8 s512, b4 s512, b1 s2048 at head dim 128; b8 s512, b1 s2048 at 64 with the persistent
#              ping-pong pinned beside the lead), EMMY_PP_CARRY=0 against the default (about 420 s)
#   ostsm      the attention experiment EMMY_O_STSM=1 (not in the default set): its GPU cases, then the A/B on issue
#              20's b8 s512 and b1 s2048 rows, both head dims, causal and not (about 300 s)
#   asplit     the attention experiment EMMY_ASPLIT=1 (not in the default set): its GPU cases, then the A/B on the
#              non-causal rows whose persistent items leave the last round short (b8 s512, b1 s2048, both head dims;
#              about 350 s)
#   pvsum      the attention experiment EMMY_PV_SUM=1 (not in the default set): its GPU cases, then the A/B at head dim
#              64 (b8 s512, b1 s2048, causal and not; the lead and the persistent ping-pong pinned; about 350 s)
#   uniformkv  the attention experiment EMMY_UNIFORM_KV (not in the default set): its GPU cases (=2), then the A/B of none,
#              =1 and =2 on issue 20's b8 s512 and b1 s2048 rows, both head dims, causal and not (about 460 s)
#   cold       the 512-token projections with the L2 flushed before each launch (kernel durations), against torch
#              eager's kernels the same way: the regime of a matmul in the model's program, its weights from HBM
# Text and JSON go to ${OUT:-/tmp}/status_* (in a device call's $OUT packed into status.tar.gz, the verdict beside it);
# each section prints its summary lines, and the end bench/verdict.lua's table of the Done-when rows. Every emmy number
# is checked against the reference before it is timed (the commands' own rule).
BIN=${EMMY_BIN:-./emmy}
LOG=${OUT:-/tmp}
mkdir -p "$LOG"
rm -f "$LOG"/status_* "$LOG"/status.tar.gz # (a run's verdict reads only its own sections: another run's, another $OUT)
ONLY="${*:-check layers attention gemm squares cold}"
on() { case " $ONLY " in *" $1 "*) return 0;; esac; return 1; }
t0=$(date +%s)
stamp() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
# an experiment's GPU cases: cases NAME SECONDS LABEL SELECTOR… (tests/gpu/run.sh's cases whose names contain a
# selector, their log in $LOG/status_NAME.txt, the ok/FAIL lines printed)
cases() {
  n=$1 s=$2 label=$3
  shift 3
  OUT=/tmp/status_${n}_logs EMMY_BIN=$BIN timeout "$s" sh tests/gpu/run.sh "$@" > "$LOG/status_$n.txt" 2>&1
  stamp "$label's cases (rc $?)"
  grep -E "^(ok|FAIL) |passed" "$LOG/status_$n.txt"
}
# an experiment's A/B over bench/attention.lua (bhsd, the chosen variants, torch's cuDNN, two interleaved runs):
# ab NAME SECONDS SETTINGS LABEL bench/attention.lua's other arguments… (its text in $LOG/status_NAME_ab.txt)
ab() {
  n=$1 s=$2 e=$3 label=$4
  shift 4
  timeout "$s" "$BIN" bench/ab.lua --env "$e" --runs 2 -- bench/attention.lua --layout bhsd --limit 0 --torch cudnn "$@" \
    > "$LOG/status_${n}_ab.txt" 2>&1
  stamp "$label A/B (rc $?)"
  tail -n 14 "$LOG/status_${n}_ab.txt"
}
# model M's layer 0 (dynamic seq_len, 512 tokens) against eager and torch.compile: whole, by kind, every kernel
layer() {
  f="$LOG/status_layer_$(echo "$1" | tr '/.' '__').txt" d="/tmp/status_dump_$(echo "$1" | tr '/.' '__')"
  rm -rf "$d"
  timeout 200 "$BIN" run "$1" --layer 0 --dynamic seq_len@x:1 --bench --bench-backends eager,tcompile,emmy --dump-dir "$d" > "$f" 2>&1
  stamp "$1 layer 0 (rc $?)"
  cp "$d/60_bench_compare.json" "${f%.txt}.json" 2>/dev/null # (its by-kind rows, for bench/verdict.lua)
  grep -E "^(emmy|eager|tcompile|transformers) |^(matmul|attention|norm, elementwise|copy|sum) " "$f"
  grep -E "^k_" "$f"
}
if on check; then
  # each case's log stays in /tmp (a device call brings few files back); status_check.txt has the failures' tails
  OUT=/tmp/status_check_logs EMMY_BIN=$BIN timeout 400 sh tests/gpu/run.sh layer_seq1 layer_seq7 layer_seq513 layer_seq2048 layer_sweep513 \
    llama_sweep513 wide1_q4b_seq513 model_seq37 op_cases > "$LOG/status_check.txt" 2>&1
  stamp "check (rc $?)"
  grep -E "^(ok|FAIL) |passed" "$LOG/status_check.txt"
fi
if on layers; then
  for m in Qwen/Qwen3-Embedding-0.6B TinyLlama/TinyLlama-1.1B-Chat-v1.0; do layer "$m"; done
fi
if on attention; then
  timeout 400 "$BIN" bench/attention.lua --layout bhsd --limit 0 --json "$LOG/status_attention.json" > "$LOG/status_attention.txt" 2>&1
  stamp "attention (rc $?)"
  grep -E "^b[0-9]+s[0-9]+ " "$LOG/status_attention.txt"
fi
if on gemm; then
  timeout 300 "$BIN" bench/gemm.lua --cases qwen,llama --batches 1,8 --torch --compile --limit 1 --json "$LOG/status_gemm.json" \
    > "$LOG/status_gemm.txt" 2>&1
  stamp "gemm projections (rc $?)"
  grep -E "^(qwen|llama) " "$LOG/status_gemm.txt"
fi
if on squares; then
  timeout 300 "$BIN" bench/gemm.lua --cases squares --torch --limit 1 --json "$LOG/status_squares.json" > "$LOG/status_squares.txt" 2>&1
  stamp "squares (rc $?)"
  grep -E "^[0-9]+³ " "$LOG/status_squares.txt"
fi
if on qwen4b; then
  layer Qwen/Qwen3-4B
  timeout 200 "$BIN" bench/gemm.lua --cases qwen4b --batches 1 --torch --compile --limit 1 --json "$LOG/status_qwen4b.json" \
    > "$LOG/status_qwen4b.txt" 2>&1
  stamp "Qwen3-4B projections (rc $?)"
  grep -E "^qwen4b " "$LOG/status_qwen4b.txt"
fi
if on rows; then
  cases rows 300 "row experiments" rowpre
  i=0
  for m in "Qwen/Qwen3-Embedding-0.6B" "Qwen/Qwen3-Embedding-0.6B --batch 8" "TinyLlama/TinyLlama-1.1B-Chat-v1.0"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # (the model and its flags, split on purpose)
    timeout 100 "$BIN" bench/ab.lua --env "EMMY_NONE=1;EMMY_ROW_PRELOAD=1;EMMY_ROW_PRELOAD=2;EMMY_ROW_PRELOAD=1 EMMY_ROW_VEC=1" \
      --runs 2 -- run $m --layer 0 --dynamic seq_len@x:1 --bench --bench-backends emmy > "$LOG/status_rows_ab$i.txt" 2>&1
    stamp "row A/B, $m (rc $?)"
    sed -n '/^case  *kernel/,/^µs:/p' "$LOG/status_rows_ab$i.txt"
  done
fi
if on kvmc; then
  # (the fixture's cases first, short; the A/B's bench checks each variant against the reference before it times it)
  cases kvmc 150 EMMY_KVMC kvmc_noncausal kvmc_persist
  timeout 380 "$BIN" bench/ab.lua --env "EMMY_NONE=1;EMMY_KVMC=1" --runs 2 -- bench/attention.lua --layout bhsd --limit 0 \
    --shapes b1s2048,b8s512 --causal 0 --torch cudnn \
    --pins "BQ=64,BKV=128,KVST=3,MINB=2,APERSIST=0,OSMEM=2,OTMA=1,PINGPONG=0;BQ=128,BKV=128,KVST=3,MINB=1,APERSIST=0,OSMEM=2,OTMA=0,PINGPONG=1" \
    > "$LOG/status_kvmc_ab.txt" 2>&1
  stamp "EMMY_KVMC A/B (rc $?)"
  tail -n 30 "$LOG/status_kvmc_ab.txt"
fi
if on kvmcprof; then
  G=/tmp/status_kvmc_graphs
  mkdir -p "$G"
  "$BIN" bench/attention.lua --layout bhsd --shapes b8s512 --heads 128:16:8 --causal 0 --torch none --graphs "$G" --dry-run > /dev/null 2>&1
  "$BIN" bench/attention.lua --layout bhsd --shapes b1s2048 --heads 64:32:4 --causal 0 --torch none --graphs "$G" --dry-run > /dev/null 2>&1
  for g in "$G"/*.torch.json; do
    for e in EMMY_NONE=1 EMMY_KVMC=1; do
      f="$LOG/status_kvmcprof_$(basename "$g" .torch.json)_${e%=1}.txt"
      env "$e" timeout 150 "$BIN" run --ir "$g" --profile > "$f" 2>&1
      stamp "ncu $(basename "$g" .torch.json) $e (rc $?)"
      sed -n '/^Nsight Compute, side by side/,$p' "$f" | head -n 60
    done
  done
fi
if on ppcarry; then
  cases ppcarry 250 EMMY_PP_CARRY ppcarry
  ab ppcarry 200 "EMMY_PP_CARRY=0;EMMY_NONE=1" "EMMY_PP_CARRY, head dim 128," --shapes b8s512,b4s512,b1s2048 --heads 128:16:8 --causal 0
  # head dim 64: the lead is not ping-pong (64-row tiles, two CTAs an SM); the persistent ping-pong pinned beside it
  ab ppcarry64 200 "EMMY_PP_CARRY=0;EMMY_NONE=1" "EMMY_PP_CARRY, head dim 64," --shapes b8s512,b1s2048 --heads 64:32:4 --causal 0 \
    --pins "BQ=128,BKV=128,KVST=3,MINB=1,APERSIST=1,OSMEM=4,OTMA=0,PINGPONG=1"
fi
if on ostsm; then
  cases ostsm 200 EMMY_O_STSM ostsm
  ab ostsm 180 "EMMY_NONE=1;EMMY_O_STSM=1" EMMY_O_STSM --shapes b8s512,b1s2048 --causal 0,1
fi
if on asplit; then
  cases asplit 200 EMMY_ASPLIT asplit
  ab asplit 150 "EMMY_NONE=1;EMMY_ASPLIT=1" EMMY_ASPLIT --shapes b8s512,b1s2048 --causal 0
fi
if on pvsum; then
  cases pvsum 200 EMMY_PV_SUM pvsum
  ab pvsum 150 "EMMY_NONE=1;EMMY_PV_SUM=1" EMMY_PV_SUM --shapes b8s512,b1s2048 --heads 64:32:4 --causal 0,1 \
    --pins "BQ=128,BKV=128,KVST=3,MINB=1,APERSIST=1,OSMEM=4,OTMA=0,PINGPONG=1"
fi
if on uniformkv; then
  cases uniformkv 220 EMMY_UNIFORM_KV uniformkv
  ab uniformkv 240 "EMMY_NONE=1;EMMY_UNIFORM_KV=1;EMMY_UNIFORM_KV=2" EMMY_UNIFORM_KV --shapes b8s512,b1s2048 --causal 0,1
fi
if on cold; then
  timeout 300 "$BIN" bench/gemm.lua --cases qwen,llama --batches 1 --torch --cold --limit 1 --match X=1 \
    --json "$LOG/status_cold.json" > "$LOG/status_cold.txt" 2>&1
  stamp "cold projections (rc $?)"
  sed -n '/^case  *kernel  *chosen cold/,$p' "$LOG/status_cold.txt"
fi
# issues 19 and 20's Done-when rows against their bounds, from the files above (bench/verdict.lua)
"$BIN" bench/verdict.lua "$LOG" --json "$LOG/status_verdict.json" > "$LOG/status_verdict.md" 2>&1 && cat "$LOG/status_verdict.md"
# a device call brings back 8 files: in $OUT, every file but the verdict goes into one archive
if [ -n "$OUT" ] && [ "$LOG" = "$OUT" ]; then
  (cd "$LOG" && ls status_* | grep -v '^status_verdict' | tar czf status.tar.gz -T - && ls status_* | grep -v '^status_verdict' | xargs rm -f)
  echo "== $LOG/status.tar.gz: every section's text and JSON (tar xzf)"
fi
