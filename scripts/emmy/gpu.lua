-- emmy.gpu — running compiled kernels on the GPU: NVRTC-compiling the chosen variants, allocating one
-- device buffer per materialized value, launching kernels in graph order with the symbols bound, and
-- checking every kernel output against the CPU reference.
local kernels = require "emmy.kernels"
local ref = require "emmy.ref"

local M = {}

local BYTES = { bf16 = 2, f16 = 2, f32 = 4, f64 = 8, i32 = 4, i64 = 8, bool = 1 }
M.BYTES = BYTES -- (a dtype's bytes an element on the device)

local function concrete(g, shape, bind)
  local out = {}
  for i, d in ipairs(shape) do out[i] = type(d) == "number" and d or assert(g:eval(d, bind)) end
  return out
end
M.concrete = concrete

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- The NVRTC architecture for a device (sm_90a on Hopper so that later tiers may use wgmma/TMA).
function M.arch(info) return info.arch .. (info.cc == "9.0" and "a" or "") end

-- The rules' device facts (kernels.plan's opts.device) for a GPU, from its cu:info() table (or the worker's).
function M.device(info)
  return { name = info.name, sm_count = info.sm_count, smem_static = 49152, smem_optin = info.smem_optin, max_threads = 1024,
    regs_per_block = 65536, cc = info.cc, cc_major = info.cc_major, arch = M.arch(info) }
end

-- The plan's chosen knobs with knobs (a candidate's, or a partial assignment) over them.
function M.knobs_over(plan, knobs)
  local out = {}
  for key, v in pairs(plan.choice.knobs) do out[key] = v end
  for key, v in pairs(knobs or {}) do out[key] = v end
  return out
end

