#!/bin/sh
# The evidence for the kernels that miss their issue-5 targets, in one GPU call: the wgmma tiles of q_proj and
# down timed with every WG_WAIT and SPLIT_K option (graph replay, median of 50, each checked first), then Nsight
# Compute's speed-of-light, occupancy and warp-state sections for q_proj, down and attention at seq_len 512 and
# attention at 2048 (the default variants; --clock-control none as METHOD.md asks). Where ncu cannot read the
# counters it says so and the timings stand alone. Text goes to ${OUT:-/tmp}/gaps_*.txt.
BIN=${EMMY_BIN:-./emmy}
LOG=${OUT:-/tmp}
L0="Qwen/Qwen3-Embedding-0.6B --layer 0 --dynamic seq_len@x:1"
export EMMY_MERGE_SIBLINGS=0 # (q_proj apart from k and v, as these kernels were measured; the default merges them)
for k in k_linear_7363a2 k_linear_add_f97280; do
  EMMY_KNOBS=WGMMA=1 timeout 120 "$BIN" bench/kernels.lua --kernel $k --tiles --json "$LOG/gaps_tiles_$k.json" \
    > "$LOG/gaps_tiles_$k.txt" 2>&1
  echo "== $k: the wgmma tiles, fastest first"
  grep -E "^$k " "$LOG/gaps_tiles_$k.txt" | grep -v scalar | head -3
  python3 -c "import json,sys
r=[x for x in json.load(open(sys.argv[1])).get('variants',[]) if x.get('us')]
r.sort(key=lambda x:x['us'])
for x in r[:6]: print('%7.1f us  %s'%(x['us'],x['knobs']))" "$LOG/gaps_tiles_$k.json" 2>&1 | tail -6
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
if [ -n "$NCU" ]; then
  timeout 150 "$NCU" --clock-control none $SECT -k regex:'k_linear_7363a2|k_linear_add_f97280|k_sdpa_123d66' \
    --launch-count 3 "$BIN" run $L0 --seq-len 512 > "$LOG/gaps_ncu512.txt" 2>&1
  timeout 150 "$NCU" --clock-control none $SECT -k regex:k_sdpa --launch-count 1 "$BIN" run $L0 --seq-len 2048 \
    > "$LOG/gaps_ncu2048.txt" 2>&1
  for f in gaps_ncu512 gaps_ncu2048; do
    echo "== $f"
    grep -E "^  k_|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|No Eligible|Issued Warp|Warp Cycles Per Issued|==ERR|==WARNING" "$LOG/$f.txt" | head -60
  done
else
  echo "no ncu on this machine"
fi
