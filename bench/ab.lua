-- bench/ab.lua — an A/B of compile-time switches (EMMY_* experiments, knob pins) over a bench script, interleaved:
-- for each run, each setting in turn runs `env SETTING ./emmy SCRIPT ARGS --json FILE`, so that a drift of the GPU's
-- clocks or of torch between runs falls on every setting alike; then one table of every variant the script timed
-- (case, role, the knobs it pins beyond the case's chosen variant), a column per setting with the median over the
-- runs (and the spread, min-max, when there are several), and each setting's ratio to the first.
--   ./emmy bench/ab.lua --env "EMMY_NONE=1;EMMY_DESC_INC=1" [--runs 2] [--timeout S] [--json FILE] -- bench/attention.lua ARGS…
-- --timeout S: each run killed after S seconds (timeout(1); its variants lost, the others kept).
-- --env: settings separated by ';', each one or more NAME=VALUE separated by spaces (EMMY_NONE=1 changes nothing: the
-- baseline, and the default: one setting, the bench repeated --runs times for its medians and spread, pins against the chosen); SCRIPT is any bench that writes --json FILE with its timed variants as {variants = {{case, knobs, role,
-- us}, …}} (bench/attention.lua, bench/gemm.lua; attention's torch time a case is a row too), or `run … --bench`
-- (`emmy run`: given --dump-dir D, its rows are the whole graph a backend, emmy's time by kind and each kernel's time
-- in the program, read from D/60_bench_compare.json and 62_kernel_bench.json; under the table, each kernel whose
-- variant differs from the first setting's, with the knobs that differ). A run that exits non-zero is reported
-- with its exit status and its variants still read when it wrote them (each run's output: DIR/*.log, the folder named
-- where a setting timed nothing); exit status 1 when a setting produced no timed variant.
local cjson = require "cjson"
local cli = require "emmy.cli"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"
local bench = require "emmy.bench"
local read_json = require("emmy.triage").read_json

local CMD = "bench/ab.lua"
local argv, rest = {}, nil
for i = 1, #arg do
  if arg[i] == "--" then
    rest = {}
    for j = i + 1, #arg do rest[#rest + 1] = arg[j] end
    break
  end
  argv[#argv + 1] = arg[i]
end
local opts = cli.parse(argv, { flags = { ["--env"] = { kind = "string", default = "EMMY_NONE=1" }, ["--runs"] = { kind = "int", default = 2, min = 1, max = 20 },
  ["--json"] = { kind = "string" }, ["--timeout"] = { kind = "int", min = 1 } } }, CMD)
if not rest or #rest == 0 then cli.usage("%s: the bench to run follows '--' (%s --env … -- bench/attention.lua ARGS)", CMD, CMD) end
local RUN = rest[1] == "run" -- emmy run … --bench: its dump's files, not --json
for _, a in ipairs(rest) do
  if a == "--json" or (RUN and a == "--dump-dir") then
    cli.usage("%s: the bench's %s is ab.lua's to set; give ab.lua --json for the merged table", CMD, a)
  end
end
if RUN then
  local bench_flag = false
  for _, a in ipairs(rest) do if a == "--bench" then bench_flag = true end end
  if not bench_flag then cli.usage("%s: emmy run needs --bench to give times", CMD) end
end

-- The settings: {label, vars = {{name, value}, …}}.
local settings = {}
for set in opts.env:gmatch("[^;]+") do
  local s = { label = set:gsub("^%s+", ""):gsub("%s+$", ""), vars = {} }
  for item in set:gmatch("%S+") do
    local k, v = item:match("^([%a_][%w_]*)=(.*)$")
    if not k then cli.usage("%s: --env item '%s' is not NAME=VALUE", CMD, item) end
    s.vars[#s.vars + 1] = { k, v }
  end
  if #s.vars == 0 then cli.usage("%s: --env has an empty setting", CMD) end
  settings[#settings + 1] = s
end
if #settings < 1 then cli.usage("%s: --env has no setting (a setting: NAME=VALUE …; EMMY_NONE=1 for the baseline)", CMD) end

local dir = os.tmpname()
os.remove(dir)
cli.must(sys.mkdir_p(dir))
local quote = cli.shell_quote

-- emmy run --bench's dump d as variant rows: the whole graph a backend, emmy's kernels by kind, each kernel in the
-- program (its layer op beside its name).
local function run_rows(d)
  local cmp, kb = read_json(d .. "/60_bench_compare.json"), read_json(d .. "/62_kernel_bench.json")
  if type(cmp) ~= "table" then return nil end
  if type(kb) ~= "table" then kb = nil end
  local v = { kernel_variants = {} } -- (the kernels' variants by name beside the rows)
  for _, w in ipairs(type(cmp.whole) == "table" and cmp.whole or {}) do
    local st = type(w) == "table" and w.stats
    v[#v + 1] = { case = "whole graph", role = tostring(w.backend), knobs = "", us = type(st) == "table" and st.median_us or nil }
  end
  local bk = type(cmp.by_kind) == "table" and cmp.by_kind.rows or {}
  for _, row in ipairs(type(bk) == "table" and bk or {}) do
    local e = type(row) == "table" and row.emmy
    if type(e) == "table" then v[#v + 1] = { case = "emmy by kind", role = tostring(row.kind), knobs = "", us = e.us } end
  end
  for _, k in ipairs(kb and type(kb.kernels) == "table" and kb.kernels or {}) do
    if type(k) == "table" and type(k.in_program_us) == "number" then
      v[#v + 1] = { case = "in the program", role = tostring(k.name), knobs = tostring(k.layer_op or ""), us = k.in_program_us }
    end
    if type(k) == "table" and type(k.name) == "string" and type(k.knobs) == "string" then v.kernel_variants[k.name] = k.knobs end
  end
  return v
end

-- One run of setting s: its variants (or nil) and the exit status.
local function run_once(s, r)
  local path = ("%s/%d_%d.json"):format(dir, r, s.index)
  local env = {}
  for _, kv in ipairs(s.vars) do env[#env + 1] = quote(kv[1] .. "=" .. kv[2]) end
  local args = {}
  for _, a in ipairs(rest) do args[#args + 1] = quote(a) end
  local cmd = ("%senv %s %s %s %s %s > %s 2>&1"):format(opts.timeout and ("timeout %d "):format(opts.timeout) or "",
    table.concat(env, " "), quote(EMMY_HOME .. "/emmy"), table.concat(args, " "), RUN and "--dump-dir" or "--json",
    quote(RUN and path .. ".d" or path), quote(path .. ".log"))
  local t0 = sys.clock()
  local rc = os.execute(cmd) -- (LuaJIT: the wait status)
  local status = rc >= 256 and math.floor(rc / 256) or rc
  local doc = not RUN and read_json(path)
  local variants = type(doc) == "table" and type(doc.variants) == "table" and doc.variants or nil
  if RUN then variants = run_rows(path .. ".d") end
  -- torch's fastest backend a case (bench/attention.lua's cases[].torch), a row of its own: the same in every
  -- setting but for noise, which it measures
  for _, c in ipairs(variants and type(doc) == "table" and type(doc.cases) == "table" and doc.cases or {}) do
    local t = type(c) == "table" and c.torch
    if type(t) == "table" and type(t.best_us) == "number" then
      variants[#variants + 1] = { case = c.label, kernel = c.kernel, role = "torch", knobs = tostring(t.best), us = t.best_us }
    end
  end
  io.write(("run %d, %s: exit %d, %s (%.0f s)\n"):format(r, s.label, status,
    variants and ("%d rows"):format(#variants) or "no results written: " .. path .. ".log",
    sys.clock() - t0))
  io.flush()
  return variants, status
end

for i, s in ipairs(settings) do s.index, s.times, s.variants = i, {}, {} end
local order, rows_by = {}, {}
local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  local n = #c
  if n == 0 then return nil end
  return n % 2 == 1 and c[(n + 1) / 2] or (c[n / 2] + c[n / 2 + 1]) / 2
end

print(("%s: %d settings x %d runs, interleaved: %s"):format(CMD, #settings, opts.runs, table.concat(rest, " ")))
local chosen_of = {} -- case and kernel -> the chosen variant's knobs
local kernels_of = {} -- case -> {kernel = true}: bench/gemm.lua's cases hold several kernels, named in the table then
for r = 1, opts.runs do
  for _, s in ipairs(settings) do
    local variants = run_once(s, r)
    for name, knobs in pairs(variants and variants.kernel_variants or {}) do s.variants[name] = s.variants[name] or knobs end
    for _, v in ipairs(variants or {}) do
      if type(v) == "table" and v.case and v.knobs then
        local ck = v.case .. "\0" .. tostring(v.kernel or "")
        if v.role == "chosen" then chosen_of[ck] = chosen_of[ck] or v.knobs end
        kernels_of[v.case] = kernels_of[v.case] or {}
        if v.kernel then kernels_of[v.case][v.kernel] = true end
        local key = ("%s\0%s\0%s"):format(ck, v.role or "", v.knobs)
        local row = rows_by[key]
        if not row then
          row = { case = v.case, kernel = v.kernel, ck = ck, role = v.role or "", knobs = v.knobs, us = {} }
          rows_by[key], order[#order + 1] = row, key
        end
        row.us[s.index] = row.us[s.index] or {}
        if type(v.us) == "number" then table.insert(row.us[s.index], v.us) end
      end
    end
  end
end

-- The table: a column per setting (median, spread), the ratio of each later setting to the first.
local header = { "case", RUN and "kernel" or "role", RUN and "op" or "knobs (beyond the chosen)" }
for i, s in ipairs(settings) do
  header[#header + 1] = s.label .. " µs"
  if i > 1 then header[#header + 1] = "/ first" end
end
local rows, out, failed = {}, {}, false
for _, key in ipairs(order) do
  local row = rows_by[key]
  local nk = 0
  for _ in pairs(kernels_of[row.case] or {}) do nk = nk + 1 end
  local label = nk > 1 and row.kernel and (row.case .. " " .. row.kernel) or row.case
  local line = { label, row.role, RUN and row.knobs or (row.role == "chosen" or row.role == "torch")
    and ("(" .. (row.role == "torch" and row.knobs or "chosen") .. ")") or bench.knob_diff(row.knobs, chosen_of[row.ck] or "") }
  local first
  local rec = { case = row.case, kernel = row.kernel, role = row.role, knobs = row.knobs, settings = {} }
  for i, s in ipairs(settings) do
    local t = row.us[i] or {}
    local m = median(t)
    if i == 1 then first = m end
    local lo, hi = math.huge, -math.huge
    for _, x in ipairs(t) do lo, hi = math.min(lo, x), math.max(hi, x) end
    local spread = #t > 1 and (" (%.1f-%.1f)"):format(lo, hi) or ""
    line[#line + 1] = m and ("%.1f%s"):format(m, spread) or "—"
    if i > 1 then line[#line + 1] = (m and first) and ("%.3f"):format(m / first) or "—" end
    rec.settings[#rec.settings + 1] = { env = s.label, median_us = m, us = t }
  end
  rows[#rows + 1], out[#out + 1] = line, rec
end
print()
tbl.print { header = header, rows = rows, align = "lll" .. ("r"):rep(#header - 3) }
print("µs: the median over the runs (min-max); — : no checked time (wrong, failed or refused in every run)")
-- (emmy run: the variant each setting's kernels ran where it is not the first setting's — an EMMY_KNOBS pin takes the
-- first candidate with every pinned knob, whose other knobs may differ from the chosen's)
local base = settings[1].variants
for i = 2, #settings do
  local s = settings[i]
  local names = {}
  for name in pairs(s.variants) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local v = s.variants[name]
    if base[name] and v ~= base[name] then
      print(("%s: %s ran %s (the first setting's: %s)"):format(s.label, name, bench.knob_diff(v, base[name]), bench.knob_diff(base[name], v)))
    end
  end
end
for _, s in ipairs(settings) do
  local any = false
  for _, key in ipairs(order) do if #(rows_by[key].us[s.index] or {}) > 0 then any = true end end
  if not any then
    print(("%s: no timed variant in any run (the logs: %s/*.log)"):format(s.label, dir))
    failed = true
  end
end
if opts.json then
  cli.must(sys.write_file(opts.json, cjson.encode { format = "emmy.bench.ab", version = 1, command = rest, runs = opts.runs,
    settings = (function() local l = {} for i, s in ipairs(settings) do l[i] = s.label end return l end)(), rows = out }))
end
return failed and 1 or 0
