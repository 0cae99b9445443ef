-- The knob table (src/knobs.h) from Lua: the emmy.knobs binding, the rules checked against it, EMMY_KNOBS pins
-- checked against it and against the run's kernels, ir.emit refusing a knob outside it, the structural defaults,
-- and docs/formats.md's generated knob table.
local knobs = require "emmy.knobs"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local L0 = { "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1" }
local function rules_copy()
  local d = tmpdir()
  sh(("cp %s/rules/tile/*.lua %s/"):format(shell_quote(ROOT), d))
  return d
end

-- compile under env; the rule file f of a rules copy edited by gsub(pattern, repl) first when given
local function compile_with(env, f, pattern, repl)
  if f then
    local d = rules_copy()
    local src = read_file(d .. "/" .. f)
    local edited, n = src:gsub(pattern, repl)
    check(n == 1, "the edit of " .. f .. " applies once: " .. pattern)
    write_file(d .. "/" .. f, edited)
    env = (env and env .. " " or "") .. "EMMY_RULES=" .. d
  end
  return emmy(args("compile", L0, "--ir", "tile"), { env = env })
end

test("the binding lists the table: names, families, defaults, legal values, docs", function()
  local list = knobs.list()
  check(#list > 24, "more knobs than the old limit of an assignment: " .. #list)
  local by = {}
  for _, k in ipairs(list) do
    check(type(k.name) == "string" and type(k.family) == "string" and type(k.default) == "number", k.name)
    check(k.doc ~= "" and k.kinds ~= "" and k.values ~= "", k.name)
    check(knobs.check(k.name, k.default), k.name .. ": its default is legal")
    by[k.name] = k
  end
  eq(by.PERSIST.values, "0,1", "PERSIST values")
  eq(by.PERSIST.default, 0, "PERSIST default")
  eq(by.PERSIST.family, "TILE", "PERSIST family")
  check(by.PERSIST.doc:find("persistent warp-specialized pipeline", 1, true), by.PERSIST.doc)
  eq(by.EPI_SMEM.values, "0,1,2,3,4,5,6,7", "EPI_SMEM values")
  eq(knobs.info("BM").default, 64, "BM default")
  eq(knobs.info("BMM"), nil, "no BMM")
  eq(knobs.check("BM", 128), true, "BM=128")
  local ok, why = knobs.check("BMM", 64)
  check(not ok and why:find("'BMM' is not a knob (did you mean BM?", 1, true), why)
  ok, why = knobs.check("BM", 48)
  check(not ok and why:find("BM=48 is not a legal value of BM (it takes 16,32,64,128,256)", 1, true), why)
  ok, why = knobs.check("THREADS", 64.5)
  check(not ok and why:find("not an integer", 1, true), why)
  ok, why = knobs.check("THREADS", "64")
  check(not ok and why:find("not an integer", 1, true), why)
  check(knobs.check("THREADS", 1024) and not knobs.check("THREADS", 1056), "a range holds its ends only")
end)

test("every knob an emitter reads or a rule declares is in the table, and the structural defaults are its", function()
  -- the emitters read knobs as EX_KNOB(c, NAME) (an enum: another name does not compile); no string lookups remain
  local names, n = {}, 0
  for _, f in ipairs(require("emmy.sys").listdir(ROOT .. "/src")) do
    if f:match("%.[ch]$") and f ~= "knobs.h" then
      local src = read_file(ROOT .. "/src/" .. f)
      check(not src:find("em_knob_get", 1, true), f .. " reads a knob by its name string")
      for name in src:gmatch("EX_KNOB%([^,]+,%s*([%w_]+)%)") do
        names[name] = true
        n = n + 1
      end
    end
  end
  check(n >= 30, "the emitters' knob reads found: " .. n)
  for name in pairs(names) do if name ~= "NAME" then check(knobs.info(name), "an emitter reads " .. name) end end
  -- the rules (and the test-only plant rule): rules.load checks every declared knob against the table
  local rules = require "emmy.rules"
  for _, dir in ipairs { ROOT .. "/rules/tile", ROOT .. "/tests/fixtures/plant" } do
    for _, r in ipairs(rules.load(dir)) do
      for key in pairs(r.knobs or {}) do check(knobs.info(key), r.file .. " declares " .. key) end
    end
  end
  local compiler = require "emmy.compiler"
  local want = { SPLIT_CONE = 1, MERGE_SIBLINGS = 1, VIEW_OUT = 1, DUAL_GATE = 1, ROPE_EPI = 1, NORM_EPI = 0 }
  for key, v in pairs(want) do eq(compiler.STRUCTURAL[key], v, key .. " default") end
  for key in pairs(compiler.STRUCTURAL) do check(want[key] ~= nil, "structural " .. key) end
end)

test("docs/formats.md's knob table is the one generated from src/knobs.h (regenerate: emmy knobs --update-docs)", function()
  local code, md = emmy { "knobs", "--markdown" }
  eq(code, 0, "exit")
  local cmd = dofile(ROOT .. "/scripts/commands/knobs.lua")
  local _, table_text = cmd.split_docs(read_file(ROOT .. "/docs/formats.md"))
  check(table_text, "docs/formats.md has the generated table's markers")
  check(table_text == md, "docs/formats.md's knob table differs from src/knobs.h: run ./emmy knobs --update-docs")
  for _, k in ipairs(knobs.list()) do check(md:find("\n| " .. k.name .. " | ", 1, true), k.name .. " has a row") end
end)

test("emmy knobs lists the table and shows one knob; an unknown one is a usage error", function()
  local code, out = emmy { "knobs" }
  eq(code, 0, "exit")
  check(out:find("\nPERSIST%s+TILE%s+0%s+0,1%s+contraction"), out)
  check(out:find(#knobs.list() .. " knobs", 1, true), out)
  local c2, o2 = emmy { "knobs", "KVSPLIT" }
  eq(c2, 0, "exit")
  check(o2:find("KVSPLIT  family WORK, default 1, values 1,2", 1, true), o2)
  local c3, _, e3 = emmy { "knobs", "BMM" }
  eq(c3, 2, "exit")
  check(#lines_of(e3) == 1 and e3:find("'BMM' is not a knob (did you mean BM?", 1, true), e3)
  local c4, o4 = emmy { "knobs", "--json" }
  eq(c4, 0, "exit")
  eq(#require("cjson").decode(o4).knobs, #knobs.list(), "json rows")
end)

test("regression: EMMY_KNOBS=BMM=64 is a one-line usage error naming the knob (it was silently ignored)", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=BMM=64" })
  eq(code, 2, "exit: " .. out)
  eq(#lines_of(err), 1, "one line: " .. err)
  check(err:find("EMMY_KNOBS item 'BMM=64': 'BMM' is not a knob (did you mean BM? `emmy knobs` lists them)", 1, true), err)
  -- with a kernel prefix, and before any kernel exists (--ir graph stops after the passes)
  code, _, err = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=k_sdpa:KVSPLT=2" })
  check(code == 2 and err:find("'KVSPLT' is not a knob (did you mean KVSPLIT?", 1, true), err)
  code, _, err = emmy(args("compile", L0, "--ir", "graph"), { env = "EMMY_KNOBS=BMM=64" })
  check(code == 2 and err:find("'BMM' is not a knob", 1, true), err)
end)

test("a pin of a knob no kernel of the run has is a one-line usage error", function()
  local cases = {
    { "EMMY_KNOBS=PLANT=1", "EMMY_KNOBS item 'PLANT=1': no kernel of this run has the knob PLANT (it belongs to: any (test-only))" },
    { "EMMY_PLANT=1", "EMMY_PLANT=1: no kernel of this run has the knob PLANT" },
    { "EMMY_KNOBS=k_rms_norm:BM=64", "EMMY_KNOBS item 'k_rms_norm:BM=64': no kernel of this run named *k_rms_norm* has the knob BM (it belongs to: contraction)" },
    { "EMMY_KNOBS=k_nothing:BM=64", "EMMY_KNOBS item 'k_nothing:BM=64': no kernel of this run has 'k_nothing' in its name" },
    { "EMMY_KNOBS=k_sdpa:SPLIT_CONE=0", "SPLIT_CONE is structural, pinned for the whole run (SPLIT_CONE=0, without a KERNEL: prefix)" },
  }
  for _, c in ipairs(cases) do
    local code, _, err = emmy(args("compile", L0, "--ir", "tile"), { env = c[1] })
    eq(code, 2, c[1] .. ": exit")
    check(#lines_of(err) == 1 and err:find(c[2], 1, true), c[1] .. ": " .. err)
  end
  -- pins the run's kernels have still apply
  local code, out, err = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=k_sdpa:KVSPLIT=1,RASTER=4" })
  eq(code, 0, "exit: " .. err)
  check(out:find("k_sdpa_%x+%s+attention%s+%d+%s+[%w_=,]*KVSPLIT=1"), out)
  check(out:find("k_linear_add_%x+%s+contraction%s+%d+%s+[%w_=,]*RASTER=4"), out)
end)

test("check_pins looks at the whole run: every kernel, every structural fork's", function()
  local rules = require "emmy.rules"
  local function env_of(t) return function(k) return t[k] end end
  local plans = { { kernel = { name = "k_linear_abc" }, eval = { declared = { BM = 64 } } },
    { kernel = { name = "k_sdpa_def" }, eval = { declared = { KVSPLIT = 1 } } } }
  rules.check_pins(plans, env_of { EMMY_KNOBS = "BM=128,k_sdpa:KVSPLIT=2,SPLIT_CONE=0", EMMY_KVSPLIT = "2" })
  local ok, e = pcall(rules.check_pins, plans, env_of { EMMY_KNOBS = "k_linear:KVSPLIT=2" })
  check(not ok and tostring(e):find("named *k_linear* has the knob KVSPLIT", 1, true), tostring(e))
  ok, e = pcall(rules.check_pins, plans, env_of { EMMY_QROWS = "64" })
  check(not ok and tostring(e):find("EMMY_QROWS=64: no kernel of this run has the knob QROWS", 1, true), tostring(e))
  -- pins without a kernel prefix go to each kernel that declares the knob
  local pins = rules.pins("k_sdpa_def", { KVSPLIT = 1 }, env_of { EMMY_KNOBS = "BM=128,k_sdpa:KVSPLIT=2" })
  eq(pins.KVSPLIT, 2, "prefixed pin")
  eq(pins.BM, 128, "global pin (apply_pins ignores a knob the kernel lacks)")
end)

test("a rule that declares or returns a knob outside the table, or a value it does not take, names the file and knob", function()
  local cases = {
    { "010_partition_loops.lua", "knobs = { MMA = 0, WM = 2, WN = 2, PAD_SMEM = 8 }",
      "knobs = { MMA = 0, WM = 2, WN = 2, PAD_SMEM = 8, BMM = 64 }",
      "rules/tile/010_partition_loops.lua:%d+: rule warp_tier declares BMM=64: 'BMM' is not a knob %(did you mean BM%?" },
    { "010_partition_loops.lua", "knobs = { MMA = 0, WM = 2, WN = 2, PAD_SMEM = 8 }",
      "knobs = { MMA = 0, WM = 2, WN = 2, PAD_SMEM = 4 }",
      "rules/tile/010_partition_loops.lua:%d+: rule warp_tier declares PAD_SMEM=4: PAD_SMEM=4 is not a legal value of PAD_SMEM %(it takes 0,8,16%)" },
    { "010_partition_loops.lua", 'name = "raster", family = "ORDER"', 'name = "raster", family = "TILE"',
      "rules/tile/010_partition_loops.lua:%d+: rule raster %(family TILE%) declares RASTER, a knob of family ORDER in the knob table" },
    { "010_partition_loops.lua", "{ RASTER = 1 }, { RASTER = 8 }", "{ RASTER = 1 }, { RASTR = 8 }",
      "rules/tile/010_partition_loops.lua:%d+: fork raster returns RASTR=8: 'RASTR' is not a knob %(did you mean RASTER%?" },
    -- a zero-deep K stage: the emitter's table has no BK=0
    { "010_partition_loops.lua", "for _, bk in ipairs { 16, 8, 32 } do", "for _, bk in ipairs { 0 } do",
      "rules/tile/010_partition_loops.lua:%d+: fork scalar_contraction returns BK=0: BK=0 is not a legal value of BK" },
    { "050_use_tma.lua", "{ ASYNC = 1, STAGES = 6 }", "{ ASYNC = 1, STAGES = 16 }",
      "rules/tile/050_use_tma.lua:%d+: fork cp_async returns STAGES=16: STAGES=16 is not a legal value of STAGES %(it takes 1..12%)" },
  }
  for _, c in ipairs(cases) do
    local code, _, err = compile_with(nil, c[1], c[2]:gsub("%p", "%%%0"), c[3])
    -- (the rule sandbox names a copied rules folder by its own path: match from the file name on)
    check(code ~= 0 and #lines_of(err) == 1 and err:find((c[4]:gsub("^rules/tile/", ""))), c[3] .. ": " .. err)
  end
end)

test("ir.emit refuses a knob outside the table or a value it does not take; PLANT=4 plants a compile error", function()
  local compiler, kernels = require "emmy.compiler", require "emmy.kernels"
  local g = require("emmy.frontend").load("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } }).graph
  local p
  for _, q in ipairs(kernels.plan(compiler.run(g))) do if q.kernel.kind == "row" then p = q break end end
  local function with(key, v)
    local kn = {}
    for k2, x in pairs(p.choice.knobs) do kn[k2] = x end
    kn[key] = v
    return kn
  end
  local src, la = kernels.emit(p, with("THREADZ", 128))
  check(src == nil and la:find("'THREADZ' is not a knob (did you mean THREADS?", 1, true), tostring(la))
  src, la = kernels.emit(p, with("THREADS", 16))
  check(src == nil and la:find("THREADS=16 is not a legal value of THREADS (it takes 32..1024)", 1, true), tostring(la))
  src, la = kernels.emit(p, with("THREADS", 64.5))
  check(src == nil and la:find("needs an integer", 1, true), tostring(la))
  src = kernels.emit(p, with("PLANT", 4))
  check(src and src:find('#error "PLANT=4: a planted compile error"', 1, true), src)
  -- the header comment lists the assignment's knobs, sorted by name; knobs left out read as the table's defaults
  src = assert(kernels.emit(p, p.choice.knobs))
  check(src:find("// kernel " .. p.kernel.name .. ": row CACHE=0,RPB=1,THREADS=256,UNROLL=1\n", 1, true), src:sub(1, 4000))
end)

return T
