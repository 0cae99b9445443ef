-- The rule sandbox (emmy.sandbox, emmy.rules, docs/reliability.md "Rules") against hostile rule files: seeded,
-- generated cases, each a temporary EMMY_RULES folder and one `emmy compile` of a one-kernel graph (the SDPA
-- fixture). Every case must end with exit 1 or 2 and one line on stderr naming the rule file and the line (the
-- line of the hostile statement, or of the rule function holding it), within a time bound, and under
-- ./emmy-asan with no sanitizer report. EMMY_FUZZ_SEED=N draws other placements and sizes.
local sys = require "emmy.sys"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local FIXTURE = ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json"
local ASAN = BIN:find("asan", 1, true) ~= nil
local SEED = tonumber(os.getenv("EMMY_FUZZ_SEED") or "") or 20261201
-- wall seconds one case may take: the sandbox's budgets are 5e7 VM instructions and 2 s of CPU a call; the rest
-- is the machine (2 cores shared) and ASan
local BOUND_S = ASAN and 60 or 30

-- A seeded generator: pick(n) -> 1..n.
local function rng(seed)
  local x = seed % 2147483647
  if x <= 0 then x = x + 2147483646 end
  return function(n)
    x = x * 16807 % 2147483647
    return x % n + 1
  end
end

-- The attention kernel's knobs, declared by every generated rule so that the harmless parts of a case compile.
local KNOBS = "{ FLASH = 0, BQ = 64, BKV = 32, KVST = 1, KVSPLIT = 1, MINB = 1, QSMEM = 0, QROWS = 64, KV_TILE = 0 }"

local function nlines(s)
  local n = 0
  for _ in s:gmatch("\n") do n = n + 1 end
  return n
end

-- Lines of padding (blank lines and comments), so that the hostile line moves from case to case.
local function padding(r)
  local out = {}
  for i = 1, r(12) - 1 do out[i] = (r(2) == 1) and "" or ("-- padding " .. i) end
  return #out > 0 and (table.concat(out, "\n") .. "\n") or ""
end

-- Runs `emmy compile FIXTURE` with EMMY_RULES=dir under a hard timeout; returns code, stdout, stderr, seconds.
local function compile_with(dir)
  local d = tmpdir()
  local cmd = ("cd %s && EMMY_RULES=%s timeout -k 5 %d %s compile %s >%s/out 2>%s/err </dev/null"):format(
    shell_quote(ROOT), shell_quote(dir), BOUND_S + 30, shell_quote(BIN), shell_quote(FIXTURE), d, d)
  local t0 = sys.clock()
  local r1, _, r3 = os.execute(cmd)
  local dt = sys.clock() - t0
  local code = type(r1) == "number" and r1 or r3
  if type(r1) == "number" and r1 > 255 then code = math.floor(r1 / 256) end
  return code, read_file(d .. "/out"), read_file(d .. "/err"), dt
end

