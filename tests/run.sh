#!/bin/sh
# Runs every test that needs no GPU — C unit tests, Lua tests (host, IR, JSON, CPU reference against the
# PyTorch oracle), the torchref self-test — and reports GPU tests as skipped. Last line: N passed, N failed, N skipped.
BIN=${EMMY_BIN:-./emmy}
PY=${EMMY_PYTHON:-/usr/bin/python3}
mode=${1:-all}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
passed=0; failed=0; skipped=0

tally() { # file: adds the counts from its last "N passed, N failed[, N skipped]" line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
  if [ -z "$line" ]; then echo "FAIL $2 (no summary line; see output above)"; failed=$((failed + 1)); return; fi
  p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
  s=$(echo "$line" | sed -nE 's/.*, ([0-9]+) skipped.*/\1/p')
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
}

if [ "$mode" != "--lua-only" ]; then
  echo "== C unit tests"
  ./tests/unit > "$log/unit" 2>&1; cat "$log/unit" | grep -v '^ok '; tally "$log/unit" tests/unit
  echo "== torchref self-test ($PY)"
  PYTHONDONTWRITEBYTECODE=1 $PY tools/torchref/test_replay.py > "$log/py" 2>&1; grep -vE '^(ok|PASS)' "$log/py" | tail -n 20
  tally "$log/py" tools/torchref/test_replay.py
  PYTHONDONTWRITEBYTECODE=1 timeout 300 $PY tools/torchref/test_stock_serve.py > "$log/py2" 2>&1; grep -vE '^(ok|PASS|stock_serve: serving)' "$log/py2" | tail -n 20
  tally "$log/py2" tools/torchref/test_stock_serve.py
fi
echo "== Lua tests ($BIN)"
EMMY_PYTHON=$PY "$BIN" tests/lua/run.lua > "$log/lua" 2>&1; grep -v '^ok ' "$log/lua"; tally "$log/lua" tests/lua
if [ "$mode" != "--lua-only" ] && [ -x ./emmy-asan ]; then
  echo "== host, IR, JSON and rule-sandbox tests under AddressSanitizer + UBSan (./emmy-asan)"
  EMMY_BIN=./emmy-asan ./emmy-asan tests/lua/run.lua host/ > "$log/asan1" 2>&1; grep -v '^ok ' "$log/asan1"; tally "$log/asan1" asan-host
  EMMY_BIN=./emmy-asan ./emmy-asan tests/lua/run.lua json/ > "$log/asan2" 2>&1; grep -v '^ok ' "$log/asan2"; tally "$log/asan2" asan-json
  EMMY_BIN=./emmy-asan ./emmy-asan tests/lua/run.lua ir/ > "$log/asan3" 2>&1; grep -v '^ok ' "$log/asan3"; tally "$log/asan3" asan-ir
  echo "== the fault-injection suite under AddressSanitizer + UBSan (docs/reliability.md)"
  EMMY_BIN=./emmy-asan ./emmy-asan tests/lua/run.lua faults/ > "$log/asan4" 2>&1; grep -v '^ok ' "$log/asan4"; tally "$log/asan4" asan-faults
  # the fuzz and fault cases of dims, sizes and input validation, in process and in the commands they spawn
  EMMY_BIN=./emmy-asan ./emmy-asan tests/lua/run.lua fuzz_inputs/ > "$log/asan5" 2>&1; grep -v '^ok ' "$log/asan5"; tally "$log/asan5" asan-fuzz-inputs
  EMMY_BIN=./emmy-asan ./emmy-asan tests/lua/run.lua rules_sandbox/ > "$log/asan6" 2>&1; grep -v '^ok ' "$log/asan6"; tally "$log/asan6" asan-rules
fi
echo "== GPU tests"
sh tests/gpu/run.sh --list-skip > "$log/gpu" 2>&1; cat "$log/gpu"; tally "$log/gpu" tests/gpu

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
