-- Knobs the emitter never reads (issue 21): every knob read goes through EX_KNOB, which records it; a knob of the
-- assignment away from the table's default that no code path read fails the emission in one line naming the
-- kernel, the knob, its value and the fork that left it unread. Structural knobs are the kernel former's and exempt.
-- The sweeps check that no candidate the shipped rules give is refused (the check must never break a tune).
local compiler, kernels, rules = require "emmy.compiler", require "emmy.kernels", require "emmy.rules"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local SDPA = ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json"
local L0 = { "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1" }

-- The plans of model's graph (frontend flags opts) under the default structural assignment.
local function plans_of(model, opts)
  local g = require("emmy.frontend").load(model, opts).graph
  return kernels.plan(compiler.run(g), { device = kernels.deploy_device(), check_pins = false })
end

-- A copy of p's chosen knobs with the entries of t.
local function with(p, t)
  local kn = {}
  for key, v in pairs(p.choice.knobs) do kn[key] = v end
  for key, v in pairs(t) do kn[key] = v end
  return kn
end

-- Emits every candidate of every distinct kernel (by structural hash) of model's graph (frontend flags opts), the
-- rules evaluated once a kernel, under the default structural assignment or (all_forks) under each of the 2^6
-- assignments of the structural knobs. Returns kernels, candidates, refusals ("kernel knobs: message").
local function sweep(model, opts, all_forks)
  local g = require("emmy.frontend").load(model, opts).graph
  local dev, rl = kernels.deploy_device(), rules.load()
  local base = compiler.structural_pins(function() return nil end)
  local free = {}
  for key in pairs(compiler.STRUCTURAL) do free[#free + 1] = key end
  table.sort(free)
  local seen, nk, nc, bad = {}, 0, 0, {}
  for bits = 0, all_forks and 2 ^ #free - 1 or 0 do
    local kn = {}
    for key, v in pairs(base) do kn[key] = v end
    for i, key in ipairs(free) do if math.floor(bits / 2 ^ (i - 1)) % 2 == 1 then kn[key] = 1 - base[key] end end
    for _, k in ipairs(compiler.run(g, { knobs = kn }).kernels) do
      if not seen[k.hash] then
        seen[k.hash] = true
        nk = nk + 1
        local p = { kernel = k, eval = rules.evaluate(rl, kernels.facts(k), dev) }
        for _, c in ipairs(p.eval.candidates) do
          nc = nc + 1
          local src, msg = kernels.emit(p, c.knobs)
          if not src then bad[#bad + 1] = ("%s %s: %s"):format(k.name, c.string, tostring(msg)) end
        end
      end
    end
  end
  return nk, nc, bad
end

test("ir.emit refuses a knob away from its default that the emitter never reads, in one line naming the fork", function()
  local g = assert(require("emmy.graphjson").read(SDPA))
  local p = kernels.plan(compiler.run(g), { device = kernels.deploy_device(), check_pins = false })[1]
  local name = p.kernel.name
  local cases = {
    { { FLASH = 0, BQ = 32 }, "BQ=32 is not read by this kernel's emitter with FLASH=0 (BQ is for attention (flash)): "
      .. "leave it at its default, 64" },
    { { FLASH = 0, BQ = 32, BKV = 64 }, "BKV=64, BQ=32 are not read by this kernel's emitter with FLASH=0 (BKV is for "
      .. "attention (flash); BQ is for attention (flash)): leave them at their defaults (BKV=32, BQ=64)" },
    { { FLASH = 0, QSMEM = 1 }, "QSMEM=1 is not read by this kernel's emitter with FLASH=0" },
    { { FLASH = 1, QROWS = 128 }, "QROWS=128 is not read by this kernel's emitter with FLASH=1 (QROWS is for attention)" },
    { { FLASH = 1, KV_TILE = 32 }, "KV_TILE=32 is not read by this kernel's emitter with FLASH=1" },
    { { BN = 128 }, "BN=128 is not read by this kernel's emitter (BN is for contraction kernels, not attention): "
      .. "leave it at its default, 64" },
  }
  for _, c in ipairs(cases) do
    local src, msg = kernels.emit(p, c[1]) -- (knobs left out are at their defaults)
    check(src == nil and #lines_of(msg) == 1 and msg:find(name .. " (attention): " .. c[2], 1, true), tostring(msg))
  end
  -- read knobs at any legal value, unread knobs at their defaults and structural knobs at any value pass
  for _, kn in ipairs { { FLASH = 0, QROWS = 128, KV_TILE = 32, BQ = 64, KVSPLIT = 1 }, { FLASH = 1, BQ = 32, QROWS = 64 },
    { FLASH = 1, DUAL_GATE = 0, MERGE_SIBLINGS = 1, SPLIT_CONE = 0, NORM_EPI = 1 }, { FLASH = 0, MINB = 2, PLANT = 3 } } do
    local src, msg = kernels.emit(p, kn)
    check(src, tostring(msg))
  end
end)

test("a contraction's knob outside its fork is refused naming the condition (the legality table's words); another kind's knob says whose it is", function()
  local lin, row
  for _, p in ipairs(plans_of("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } })) do
    if p.kernel.kind == "contraction" and p.choice.knobs.PERSIST == 0 then lin = lin or p end
    if p.kernel.kind == "row" then row = row or p end
  end
  -- (a contraction knob whose kinds text states a condition is the legality table's, src/ctr_legal.c: the emitter
  -- refuses the plan with the table's reason before its unread check)
  local src, msg = kernels.emit(lin, with(lin, { EPI_SMEM = 1 }))
  check(src == nil and msg:find(lin.kernel.name .. " (contraction): EPI_SMEM=1..7 are the persistent pipeline's staged "
    .. "epilogues (PERSIST=1)", 1, true), tostring(msg))
  src, msg = kernels.emit(row, with(row, { BN = 128, FLASH = 1 }))
  check(src == nil and msg:find(row.kernel.name .. " (row): BN=128, FLASH=1 are not read by this kernel's emitter (BN is "
    .. "for contraction kernels, not row; FLASH is for attention kernels, not row)", 1, true), tostring(msg))
end)

test("issue 21: a pinned knob the emitter never reads (BQ=32 with FLASH=0) is one line and a non-zero exit", function()
  -- the shipped rules never offer BQ away from its default on the scalar tier; this copy does, as a rule author might
  local d = tmpdir()
  sh(("cp %s/rules/tile/*.lua %s/"):format(shell_quote(ROOT), d))
  local f = d .. "/010_partition_loops.lua"
  local src, n = read_file(f):gsub("out%[#out %+ 1%] = { QROWS = q, KV_TILE = t }", "out[#out + 1] = { QROWS = q, KV_TILE = t, BQ = 32 }")
  eq(n, 1, "the edit of the scalar_attention fork applies once")
  write_file(f, src)
  local env = "EMMY_RULES=" .. d
  for _, pin in ipairs { "EMMY_KNOBS=FLASH=0,BQ=32", "EMMY_FLASH=0 EMMY_BQ=32", "EMMY_KNOBS=k_sdpa:FLASH=0" } do
    local code, out, err = emmy({ "compile", SDPA, "--kernel", "sdpa", "--ir", "tile" }, { env = env .. " " .. pin })
    eq(code, 1, pin .. ": exit (the emitter refused the chosen variant): " .. out)
    eq(#lines_of(err), 1, pin .. ": one line: " .. err)
    check(err:find("^emmy: k_sdpa_%x+ %(attention%): BQ=32 is not read by this kernel's emitter with FLASH=0 %(BQ is for "
      .. "attention %(flash%)%): leave it at its default, 64\n$"), pin .. ": " .. err)
  end
  -- the flash variants read BQ=32: the same pin without FLASH=0 compiles
  local code, out, err = emmy({ "compile", SDPA, "--kernel", "sdpa", "--ir", "tile" }, { env = env .. " EMMY_KNOBS=BQ=32" })
  eq(code, 0, "BQ=32 alone: " .. err)
  check(out:find("BQ=32,FLASH=1", 1, true), out)
  -- and a whole layer under the shipped rules, pinned to the scalar tier, compiles
  code, out, err = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=FLASH=0" })
  eq(code, 0, "FLASH=0 under the shipped rules: " .. err)
end)

test("the structural knobs the emitter's check exempts are the kernel former's (compiler.STRUCTURAL)", function()
  local want = { SPLIT_CONE = true, MERGE_SIBLINGS = true, VIEW_OUT = true, DUAL_GATE = true, ROPE_EPI = true, NORM_EPI = true }
  for _, info in ipairs(require("emmy.knobs").list()) do
    eq(info.structural, want[info.name] == true, info.name .. " structural")
    eq(compiler.STRUCTURAL[info.name], want[info.name] and info.default or nil, info.name .. " in compiler.STRUCTURAL")
  end
end)

-- Every candidate of the shipped rules emits: in `make test`, the default structural assignment of two layers; with
-- EMMY_KREAD_SWEEP=all, both models whole and layer 0, batch 1 and 8, under every structural assignment (about 20
-- minutes of CPU on 2 cores; run it after an emitter or rule change: docs/reliability.md gives the last counts).
local DYN_L, DYN_W = { "seq_len@x:1" }, { "seq_len@input_ids:1" }
local function no_refusal(model, opts, all_forks, least)
  local nk, nc, bad = sweep(model, opts, all_forks)
  check(nk >= 5 and nc >= least, ("%s: swept %d kernels, %d candidates"):format(model, nk, nc))
  check(#bad == 0, ("%s: %d of %d candidates refused; first: %s"):format(model, #bad, nc, tostring(bad[1])))
end

test("no candidate of Qwen3-Embedding-0.6B layer 0 is refused: every knob away from its default is read", function()
  no_refusal("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = DYN_L }, false, 31000)
end)

test("no candidate of TinyLlama layer 0 at batch 8 is refused: every knob away from its default is read", function()
  no_refusal("TinyLlama/TinyLlama-1.1B-Chat-v1.0", { layer = 0, batch = 8, dynamic = DYN_L }, false, 30000)
end)

test("EMMY_KREAD_SWEEP=all: no candidate of either model, whole and layer 0, batch 1 and 8, any structural assignment", function()
  if os.getenv("EMMY_KREAD_SWEEP") ~= "all" then
    skip("about 20 minutes of CPU: EMMY_KREAD_SWEEP=all ./emmy tests/lua/run.lua kread runs it")
  end
  for _, m in ipairs { "Qwen/Qwen3-Embedding-0.6B", "TinyLlama/TinyLlama-1.1B-Chat-v1.0" } do
    for _, b in ipairs { 1, 8 } do
      no_refusal(m, { layer = 0, batch = b, dynamic = DYN_L }, true, 120000)
      no_refusal(m, { batch = b, dynamic = DYN_W }, true, 150000)
    end
  end
end)

return T