-- Writes case c's files ({name = text}) into a fresh folder and checks the outcome; returns nil or a failure.
-- c.file: the file the message must name (a name in c.files); c.lines: the lines it may name ({n = true}; nil: any);
-- c.find: text the message must hold; c.dir: the EMMY_RULES folder to use as it is (no files written).
local function run_case(c)
  local dir = c.dir
  if not dir then
    dir = tmpdir()
    for name, text in pairs(c.files) do write_file(dir .. "/" .. name, text) end
  end
  local code, out, err, dt = compile_with(dir)
  local why
  local l = lines_of(err)
  if code ~= 1 and code ~= 2 then why = ("exit %s (expected 1 or 2)"):format(tostring(code))
  elseif #l ~= 1 or not l[1]:match("^emmy: ") then why = ("%d lines on stderr (expected one 'emmy: ...')"):format(#l)
  elseif dt > BOUND_S then why = ("took %.1f s (bound %d s)"):format(dt, BOUND_S)
  elseif c.find and not err:find(c.find, 1, true) then why = ("the message lacks '%s'"):format(c.find)
  elseif c.file then
    -- the place the message names: FILE:LINE, one of c.file at c.lines or of the alternatives c.alts
    local named = false
    for _, a in ipairs { { file = c.file, lines = c.lines }, unpack(c.alts or {}) } do
      local s, e = err:find(dir .. "/" .. a.file .. ":", 1, true)
      local line = s and tonumber(err:match("^(%d+)", e + 1))
      if line and (not a.lines or a.lines[line]) then named = true end
    end
    if not named then
      local want = {}
      for n in pairs(c.lines or {}) do want[#want + 1] = n end
      table.sort(want)
      why = ("the message does not name %s:LINE with LINE in {%s}%s"):format(c.file, table.concat(want, ","),
        c.alts and (" (nor " .. c.alts[1].file .. ")") or "")
    end
  end
  if why then
    return ("%s: %s\n      stderr: %s\n      stdout tail: %s"):format(c.name, why, err:sub(1, 600), out:sub(-200))
  end
end

local function run_cases(cases)
  local fails = {}
  for _, c in ipairs(cases) do
    local f = run_case(c)
    if f then fails[#fails + 1] = f end
  end
  check(#fails == 0, ("%d of %d cases failed:\n    %s"):format(#fails, #cases, table.concat(fails, "\n    ")))
end

-- ---- statement payloads, placed in rule code -------------------------------------------------------------------

-- Each payload is Lua statements (a function of the seeded generator r). args: it reads k / dev (not in a file's
-- body); at = "stmt": the message names a line of the payload; "fn": that, or the line of the function holding it
-- (errors found after the call returns: an allocation refused, a write into an array of the facts).
local P = {}
local function payload(cat, name, at, args, fn) P[#P + 1] = { cat = cat, name = name, at = at, args = args, gen = fn } end
local function const(s) return function() return s end end

-- time
payload("time", "while true", "stmt", false, const("while true do end"))
payload("time", "repeat forever", "stmt", false, const("local i = 0\nrepeat i = i + 1 until i < 0"))
payload("time", "tail calls", "stmt", false, const("local function f(n) return f(n + 1) end\nf(1)"))
payload("time", "long numeric for", "stmt", false, const("local s = 0\nfor i = 1, 1e15 do s = s + i % 7 end"))
payload("time", "table churn", "stmt", false, const("local t = {}\nfor i = 1, 1e12 do t[i % 100 + 1] = i end"))
payload("time", "backtracking find", "stmt", false, function(r)
  return ("local s = string.rep('a', %d)\nlocal x = s:find('.-.-.-.-b')"):format(400 + r(8000)) end)
payload("time", "backtracking match", "stmt", false, function(r)
  return ("local x = string.match(string.rep('x', %d), '(x*)(x*)(x*)(x*)y')"):format(300 + r(5000)) end)
payload("time", "backtracking gsub", "stmt", false, function(r)
  return ("local x = string.rep('ab', %d):gsub('(a-)(b-)(a-)(b-)c', '%%1')"):format(300 + r(3000)) end)
payload("time", "backtracking gmatch", "stmt", false, function(r)
  return ("for w in string.rep('a', %d):gmatch('.-.-.-z') do end"):format(500 + r(5000)) end)
payload("time", "loop in a gsub callback", "stmt", false, const("local x = ('abc'):gsub('.', function(c)\n  while true do end\nend)"))
payload("time", "loop in a sort comparator", "stmt", false,
  const("table.sort({ 3, 2, 1 }, function(a, b)\n  while true do end\nend)"))
-- memory
payload("memory", "a table of large strings", "fn", false, function(r)
  return ("local t = {}\nfor i = 1, 1e9 do t[i] = string.rep('x', %d) .. i end"):format(1000 * r(1000)) end)
payload("memory", "doubling a string", "fn", false, const("local s = 'x'\nwhile true do s = s .. s end"))
payload("memory", "a table of tables", "fn", false, const("local t = {}\nfor i = 1, 1e10 do t[i] = { i, i, i } end"))
payload("memory", "string.rep of GBs", "stmt", false, function(r) return ("local s = string.rep('x', 2 ^ %d)"):format(28 + r(17)) end)
payload("memory", "string.rep with a separator", "stmt", false, const("local s = string.rep('ab', 2 ^ 27, ',')"))
payload("memory", "gsub doubling", "fn", false, const("local s = string.rep('a', 2 ^ 16)\nfor i = 1, 64 do s = s:gsub('a', 'aa') end"))
payload("memory", "a growing hash", "fn", false, const("local t = {}\nfor i = 1, 1e10 do t['k' .. i] = i end"))
-- crashes: C recursion, stack, library limits
payload("crash", "recursive gsub through the string metatable", "stmt", false,
  const("local function f(s) return (s:gsub('.', f)) end\nf('ab')"))
payload("crash", "recursive string.gsub", "stmt", false, const("local function f(s) return (string.gsub(s, '.', f)) end\nf('abc')"))
payload("crash", "recursive gsub through a closure", "stmt", false,
  const("local function f(s) return (s:gsub('.', function(c) return f(c .. c) end)) end\nf('ab')"))
payload("crash", "recursive table.sort", "stmt", false,
  const("local function cmp(a, b) table.sort({ 2, 1 }, cmp) return a < b end\ntable.sort({ 2, 1, 3 }, cmp)"))
payload("crash", "Lua stack overflow", "stmt", false, const("local function f() return 1 + f() end\nf()"))
payload("crash", "a huge byte slice", "stmt", false, const("local s = { ('x'):rep(1e6):byte(1, -1) }"))
payload("crash", "unpack of 1e8 results", "stmt", false, const("local u = { unpack({}, 1, 1e8) }"))
payload("crash", "a format width of 100 digits", "stmt", false, const("local s = string.format('%' .. string.rep('9', 100) .. 'd', 1)"))
payload("crash", "string.char(256)", "stmt", false, const("local c = string.char(256)"))
payload("crash", "sorting 2e6 numbers", "stmt", false, const("local t = {}\nfor i = 1, 2e6 do t[i] = -i end\ntable.sort(t)"))
-- what the string metatable and the globals reach
payload("escape", "(''):dump", "stmt", false, const("local b = (''):dump()"))
payload("escape", "('').dump", "stmt", false, const("local b = ('').dump(function() end)"))
payload("escape", "string.dump", "stmt", false, const("local b = string.dump(function() end)"))
payload("escape", "the string metatable's __index", "stmt", false, const("local d = ('').__index.dump"))
payload("escape", "a field of a string function", "stmt", false, const("local d = ('').rep.dump"))
for _, g in ipairs { "getmetatable('')", "load('return 1')", "loadstring('return 1')", "require('emmy.sys')",
  "os.execute('true')", "io.open('/etc/passwd')", "debug.getinfo(1)", "setfenv(1, {})", "rawget(_G, 'os')", "jit.on()",
  "collectgarbage('stop')", "pcall(error, 'x')", "newproxy(true)", "setmetatable({}, {})", "_G.os", "dofile('/dev/null')",
  "coroutine.wrap(print)", "print('x')" } do
  payload("escape", g, "stmt", false, const("local x = " .. g))
end
payload("escape", "setting a global", "stmt", false, const("newglobal = 1"))
-- read-only facts
payload("readonly", "dev.max_threads = 1e9", "stmt", true, const("dev.max_threads = 1e9"))
payload("readonly", "k.kind", "stmt", true, const("k.kind = 'pointwise'"))
payload("readonly", "a new field of dev", "stmt", true, const("dev.new_field = 1"))
payload("readonly", "dev.max_threads = nil", "stmt", true, const("dev.max_threads = nil"))
payload("readonly", "dev.smem_static x 1000", "stmt", true, const("dev.smem_static = dev.smem_static * 1000"))
payload("readonly", "k.ops[1]", "fn", true, const("k.ops[1] = 'aten.mm.default'"))
payload("readonly", "table.insert(k.ops)", "fn", true, const("table.insert(k.ops, 'x')"))
payload("readonly", "k.ops[#k.ops + 1]", "stmt", true, const("k.ops[#k.ops + 1] = 'x'"))
payload("readonly", "k.ops.extra", "stmt", true, const("k.ops.extra = true"))
payload("readonly", "k.ops[1] = nil", "fn", true, const("local o = k.ops\no[1] = nil"))
-- error objects
for _, e in ipairs { "error({})", "error()", "error(nil)", "error(42)", "error(true)", "error(function() end)",
  "error('two\\nlines\\nhere')", "error(string.rep('long ', 2000))", "error('plain', 0)", "assert(false)", "assert(nil, {})",
  "local x = nil\nlocal y = x.field", "local n = nil + 1", "local f\nf()", "error('\\0binary\\1')", "error(string.rep('\\n', 50))" } do
  payload("errors", e, "stmt", false, const(e))
end
payload("errors", "error(k)", "stmt", true, const("error(k)"))
payload("errors", "error(dev.name)", "stmt", true, const("error(dev.name)"))

-- Where a payload goes: files {name = text}, the file and lines the message may name. k/dev exist in all but the
-- file-body placements.
local function base_rules(gate_body, fork_body)
  return "return {\n  { name = 'hostile', family = 'WORK', knobs = " .. KNOBS .. ",\n    gate = function(k, dev)\n" ..
    (gate_body or "") .. "\n      return true, 'ok'\n    end,\n    fork = function(k, dev)\n" .. (fork_body or "") ..
    "\n      return { { FLASH = 1 } }\n    end },\n}\n"
end

-- Each make(r, body) returns files, the file holding the payload, its first line, the line of the function holding
-- it, and the rule function the engine called (file, line: where an error found after the call is placed).
local PLACES = {
  { name = "gate", args = true, make = function(r, body)
    local pad = padding(r)
    local def = nlines(pad) + 3
    return { ["010_h.lua"] = pad .. base_rules(body) }, "010_h.lua", def + 1, def, "010_h.lua", def
  end },
  { name = "fork", args = true, make = function(r, body)
    local pad = padding(r)
    local def = nlines(pad) + 7
    return { ["010_h.lua"] = pad .. base_rules(nil, body) }, "010_h.lua", def + 1, def, "010_h.lua", def
  end },
  { name = "file body", args = false, make = function(r, body)
    local pad = padding(r)
    return { ["010_h.lua"] = pad .. body .. "\n" .. base_rules() }, "010_h.lua", nlines(pad) + 1, 1, "010_h.lua", 1
  end },
  { name = "helper function", args = true, make = function(r, body)
    local pad = padding(r)
    local helper = pad .. "local H = {}\nfunction H.f(k, dev)\n" .. body .. "\nend\nreturn H\n"
    local rules = "local h = use '_hostile'\n" .. base_rules("      h.f(k, dev)")
    return { ["_hostile.lua"] = helper, ["010_h.lua"] = rules }, "_hostile.lua", nlines(pad) + 3, nlines(pad) + 2, "010_h.lua", 4
  end },
  { name = "helper body", args = false, make = function(r, body)
    local pad = padding(r)
    return { ["_hostile.lua"] = pad .. body .. "\nreturn {}\n", ["010_h.lua"] = "local h = use '_hostile'\n" .. base_rules() },
      "_hostile.lua", nlines(pad) + 1, 1, "010_h.lua", 1
  end },
  { name = "gsub callback", args = true, make = function(r, body)
    local pad = padding(r)
    local text = pad .. base_rules("      local _ = ('x'):gsub('.', function(c)\n" .. body .. "\n      end)")
    local def = nlines(pad) + 4
    return { ["010_h.lua"] = text }, "010_h.lua", def + 1, def, "010_h.lua", def - 1
  end },
  { name = "sort comparator", args = true, make = function(r, body)
    local pad = padding(r)
    local text = pad .. base_rules("      table.sort({ 2, 1 }, function(a, b)\n" .. body .. "\n      return a < b end)")
    local def = nlines(pad) + 4
    return { ["010_h.lua"] = text }, "010_h.lua", def + 1, def, "010_h.lua", def - 1
  end },
}

-- The cases of one category: each payload in `per` placements drawn by the seed.
local function statement_cases(cat, per, seed)
  local r = rng(seed)
  local cases = {}
  for pi, p in ipairs(P) do
    if p.cat == cat then
      local places = {}
      for _, pl in ipairs(PLACES) do if pl.args or not p.args then places[#places + 1] = pl end end
      for n = 1, per do
        local pl = places[r(#places)]
        local body = p.gen(r)
        local files, file, first, def, ofile, oline = pl.make(r, body)
        local lines = {}
        for l = first, first + nlines(body) do lines[l] = true end
        local c = { name = ("%s [%s #%d, %s]"):format(p.name, cat, pi * 10 + n, pl.name), files = files, file = file, lines = lines }
        if p.at == "fn" then
          lines[def] = true
          c.alts = { { file = ofile, lines = { [oline] = true } } }
        end
        cases[#cases + 1] = c
      end
    end
  end
  return cases
end

local PER = ASAN and 1 or 2

test("the generated rules harness compiles a well-formed rule (the baseline every case breaks)", function()
  local d = tmpdir()
  write_file(d .. "/010_h.lua", base_rules())
  local code, out, err = compile_with(d)
  eq(code, 0, "exit: " .. err)
  check(out:find("k_sdpa_", 1, true), out)
end)

for _, cat in ipairs { "time", "memory", "crash", "escape", "readonly", "errors" } do
  test(("hostile statements (%s): exit 1/2, one line naming the rule file and line, in bounded time"):format(cat), function()
    run_cases(statement_cases(cat, PER, SEED + #cat))
  end)
end

-- ---- what rules return -----------------------------------------------------------------------------------------

local function rule_with(gate_ret, fork_ret)
  return "return {\n  { name = 'ret', family = 'WORK', knobs = " .. KNOBS .. ",\n    gate = function(k, dev)\n      " ..
    (gate_ret or "return true, 'ok'") .. "\n    end,\n    fork = function(k, dev)\n      " ..
    (fork_ret or "return { { FLASH = 1 } }") .. "\n    end },\n}\n"
end

test("a gate's or a fork's return values of the wrong type or range are one line naming the rule", function()
  local cases = {}
  for _, g in ipairs { "return", "return 1", "return 'yes'", "return true, 5", "return true, {}", "return nil, 'why'",
    "return true, 'r', 3", "return k", "return function() end", "return false, dev" } do
    cases[#cases + 1] = { name = "gate: " .. g, files = { ["010_r.lua"] = rule_with(g) }, file = "010_r.lua", lines = { [3] = true },
      find = "gate ret" }
  end
  for _, f in ipairs { "return", "return 5", "return 'x'", "return { 1 }", "return { { FLASH = '1' } }",
    "return { { FLASH = 1.5 } }", "return { { FLASH = -1 } }", "return { { FLASH = 2 ^ 31 } }", "return { { FLASH = 0 / 0 } }",
    "return { { FLASH = math.huge } }", "return { { UNDECLARED = 1 } }", "return { { [1] = 5 } }", "return { { flash = 1 } }",
    "return { { FLASH = 1 } }, {}", "return { { FLASH = 1 }, n = 2 }", "return { { FLASH = true } }", "return { dev }",
    "return dev", "return k.ops", "local o = {}\nfor i = 1, 20000 do o[i] = { BQ = 16 } end\nreturn o",
    "return { { FLASH = 1, " .. ("A=1, B=1, C=1, D=1, E=1, F=1, G=1, H=1, I=1, J=1, K=1, L=1, M=1, N=1, O=1, P=1, Q=1, R=1, S=1, T=1, U=1, V=1, W=1, X=1, Y=1")
      .. " } }" } do
    cases[#cases + 1] = { name = "fork: " .. f, files = { ["010_r.lua"] = rule_with(nil, f) }, file = "010_r.lua",
      lines = { [6] = true }, find = "fork ret" }
  end
  run_cases(cases)
end)

test("a fork product past the limit is one line naming the fork that passed it", function()
  local r = rng(SEED + 7)
  local cases = {}
  for n = 1, 3 do
    -- three families of real knobs with wide ranges (the knob table refuses made-up ones): THREADS a values,
    -- RASTER and SPLIT_K 16 each, so the product passes 250,000 at the third fork
    local a = 977 + r(16)
    local function fam(name, fam_, knob, first, count)
      return ("  { name = '%s', family = '%s', knobs = { %s = %d },\n    fork = function(k, dev)\n      local o = {}\n" ..
        "      for i = 1, %d do o[i] = { %s = %d + i } end\n      return o\n    end },\n"):format(name, fam_, knob, first, count, knob,
        first - 1)
    end
    local text = "return {\n  { name = 'base', family = 'WORK', knobs = " .. KNOBS .. ", fork = function() return { { FLASH = 1 } } end },\n" ..
      fam("fa", "REDUCE", "THREADS", 32, a) .. fam("fb", "ORDER", "RASTER", 1, 16) .. fam("fc", "SPLIT", "SPLIT_K", 1, 16) .. "}\n"
    -- fork fc is defined on line 2 + 6 + 6 + 2
    cases[#cases + 1] = { name = ("product %d x 16 x 16"):format(a), files = { ["010_p.lua"] = text }, file = "010_p.lua",
      lines = { [16] = true }, find = "fork product" }
  end
  run_cases(cases)
end)

test("malformed rule tables and rule files are one line naming the file", function()
  local cases = {}
  local function rule(fields) return "return { { name = 'x', family = 'W', " .. fields .. " } }" end
  for _, text in ipairs { "return 5", "return 'rules'", "return nil", "return { name = 'x', family = 'W' }",
    "return { { family = 'W' } }", "return { { name = 'x' } }", "return { { name = 'x', family = 5 } }", rule("gates = function() end"),
    rule("kinds = 'attention'"), rule("kinds = { 5 }"), rule("knobs = 5"), rule("knobs = { FLASH = 1.5 }"), rule("knobs = { flash = 0 }"),
    rule("knobs = { TOO_LONG_KNOB_NAME = 1 }"), rule("knobs = { FLASH = -1 }"), "return { { name = 'x\\ny', family = 'W' } }",
    "return { 5 }", rule("gate = 5"), rule("fork = {}"), "syntax error here", "local x = \n\n\n)",
    "return " .. string.rep("{", 300) .. string.rep("}", 300), "return { { name = 'x', family = 'W', knobs = { " ..
      (function() local t = {} for i = 1, 25 do t[i] = ("K%d = 0"):format(i) end return table.concat(t, ", ") end)() .. " } } }" } do
    cases[#cases + 1] = { name = "file: " .. text:sub(1, 60), files = { ["010_m.lua"] = text }, file = "010_m.lua" }
  end
  -- a bytecode file, and one over the size limit
  cases[#cases + 1] = { name = "bytecode", files = { ["010_m.lua"] = "\27LJ\2\0\0\0" }, file = "010_m.lua", lines = { [1] = true } }
  cases[#cases + 1] = { name = "a 5 MB rule file", files = { ["010_m.lua"] = string.rep("-- comment\n", 500000) .. "return {}" },
    find = "010_m.lua" }
  cases[#cases + 1] = { name = "use of a missing helper", files = { ["010_m.lua"] = "local h = use '_none'\n" .. base_rules() },
    file = "010_m.lua", lines = { [1] = true } }
  cases[#cases + 1] = { name = "use of a bad helper name", files = { ["010_m.lua"] = "local h = use '../x'\n" .. base_rules() },
    file = "010_m.lua", lines = { [1] = true } }
  cases[#cases + 1] = { name = "helpers using each other", files = { ["_a.lua"] = "local b = use '_b'\nreturn {}",
    ["_b.lua"] = "local a = use '_a'\nreturn a", ["010_m.lua"] = "local a = use '_a'\n" .. base_rules() }, file = "_b.lua", lines = { [1] = true } }
  run_cases(cases)
end)

test("a rules folder with no rules, or rules that leave a kernel no candidate, is an error (not 0 candidates, exit 0)", function()
  local empty = tmpdir()
  local helper_only = tmpdir()
  write_file(helper_only .. "/_atom.lua", "return {}")
  local other = tmpdir()
  write_file(other .. "/rules.lua", "return {}")
  write_file(other .. "/10.lua", "return {}")
  local cases = {
    { name = "an empty folder", dir = empty, find = "holds no rules" },
    { name = "a helper only", dir = helper_only, find = "holds no rules" },
    { name = "no NNN_*.lua", dir = other, find = "holds no rules" },
    { name = "a missing folder", dir = empty .. "/nope", find = "does not exist" },
    { name = "a file returning no rules", files = { ["010_e.lua"] = "return {}" }, find = "holds no rules" },
    { name = "rules for another kind", files = { ["010_e.lua"] = "return { { name = 'c', family = 'W', kinds = { 'contraction' } } }" },
      find = "no rule applies" },
    { name = "every leaf rejected", files = { ["010_e.lua"] = rule_with(nil, "return { { KV_TILE = 128 } }") }, find = "no candidate" },
    { name = "refused, defaults rejected", files = { ["010_e.lua"] =
      "return { { name = 'no', family = 'W', knobs = { QROWS = 0 },\n  gate = function(k, dev) return false, 'never' end } }" },
      find = "010_e.lua:2", },
  }
  run_cases(cases)
end)

test("a knob value the emitter does not honour is refused at the fork (the knob table), never the variant's knob", function()
  -- (a knob set to a legal value that the emitter never reads — BQ=32 with FLASH=0 — is not caught: the check that
  -- compared the emitter's realized knobs with the variant's did not survive the move to the knob table)
  local cases = {}
  for _, f in ipairs { { "return { { FLASH = 1, QSMEM = 2 } }", "is not a legal value of QSMEM" },
    { "return { { FLASH = 3 } }", "is not a legal value of FLASH" }, { "return { { FLASH = 1, FOO = 1 } }", "'FOO' is not a knob" } } do
    cases[#cases + 1] = { name = f[1], files = { ["010_k.lua"] = rule_with(nil, f[1]) }, file = "010_k.lua", lines = { [6] = true },
      find = f[2] }
  end
  run_cases(cases)
end)

-- ---- in-process: the prior's files run in the same sandbox -----------------------------------------------------

test("the prior's formulas run in the sandbox: budgets, read-only facts, one-line errors naming the file", function()
  local prior = require "emmy.prior"
  local k = { kind = "contraction", M = 512, N = 1024, K = 1024, dual = false }
  local c = { MMA = 1, BM = 64, BN = 64, BK = 64, WM = 2, WN = 2, TM = 4, TN = 4, STAGES = 3, ASYNC = 1, TMA = 0 }
  local dev = { sm_count = 132 }
  local function with(features)
    local d = tmpdir()
    sh(("cp %s/rules/prior/*.lua %s/"):format(shell_quote(ROOT), d))
    write_file(d .. "/features.lua", "local F = {}\n\nfunction F.contraction(k, c, dev)\n" .. features .. "\nend\nreturn F\n")
    return d
  end
  for _, t in ipairs {
    { "while true do end", "time budget" },
    { "c.BM = 1", "read-only" },
    { "dev.sm_count = 1e9", "read-only" },
    { "return ('').dump", nil },
    { "local s = ('x'):rep(2 ^ 40)", "memory budget" },
    { "error({})", "error raised with a table" },
    { "return 5", "returned a number" },
  } do
    local d = with(t[1])
    local ok, err = pcall(prior.features, k, c, dev, d)
    if t[2] then
      check(not ok and #lines_of(tostring(err)) == 1 and tostring(err):find(d .. "/features.lua:", 1, true) and
        tostring(err):find(t[2], 1, true), t[1] .. ": " .. tostring(err))
    else
      check(ok and err == nil, t[1] .. ": the prior reached string.dump: " .. tostring(err))
    end
  end
  eq(c.BM, 64, "the caller's knobs are untouched")
  -- the shipped prior is unchanged by the sandbox
  check(type(prior.offline(k, c, dev)) == "number", "the shipped prior still prices a candidate")
end)

test("the string metatable is the host's again after every rule call, and no hook is left behind", function()
  local sandbox = require "emmy.sandbox"
  local host = getmetatable("").__index
  local d = tmpdir()
  local path = d .. "/f.lua"
  write_file(path, "return { dump = function(s) return s.dump end, spin = function() while true do end end }")
  local f = sandbox.run_file(sandbox.env(d, d), path, path, "a table")
  local at = { file = path, line = 1 }
  eq(sandbox.call(at, f.dump, "abc"), nil, "('').dump inside a call")
  eq(getmetatable("").__index, host, "the host's string library after the call")
  check(("abc").dump ~= nil, "the host keeps string.dump")
  local ok, err = pcall(sandbox.call, at, f.spin)
  check(not ok and tostring(err):find(path .. ":1: time budget exceeded", 1, true), tostring(err))
  eq(getmetatable("").__index, host, "the host's string library after a failed call")
  eq(debug.gethook(), nil, "no hook left behind")
end)

test("a refusal cites the line of the condition that refused, not the gate's first line", function()
  local rules = require "emmy.rules"
  local path = tmpdir() .. "/010_x.lua"
  write_file(path, table.concat({
    "return function(k, dev)",
    "  if (dev.cc_major or 0) < 9 then",
    "    return false, (\"compute capability %s has no wgmma (needs 9.0)\"):format(dev.cc)",
    "  end",
    "  if k.E ~= 64 then return false, (\"head dim %s (takes 64)\"):format(tostring(k.E)) end",
    "  if k.masked then return false, k.why end",
    "  return true, \"ok\"",
    "end" }, "\n"))
  local r = { path = path, gate = assert(loadfile(path))(), line = 1 }
  eq(rules.refusal_line(r, "compute capability 8.0 has no wgmma (needs 9.0)"), 3)
  eq(rules.refusal_line(r, "head dim 128 (takes 64)"), 5)
  eq(rules.refusal_line(r, "an attention mask"), 1) -- three returns, no literal text matches: the gate's line
  -- the shipped rules: TinyLlama's attention under a device without wgmma cites the compute-capability condition
  local lines = {}
  for l in io.lines(ROOT .. "/rules/tile/010_partition_loops.lua") do lines[#lines + 1] = l end
  local found = false
  for _, rr in ipairs(rules.load()) do
    if rr.name == "flash_wgmma" then
      found = true
      local n = rules.refusal_line(rr, "compute capability 8.0 has no wgmma (needs 9.0)")
      check(lines[n]:find("has no wgmma", 1, true), ("line %d: %s"):format(n, lines[n]))
    end
  end
  check(found, "the flash_wgmma rule")
end)

return T