-- EMMY_SOURCE_OVERRIDE=DIR: a hand-edited kernel, DIR/<kernel name>.cu, compiled in place of every variant the
-- emitter writes for that kernel (pin the variant with EMMY_KNOBS: the launch shape is still the emitter's), so
-- an edit of `emmy compile --ir cuda` output is checked against the CPU reference and timed like any variant. A
-- line "// emmy-launch smem=N scratch=B" in the file sets the dynamic shared memory and asks for B bytes of zeroed
-- scratch per CTA, passed after the outputs (`unsigned *em_scratch`; emmy run prints its 32-bit words' mean and
-- max over the CTAs after the check launch: M.scratch_summary). Returns src, launch (unchanged when there is no
-- file); says so on stderr once a kernel.
local overridden = {}
function M.source_override(name, src, la, env)
  local dir = (env or os.getenv)("EMMY_SOURCE_OVERRIDE")
  if not dir or dir == "" then return src, la end
  local path = dir .. "/" .. name .. ".cu"
  local f = io.open(path, "rb")
  if not f then return src, la end
  local text = f:read("*a")
  f:close()
  local out = {}
  for key, v in pairs(la) do out[key] = v end
  local line = text:match("//%s*emmy%-launch([^\n]*)") or ""
  local smem, scratch = line:match("smem=(%d+)"), line:match("scratch=(%d+)")
  if smem then out.smem = tonumber(smem) end
  if scratch then out.scratch_per_tile, out.scratch_dump = tonumber(scratch), true end
  -- a hand-edited kernel that does not wait for the previous grid (griddepcontrol.wait: a file written before PDL
  -- was the default, or EMMY_PDL=0's source) is launched plainly, or it could read what that grid still writes
  if out.pdl and not text:find("griddepcontrol.wait", 1, true) then out.pdl = false end
  if not overridden[path] then
    overridden[path] = true
    io.stderr:write(("note: %s: CUDA source from %s (EMMY_SOURCE_OVERRIDE)%s\n"):format(name, path,
      smem and (", dynamic shared memory " .. smem) or ""))
  end
  return text, out
end

-- The NVRTC job of one variant on a GPU (info: cu:info()): the source, arch and options the cubin cache is keyed
-- by, so that a compile ahead (emmy tune) and the build that loads it (gpu.build, in the bench worker) meet in
-- the cache. Returns job, launch | nil, msg (the emitter refused the variant).
function M.job(plan, knobs, info)
  local src, la = kernels.emit(plan, knobs)
  if not src then return nil, la end
  src, la = M.source_override(plan.kernel.name, src, la)
  -- in-process compiles: with the model's weights resident, forking per compile is slow (see nvrtc.h)
  return { source = src, arch = M.arch(info), name = plan.kernel.name .. ".cu", options = { "-std=c++17" } }, la
end

-- Compiles variants: list of {plan, knobs}; returns list of {fn, launch, src, compile} or raises (opts.keep_going: a
-- variant the emitter refuses is an entry with only its error, {error = "emit: …"}, and the others are built).
function M.build(cu, list, opts)
  local nv = require "emmy.nvrtc"
  local info = cu:info()
  local jobs, emitted, at = {}, {}, {}
  for i, it in ipairs(list) do
    local job, la = M.job(it.plan, it.knobs, info)
    if job then
      emitted[i] = { src = job.source, launch = la }
      jobs[#jobs + 1] = job
      at[#jobs] = i
    elseif opts and opts.keep_going then
      emitted[i] = { error = "emit: " .. tostring(la) } -- (a pin the emitter refuses: its row says why, the rest run)
    else
      error(la, 0)
    end
  end
  local res = nv.compile_many(jobs, { progress = opts and opts.progress })
  local out = {}
  for i, e in ipairs(emitted) do if e.error then out[i] = e end end
  for j, r in ipairs(res) do
    local i = at[j]
    local e = emitted[i]
    e.compile = r
    if r.status == "ok" then
      local mod, err = cu:module(r.cubin)
      if not mod then
        e.error = "load_fail: " .. err
      else
        e.module = mod
        e.fn, err = mod:fn(list[i].plan.kernel.name)
        if not e.fn then e.error = "load_fail: " .. err end
      end
    else
      e.error = r.status .. ": " .. ((r.log or ""):match("[^\n]*error[^\n]*") or r.status)
    end
    out[i] = e
  end
  return out
end

-- Device buffers of kernel graph kg's inputs, each uploaded from the reference's value of that name (vals), else the
-- graph input's (ins); one in have (a buffer the caller already holds, e.g. the program's own input) is taken as it
-- is. A name neither holds raises one line naming the kernel input, not a bare assert.
function M.upload_inputs(cu, kg, vals, ins, have)
  local kb = {}
  for _, v in ipairs(kg:inputs()) do
    if have and have[v.name] then kb[v.name] = have[v.name]
    else
      local t = vals[v.name] or (ins and ins[v.name])
      if not t then
        error(("kernel input %s has no value: neither the reference nor the inputs hold that name"):format(v.name), 0)
      end
      local b, err = cu:upload(t)
      if not b then error(("upload of kernel input %s: %s"):format(v.name, tostring(err)), 0) end
      kb[v.name] = b
    end
  end
  return kb
end

-- Device buffer of value name (allocated, poisoned with 0xFF, on first use).
function M.buffer(cu, bufs, g, name, bind)
  if bufs[name] then return bufs[name] end
  local v = g:value(name)
  local n = numel(concrete(g, v.shape, bind))
  local b, err = cu:alloc(math.max(1, n * BYTES[v.dtype]))
  if not b then error(err, 0) end
  b:fill(255)
  bufs[name] = b
  return b
end

-- Device buffers for the values a launch sequence writes (plans, in launch order), each taken from the buffers whose
-- values' last reader has already been launched where one is large enough (the smallest such), else allocated: the
-- bytes a program touches are then about what torch's caching allocator gives torch's, not one buffer a value. Safe under programmatic launch: every
-- kernel waits for the previous grid's completion before its first load or store. Only for timing: the check reads
-- every kernel's outputs after the program ran, so it allocates one buffer a value (M.buffer). g: the whole graph
-- (its inputs, already in bufs, and its outputs keep their buffers). Returns the bytes allocated and the bytes one
-- buffer a value would take.
function M.plan_reuse(cu, bufs, plans, bind, g)
  local keep = {}
  for _, v in ipairs(g:inputs()) do keep[v.name] = true end
  for _, o in ipairs(g:outputs()) do keep[o] = true end
  local last, got, want = {}, 0, 0
  for i, p in ipairs(plans) do
    for _, v in ipairs(p.kernel.repro:inputs()) do last[v.name] = i end
  end
  local free = {}
  local function release(name) if not keep[name] and bufs[name] then free[#free + 1] = bufs[name] end end
  for i, p in ipairs(plans) do
    local kg = p.kernel.repro
    for _, o in ipairs(kg:outputs()) do
      if not bufs[o] then
        local v = kg:value(o)
        local bytes = math.max(1, numel(concrete(kg, v.shape, bind)) * BYTES[v.dtype])
        local best
        want = want + bytes
        for j, b in ipairs(free) do
          if b:size() >= bytes and (not best or b:size() < free[best]:size()) then best = j end
        end
        if best then bufs[o] = table.remove(free, best) else got = got + M.buffer(cu, bufs, kg, o, bind):size() end
      end
    end
    for _, v in ipairs(kg:inputs()) do if last[v.name] == i then release(v.name) end end
    for _, o in ipairs(kg:outputs()) do if not last[o] then release(o) end end
  end
  return got, want
end

-- ctx:time(body, opts), captured once more where the first capture was invalidated (a cause not found: the same
-- variants capture and time alone; docs/performance.md, fifty-first session): t | nil, err, and the first error where
-- there was a second capture (an ok row keeps it, so the variant is neither lost nor silently masked; a second failure
-- names both).
function M.time_retrying(cu, body, opts)
  local t, err = cu:time(body, opts)
  if t or not tostring(err):find("STREAM_CAPTURE_INVALIDATED", 1, true) or cu:lost() then return t, err end
  local first = tostring(err)
  t, err = cu:time(body, opts)
  if t then return t, nil, first end
  return nil, ("%s (captured twice; the first: %s)"):format(tostring(err), first), first
end

-- Launches one compiled kernel (e from M.build) of plan on buffers bufs at binding bind.
function M.launch(cu, plan, e, bufs, bind)
  local k = plan.kernel
  local g = k.repro
  local args = {}
  for _, v in ipairs(g:inputs()) do args[#args + 1] = M.buffer(cu, bufs, g, v.name, bind) end
  for _, o in ipairs(g:outputs()) do args[#args + 1] = M.buffer(cu, bufs, g, o, bind) end
  -- scratch per block of the grid, zeroed once for each compiled variant that uses it: SPLIT_K's per (m, n) tile and
  -- STREAM_K's per CTA (the kernel leaves its counters and flags at zero; another variant's partial sums where
  -- this one keeps its flags would read as raised flags), STAMP=1's record per CTA (M.scratch reads it back)
  local per = e.launch.scratch_per_tile or 0
  local grid = {}
  for i = 1, 3 do
    local x = g:eval(e.launch.grid[i], bind)
    if not x then error(("%s: cannot evaluate grid %s"):format(k.name, e.launch.grid[i]), 0) end
    grid[i] = math.max(1, x)
  end
  -- a persistent kernel loops over its tiles: one CTA an SM at most (sm_blocks: MINB=2 attention two), whole
  -- clusters, and no more clusters than fit
  -- at once (cuOccupancyMaxActiveClusters: a GPC's SMs pair up, so a clustered grid of one CTA an SM may not fit
  -- whole, and the clusters left over would run as a second wave)
  local cl = e.launch.persistent or 0
  if cl > 0 then
    local cap = cu:info().sm_count * (e.launch.sm_blocks or 1)
    -- EMMY_PERSIST_CTAS=N (a diagnostic, docs/formats.md): at most N CTAs, each looping over more tiles — whether a
    -- k-step's wait is each SM's feed (unchanged with fewer SMs) or L2's as a whole (shorter)
    local most = tonumber(os.getenv("EMMY_PERSIST_CTAS") or "")
    if most and most >= 1 then cap = math.min(cap, math.floor(most)) end
    if cl >= 2 then
      if e.max_clusters == nil then e.max_clusters = e.fn:max_clusters({ cl, 1, 1 }, e.launch.block, e.launch.smem) or -1 end
      if e.max_clusters > 0 then cap = math.min(cap, e.max_clusters * cl) end
    end
    -- (SPLIT_L2=1: a tile's K parts are a group of consecutive CTAs that wait for each other, so whole groups)
    local mult = math.max(cl, e.launch.group or 1)
    grid[1] = math.max(mult, math.floor(math.min(grid[1], cap) / mult) * mult)
  end
  e.launched_ctas = grid[1] * grid[2] -- (the records a STAMP=1 launch wrote: emmy.stamps reads no more)
  if per > 0 then
    local bytes = per * grid[1] * grid[2]
    local key = "\0scratch:" .. k.name
    local b = bufs[key]
    if not b or b:size() < bytes then
      local err
      b, err = cu:alloc(bytes)
      if not b then return nil, ("%s: scratch of %d bytes: %s"):format(k.name, bytes, err) end
      b:fill(0)
      bufs[key] = b
    elseif bufs[key .. ":by"] ~= e then
      b:fill(0)
    end
    bufs[key .. ":by"] = e
    args[#args + 1] = b
  end
  -- TMA tensor maps, encoded at this launch's shapes: input (or output) [..., inner] as rows x inner (leading
  -- dims fold; t.inner: a row of that many elements, the tensor a contiguous view of rows x inner); t.own: the
  -- tensor's own dims, innermost first, a box of t.box[2] rows of the second and one of each outer dim
  for _, t in ipairs(e.launch.tmaps or {}) do
    local v = t.output and g:value(g:outputs()[t.output]) or g:inputs()[t.input]
    local m, err = cu:tmap(M.tmap_spec(t, v.dtype, concrete(g, v.shape, bind), M.buffer(cu, bufs, g, v.name, bind)))
    if not m then return nil, ("%s: %s"):format(k.name, err) end
    args[#args + 1] = { tmap = m }
  end
  for _, s in ipairs(e.launch.syms) do args[#args + 1] = { i64 = bind[s] } end
  return cu:launch(e.fn, { grid = grid, block = e.launch.block, smem = e.launch.smem, args = args, pdl = e.launch.pdl })
end

-- A launch's tensor map t (launch.tmaps) over a tensor of dtype and concrete shape at ptr, as ctx:tmap takes it
-- (dims innermost first, strides in bytes, a box an extent a dim): rows x inner (the leading dims folded; t.inner:
-- rows of that many elements), or with t.own the tensor's own dims, a box of t.box[1] x t.box[2] and one of each
-- outer dim.
function M.tmap_spec(t, dtype, shape, ptr)
  local bytes = BYTES[dtype]
  if not t.own then
    local inner = t.inner or shape[#shape]
    return { ptr = ptr, dtype = dtype, dims = { inner, math.max(1, numel(shape) / inner) }, strides = { inner * bytes },
      box = { t.box[1], t.box[2] } }
  end
  local dims, strides, box, step = {}, {}, {}, bytes
  for i = #shape, 1, -1 do
    local at = #dims + 1
    dims[at], box[at] = math.max(1, shape[i]), at == 1 and t.box[1] or at == 2 and t.box[2] or 1
    step = step * shape[i]
    if i > 1 then strides[#strides + 1] = step end
  end
  return { ptr = ptr, dtype = dtype, dims = dims, strides = strides, box = box }
end

-- The scratch buffer gpu.launch passed to plan's kernel on bufs (SPLIT_K's partials, STAMP=1's records), or nil.
function M.scratch(bufs, plan) return bufs["\0scratch:" .. plan.kernel.name] end

-- One line for an overridden kernel's scratch (launch.scratch_dump): each 32-bit word of the per-CTA record, its
-- mean, min and max over the CTAs ("w0 12.5/3/40 w1 …"; the min and max place timestamps such as %globaltimer's low
-- word: the first CTA in, the last one out), or nil when there is none.
function M.scratch_summary(bufs, plan, e)
  local per = e.launch.scratch_dump and e.launch.scratch_per_tile or 0
  local b = per >= 4 and M.scratch(bufs, plan)
  if not b then return nil end
  local words, n = math.floor(per / 4), math.floor(b:size() / per)
  local t = b:download("i32", { n * words })
  if not t then return nil end
  local v = t:to_table()
  local parts = {}
  for w = 1, words do
    local sum, mn, mx = 0, math.huge, 0
    for cta = 0, n - 1 do
      local x = v[cta * words + w] % 4294967296
      sum, mn, mx = sum + x, math.min(mn, x), math.max(mx, x)
    end
    parts[#parts + 1] = ("w%d %.1f/%d/%d"):format(w - 1, sum / n, mn, mx)
  end
  return ("scratch %s (%d CTAs, mean/min/max a word): %s"):format(plan.kernel.name, n, table.concat(parts, " "))
end

-- Compares the device value name with the reference tensor; returns a comparison table (ref.compare) or
-- nil, msg. terms: the reference tensors name is the sum or difference of (the tolerance at their magnitude).
function M.check(g, bufs, name, want, bind, terms)
  local v = g:value(name)
  local got, err = bufs[name]:download(v.dtype, concrete(g, v.shape, bind))
  if not got then return nil, err end
  return ref.compare(got, want, terms and { terms = terms } or nil)
end

-- The terms of output o of kernel graph kg where o is an add or a subtraction of two tensors whose reference
-- values vals holds (a residual add: the linear's result was rounded at its own magnitude before the residual
-- cancelled it, so two correct summation orders may differ there by one ulp of the result, not of the sum), or nil.
local SUMS = { ["aten.add.Tensor"] = true, ["aten.sub.Tensor"] = true }
local function sum_terms(kg, o, vals)
  for _, nd in ipairs(kg:nodes()) do
    if nd.name == o and SUMS[nd.op] then
      local t = {}
      for _, a in ipairs(nd.args) do
        if (a[1] == "self" or a[1] == "other") and type(a[2]) == "string" and vals[a[2]] then t[#t + 1] = vals[a[2]] end
      end
      return #t > 0 and t or nil
    end
  end
end

-- Compares output o of kernel graph kg on bufs with its reference value in vals, a residual add's tolerance taken at
-- its terms' magnitude (sum_terms): a comparison table, or nil and a message.
function M.check_output(kg, bufs, o, vals, bind)
  return M.check(kg, bufs, o, vals[o], bind, sum_terms(kg, o, vals))
end

-- Checks every output of kernel graph kg on bufs against the reference values vals: true, or nil and one line
-- naming the first output that differs ("wrong: OUT: max rel …, N of M outside tolerance") or failed to download.
function M.check_outputs(kg, bufs, vals, bind)
  for _, o in ipairs(kg:outputs()) do
    local c, err = M.check_output(kg, bufs, o, vals, bind)
    if not c then return nil, ("download failed: %s: %s"):format(o, tostring(err)) end
    if not c.ok then
      return nil, ("wrong: %s: max rel %.3g, %d of %d outside tolerance"):format(o, c.max_rel, c.mismatches, c.numel)
    end
  end
  return true
end

-- ||device value - reference|| / ||reference||.
function M.rel_l2(g, bufs, name, want, bind)
  local v = g:value(name)
  local got = bufs[name]:download(v.dtype, concrete(g, v.shape, bind))
  if not got then return math.huge end
  local a, b = got:to_table(), want:to_table()
  local num, den = 0, 0
  for i = 1, #a do
    num = num + (a[i] - b[i]) ^ 2
    den = den + b[i] * b[i]
  end
  return den > 0 and math.sqrt(num / den) or math.sqrt(num)
end

return M
