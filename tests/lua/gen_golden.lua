-- Regenerates the golden corpus of emitted CUDA from tests/fixtures/cuda_golden/MANIFEST.lua:
--   emmy tests/lua/gen_golden.lua [--recorded] [SUBSTR]
-- --recorded: each file re-emitted under the knobs it records (an emitter change that keeps every variant: what
-- tests/lua/test_golden.lua compares), not the rules' first candidate under the pins (a rules change moves those).
-- Each entry's kernel is formed under its structural knobs, its pins choose the rules' first candidate on the
-- deploy target (the H200, GPU or not), and that variant's source is written. With SUBSTR only the entries whose
-- file name contains it are written and no file is removed; without, files the manifest does not list are removed.
-- Refuses (and writes nothing) when a pin names no knob of its kernel or two entries emit the same source, so
-- every file covers what its name says.
package.path = EMMY_HOME .. "/tests/lua/?.lua;" .. package.path
local golden = require "golden"
local compiler = require "emmy.compiler"
local kernels = require "emmy.kernels"
local rules = require "emmy.rules"
local sys = require "emmy.sys"

local recorded = arg and arg[1] == "--recorded"
local filter = arg and arg[recorded and 2 or 1]
local rl = rules.load()
local dev = kernels.deploy_device()
local evals = setmetatable({}, { __mode = "k" })
local out, by_src = {}, {}
local t0 = sys.clock()
for _, e in ipairs(golden.manifest()) do
  if not filter or e.file:find(filter, 1, true) then
    local k = assert(golden.kernel(e))
    local f = kernels.facts(k)
    evals[k] = evals[k] or rules.evaluate(rl, f, dev)
    local ev = evals[k]
    local _, envf = golden.env_of(e)
    for key in pairs(golden.pins_of(e)) do
      if compiler.STRUCTURAL[key] == nil and ev.declared[key] == nil then
        error(("%s: pin %s is not a knob of %s (%s)"):format(e.file, key, k.name, k.kind), 0)
      end
    end
    local c
    if recorded then
      local _, _, knobs = golden.recorded(assert(golden.read(golden.DIR .. "/" .. e.file), e.file .. " is missing"))
      c = { knobs = knobs, string = "(recorded)" }
    else
      local ok, cands = pcall(rules.apply_pins, k.name, ev, rules.pins(k.name, ev.declared, envf))
      if not ok then error(e.file .. ": " .. tostring(cands), 0) end
      c = cands[1]
    end
    if e.add and not recorded then -- a knob no rule offers (STAMP), set on the chosen variant
      local knobs = {}
      for key, v in pairs(c.knobs) do knobs[key] = v end
      local key, v = e.add:match("^([%w_]+)=(%d+)$")
      knobs[key] = tonumber(v)
      c = { knobs = knobs, string = c.string .. " + " .. e.add }
    end
    local src, err = kernels.emit({ kernel = k }, c.knobs)
    if not src then error(e.file .. ": " .. tostring(err), 0) end
    if by_src[src] then error(("%s and %s emit the same source: a pin changes nothing"):format(by_src[src], e.file), 0) end
    by_src[src] = e.file
    out[#out + 1] = { file = e.file, src = src, knobs = c.string }
  end
end
assert(sys.mkdir_p(golden.DIR))
local listed, written = {}, 0
for _, o in ipairs(out) do
  listed[o.file] = true
  local path = golden.DIR .. "/" .. o.file
  if golden.read(path) ~= o.src then
    local fh = assert(io.open(path, "wb"))
    fh:write(o.src)
    fh:close()
    written = written + 1
    print("wrote " .. o.file .. "  " .. o.knobs)
  end
end
local removed = 0
if not filter then
  for _, f in ipairs(sys.listdir(golden.DIR) or {}) do
    if f:match("%.cu$") and not listed[f] then
      os.remove(golden.DIR .. "/" .. f)
      removed = removed + 1
      print("removed " .. f)
    end
  end
end
print(("%d entries, %d written, %d unchanged, %d removed (%.1f s)"):format(#out, written, #out - written, removed, sys.clock() - t0))
