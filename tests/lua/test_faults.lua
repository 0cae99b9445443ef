-- The fault-injection suite of docs/reliability.md, sections "Writes" and "The tune DB". No GPU (tunes run on the
-- mock driver, tests/fixtures/cuda_mock.c), bounded (each case is one short command), seeded (the cases are the
-- same on every machine).
--   Writes: every command that writes a file is run with one step of its writes failing — open, write, fsync,
--   close or rename, each with an errno, at the Nth counted call (tests/fixtures/fault_inject.c, LD_PRELOAD) —
--   and on a tmpfs this test mounts with a few KB left. After each run: a failure is exit 1 with one line naming
--   the file and the OS error; every file of the output folder is its old content or the whole new one (as a
--   clean run writes it); no temp file is left; a run where no fault fired exits 0 with every file new.
--   The tune DB: foreign SQLite files, files that are not SQLite, other schema versions — all refused untouched,
--   byte for byte and without side files; schema 1 upgraded with its rows; a read-only mount read by eval and
--   repl --db; --clean refused while another run holds the run lock, rows intact.
-- Mounting needs root (CI runs as root); without it those cases are skipped with the reason.
local cjson = require "cjson"
local sys = require "emmy.sys"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

-- xorshift32: the same cases on every machine and LuaJIT build
local function rng(seed)
  local s = seed
  return function(n)
    s = bit.bxor(s, bit.lshift(s, 13))
    s = bit.bxor(s, bit.rshift(s, 17))
    s = bit.bxor(s, bit.lshift(s, 5))
    return (s % n + n) % n + 1
  end
