#!/bin/sh
# tools/sass_count.sh FILE.cu… — each emitted kernel's SASS instruction count for sm_90a (its .text section / 16 bytes),
# registers and spills, with the CUDA toolkit's nvcc (no GPU needed): a codegen change's size before and after, e.g.
#   ./emmy compile MODEL --layer 0 --dynamic seq_len@x:1 --dump-dir D; sh tools/sass_count.sh D/40_lowering_cuda.kernels/*.cu
NVCC=${NVCC:-nvcc}
command -v "$NVCC" > /dev/null 2>&1 || { echo "sass_count: no nvcc (set NVCC=/path/to/nvcc)" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: sh tools/sass_count.sh FILE.cu..." >&2; exit 2; }
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
rc=0
for f in "$@"; do
  if ! "$NVCC" -arch=sm_90a -cubin -w -Xptxas -v "$f" -o "$t/k.cubin" > "$t/log" 2>&1; then
    echo "$(basename "$f"): does not compile: $(grep -m1 error "$t/log")"; rc=1; continue
  fi
  sz=$(readelf -S -W "$t/k.cubin" 2>/dev/null | sed 's/^ *\[ *[0-9]*\] *//' | awk '$1 ~ /^\.text\./ { print $5; exit }')
  echo "$(basename "$f"): $((0x${sz:-0} / 16)) SASS instructions, $(grep -o 'Used [0-9]* registers' "$t/log" | head -1), $(grep -o '[0-9]* bytes spill stores' "$t/log" | head -1)"
done
exit $rc
