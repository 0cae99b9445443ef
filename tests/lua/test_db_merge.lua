-- Scale-out (issue 24): emmy db merge (emmy.tunedb's merge) — idempotent, rows deduplicated across DBs that share
-- them, DBs of another machine refused unless --force, a merge that fails midway leaves the output as it was — and
-- compile --nvrtc --shard I/N, whose shards together equal one process.
local tunedb = require "emmy.tunedb"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local function tmp(name)
  local d = os.tmpname()
  os.remove(d)
  assert(require("emmy.sys").mkdir_p(d))
  return d .. "/" .. name
end

-- A tune DB with one run of n measurements of kernel k's variants on machine m ({gpu, driver, nvrtc}).
local function make(path, k, n, m, start)
  local db = assert(tunedb.open(path))
  local run = db:begin_run("emmy tune " .. k, "abc123", false)
  local ctx = db:context { gpu = m.gpu, cc = "9.0", driver = m.driver, nvrtc = m.nvrtc, regime = "deploy" }
  db:kernel { hash = "h_" .. k, name = k, ops = "linear", features = { M = 512 }, flops = 1e9, bytes = 1e6 }
  for i = 1, n do
    local v = db:variant("h_" .. k, ("BM=%d"):format(32 * (i + (start or 0))), "wgmma", { "TILE" })
    db:record { run_id = run, context_id = ctx, variant_id = v, status = i % 3 == 0 and "wrong" or "ok", median_us = 10 + i,
      samples = 50, search_order = i }
  end
  db:end_run(run)
  db:close()
end

local H200 = { gpu = "NVIDIA H200", driver = "580.65", nvrtc = "13.0" }

local function counts(path)
  local db = assert(tunedb.open(path, { readonly = true }))
  local out = {}
  for _, t in ipairs { "runs", "contexts", "kernels", "variants", "measurements" } do
    out[t] = assert(db.h:rows("SELECT COUNT(*) AS n FROM " .. t))[1].n
  end
  db:close()
  return out
end

local function merge(args, env)
  return emmy(args and { "db", "merge", unpack(args) } or { "db" }, env and { env = env } or nil)
end

test("merge: every row once, twice changes nothing, a DB holding another's rows adds none of them again", function()
  local a, b, out = tmp("a.db"), tmp("b.db"), tmp("out.db")
  make(a, "q", 4, H200)
  make(b, "o", 3, H200)
  local c, o, e = merge { out, a, b }
  eq(c, 0, "merge: " .. e)
  check(o:find("7 measurements", 1, true), o)
  local n1 = counts(out)
  eq(n1.measurements, 7, "measurements")
  eq(n1.runs, 2, "runs")
  eq(n1.contexts, 1, "one machine, one regime: one context")
  eq(n1.kernels, 2, "kernels")
  eq(n1.variants, 7, "variants")
  c, o = merge { out, a, b }
  eq(c, 0, "again")
  check(o:find("0 measurements, 0 variants, 0 kernels, 0 contexts, 0 runs added from 2 DBs", 1, true), o)
  local n2 = counts(out)
  for t, n in pairs(n1) do eq(n2[t], n, t .. " after merging twice") end
  -- out2 = a + b; merging a again into it (its rows already there through out) adds nothing
  local out2 = tmp("out2.db")
  eq((merge { out2, out, a }), 0, "merge of a merge")
  local n3 = counts(out2)
  for t, n in pairs(n1) do eq(n3[t], n, t .. ": the rows a shares with the merge are not doubled") end
end)

test("merge: DBs of another GPU, driver or NVRTC are refused, nothing written; --force merges them", function()
  local a, b, out = tmp("a.db"), tmp("b.db"), tmp("out.db")
  make(a, "q", 2, H200)
  make(b, "q", 2, { gpu = "NVIDIA H200", driver = "575.00", nvrtc = "13.0" }, 10)
  eq((merge { out, a }), 0, "first")
  local before = counts(out)
  local c, _, e = merge { out, b }
  eq(c, 2, "refused")
  check(e:find("different machines", 1, true) and e:find("575.00", 1, true) and e:find("--force", 1, true), e)
  local after = counts(out)
  for t, n in pairs(before) do eq(after[t], n, t .. " untouched by the refusal") end
  c, _, e = merge { out, b, "--force" }
  eq(c, 0, "--force: " .. e)
  local forced = counts(out)
  eq(forced.measurements, 4, "both machines' rows")
  eq(forced.contexts, 2, "two contexts: rows of different machines are never compared")
end)

test("merge: a merge that fails midway leaves the output as it was (one transaction)", function()
  local a, b, out = tmp("a.db"), tmp("b.db"), tmp("out.db")
  make(a, "q", 3, H200)
  make(b, "o", 5, H200)
  eq((merge { out, a }), 0, "first")
  local before = counts(out)
  local c, _, e = merge({ out, b }, "EMMY_DB_MERGE_FAIL_AFTER=2")
  eq(c, 1, "the injected failure")
  check(e:find("interrupted", 1, true) and e:find("as it was", 1, true), e)
  local after = counts(out)
  for t, n in pairs(before) do eq(after[t], n, t .. " after the failed merge") end
  eq((merge { out, b }), 0, "the same merge, not interrupted")
  eq(counts(out).measurements, 8, "all rows")
end)

test("db: bad usage is one line and exit 2", function()
  local c, _, e = merge()
  eq(c, 2, "no action")
  c, _, e = emmy { "db", "split", "x.db" }
  eq(c, 2, "unknown action")
  check(e:find("unknown action", 1, true), e)
  c, _, e = merge { tmp("o.db") }
  eq(c, 2, "no inputs")
  local x = tmp("x.db")
  c, _, e = merge { x, x }
  eq(c, 2, "the output as an input")
  c, _, e = merge { tmp("o.db"), tmp("missing.db") }
  eq(c, 2, "a missing input")
  check(e:find("no tune DB", 1, true), e)
end)

test("compile --nvrtc --shard I/N: the shards together compile each variant once, the results equal one process's", function()
  local d = tmp("shards")
  local env = "EMMY_CUBIN_CACHE=" .. d .. "cc"
  local base = { "compile", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1", "--nvrtc", "--sample", "2" }
  local function run(extra)
    local a = { unpack(base) }
    for _, x in ipairs(extra) do a[#a + 1] = x end
    return emmy(a, { env = env })
  end
  local c, _, e = run { "--results", d .. "all.jsonl" }
  if c ~= 0 and e:find("NVRTC is not available", 1, true) then skip("no NVRTC") end
  eq(c, 0, "one process: " .. e)
  local parts = {}
  for i = 0, 2 do
    local ci, _, ei = run { "--shard", i .. "/3", "--results", d .. i .. ".jsonl" }
    eq(ci, 0, "shard " .. i .. ": " .. ei)
    check(ei:find(("shard %d/3: "):format(i), 1, true), ei)
    for l in io.open(d .. i .. ".jsonl"):lines() do parts[#parts + 1] = l end
  end
  table.sort(parts)
  local all = {}
  for l in io.open(d .. "all.jsonl"):lines() do all[#all + 1] = l end
  eq(#parts, #all, "each variant once")
  for i = 1, #all do eq(parts[i], all[i], "line " .. i) end
  c, _, e = run { "--shard", "3/3" }
  eq(c, 2, "a shard past the count")
  check(e:find("0 <= I < N", 1, true), e)
end)

test("tune --shard I/N: each distinct kernel in one shard's DB; the merge holds them all and --refit refits the prior", function()
  local d = tmp("tshards")
  local ROOT = EMMY_HOME
  local mock = d .. "libcuda_mock.so"
  local ok = os.execute(("cc -shared -fPIC -O1 -o %s %s/tests/fixtures/cuda_mock.c 2>/dev/null"):format(mock, ROOT))
  if ok ~= 0 and ok ~= true then skip("cannot build the mock driver with cc") end
  package.path = EMMY_HOME .. "/tests/lua/?.lua;" .. package.path
  local graph = require("graphs").two_kernels(d .. "two.torch.json")
  local function env(db) return ("EMMY_LIBCUDA=%s EMMY_CUBIN_CACHE=%scubin EMMY_ONLINE_FILE=%sonline.json EMMY_TUNE_DB=%s"):format(mock,
    d, d, db) end
  local names = {}
  for i = 0, 1 do
    local c, o, e = emmy({ "tune", graph, "--patience", "1", "--shard", i .. "/2", "--dump-dir", d .. "t" .. i }, { env = env(d .. i .. ".db") })
    eq(c, 0, "shard " .. i .. ": " .. e)
    check(o:find(("shard %d/2: 1 of 2 distinct kernels"):format(i), 1, true), o)
    local db = assert(tunedb.open(d .. i .. ".db", { readonly = true }))
    local ks = assert(db.h:rows("SELECT name FROM kernels"))
    db:close()
    eq(#ks, 1, "one kernel in shard " .. i)
    names[#names + 1] = ks[1].name
  end
  check(names[1] ~= names[2], "the shards tuned different kernels: " .. names[1] .. ", " .. names[2])
  local c, o, e = merge({ d .. "m.db", d .. "0.db", d .. "1.db", "--refit" }, "EMMY_ONLINE_FILE=" .. d .. "merged_online.json")
  eq(c, 0, e)
  eq(counts(d .. "m.db").kernels, 2, "both kernels merged")
  check(o:find("online half refit on", 1, true), o)
  check(io.open(d .. "merged_online.json"), "the refit model is saved")
  c, _, e = emmy({ "tune", graph, "--shard", "0/2", "--bench" }, { env = env(d .. "x.db") })
  eq(c, 2, "--bench with --shard")
  check(e:find("emmy db merge", 1, true), e)
end)

return T
