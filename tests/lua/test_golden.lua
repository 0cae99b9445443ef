-- The golden corpus (tests/fixtures/cuda_golden/, listed in its MANIFEST.lua): every file is re-emitted in-process
-- from the variant its "// kernel" line records, on the kernel its entry forms, and must match byte for byte. This
-- checks the emitters alone (the rules' choices may move; the recorded variants do not), with no GPU and no NVRTC.
local golden = require "golden"
local kernels = require "emmy.kernels"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local entries = golden.manifest()

test("the manifest and the folder list the same files", function()
  local listed = {}
  for _, e in ipairs(entries) do listed[e.file] = true end
  local stray = {}
  for _, f in ipairs(require("emmy.sys").listdir(golden.DIR) or {}) do
    if f:match("%.cu$") and not listed[f] then stray[#stray + 1] = f end
  end
  table.sort(stray)
  check(#stray == 0, ("files the manifest does not list (regenerate: %s): %s"):format(golden.REGEN, table.concat(stray, " ")))
  check(#entries >= 100, "the manifest has its entries")
end)

for _, e in ipairs(entries) do
  test(e.file, function()
    local path = golden.DIR .. "/" .. e.file
    local want = golden.read(path)
    check(want, ("%s is missing (regenerate: %s)"):format(path, golden.REGEN))
    local name, kind, knobs = golden.recorded(want)
    check(name == e.kernel, ("%s: no '// kernel %s: ...' line (regenerate: %s)"):format(e.file, e.kernel, golden.REGEN))
    -- the recorded variant still has what the entry pins (the manifest was edited without regenerating otherwise)
    for key, v in pairs(golden.pins_of(e)) do
      if knobs[key] ~= nil and knobs[key] ~= v then
        error(("%s records %s=%d but the manifest pins %s=%d (regenerate: %s)"):format(e.file, key, knobs[key], key, v,
          golden.REGEN), 0)
      end
    end
    local k, err = golden.kernel(e)
    check(k, tostring(err) .. "\n  kernel formation changed; if that is meant, regenerate: " .. golden.REGEN)
    eq(k.kind, kind, e.file .. ": kernel kind")
    local got, msg = kernels.emit({ kernel = k }, knobs)
    check(got, ("%s: the emitter refused the recorded variant: %s"):format(e.file, tostring(msg)))
    local n, a, b = golden.first_diff(got, want)
    if n then
      error(("%s: emitted CUDA differs from the committed file at line %d\n  emitted:   %q\n  committed: %q\n"
        .. "  shown by:  %s\n  a refactor keeps this file byte-identical; if the change is meant, regenerate (%s) and "
        .. "commit the diff with it"):format(e.file, n, a, b, golden.command(e), golden.REGEN), 0)
    end
  end)
end

return T
