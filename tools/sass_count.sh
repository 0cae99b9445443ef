#!/bin/sh
# tools/sass_count.sh FILE.cu… — each emitted kernel's SASS instruction count for sm_90a (its .text section / 16 bytes),
# registers and spills, no GPU needed: a codegen change's size before and after, e.g.
#   ./emmy compile MODEL --layer 0 --dynamic seq_len@x:1 --dump-dir D; sh tools/sass_count.sh D/40_lowering_cuda.kernels/*.cu
# Compiled by emmy's own NVRTC with emmy's options (tools/nvrtc_cubin.lua: what a run loads), or with SASS_VIA=nvcc
# (or no emmy binary) by the toolkit's nvcc, whose defaults differ: Qwen3's dynamic q|k|v is 2,544 instructions by
# NVRTC and 2,456 by nvcc 13.0.
NVCC=${NVCC:-nvcc}
EMMY=${EMMY_BIN:-$(dirname "$0")/../emmy}
[ $# -gt 0 ] || { echo "usage: sh tools/sass_count.sh FILE.cu..." >&2; exit 2; }
if [ "${SASS_VIA:-nvrtc}" = nvrtc ] && [ -x "$EMMY" ]; then via=nvrtc
elif command -v "$NVCC" > /dev/null 2>&1; then via=nvcc
else echo "sass_count: no emmy binary and no nvcc (set EMMY_BIN or NVCC=/path/to/nvcc)" >&2; exit 2; fi
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
rc=0
for f in "$@"; do
  if [ $via = nvcc ]; then
    if ! "$NVCC" -arch=sm_90a -cubin -w -Xptxas -v "$f" -o "$t/k.cubin" > "$t/log" 2>&1; then
      echo "$(basename "$f"): does not compile: $(grep -m1 error "$t/log")"; rc=1; continue
    fi
    regs=$(grep -o 'Used [0-9]* registers' "$t/log" | head -1); spill=$(grep -o '[0-9]* bytes spill stores' "$t/log" | head -1)
  else
    if ! "$EMMY" "$(dirname "$0")/nvrtc_cubin.lua" "$f" "$t/k.cubin" > "$t/log" 2>&1; then
      echo "$(basename "$f"): does not compile: $(head -c 200 "$t/log")"; rc=1; continue
    fi
    read -r st r sp < "$t/log"; regs="Used $r registers"; spill="$sp bytes spill stores"
  fi
  sz=$(readelf -S -W "$t/k.cubin" 2>/dev/null | sed 's/^ *\[ *[0-9]*\] *//' | awk '$1 ~ /^\.text\./ { print $5; exit }')
  echo "$(basename "$f"): $((0x${sz:-0} / 16)) SASS instructions, $regs, $spill"
done
exit $rc
