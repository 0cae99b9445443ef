#!/bin/sh
# GPU tests and benchmarks, run on the GPU machine in one call (`make test-gpu`). Where there is no GPU,
# `--list-skip` reports each GPU test as skipped with the reason, so none is silently dropped.
BIN=${EMMY_BIN:-./emmy}
TESTS="gpu_probe cuda_runtime"
if [ "$1" = "--list-skip" ] || ! "$BIN" info --json 2>/dev/null | grep -q '"gpu":{'; then
  reason="no GPU on this machine"
  [ "$1" = "--list-skip" ] && reason="GPU tests run with 'make test-gpu' on the GPU machine"
  n=0
  for t in $TESTS; do echo "skip $t ($reason)"; n=$((n + 1)); done
  echo "0 passed, 0 failed, $n skipped"
  exit 0
fi
passed=0; failed=0
# gpu_probe: the driver is opened with dlopen and sees the GPU; NVRTC answers.
if "$BIN" info | tee /dev/stderr | grep -q '^gpu .*sm_'; then echo "ok   gpu_probe"; passed=$((passed + 1));
else echo "FAIL gpu_probe"; failed=$((failed + 1)); fi
# cuda_runtime: the driver runtime (tests/gpu/test_cuda.lua): nvcc-built kernels against the host reference,
# one-line errors, a lost context failing fast (a new process gets a working device), event and CUDA-graph timing.
if "$BIN" tests/gpu/test_cuda.lua; then echo "ok   cuda_runtime"; passed=$((passed + 1));
else echo "FAIL cuda_runtime"; failed=$((failed + 1)); fi
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