end
local function pick(r, list) return list[r(#list)] end

local STRERROR = { [1] = "Operation not permitted", [5] = "Input/output error", [13] = "Permission denied",
  [18] = "Invalid cross-device link", [27] = "File too large", [28] = "No space left on device",
  [30] = "Read-only file system", [122] = "Disk quota exceeded" }
-- the errors each step can really fail with
local ERRNOS = { open = { 28, 13, 30, 122, 5 }, write = { 28, 5, 122, 27 }, fsync = { 5, 28, 122 },
  close = { 5, 28, 122 }, rename = { 5, 28, 18, 13, 30 } }

-- Shared fixtures, built once: the fault library, the mock driver, a tiny graph.
local shared
local function fixtures()
  if shared then return shared end
  local d = tmpdir()
  shared = { dir = d, graph = d .. "/tiny.torch.json", cubin = d .. "/cubin" }
  local code, out = sh(("cc -shared -fPIC -O1 -o %s/fault_inject.so %s/tests/fixtures/fault_inject.c -ldl"):format(d, ROOT))
  shared.fault_so = code == 0 and (d .. "/fault_inject.so") or nil
  shared.fault_why = code ~= 0 and ("cannot build tests/fixtures/fault_inject.c with cc: " .. out:gsub("\n", " "):sub(1, 160)) or nil
  code, out = sh(("cc -shared -fPIC -O1 -o %s/libcuda_mock.so %s/tests/fixtures/cuda_mock.c"):format(d, ROOT))
  shared.mock_so = code == 0 and (d .. "/libcuda_mock.so") or nil
  shared.mock_why = code ~= 0 and ("cannot build the mock driver with cc: " .. out:gsub("\n", " "):sub(1, 160)) or nil
  -- one elementwise kernel with a few candidates: a tune of it takes a fraction of a second
  local g = require("emmy.ir").new("tiny")
  local x = assert(g:input("x", "bf16", { 64, 256 }, { kind = "activation" }))
  local y = assert(g:node("aten.silu.default", { self = x }, { name = "y" }))
  local z = assert(g:node("aten.mul.Tensor", { self = y, other = x }, { name = "z" }))
  assert(g:output(z))
  assert(require("emmy.graphjson").write(g, shared.graph))
  return shared
end

-- Every file under dir: relative path -> content.
local function tree(dir, out, prefix)
  out = out or {}
  for _, name in ipairs(sys.listdir(dir) or {}) do
    local p, rel = dir .. "/" .. name, (prefix and (prefix .. "/") or "") .. name
    local k = sys.stat(p)
    if k == "dir" then tree(p, out, rel) else out[rel] = read_file(p) end
  end
  return out
end

local function is_temp(rel) return rel:match("%.tmp%.%d+%.%d+$") ~= nil end

local function deep_eq(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not deep_eq(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- Whether text is the file the clean run wrote: the same bytes, or for a JSON file that cjson writes (its key
-- order is not fixed) the same value; a loose file (times in it) only needs to be whole JSON.
local function is_new(w, rel, text, want)
  if text == want then return true end
  if rel:match("%.json$") and not rel:match("%.torch%.json$") then
    local ok, v = pcall(cjson.decode, text)
    if not ok then return false end
    if w.loose and w.loose[rel] then return true end
    local ok2, v2 = pcall(cjson.decode, want)
    return ok2 and deep_eq(v, v2)
  end
  return false
end

local function emmy_lines(err)
  local n, last = 0, nil
  for _, l in ipairs(lines_of(err)) do
    if l:match("^emmy:") then n = n + 1 end
    last = l
  end
  return n, last
end

-- The commands that write files. run(out, env) -> code, stdout, stderr; each writes only under out. loose: files
-- whose bytes differ from run to run (times), checked as complete JSON instead of against the clean run.
local function writers()
  local f = fixtures()
  local function tune_env(out, env, extra)
    return ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s EMMY_CUBIN_CACHE=%s %s %s"):format(f.mock_so, tmpdir() .. "/tune.db",
      f.cubin, extra or ("EMMY_ONLINE_FILE=" .. tmpdir() .. "/online.json"), env or "")
  end
  local st_script = f.dir .. "/st_write.lua"
  write_file(st_script, [[
local st, ref = require "emmy.safetensors", require "emmy.ref"
local a = ref.random("bf16", { 64, 64 }, { seed = 7 })
local b = ref.random("f32", { 300 }, { seed = 8 })
assert(st.write(arg[1], { ["layers.0.w"] = a, ["layers.0.b"] = b }, { format = "pt" })) -- (a failure: one line, exit 1)
]])
  return {
    { name = "graph -o", run = function(out, env)
      return emmy({ "graph", f.graph, "-o", out .. "/g.torch.json" }, { env = env }) end },
    { name = "trace -o", run = function(out, env)
      return emmy({ "trace", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "-o", out .. "/t.torch.json" }, { env = env }) end },
    { name = "compile --ir cuda -o", run = function(out, env)
      return emmy({ "compile", f.graph, "--ir", "cuda", "-o", out .. "/k.cu" }, { env = env }) end },
    { name = "compile --dump-dir", run = function(out, env)
      return emmy({ "compile", f.graph, "--dump-dir", out .. "/dump" }, { env = env }) end },
    { name = "ref --save", run = function(out, env)
      return emmy({ "ref", f.graph, "--save", out .. "/saved" }, { env = env }) end },
    { name = "safetensors write", run = function(out, env)
      return emmy({ st_script, out .. "/w.safetensors" }, { env = env }) end },
    { name = "tune --dump-dir", mock = true, loose = { ["tune/tune.json"] = true }, run = function(out, env)
      return emmy({ "tune", f.graph, "--patience", "1", "--dump-dir", out .. "/tune" }, { env = tune_env(out, env) }) end },
    { name = "tune EMMY_ONLINE_FILE", mock = true, loose = { ["online.json"] = true }, run = function(out, env)
      return emmy({ "tune", f.graph, "--patience", "1" }, { env = tune_env(out, env, "EMMY_ONLINE_FILE=" .. out .. "/online.json") }) end },
  }
end

-- The files a clean run of w writes (relative path -> content), from one run in a fresh folder.
local refs = {}
local function reference(w)
  if refs[w.name] then return refs[w.name] end
  local out = tmpdir() .. "/out"
  assert(sys.mkdir_p(out))
  local code, o, e = w.run(out, nil)
  eq(code, 0, w.name .. " (clean run): " .. e .. o)
  refs[w.name] = tree(out)
  check(next(refs[w.name]), w.name .. " wrote nothing")
  return refs[w.name]
end

-- An output folder holding an old version of every file w writes.
local function populate(out, ref)
  for rel in pairs(ref) do
    local dir = (out .. "/" .. rel):match("^(.*)/[^/]*$")
    assert(sys.mkdir_p(dir))
    write_file(out .. "/" .. rel, "old " .. rel .. "\n")
  end
end

-- Checks one run of w into out (populated): the outcome (fired: a fault was injected or the disk was full),
-- the one line, the files old or whole new, no temp file. want_err: text the line must hold when it failed.
local function outcome(w, out, ref, code, o, e, fired, want_err, label)
  local files = tree(out)
  for rel, text in pairs(files) do
    check(not is_temp(rel), label .. ": a temp file was left: " .. rel)
    if not is_temp(rel) and rel ~= "filler" then
      check(ref[rel] ~= nil, label .. ": a file the clean run does not write: " .. rel)
      local old, new = text == "old " .. rel .. "\n", ref[rel] and is_new(w, rel, text, ref[rel])
      check(old or new, label .. ": " .. rel .. " is neither its old content nor the whole new one (" .. #text .. " bytes)")
    end
  end
  if fired == false then
    eq(code, 0, label .. ": no fault fired, yet: " .. e)
    for rel in pairs(ref) do
      check(files[rel] and is_new(w, rel, files[rel], ref[rel]), label .. ": " .. rel .. " not rewritten")
    end
    return "ok"
  end
  if code == 0 and fired == nil then -- a full disk with room enough: every file new
    for rel in pairs(ref) do
      check(files[rel] and is_new(w, rel, files[rel], ref[rel]), label .. ": exit 0 but " .. rel .. " is not the new file")
    end
    return "ok"
  end
  eq(code, 1, label .. ": exit status (stderr: " .. e .. ")")
  local n, last = emmy_lines(e)
  check(n == 1 and last and last:match("^emmy:"), label .. ": not one 'emmy:' line ending stderr: " .. e)
  check(want_err == nil or last:find(want_err, 1, true), label .. ": the line does not say '" .. tostring(want_err) .. "': " .. last)
  local named = last:match("cannot write (.-): ") or last:match("wrote (.-), but")
  check(named and named:sub(1, #out) == out, label .. ": the line does not name a file of " .. out .. ": " .. last)
  local rel = named:sub(#out + 2)
  if not last:find("but cannot make it durable", 1, true) then
    check(files[rel] == "old " .. rel .. "\n", label .. ": the file named, " .. rel .. ", lost its old content")
  end
  return "failed"
end

local function needs(f, w)
  if not f.fault_so then skip(f.fault_why) end
  if w.mock and not f.mock_so then skip(f.mock_why) end
end

-- Every writer with every step failing, errnos and call numbers drawn from a seeded generator, plus short writes
-- and EINTR (which a writer must ride through).
test("every write path under injected faults: exit 1 and one line naming the file, old or whole new files, no temp", function()
  local f = fixtures()
  if not f.fault_so then skip(f.fault_why) end
  local r = rng(20240521)
  local n, failed, passed = 0, 0, 0
  for _, w in ipairs(writers()) do
    if not (w.mock and not f.mock_so) then
      local ref = reference(w)
      local nfiles = 0
      for _ in pairs(ref) do nfiles = nfiles + 1 end
      for _, op in ipairs { "open", "write", "fsync", "close", "rename", "short", "eintr" } do
        local errno = ERRNOS[op] and pick(r, ERRNOS[op]) or 4
        local nth = op == "short" and 0 or r(nfiles + 1)
        local d = tmpdir()
        local out, log = d .. "/out", d .. "/fault.log"
        populate(out, ref)
        -- (under ./emmy-asan the fault library is loaded before the ASan runtime, which ASan must be told is fine)
        local env = ("LD_PRELOAD=%s EMMY_FAULT_OP=%s EMMY_FAULT_PATH=%s/ EMMY_FAULT_ERRNO=%d EMMY_FAULT_NTH=%d EMMY_FAULT_LOG=%s%s")
          :format(f.fault_so, op, out, errno, nth, log, BIN:find("asan", 1, true) and " ASAN_OPTIONS=verify_asan_link_order=0" or "")
        local code, o, e = w.run(out, env)
        local fired = read_file(log) ~= "" and op ~= "eintr"
        local label = ("%s, %s fails with errno %d at call %d"):format(w.name, op, errno, nth)
        local res = outcome(w, out, ref, code, o, e, fired, fired and STRERROR[errno] or nil, label)
        n = n + 1
        if res == "failed" then failed = failed + 1 else passed = passed + 1 end
      end
    end
  end
  check(failed >= 20, ("only %d of %d cases had a fault fire"):format(failed, n))
end)

-- Mounts a tmpfs of size_kb at dir for fn(dir); always unmounted. Skips when mounting is impossible.
local function with_tmpfs(dir, size_kb, fn, ro_after)
  assert(sys.mkdir_p(dir))
  local code, out = sh(("mount -t tmpfs -o size=%dk,mode=0755 tmpfs %s"):format(size_kb, shell_quote(dir)))
  if code ~= 0 then
    skip("cannot mount a tmpfs (" .. out:gsub("\n", " "):sub(1, 120) .. "); the full-disk cases need root, as in CI")
  end
  local ok, err = pcall(fn, dir)
  local uc, uo = sh("umount " .. shell_quote(dir))
  if not ok then error(err, 0) end
  check(uc == 0, "umount " .. dir .. ": " .. uo)
end

-- Bytes free on the file system of dir.
local function avail(dir)
  local _, out = sh("df -B1 --output=avail " .. shell_quote(dir) .. " | tail -n 1")
  return tonumber(out:match("%d+")) or 0
end

-- Leaves about free bytes on dir's file system (a filler file of whole pages).
local function fill(dir, free)
  local pages = math.floor((avail(dir) - free) / 4096)
  if pages > 0 then sh(("dd if=/dev/zero of=%s/filler bs=4096 count=%d"):format(shell_quote(dir), pages)) end
end

test("every write path on a full tmpfs: exit 1 with 'No space left on device' and old files kept, or exit 0 with all new", function()
  local f = fixtures()
  local r = rng(77)
  local seen = { ok = 0, failed = 0 }
  for _, w in ipairs(writers()) do
    if not (w.mock and not f.mock_so) then
      local ref = reference(w)
      local bytes = 0
      for _, t in pairs(ref) do bytes = bytes + #t end
      for k = 1, 3 do
        local free = k == 1 and 0 or (r(math.floor(bytes / 4096) + 3) - 1) * 4096
        with_tmpfs(tmpdir() .. "/mnt", 1024 + 4 * math.ceil(bytes / 1024), function(mnt)
          local out = mnt .. "/out"
          populate(out, ref)
          fill(mnt, free)
          local code, o, e = w.run(out, nil)
          local res = outcome(w, out, ref, code, o, e, nil, "No space left on device",
            ("%s on a full disk (%d bytes free)"):format(w.name, free))
          seen[res] = seen[res] + 1
        end)
      end
    end
  end
  check(seen.failed >= 8, ("only %d full-disk cases failed: the disk was not full enough"):format(seen.failed))
end)

-- The examples of issue 21, one by one.
test("issue 21: graph -o on a full disk exits 1, one line, X keeps its old content", function()
  local f = fixtures()
  with_tmpfs(tmpdir() .. "/mnt", 64, function(mnt)
    write_file(mnt .. "/X.torch.json", "the old graph\n")
    fill(mnt, 0)
    local code, o, e = emmy { "graph", f.graph, "-o", mnt .. "/X.torch.json" }
    eq(code, 1, "exit")
    check(not o:find("wrote", 1, true), "no 'wrote' line: " .. o)
    eq(e, "emmy: cannot write " .. mnt .. "/X.torch.json: No space left on device\n", "the one line")
    eq(read_file(mnt .. "/X.torch.json"), "the old graph\n", "X as it was")
  end)
end)

test("issue 21: compile --dump-dir and trace -o on a full disk exit 1 and leave no 0-byte file", function()
  local f = fixtures()
  with_tmpfs(tmpdir() .. "/mnt", 64, function(mnt)
    fill(mnt, 0)
    local code, _, e = emmy { "compile", f.graph, "--dump-dir", mnt .. "/dump" }
    check(code == 1 and #lines_of(e) == 1 and e:find("No space left on device", 1, true), "compile: " .. e)
    code, _, e = emmy { "trace", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "-o", mnt .. "/t.torch.json" }
    check(code == 1 and #lines_of(e) == 1 and e:find("cannot write " .. mnt .. "/t.torch.json: No space left on device", 1, true), "trace: " .. e)
    for rel, text in pairs(tree(mnt)) do
      check(rel == "filler" or #text > 0, "a 0-byte file: " .. rel)
      check(not is_temp(rel), "a temp file: " .. rel)
    end
    -- the same for what a command prints when stdout is a file on the full disk
    local c2, o2 = sh(("(%s graph %s --json > %s/summary.json)"):format(shell_quote(BIN), shell_quote(f.graph), shell_quote(mnt)))
    check(c2 == 1 and o2:find("emmy: cannot write standard output: No space left on device", 1, true), "stdout: " .. o2)
  end)
end)

test("issue 21: a tune with EMMY_ONLINE_FILE on a full disk keeps online.json (exit 1, one line)", function()
  local f = fixtures()
  if not f.mock_so then skip(f.mock_why) end
  with_tmpfs(tmpdir() .. "/mnt", 64, function(mnt)
    local old = '{"version":1,"kinds":{},"rows":40,"usable":true}'
    write_file(mnt .. "/online.json", old)
    fill(mnt, 0)
    local env = ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s EMMY_CUBIN_CACHE=%s EMMY_ONLINE_FILE=%s/online.json"):format(f.mock_so,
      tmpdir() .. "/tune.db", f.cubin, mnt)
    local code, _, e = emmy({ "tune", f.graph, "--patience", "1" }, { env = env })
    eq(code, 1, "exit: " .. e)
    local n, last = emmy_lines(e)
    check(n == 1 and last:find("cannot write " .. mnt .. "/online.json: No space left on device", 1, true), e)
    eq(read_file(mnt .. "/online.json"), old, "online.json as it was")
  end)
end)

test("a read-only folder: every writer exits 1 with 'Read-only file system', nothing changed", function()
  local f = fixtures()
  for _, w in ipairs(writers()) do
    if not (w.mock and not f.mock_so) then
      local ref = reference(w)
      with_tmpfs(tmpdir() .. "/mnt", 4096, function(mnt)
        populate(mnt .. "/out", ref)
        assert(sh("mount -o remount,ro " .. shell_quote(mnt)) == 0)
        local code, o, e = w.run(mnt .. "/out", nil)
        outcome(w, mnt .. "/out", ref, code, o, e, true, "Read-only file system", w.name .. " on a read-only mount")
      end)
    end
  end
end)

---------------------------------------------------------------------------------------------------------------
-- The tune DB

local sqlite = require "emmy.sqlite"
local tunedb = require "emmy.tunedb"

-- The files next to path (path itself and SQLite's side files), name -> content.
local function db_files(path)
  local dir, base = path:match("^(.*)/([^/]*)$")
  local out = {}
  for _, name in ipairs(sys.listdir(dir) or {}) do
    if name:sub(1, #base) == base then out[name] = read_file(dir .. "/" .. name) end
  end
  return out
end

-- a: before, b: after. wal_ok: a reader may leave SQLite's empty -wal and its -shm beside a WAL database.
local function same_files(a, b, label, wal_ok)
  for k, v in pairs(a) do check(b[k] == v, label .. ": " .. k .. " changed") end
  for k, v in pairs(b) do
    local side = wal_ok and ((k:match("%-wal$") and v == "") or k:match("%-shm$"))
    check(a[k] ~= nil or side, label .. ": " .. k .. " appeared")
  end
end

-- A tune DB with rows: n measurements of one kernel.
local function make_db(path, n)
  local db = assert(tunedb.open(path))
  local ctx = db:context { gpu = "NVIDIA H200", cc = "9.0", driver = "580", nvrtc = "13.0", regime = "deploy" }
  db:kernel { hash = "aaaa", name = "k_linear_aaaaaa", ops = "linear", features = { M = 64 } }
  local run = db:begin_run("emmy tune x", "abc", false)
  for i = 1, n or 3 do
    db:record { run_id = run, context_id = ctx, variant_id = db:variant("aaaa", "BM=" .. i, "warp"), status = "ok",
      median_us = 10 + i, samples = 50 }
  end
  db:end_run(run)
  db:close()
end

local function count(path, sql)
  local h = assert(sqlite.open(path, { readonly = true }))
  local n = assert(h:rows(sql or "SELECT COUNT(*) AS n FROM measurements"))[1].n
  h:close()
  return n
end

-- Foreign files, drawn from a seeded generator: SQLite files of other programs (their tables, rows, application
-- ids, versions, journal modes, page sizes), emmy's application_id with other schema versions, files that are not
-- SQLite at all, and a truncated tune DB.
local function foreign_cases(seed, n)
  local r = rng(seed)
  local out = {}
  local words = { "notes", "users", "runs", "kernels", "measurements", "cache", "t", "meta", "contexts", "x" }
  for i = 1, n do
    local kind = pick(r, { "other", "other", "version", "junk", "legacy_lookalike" })
    out[i] = { kind = kind, write = function(path)
      if kind == "junk" then
        local parts = { "SQLite format 2\0", "hello\n", ("\0"):rep(100), "{\"a\": 1}", "PK\3\4" }
        local t = {}
        for _ = 1, r(8) do t[#t + 1] = pick(r, parts) .. string.char(r(255)) end
        write_file(path, table.concat(t))
        return "is not a SQLite database"
      end
      local h = assert(sqlite.open(path))
      assert(h:exec(("PRAGMA page_size = %d"):format(pick(r, { 512, 1024, 4096, 8192 }))))
      if kind == "version" then
        local v = pick(r, { 0, 1, 3, 7, 99, 2147483647, -1 })
        assert(h:exec(("CREATE TABLE runs (id INTEGER PRIMARY KEY); PRAGMA application_id = %d; PRAGMA user_version = %d")
          :format(tunedb.APP_ID, v)))
        if r(2) == 1 then assert(h:rows("PRAGMA journal_mode = WAL")) end
        h:close()
        return v > tunedb.SCHEMA and "written by a newer emmy" or "which this emmy does not read"
      end
      if kind == "legacy_lookalike" then
        -- schema 1's table names with other columns: not emmy's
        assert(h:exec("CREATE TABLE runs (a); CREATE TABLE contexts (a); CREATE TABLE kernels (a); " ..
          "CREATE TABLE variants (a); CREATE TABLE measurements (a); PRAGMA user_version = 1"))
        h:close()
        return "of another program"
      end
      for t = 1, r(3) do
        local name = pick(r, words) .. t
        assert(h:exec(("CREATE TABLE %s (id INTEGER PRIMARY KEY, v TEXT)"):format(name)))
        for k = 1, r(5) do assert(h:run(("INSERT INTO %s (v) VALUES (?)"):format(name), "row " .. k)) end
      end
      assert(h:exec(("PRAGMA application_id = %d; PRAGMA user_version = %d"):format(pick(r, { 0, 0, 1, 42, 0x4d504c41 }),
        pick(r, { 0, 1, 2, 5 }))))
      if r(2) == 1 then assert(h:rows("PRAGMA journal_mode = WAL")) end
      h:close()
      return "of another program"
    end }
  end
  return out
end

test("foreign files given as the tune DB are refused untouched (generated cases): tune, eval, repl --db, tunedb.open", function()
  local f = fixtures()
  local script = tmpdir() .. "/open.lua"
  write_file(script, [[
local db, err = require("emmy.tunedb").open(arg[1], { readonly = arg[2] == "ro" })
if not db then error(err, 0) end
db:close()
]])
  local cases = foreign_cases(1234, 24)
  for i, c in ipairs(cases) do
    local path = tmpdir() .. "/given.db"
    local want = c.write(path)
    local before = db_files(path)
    local runs = {
      { "open rw", { script, path, "rw" } },
      { "open ro", { script, path, "ro" } },
      { "eval", { "eval", "variants", "--db", path, "--kernel", "x" } },
    }
    if i % 4 == 1 then runs[#runs + 1] = { "repl --db", { "repl", "--db", path } } end
    if i % 3 == 1 and f.mock_so then runs[#runs + 1] = { "tune", { "tune", f.graph, "--patience", "1" }, ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s EMMY_CUBIN_CACHE=%s EMMY_ONLINE_FILE=%s"):format(f.mock_so, path, f.cubin, tmpdir() .. "/o.json") } end
    for _, run in ipairs(runs) do
      local code, _, e = emmy(run[2], { env = run[3], stdin = "" })
      local label = ("case %d (%s), %s"):format(i, c.kind, run[1])
      check(code == 1 or code == 2, label .. ": exit " .. tostring(code) .. ": " .. e)
      local n, last = emmy_lines(e)
      check(n == 1 and last:find(path, 1, true) and last:find(want, 1, true), label .. ": " .. e)
      same_files(before, db_files(path), label)
    end
  end
end)

test("issue 21: a foreign SQLite file gets no tables and keeps its journal mode; another version is refused before any change", function()
  local f = fixtures()
  if not f.mock_so then skip(f.mock_why) end
  local path = tmpdir() .. "/mine.db"
  local h = assert(sqlite.open(path))
  assert(h:exec("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('keep me')"))
  h:close()
  local before = db_files(path)
  local env = ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s EMMY_CUBIN_CACHE=%s EMMY_ONLINE_FILE=%s"):format(f.mock_so, path, f.cubin, tmpdir() .. "/o.json")
  local code, _, e = emmy({ "tune", f.graph, "--patience", "1" }, { env = env })
  check(code == 1 and e:find("is a SQLite database of another program (application_id 0, user_version 0, tables: notes)", 1, true), e)
  same_files(before, db_files(path), "foreign")
  eq(count(path, "SELECT COUNT(*) AS n FROM sqlite_master"), 1, "no table added")
  h = assert(sqlite.open(path, { readonly = true }))
  eq(h:rows("PRAGMA journal_mode")[1].journal_mode, "delete", "journal mode as it was")
  h:close()
  -- a tune DB of another version, in rollback-journal mode: refused before the journal mode is touched
  local v9 = tmpdir() .. "/v9.db"
  h = assert(sqlite.open(v9))
  assert(h:exec(("CREATE TABLE runs (id INTEGER PRIMARY KEY); PRAGMA application_id = %d; PRAGMA user_version = 9"):format(tunedb.APP_ID)))
  h:close()
  before = db_files(v9)
  env = env:gsub("EMMY_TUNE_DB=%S+", "EMMY_TUNE_DB=" .. v9)
  code, _, e = emmy({ "tune", f.graph, "--patience", "1", "--clean" }, { env = env })
  check(code == 1 and e:find("has schema version 9, written by a newer emmy", 1, true), e)
  same_files(before, db_files(v9), "v9")
end)

test("schema 1 (before the application_id): a tune stamps it as schema 2 with every row kept; eval reads it untouched", function()
  local path = tmpdir() .. "/v1.db"
  make_db(path, 4)
  local h = assert(sqlite.open(path))
  assert(h:exec("PRAGMA application_id = 0; PRAGMA user_version = 1; PRAGMA journal_mode = DELETE"))
  h:close()
  local before = db_files(path)
  local code, o, e = emmy { "eval", "variants", "--db", path, "--kernel", "linear" }
  check(code == 0 and o:find("k_linear_aaaaaa", 1, true), "eval reads schema 1: " .. e)
  same_files(before, db_files(path), "eval on schema 1", true)
  local db = assert(tunedb.open(path))
  db:close()
  h = assert(sqlite.open(path, { readonly = true }))
  eq(h:rows("PRAGMA application_id")[1].application_id, tunedb.APP_ID, "stamped")
  eq(h:rows("PRAGMA user_version")[1].user_version, tunedb.SCHEMA, "schema 2")
  h:close()
  eq(count(path), 4, "rows kept")
end)

test("commands that only read open the tune DB read-only: eval and repl --db change no byte", function()
  local path = tmpdir() .. "/t.db"
  make_db(path, 5)
  local before = db_files(path)
  local code, _, e = emmy { "eval", "variants", "--db", path, "--kernel", "linear" }
  eq(code, 0, e)
  code, _, e = emmy { "eval", "failures", "--db", path }
  eq(code, 0, e)
  local o
  code, o, e = emmy({ "repl", "--db", path }, { stdin = "print('N', db:sql('SELECT COUNT(*) AS n FROM measurements')[1].n)\n" ..
    "print('W', db:sql('DELETE FROM measurements'))\n" })
  check(code == 0 and o:find("N\t5", 1, true), o .. e)
  check(o:find("W\tnil\tsqlite: attempt to write a readonly database", 1, true), "a write through repl --db is refused: " .. o)
  same_files(before, db_files(path), "after eval and repl", true)
  eq(count(path), 5, "rows")
end)

test("a valid tune DB on a read-only mount is read by eval and repl --db; a tune on it fails in one line", function()
  local f = fixtures()
  local src = tmpdir() .. "/src"
  assert(sys.mkdir_p(src))
  make_db(src .. "/t.db", 6)
  with_tmpfs(tmpdir() .. "/mnt", 1024, function(mnt)
    assert(sh(("cp %s/t.db %s/t.db"):format(shell_quote(src), shell_quote(mnt))) == 0)
    assert(sh("mount -o remount,ro " .. shell_quote(mnt)) == 0)
    local path = mnt .. "/t.db"
    local before = db_files(path)
    local code, o, e = emmy { "eval", "variants", "--db", path, "--kernel", "linear" }
    check(code == 0 and o:find("k_linear_aaaaaa", 1, true), "eval on a read-only mount: " .. e)
    code, o, e = emmy({ "repl", "--db", path }, { stdin = "print('N', db:sql('SELECT COUNT(*) AS n FROM measurements')[1].n)\n" })
    check(code == 0 and o:find("N\t6", 1, true), "repl --db on a read-only mount: " .. o .. e)
    if f.mock_so then
      local env = ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s EMMY_CUBIN_CACHE=%s EMMY_ONLINE_FILE=%s"):format(f.mock_so, path, f.cubin, tmpdir() .. "/o.json")
      code, _, e = emmy({ "tune", f.graph, "--patience", "1" }, { env = env })
      local n, last = emmy_lines(e)
      check(code == 1 and n == 1 and last:find(path, 1, true), "tune on a read-only DB: " .. e)
    end
    same_files(before, db_files(path), "read-only mount")
  end)
end)

test("a read-only tune DB by permission bits (non-root) is read by eval", function()
  local _, uid = sh("id -u")
  if tonumber(uid) == 0 then
    skip("running as root: permission bits do not stop root; the read-only mount case shows the same promise")
  end
  local d = tmpdir()
  make_db(d .. "/t.db", 2)
  assert(sh(("chmod 0444 %s/t.db && chmod 0555 %s"):format(shell_quote(d), shell_quote(d))) == 0)
  local code, _, e = emmy { "eval", "variants", "--db", d .. "/t.db", "--kernel", "linear" }
  sh("chmod 0755 " .. shell_quote(d))
  eq(code, 0, e)
end)

-- A process that holds the run lock the way a tune does (tunedb.open_for_run), records rows, and waits for a file
-- before it records more and ends. mode: "run" or "clean" (holds the exclusive lock inside on_clean until go).
local HOLDER = [[
local tunedb, sys = require "emmy.tunedb", require "emmy.sys"
local path, dir, mode = arg[1], arg[2], arg[3]
local function wait_for(f) local t = sys.clock() while not sys.stat(f) and sys.clock() - t < 60 do os.execute("sleep 0.02") end end
local function touch(f) assert(sys.write_file(f, "")) end
local db = assert(tunedb.open_for_run(path, { clean = mode == "clean", on_clean = function() touch(dir .. "/ready") wait_for(dir .. "/go") end }))
local ctx = db:context { gpu = "g", cc = "9.0", driver = "d", nvrtc = "n", regime = "deploy" }
db:kernel { hash = "hold", name = "k_hold_000000" }
local run = db:begin_run("holder", "x", false)
local function rows(n) for i = 1, n do db:record { run_id = run, context_id = ctx, variant_id = db:variant("hold", mode .. i .. "-" .. sys.clock()), status = "ok", median_us = i } end end
rows(5)
if mode ~= "clean" then touch(dir .. "/ready") wait_for(dir .. "/go") end
rows(5)
db:end_run(run)
db:close()
touch(dir .. "/done")
]]

local function spawn_holder(path, mode)
  local d = tmpdir()
  write_file(d .. "/holder.lua", HOLDER)
  os.execute(("%s %s %s %s %s > %s/log 2>&1 &"):format(shell_quote(BIN), shell_quote(d .. "/holder.lua"), shell_quote(path),
    shell_quote(d), mode, shell_quote(d)))
  local t = sys.clock()
  while not sys.stat(d .. "/ready") and sys.clock() - t < 30 do os.execute("sleep 0.02") end
  check(sys.stat(d .. "/ready"), "the holder did not start: " .. read_file(d .. "/log"))
  return {
    go = function()
      write_file(d .. "/go", "")
      local t2 = sys.clock()
      while not sys.stat(d .. "/done") and sys.clock() - t2 < 30 do os.execute("sleep 0.02") end
      check(sys.stat(d .. "/done"), "the holder did not finish: " .. read_file(d .. "/log"))
    end,
  }
end

test("issue 21: tune --clean while another tune writes to the DB is refused, its rows, the online half and the cache intact", function()
  local f = fixtures()
  if not f.mock_so then skip(f.mock_why) end
  local d = tmpdir()
  local path, online, cubin = d .. "/tune.db", d .. "/online.json", d .. "/cubin"
  make_db(path, 3)
  write_file(online, '{"version":1}')
  assert(sys.mkdir_p(cubin))
  write_file(cubin .. "/0123456789abcdef0123456789abcdef.meta", "kept")
  local env = ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s EMMY_CUBIN_CACHE=%s EMMY_ONLINE_FILE=%s"):format(f.mock_so, path, cubin, online)
  local h = spawn_holder(path, "run")
  local code, _, e = emmy({ "tune", f.graph, "--patience", "1", "--clean" }, { env = env })
  eq(code, 1, "exit: " .. e)
  local n, last = emmy_lines(e)
  check(n == 1 and last:find("another tune is writing to it, and --clean would delete its rows; nothing was deleted", 1, true), e)
  eq(count(path), 3 + 5, "rows of the DB and of the running tune kept")
  eq(read_file(online), '{"version":1}', "online half kept")
  eq(read_file(cubin .. "/0123456789abcdef0123456789abcdef.meta"), "kept", "cubin cache kept")
  h.go()
  eq(count(path), 3 + 10, "the running tune recorded all its rows")
  -- a tune without --clean runs beside it; once alone, --clean deletes every row and keeps the file emmy's
  h = spawn_holder(path, "run")
  code, _, e = emmy({ "tune", f.graph, "--patience", "1" }, { env = env })
  eq(code, 0, "a tune beside another: " .. e)
  h.go()
  code, _, e = emmy({ "tune", f.graph, "--patience", "1", "--clean" }, { env = env })
  eq(code, 0, "--clean alone: " .. e)
  eq(count(path), 1, "only the new tune's row")
  eq(count(path, "SELECT COUNT(*) AS n FROM runs"), 1, "only its run")
  local h2 = assert(sqlite.open(path, { readonly = true }))
  eq(h2:rows("PRAGMA application_id")[1].application_id, tunedb.APP_ID, "the file is still emmy's")
  h2:close()
end)

test("the run lock under generated interleavings: a --clean never deletes rows of a run that holds the lock", function()
  local r = rng(99)
  local clean_script = tmpdir() .. "/clean.lua"
  write_file(clean_script, [[
local db, err = require("emmy.tunedb").open_for_run(arg[1], { clean = true })
if not db then error(err, 0) end
db:close()
]])
  for i = 1, 6 do
    local path = tmpdir() .. "/tune.db"
    make_db(path, r(4))
    local holders = {}
    for _ = 1, r(2) do holders[#holders + 1] = spawn_holder(path, "run") end
    local before = count(path)
    local code, _, e = emmy { clean_script, path }
    check(code == 1 and e:find("nothing was deleted", 1, true), ("round %d: --clean beside %d runs: %s"):format(i, #holders, e))
    eq(count(path), before, ("round %d: rows kept"):format(i))
    for k = #holders, 1, -1 do
      holders[k].go()
      if k > 1 then
        code = emmy { clean_script, path }
        eq(code, 1, ("round %d: --clean beside %d runs still"):format(i, k - 1))
      end
    end
    -- alone: the clean deletes; a killed holder (its lock gone with it) does not block a clean
    eq(emmy { clean_script, path }, 0, ("round %d: --clean alone"):format(i))
    eq(count(path), 0, "every row deleted")
    if r(2) == 1 then
      local d = tmpdir()
      write_file(d .. "/holder.lua", HOLDER)
      os.execute(("%s %s %s %s run > /dev/null 2>&1 & pid=$!; while [ ! -e %s/ready ]; do sleep 0.02; done; kill -9 $pid; wait $pid 2>/dev/null")
        :format(shell_quote(BIN), shell_quote(d .. "/holder.lua"), shell_quote(path), shell_quote(d), shell_quote(d)))
      eq(emmy { clean_script, path }, 0, ("round %d: --clean after a killed run"):format(i))
    end
  end
end)

test("a tune that starts while a --clean holds the DB waits for it, and its rows are not deleted", function()
  local f = fixtures()
  if not f.mock_so then skip(f.mock_why) end
  local d = tmpdir()
  local path = d .. "/tune.db"
  make_db(path, 2)
  local h = spawn_holder(path, "clean") -- inside its clean: the exclusive lock held, the rows deleted
  local env = ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s EMMY_CUBIN_CACHE=%s EMMY_ONLINE_FILE=%s"):format(f.mock_so, path, f.cubin, d .. "/o.json")
  local log = d .. "/tune.log"
  os.execute(("(env %s %s tune %s --patience 1 > %s 2>&1; echo $? > %s/tune.rc) &"):format(env, shell_quote(BIN),
    shell_quote(f.graph), shell_quote(log), shell_quote(d)))
  os.execute("sleep 0.5")
  check(not sys.stat(d .. "/tune.rc"), "the tune did not wait for the clean: " .. read_file(log))
  h.go()
  local t = sys.clock()
  while not sys.stat(d .. "/tune.rc") and sys.clock() - t < 60 do os.execute("sleep 0.05") end
  eq(read_file(d .. "/tune.rc"), "0\n", "the tune finished: " .. read_file(log))
  eq(count(path), 10 + 1, "the clean's own 10 rows and the tune's row, none deleted")
end)

return T
