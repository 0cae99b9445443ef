-- emmy.serve — an OpenAI-compatible embedding server on a whole model (issue 23): the routes, the request schema
-- and its errors, the metrics, and the loop that polls the HTTP transport (emmy.http_c) and answers. The model runs
-- through an embedder: its kernels on the GPU (`--device gpu`, as `emmy run` compiles them) or the CPU reference
-- (`--device cpu`), the model's graph with last-token pooling and L2 normalization and its weights loaded once;
-- requests are answered one sequence at a time in arrival order.
--   local srv = serve.open(model, opts)   -- opts: device, seed, truncate, max_len, max_payload, max_queue, log
--   srv:route(method, path, body) -> status, json text     (what a request gets; no transport needed)
--   serve.run(srv, host, port, {port_file=, requests=})   -- the loop (requests: stop after that many; tests)
local cjson = require "cjson"
local ffi = require "ffi"
local sys = require "emmy.sys"

local M = {}

-- ---- errors and JSON ----------------------------------------------------------------------------------------

-- An OpenAI-style error body.
local function err_body(status, message, param)
  local kind = status == 404 and "not_found_error" or status >= 500 and "server_error" or "invalid_request_error"
  return status, cjson.encode { error = { message = message, type = kind, param = param or cjson.null, code = status } }
end
M.err_body = err_body

local function ok_body(t) return 200, cjson.encode(t) end

-- ---- metrics (Prometheus text) ------------------------------------------------------------------------------

local BUCKETS = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30 }

local function histogram() return { counts = {}, sum = 0, n = 0 } end
local function observe(h, x)
  for i, b in ipairs(BUCKETS) do if x <= b then h.counts[i] = (h.counts[i] or 0) + 1 end end
  h.sum, h.n = h.sum + x, h.n + 1
end

local function metrics_text(m, dev)
  local out = {}
  local function line(fmt, ...) out[#out + 1] = fmt:format(...) end
  line("# HELP emmy_requests_total Requests answered, by route and outcome.")
  line("# TYPE emmy_requests_total counter")
  local keys = {}
  for k in pairs(m.requests) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local route, outcome = k:match("^(.-)|(.*)$")
    line('emmy_requests_total{route="%s",outcome="%s"} %d', route, outcome, m.requests[k])
  end
  for _, name in ipairs { "queue", "tokenize", "inference" } do
    local h = m[name]
    line("# HELP emmy_%s_seconds Time a request spent in %s.", name, name)
    line("# TYPE emmy_%s_seconds histogram", name)
    for i, b in ipairs(BUCKETS) do line('emmy_%s_seconds_bucket{le="%g"} %d', name, b, h.counts[i] or 0) end
    line('emmy_%s_seconds_bucket{le="+Inf"} %d', name, h.n)
    line("emmy_%s_seconds_sum %.6f", name, h.sum)
    line("emmy_%s_seconds_count %d", name, h.n)
  end
  local function counter(name, help, fmt, v)
    line("# HELP %s %s", name, help)
    line("# TYPE %s counter", name)
    line("%s " .. fmt, name, v)
  end
  counter("emmy_model_runs_total", "Model runs (each a batch of sequences packed end to end).", "%d", m.runs)
  counter("emmy_sequences_total", "Sequences embedded.", "%d", m.sequences)
  line("# HELP emmy_batch_requests_total Steps by the number of requests they packed together.")
  line("# TYPE emmy_batch_requests_total counter")
  local sizes = {}
  for k in pairs(m.batch_requests) do sizes[#sizes + 1] = k end
  table.sort(sizes)
  for _, k in ipairs(sizes) do line('emmy_batch_requests_total{requests="%d"} %d', k, m.batch_requests[k]) end
  counter("emmy_prompt_tokens_total", "Tokens embedded.", "%d", m.tokens)
  if dev then -- the GPU embedder's: how much of the serving time the model itself ran
    counter("emmy_device_seconds_total", "The model runs' time on the GPU (CUDA events before and after each run).",
      "%.6f", dev.device_s)
    counter("emmy_run_tokens_total", "Tokens run, the padding to each run's bucket included.", "%d", dev.run_tokens)
  end
  line("# HELP emmy_host_seconds_total The host's own work around the model runs, by phase (parsing the requests' JSON, packing the ids and positions, uploading them and the mask, reading back and pooling the last rows, writing the answers' JSON).")
  line("# TYPE emmy_host_seconds_total counter")
  line('emmy_host_seconds_total{phase="parse"} %.6f', m.parse_s)
  if dev then
    for _, ph in ipairs { "pack", "upload", "download" } do line('emmy_host_seconds_total{phase="%s"} %.6f', ph, dev[ph .. "_s"]) end
  end
  line('emmy_host_seconds_total{phase="answer"} %.6f', m.answer_s)
  return table.concat(out, "\n") .. "\n"
end

-- ---- the embedders: a batch of sequences packed end to end, one model run ----------------------------------

-- The whole model without pooling, its sequence dim dynamic and its attention mask and positions inputs: a batch is
-- its sequences' ids end to end (no padding), positions restarting at each, the mask block-diagonal and causal.
local DYN = { "seq_len@input_ids:1", "seq_len@attention_mask:2", "seq_len@attention_mask:3", "seq_len@position_ids:1" }

local function packed_graph(model, opts)
  local frontend = require "emmy.frontend"
  local maxpos = frontend.model(model).cfg.max_position_embeddings or 512
  local r = frontend.load(model, { dynamic = DYN, seed = opts.seed, hint = { ("seq_len=%d"):format(math.min(512, maxpos)) } })
  if opts.varlen ~= false then -- (default: varlen where the graph allows it; --mask: false; --varlen: true, must)
    local g, why = M.varlen_graph(r.graph)
    if g then r.graph = g
    elseif opts.varlen then error(why, 0)
    elseif opts.log then opts.log(why .. "; serving with the mask") end
  end
  return r, r.graph, maxpos
end

-- --dump-graph: the graph `emmy serve` compiles (packed, varlen where it allows), written to path as a .torch.json for
-- `emmy tune`, whose tune.json `--picks` then applies to the served kernels: the lines that say how. true | nil, msg.
function M.dump_graph(model, path, opts)
  local ok, r, g = pcall(packed_graph, model, opts)
  if not ok then return nil, tostring(r) end
  local okw, werr = require("emmy.graphjson").write(g, path)
  if not okw then return nil, werr end
  local dir = path:gsub("%.torch%.json$", ""):gsub("%.json$", "") .. ".tune"
  return { ("the served graph of %s: %s"):format(model, path),
    ("tune it as served (q, k and v apart): EMMY_MERGE_SIBLINGS=0 emmy tune %s --dump-dir %s"):format(path, dir),
    ("then serve its picks: emmy serve %s --picks %s/tune.json"):format(model, dir) }
end

-- --varlen: the packed graph with each attention's block-diagonal causal mask (the input attention_mask) replaced by
-- the sequences' positions (SDPA's seq_pos = position_ids, is_causal): the same attention — positions restart at
-- each packed sequence — with no T x T mask to build, upload or read (docs/formats.md). nil and why where something
-- other than an attention's attn_mask reads the mask.
local SDPA = "aten.scaled_dot_product_attention.default"
function M.varlen_graph(g)
  for _, n in ipairs(g:nodes()) do
    for _, kv in ipairs(n.args) do
      if kv[2] == "attention_mask" and not (n.op == SDPA and kv[1] == "attn_mask") then
        return nil, ("--varlen: %s (%s) reads attention_mask"):format(n.name, n.op)
      end
    end
  end
  return require("emmy.rewrite").rebuild(g, function(n, b, a)
    if n.op == SDPA and a.attn_mask == "attention_mask" then
      a.attn_mask, a.is_causal, a.seq_pos = nil, true, "position_ids"
      return b:op(n.op, a, n.name)
    end
  end, { drop_inputs = { attention_mask = true } })
end

-- The packed inputs of seqs (arrays of token ids): input_ids, position_ids, attention_mask (the block-diagonal causal
-- mask as a tensor; with lens_only, left out: the sequences' lengths, the fourth result, are what buf:upload_mask
-- builds it from on the GPU side), and each sequence's last row. pad > 0: a sequence of that many tokens (id 0) after
-- them, in its own block of the mask, whose rows no pooling reads (a CUDA graph's bucket filled up to its length).
local function pack(seqs, pad, lens_only)
  local ref = require "emmy.ref"
  local T, lens, last = 0, {}, {}
  for i, s in ipairs(seqs) do lens[i] = #s; T = T + #s; last[i] = T end
  if pad and pad > 0 then lens[#lens + 1] = pad; T = T + pad end
  local ids, pos = ref.pack_ids(seqs, pad or 0) -- (in C: two :set calls a token cost ~60 us a 512-token request)
  return { input_ids = ids, position_ids = pos, attention_mask = not lens_only and ref.packed_mask(lens) or nil }, T, last, lens
end

-- pack(seqs, pad, true) padded to the CUDA graph's bucket: the tokens rounded up to a multiple of step (0: none), at
-- most `most`.
local function pack_bucket(seqs, step, most)
  local n = 0
  for _, s in ipairs(seqs) do n = n + #s end
  local padded = step > 0 and math.min(most, math.ceil(n / step) * step) or n
  return pack(seqs, math.max(0, padded - n), true)
end

-- Row `row` (1-based) of the hidden states [1, T, H] (a tensor), L2-normalized, as a Lua array (the model's
-- last-token pooling).
local function pooled(out, row, H)
  local v
  if row == 1 and out:numel() == H then
    v = out:to_table()    -- a row read back alone: one call (1/5 of H gets' time)
  else
    v = {}
    for i = 1, H do v[i] = out:get((row - 1) * H + i) end
  end
  local s = 0
  for i = 1, H do s = s + v[i] * v[i] end
  s = math.sqrt(s)
  if s > 0 then for i = 1, H do v[i] = v[i] / s end end
  return v
end

-- The model's weights (and the inputs that do not depend on the sequence), made once.
local function weights_once(g, opts)
  local inputs = require "emmy.inputs"
  local base, w = inputs.for_model(g, { seq_len = 1 }, opts.seed or 0)
  if not base then return nil, w end
  local fixed = {}
  for _, v in ipairs(g:inputs()) do
    local sym = false
    for _, d in ipairs(v.shape) do if type(d) ~= "number" then sym = true end end
    if not sym then fixed[v.name] = base[v.name] end
  end
  return fixed
end

local function cpu_embedder(model, opts)
  local ref = require "emmy.ref"
  local r, g, maxpos = packed_graph(model, opts)
  local t0 = sys.clock()
  local fixed, e = weights_once(g, opts)
  if not fixed then return nil, e end
  if opts.log then opts.log(("weights ready in %.1f s (%s)"):format(sys.clock() - t0, g:meta("weights") or "?")) end
  local out_name, H = g:outputs()[1], r.model.cfg.hidden_size
  return {
    hidden = H, vocab = r.model.cfg.vocab_size, max_len = maxpos, max_tokens = maxpos, model_dir = r.model.dir,
    -- the L2-normalized last-token embeddings of seqs (arrays of token ids) in one run, as Lua arrays
    embed_batch = function(seqs)
      local ins, T, last = pack(seqs, nil, not g:value("attention_mask"))
      for k, t in pairs(fixed) do ins[k] = t end
      local outs, e2 = ref.run(g, ins, { bind = { seq_len = T } })
      if not outs then return nil, e2 end
      local res = {}
      for i = 1, #seqs do res[i] = pooled(outs[out_name], last[i], H) end
      return res
    end,
  }
end

-- The packed graph compiled as `emmy run` compiles it (the rules' choices; with opts.picks a tune's picks for the
-- kernels that are tuned ones),
-- its weights uploaded once and every other buffer allocated once at the largest batch; a batch is its packed inputs
-- uploaded and the kernels launched in order at seq_len = its tokens.
-- --inflight N >= 2: a batch's halves for N runs on the GPU at once. Each run has a slot: page-locked host memory for
-- its inputs (ids, positions, mask) and its pooled rows, and three events. launch stages the packed inputs in the
-- slot, enqueues their copies, the run and the copies of each sequence's last row behind whatever is on the stream
-- (every device buffer is read and written in stream order, so run i + 1's inputs land after run i is done with
-- them), and returns at once; collect waits for the slot's last event and pools the rows from host memory. So the
-- GPU goes from one run to the next without waiting for the host. g: {most, H, out, dt, step, run, stats}.
local function staged_batches(cu, bufs, n, g)
  local rowb = g.H * require("emmy.gpu").BYTES[g.dt]
  local slots = {}
  for i = 1, n do
    -- (ids and positions, 8 bytes a token each, and the mask's most² bytes where the graph reads one)
    slots[i] = { input = assert(cu:host(16 * g.most + (bufs.attention_mask and g.most * g.most or 0))), rows = assert(cu:host(g.most * rowb)),
      ev0 = assert(cu:event()), ev1 = assert(cu:event()), ev2 = assert(cu:event()) }
  end
  local st = {}
  function st.launch(seqs)
    local slot
    for _, s in ipairs(slots) do if not s.busy then slot = s break end end
    if not slot then return nil, ("every one of the %d staging slots holds a run not yet collected"):format(n) end
    local tp = sys.clock()
    local ins, T, last, lens = pack_bucket(seqs, g.step, g.most)
    local tu, off = sys.clock(), 0
    for _, name in ipairs { "input_ids", "position_ids" } do
      local nb, e = slot.input:put(off, ins[name])
      if not nb then return nil, e end
      local ok, e2 = bufs[name]:write_async(slot.input, off, nb)
      if not ok then return nil, e2 end
      off = off + nb
    end
    if bufs.attention_mask then
      local nm, em = slot.input:mask(off, lens)
      if not nm then return nil, em end
      local okm, em2 = bufs.attention_mask:write_async(slot.input, off, nm)
      if not okm then return nil, em2 end
    end
    g.stats.pack_s, g.stats.upload_s = g.stats.pack_s + (tu - tp), g.stats.upload_s + (sys.clock() - tu)
    local ok0, e0 = slot.ev0:record()
    if not ok0 then return nil, e0 end
    local ok3, e3 = g.run({ seq_len = T })
    if not ok3 then return nil, e3 end
    local ok1, e1 = slot.ev1:record()
    if not ok1 then return nil, e1 end
    for i, r in ipairs(last) do
      local ok5, e5 = bufs[g.out]:read_async(slot.rows, (i - 1) * rowb, rowb, (r - 1) * rowb)
      if not ok5 then return nil, e5 end
    end
    local ok2, e2 = slot.ev2:record()
    if not ok2 then return nil, e2 end
    slot.busy = true
    return { n = #seqs, T = T, slot = slot }
  end
  function st.collect(h)
    local slot = h.slot
    slot.busy = false
    local ok, e = slot.ev2:sync()
    if not ok then return nil, e end
    local ms = slot.ev1:ms_since(slot.ev0)
    g.stats.device_s, g.stats.run_tokens = g.stats.device_s + (ms or 0) / 1000, g.stats.run_tokens + h.T
    local res, td = {}, sys.clock()
    for i = 1, h.n do
      local o, e5 = slot.rows:get(g.dt, { 1, 1, g.H }, (i - 1) * rowb)
      if not o then return nil, e5 end
      res[i] = pooled(o, 1, g.H)
    end
    g.stats.download_s = g.stats.download_s + (sys.clock() - td)
    return res
  end
  return st
end

local function gpu_embedder(model, opts)
  local compiler = require "emmy.compiler"
  local kernels = require "emmy.kernels"
  local gpu = require "emmy.gpu"
  local cu, err = require("emmy.cuda").open()
  if not cu then return nil, "--device gpu needs a GPU: " .. tostring(err) end
  local r, g, maxpos = packed_graph(model, opts)
  -- (the mask is most² bytes and its attention most² work, every buffer sized for most: 2,048 tokens served mixed
  -- lengths at concurrency 64 2.4x as fast as 8,192 on the H200, docs/performance.md)
  local most = math.min(opts.max_batch_tokens or 2048, maxpos)
  local t0 = sys.clock()
  -- (q, k and v apart unless EMMY_MERGE_SIBLINGS pins it: the kernel former merges them at the 512-token hint, where
  -- one wave of tiles makes the merged kernel win, and a packed batch of up to `most` tokens runs it at several waves,
  -- where it lost — 74.0 µs against 52.3 apart at 4096 tokens, H100, docs/performance.md "Forty-second session" — so
  -- serving keeps the formation issue 23's table measured)
  local kn, pinned = compiler.structural_pins()
  if not pinned.MERGE_SIBLINGS then kn.MERGE_SIBLINGS = 0 end
  local ok, plans = pcall(function() return kernels.plan(compiler.run(g, { knobs = kn }), { device = gpu.device(cu:info()) }) end)
  if not ok then return nil, tostring(plans) end
  if opts.picks then
    local picks, perr = kernels.read_picks(opts.picks)
    if not picks then return nil, perr end
    if opts.log then opts.log(kernels.picks_line(kernels.apply_picks(plans, picks), opts.picks)) end
  end
  local order, list = kernels.distinct(plans), {}
  for _, p in ipairs(order) do list[#list + 1] = { plan = p, knobs = p.choice.knobs } end
  local built, by_name = gpu.build(cu, list), {}
  for i, p in ipairs(order) do
    if built[i].error then return nil, ("%s: %s"):format(p.kernel.name, built[i].error) end
    by_name[p.kernel.name] = built[i]
  end
  if opts.log then opts.log(("%d kernels (%d distinct) built in %.1f s"):format(#plans, #order, sys.clock() - t0)) end
  local fixed, e = weights_once(g, opts)
  if not fixed then return nil, e end
  local bufs, longest = {}, { seq_len = most }
  for name, t in pairs(fixed) do bufs[name] = assert(cu:upload(t)) end
  for _, p in ipairs(plans) do -- every activation, output and scratch buffer at the largest batch, once
    for _, v in ipairs(p.kernel.repro:inputs()) do gpu.buffer(cu, bufs, p.kernel.repro, v.name, longest) end
    for _, o in ipairs(p.kernel.repro:outputs()) do gpu.buffer(cu, bufs, p.kernel.repro, o, longest) end
  end
  for _, name in ipairs { "input_ids", "position_ids", "attention_mask" } do
    if g:value(name) then gpu.buffer(cu, bufs, g, name, longest) end -- (--varlen: no attention_mask)
  end
  if opts.log then opts.log(("weights on the GPU in %.1f s (%s)"):format(sys.clock() - t0, g:meta("weights") or "?")) end
  local out_name, H = g:outputs()[1], r.model.cfg.hidden_size
  local function launch_all(bind)
    for _, p in ipairs(plans) do
      local ok3, e3 = gpu.launch(cu, p, by_name[p.kernel.name], bufs, bind)
      if not ok3 then return nil, e3 end
    end
    return true
  end
  -- CUDA graphs (--graph-step S > 0): a batch of T tokens runs at the bucket T rounded up to a multiple of S (a
  -- padding sequence fills it); a bucket's first batch launches the kernels one by one (its scratch buffers made,
  -- the launches checked), and captures them into a graph that later batches of that bucket replay. The buffers
  -- were allocated at the longest batch, so the pointers a graph holds stay valid.
  local step, graphs, stats = opts.graph_step or 128, {}, { device_s = 0, run_tokens = 0, pack_s = 0, upload_s = 0, download_s = 0 }
  local function run(bind)
    local gr = graphs[bind.seq_len]
    if gr then return gr:launch() end
    local ok, e = launch_all(bind)
    if not ok or step <= 0 or gr == false then return ok, e end
    local ok2, e2 = cu:sync()
    if not ok2 then return nil, e2 end
    local captured, ce = cu:capture(function() return launch_all(bind) end)
    graphs[bind.seq_len] = captured or false
    if not captured and opts.log then opts.log(("no CUDA graph for %d tokens (launching each batch): %s"):format(bind.seq_len, ce)) end
    return true
  end
  local ev0, ev1 = assert(cu:event()), assert(cu:event())
  local dt_out = g:value(out_name).dtype
  local emb = {
    hidden = H, vocab = r.model.cfg.vocab_size, max_len = maxpos, max_tokens = most, model_dir = r.model.dir,
    seq_cap = most, -- (every buffer holds `most` tokens: a longer sequence would run past them)
    graphs = graphs, stats = stats,
    -- a batch in two halves, so that the server's host work overlaps the model's run: launch (the inputs packed and
    -- uploaded, the run enqueued between two events) returns at once; collect waits for it and reads back and pools
    -- each sequence's last row (the whole [1, T, H] read back and converted took ~12 ms at 512 tokens here). The
    -- model's time is the events' (the GPU's own), not the host's wait.
    launch_batch = function(seqs)
      local tp = sys.clock()
      local ins, T, last, lens = pack_bucket(seqs, step, most)
      local tu = sys.clock()
      for name, t in pairs(ins) do
        local ok2, e2 = bufs[name]:upload(t)
        if not ok2 then return nil, e2 end
      end
      if bufs.attention_mask then
        local okm, em = bufs.attention_mask:upload_mask(lens)
        if not okm then return nil, em end
      end
      stats.pack_s, stats.upload_s = stats.pack_s + (tu - tp), stats.upload_s + (sys.clock() - tu)
      local ok0, e0 = ev0:record()
      if not ok0 then return nil, e0 end
      local ok3, e3 = run({ seq_len = T })
      if not ok3 then return nil, e3 end
      local ok1, e1 = ev1:record()
      if not ok1 then return nil, e1 end
      return { n = #seqs, T = T, last = last }
    end,
    collect_batch = function(h)
      local ok4, e4 = cu:sync()
      if not ok4 then return nil, e4 end
      local ms = ev1:ms_since(ev0)
      stats.device_s, stats.run_tokens = stats.device_s + (ms or 0) / 1000, stats.run_tokens + h.T
      local res, td = {}, sys.clock()
      for i = 1, h.n do
        local o, e5 = bufs[out_name]:download(dt_out, { 1, 1, H }, (h.last[i] - 1) * H * gpu.BYTES[dt_out])
        if not o then return nil, e5 end
        res[i] = pooled(o, 1, H)
      end
      stats.download_s = stats.download_s + (sys.clock() - td)
      return res
    end,
  }
  if (opts.inflight or 1) >= 2 then
    local st = staged_batches(cu, bufs, opts.inflight, { most = most, H = H, out = out_name, dt = dt_out, step = step, run = run, stats = stats })
    emb.launch_batch, emb.collect_batch, emb.inflight = st.launch, st.collect, opts.inflight
  end
  emb.embed_batch = function(seqs)
    local h, e = emb.launch_batch(seqs)
    if not h then return nil, e end
    return emb.collect_batch(h)
  end
  return emb
end

-- The embeddings of seqs in runs of at most max_tokens tokens each (greedy, in order), with the metrics.
local function embed_all(srv, seqs)
  local out, run, tokens = {}, {}, 0
  local function flush()
    if #run == 0 then return true end
    local t0 = sys.clock()
    local vs, e = srv.emb.embed_batch(run)
    if not vs then return nil, e end
    observe(srv.metrics.inference, sys.clock() - t0)
    srv.metrics.runs, srv.metrics.sequences = srv.metrics.runs + 1, srv.metrics.sequences + #run
    for _, v in ipairs(vs) do out[#out + 1] = v end
    run, tokens = {}, 0
    return true
  end
  for _, s in ipairs(seqs) do
    if tokens + #s > srv.max_tokens then
      local ok, e = flush()
      if not ok then return nil, e end
    end
    run[#run + 1] = s
    tokens = tokens + #s
  end
  local ok, e = flush()
  if not ok then return nil, e end
  return out
end

-- ---- request schema -----------------------------------------------------------------------------------------

local function is_int(x) return type(x) == "number" and x == math.floor(x) end

-- The request's sequences as token-id arrays, or nil, status, message, param.
local function sequences(srv, input)
  local seqs, texts = {}, {}
  if type(input) == "string" then
    texts[1] = input
  elseif type(input) == "table" and #input > 0 then
    if type(input[1]) == "string" then
      for i, s in ipairs(input) do
        if type(s) ~= "string" then return nil, 400, ("input[%d] is not a string (an array of strings)"):format(i - 1), "input" end
        texts[#texts + 1] = s
      end
    elseif is_int(input[1]) then
      seqs[1] = input
    elseif type(input[1]) == "table" then
      for i, s in ipairs(input) do
        if type(s) ~= "table" or #s == 0 then return nil, 400, ("input[%d] is not a non-empty array of token ids"):format(i - 1), "input" end
        seqs[#seqs + 1] = s
      end
    else
      return nil, 400, "input: a string, an array of strings, an array of token ids or an array of arrays of token ids", "input"
    end
  else
    return nil, 400, "input is missing or empty", "input"
  end
  if #texts > 0 then
    if not srv.tok then
      return nil, 400, ("the model folder %s has no tokenizer.json: this server takes token ids only"):format(srv.emb.model_dir or "?"), "input"
    end
    local t0 = sys.clock()
    for i, s in ipairs(texts) do
      if s == "" then return nil, 400, ("input[%d] is an empty string"):format(i - 1), "input" end
      local ids, e = srv.tok:encode(s)
      if not ids then return nil, 400, ("input[%d]: %s"):format(i - 1, e), "input" end
      seqs[i] = ids
    end
    observe(srv.metrics.tokenize, sys.clock() - t0)
  end
  for i, s in ipairs(seqs) do
    for j, id in ipairs(s) do
      if not is_int(id) or id < 0 or id >= srv.emb.vocab then
        return nil, 400, ("input[%d][%d] = %s is not a token id of this model (0 .. %d)"):format(i - 1, j - 1, tostring(id), srv.emb.vocab - 1), "input"
      end
    end
    if #s > srv.max_len then
      if not srv.truncate then
        local whose = srv.max_len == srv.emb.seq_cap and srv.max_len < (srv.emb.max_len or math.huge)
          and "this GPU server's --max-batch-tokens" or "the model's"
        return nil, 400, ("input[%d] is %d tokens, over %s %d (the server truncates with --truncate)"):format(i - 1, #s, whose, srv.max_len), "input"
      end
      local cut = {}
      for j = 1, srv.max_len do cut[j] = s[j] end
      seqs[i] = cut
    end
  end
  return seqs
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
-- The vector as little-endian float32 bytes in base64 (OpenAI's encoding_format "base64").
local function base64_f32(v)
  local n = #v
  local buf = ffi.new("float[?]", n)
  for i = 1, n do buf[i - 1] = v[i] end
  local s = ffi.string(buf, 4 * n)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local x = a * 65536 + (b or 0) * 256 + (c or 0)
    local k = { math.floor(x / 262144) % 64, math.floor(x / 4096) % 64, math.floor(x / 64) % 64, x % 64 }
    out[#out + 1] = B64:sub(k[1] + 1, k[1] + 1) .. B64:sub(k[2] + 1, k[2] + 1) ..
      (b and B64:sub(k[3] + 1, k[3] + 1) or "=") .. (c and B64:sub(k[4] + 1, k[4] + 1) or "=")
  end
  return table.concat(out)
end
M.base64_f32 = base64_f32

-- Truncated to d dimensions and re-normalized (Qwen3-Embedding's Matryoshka dimensions).
local function truncate_dims(v, d)
  if not d or d >= #v then return v end
  local out, s = {}, 0
  for i = 1, d do out[i] = v[i]; s = s + v[i] * v[i] end
  s = math.sqrt(s)
  if s > 0 then for i = 1, d do out[i] = out[i] / s end end
  return out
end

-- An embeddings request parsed and checked: {seqs, fmt, dims}, or nil, status, body (its error answer).
local function parse_request(srv, body)
  if #body > srv.max_payload then
    return nil, err_body(413, ("the body is %d bytes, over the limit of %d"):format(#body, srv.max_payload))
  end
  local ok, req = pcall(cjson.decode, body)
  if not ok or type(req) ~= "table" then return nil, err_body(400, "the body is not a JSON object: " .. tostring(ok and "" or req):sub(1, 120)) end
  if req.model ~= nil and req.model ~= srv.name then
    return nil, err_body(404, ("model '%s' is not served here (this server serves '%s')"):format(tostring(req.model), srv.name), "model")
  end
  local fmt = req.encoding_format or "float"
  if fmt ~= "float" and fmt ~= "base64" then return nil, err_body(400, "encoding_format: 'float' or 'base64'", "encoding_format") end
  local dims = req.dimensions
  if dims ~= nil and dims ~= cjson.null and (not is_int(dims) or dims < 1 or dims > srv.emb.hidden) then
    return nil, err_body(400, ("dimensions: an integer from 1 to %d"):format(srv.emb.hidden), "dimensions")
  end
  if dims == cjson.null then dims = nil end
  local seqs, st, msg, param = sequences(srv, req.input)
  if not seqs then return nil, err_body(st, msg, param) end
  return { seqs = seqs, fmt = fmt, dims = dims }
end

-- parse_request, its time counted (emmy_host_seconds_total{phase="parse"})
local function parse_embeddings(srv, body)
  local t0 = sys.clock()
  local job, st, out = parse_request(srv, body)
  srv.metrics.parse_s = srv.metrics.parse_s + (sys.clock() - t0)
  return job, st, out
end

-- The answer to a parsed request from its sequences' embeddings vs. Written as text, not through cjson.encode: the
-- numbers by sys.json_numbers ("%.9g": every float32 reads back to itself) in ~1/6 of cjson's time — a 1,024-number
-- embedding ~40 us against ~250 here, which a single client's every request waits for.
local function respond(srv, job, vs)
  local t0, items, tokens = sys.clock(), {}, 0
  for i, ids in ipairs(job.seqs) do
    local v = vs[i]
    for _, x in ipairs(v) do
      if x ~= x or x == math.huge or x == -math.huge then
        return err_body(500, ("the model's embedding of input[%d] has non-finite values"):format(i - 1))
      end
    end
    v = truncate_dims(v, job.dims)
    local emb = job.fmt == "base64" and cjson.encode(base64_f32(v)) or assert(sys.json_numbers(v))
    items[i] = ('{"object":"embedding","index":%d,"embedding":%s}'):format(i - 1, emb)
    tokens = tokens + #ids
  end
  srv.metrics.tokens = srv.metrics.tokens + tokens
  local body = ('{"object":"list","data":[%s],"model":%s,"usage":{"prompt_tokens":%d,"total_tokens":%d}}'):format(
    table.concat(items, ","), cjson.encode(srv.name), tokens, tokens)
  srv.metrics.answer_s = srv.metrics.answer_s + (sys.clock() - t0) -- (emmy_host_seconds_total{phase="answer"})
  return 200, body
end

-- Several parsed requests' sequences packed into as few model runs as the token budget allows; each job's answer
-- (status, body) in order. A failed run fails the jobs it held only.
local function job_seqs(jobs)
  local all = {}
  for _, job in ipairs(jobs) do
    for _, s in ipairs(job.seqs) do all[#all + 1] = s end
  end
  return all
end

-- (vs, e: the sequences' embeddings already made, by a deferred step's one run)
local function embed_jobs(srv, jobs, vs, e)
  if not vs and not e then vs, e = embed_all(srv, job_seqs(jobs)) end
  local answers, k = {}, 0
  for j, job in ipairs(jobs) do
    if not vs then answers[j] = { err_body(500, "the model failed: " .. tostring(e)) }
    else
      local mine = {}
      for i = 1, #job.seqs do mine[i] = vs[k + i] end
      answers[j] = { respond(srv, job, mine) }
    end
    k = k + #job.seqs
  end
  srv.metrics.batch_requests[#jobs] = (srv.metrics.batch_requests[#jobs] or 0) + 1
  return answers
end

local function embeddings(srv, body)
  local job, st, out = parse_embeddings(srv, body)
  if not job then return st, out end
  local a = embed_jobs(srv, { job })[1]
  return a[1], a[2]
end

local function tokenize(srv, body)
  local ok, req = pcall(cjson.decode, body)
  if not ok or type(req) ~= "table" then return err_body(400, "the body is not a JSON object") end
  local text = req.input or req.prompt
  if type(text) ~= "string" then return err_body(400, "input (or prompt): a string", "input") end
  if not srv.tok then return err_body(400, ("the model folder %s has no tokenizer.json"):format(srv.emb.model_dir or "?"), "input") end
  local ids, e = srv.tok:encode(text)
  if not ids then return err_body(400, e, "input") end
  return ok_body { tokens = ids, count = #ids, max_model_len = srv.max_len }
end

-- ---- the server ---------------------------------------------------------------------------------------------

local Server = {}
Server.__index = Server
local ROUTES = { ["/health"] = true, ["/v1/models"] = true, ["/v1/embeddings"] = true, ["/tokenize"] = true, ["/metrics"] = true }

-- The answer to one request: status, body (JSON, or Prometheus text for /metrics), content type.
function Server:route(method, path, body)
  local p = path:gsub("%?.*$", "")
  local st, out, ctype = nil, nil, "application/json"
  if p == "/health" and (method == "GET" or method == "HEAD") then
    st, out = ok_body { status = "ok" }
  elseif p == "/v1/models" and method == "GET" then
    st, out = ok_body { object = "list", data = { { id = self.name, object = "model", owned_by = "emmy", created = self.started,
      max_model_len = self.max_len, tokenizer = self.tok ~= nil, dimensions = self.emb.hidden,
      input = self.tok and "text or token ids" or "token ids only (the model folder has no tokenizer.json)" } } }
  elseif p == "/v1/embeddings" and method == "POST" then
    st, out = embeddings(self, body)
  elseif p == "/tokenize" and method == "POST" then
    st, out = tokenize(self, body)
  elseif p == "/metrics" and method == "GET" then
    st, out, ctype = 200, metrics_text(self.metrics, self.emb.stats), "text/plain; version=0.0.4"
  elseif ROUTES[p] then
    st, out = err_body(405, ("%s does not take %s"):format(p, method))
  else
    st, out = err_body(404, ("no route %s %s"):format(method, p))
  end
  local known = ROUTES[p] and p or "other"
  local key = known .. "|" .. (st == 200 and "ok" or tostring(st))
  self.metrics.requests[key] = (self.metrics.requests[key] or 0) + 1
  return st, out, ctype
end

-- The server for model (ORG/NAME or a folder), or nil, msg.
function M.open(model, opts)
  opts = opts or {}
  local device = opts.device or "gpu"
  if device ~= "cpu" and device ~= "gpu" then return nil, ("--device %s: cpu or gpu"):format(device) end
  local emb, e = (device == "cpu" and cpu_embedder or gpu_embedder)(model, opts)
  if not emb then return nil, e end
  local srv = setmetatable({ name = model, emb = emb, truncate = opts.truncate, started = os.time(),
    max_len = math.min(opts.max_len or emb.max_len or 32768, emb.seq_cap or math.huge), max_payload = opts.max_payload or 4 * 1024 * 1024,
    max_queue = opts.max_queue or 64, log = opts.log,
    metrics = { requests = {}, queue = histogram(), tokenize = histogram(), inference = histogram(), sequences = 0, tokens = 0,
      runs = 0, batch_requests = {}, parse_s = 0, answer_s = 0 } }, Server)
  srv.max_tokens = math.min(opts.max_batch_tokens or emb.max_tokens, emb.max_tokens)
  local tj = emb.model_dir and emb.model_dir .. "/tokenizer.json"
  if tj and sys.stat(tj) == "file" then
    local tok, te = require("emmy.tokenizer").load(tj)
    if not tok then return nil, te end
    srv.tok = tok
  end
  return srv
end

-- One step of the server over the waiting requests q ({method, path, body, t}, in arrival order): the embeddings
-- requests parsed (or taken as parsed: r.parsed) and their sequences packed together while their tokens fit the
-- batch budget (--max-batch-tokens; a larger request runs alone, in several runs), the others answered at once.
-- Returns the answers of the first requests of q it took ({id, status, ctype, body, waited}, in q's order); the rest
-- wait for the next step. With defer, where the embedder runs a batch in two halves and the step's sequences make
-- one run, the run is launched and a second result, {collect, complete}, finishes it: collect() waits for the run and
-- reads the embeddings back, complete(vs, e) writes the embeddings answers' bodies; the caller's host work before
-- collect (and, after launching the next run, complete) overlaps the model.
function Server:step(q, defer)
  local out, jobs, held, tokens = {}, {}, {}, 0
  local now = sys.clock()
  for _, r in ipairs(q) do
    local p = r.path:gsub("%?.*$", "")
    local a = { id = r.id, ctype = "application/json", waited = now - (r.t or now) }
    if p == "/v1/embeddings" and r.method == "POST" then
      local job, st, body
      if r.parsed then job, st, body = r.parsed[1], r.parsed[2], r.parsed[3] else job, st, body = parse_embeddings(self, r.body) end
      if job then
        local n = 0
        for _, sq in ipairs(job.seqs) do n = n + #sq end
        if #jobs > 0 and tokens + n > self.max_tokens then break end
        jobs[#jobs + 1], held[#held + 1], tokens = job, a, tokens + n
      else
        a.status, a.body = st, body
      end
    else
      local ok, st, body, ctype = pcall(self.route, self, r.method, r.path, r.body)
      if not ok then st, body, ctype = err_body(500, "internal error: " .. tostring(st):sub(1, 200)) end
      a.status, a.body, a.ctype = st, body, ctype or "application/json"
    end
    out[#out + 1] = a
  end
  local function count()
    for i, a in ipairs(out) do
      local r = q[i]
      if r.method == "POST" and r.path:gsub("%?.*$", "") == "/v1/embeddings" then
        local key = "/v1/embeddings|" .. (a.status == 200 and "ok" or tostring(a.status))
        self.metrics.requests[key] = (self.metrics.requests[key] or 0) + 1
      end
    end
  end
  local function fill(ok, answers)
    for i, a in ipairs(held) do
      if ok then a.status, a.body = answers[i][1], answers[i][2]
      else a.status, a.body = err_body(500, "internal error: " .. tostring(answers):sub(1, 200)) end
    end
    count()
  end
  if #jobs == 0 then count(); return out end
  if defer and self.emb.launch_batch and tokens <= self.max_tokens then
    local seqs = job_seqs(jobs)
    local t0 = sys.clock()
    local ok, h, e = pcall(self.emb.launch_batch, seqs)
    return out, {
      collect = function() -- waits for the run: the embeddings, or nil, msg
        if not (ok and h) then return nil, ok and e or h end
        local ok2, vs, e2 = pcall(self.emb.collect_batch, h)
        if not ok2 then return nil, vs end
        if vs then
          observe(self.metrics.inference, sys.clock() - t0)
          self.metrics.runs, self.metrics.sequences = self.metrics.runs + 1, self.metrics.sequences + #seqs
        end
        return vs, e2
      end,
      complete = function(vs, e2) fill(pcall(embed_jobs, self, jobs, vs, e2 or "the run failed")) end, -- the answers' bodies
    }
  end
  fill(pcall(embed_jobs, self, jobs))
  return out
end

-- Serves until stopped (opts.requests: after that many answers). Requests past max_queue waiting are answered 503.
-- Where the embedder runs a batch in two halves (the GPU), the steps overlap the model: while run i is on the GPU the
-- loop takes new requests and parses them; once run i is read back, run i+1 is launched before run i's answers are
-- written (their JSON) and sent.
function M.run(srv, host, port, opts)
  opts = opts or {}
  local http = require "emmy.http_c"
  local h, e = http.listen(host, port, 4 * srv.max_payload)
  if not h then return nil, e end
  if opts.port_file then
    local f = assert(io.open(opts.port_file, "w"))
    f:write(tostring(h:port()))
    f:close()
  end
  if srv.log then srv.log(("serving %s on http://%s:%d (POST /v1/embeddings, /tokenize; GET /v1/models, /health, /metrics)"):format(srv.name, host, h:port())) end
  -- flying: {out, pending} of the steps whose runs are on the GPU, oldest first; at most depth of them (the embedder's
  -- --inflight, else 1)
  local answered, queue, flying, depth = 0, {}, {}, srv.emb.inflight or 1
  local function reply(out)
    for _, a in ipairs(out) do
      h:reply(a.id, a.status, a.ctype, a.body)
      observe(srv.metrics.queue, a.waited)
      answered = answered + 1
    end
  end
  local function finish(f, vs, ve)
    f.pending.complete(vs, ve)
    reply(f.out)
  end
  while not opts.requests or answered < opts.requests do
    for _, r in ipairs(h:poll((#queue > 0 or #flying > 0) and 0 or 200)) do
      if #queue >= srv.max_queue then
        local st, out = err_body(503, ("the queue is full (%d requests waiting)"):format(#queue))
        h:reply(r.id, st, "application/json", out)
        srv.metrics.requests["queue|503"] = (srv.metrics.requests["queue|503"] or 0) + 1
        answered = answered + 1
      else
        r.t = sys.clock()
        queue[#queue + 1] = r
      end
    end
    if #flying > 0 then -- (a run is on the GPU: the waiting requests parsed meanwhile)
      for _, r in ipairs(queue) do
        if not r.parsed and r.method == "POST" and r.path:gsub("%?.*$", "") == "/v1/embeddings" then
          r.parsed = { parse_embeddings(srv, r.body) }
        end
      end
    end
    -- depth 1: the run on the GPU read back, then the next launched before its answers are written; depth > 1: the
    -- next launched behind the runs on the GPU while there is room, else the oldest read back and answered
    local done, vs, ve
    if #flying >= depth or (#flying > 0 and (depth == 1 or #queue == 0)) then
      done = table.remove(flying, 1)
      vs, ve = done.pending.collect()
    end
    if #flying < depth and #queue > 0 then
      local step, pending = srv:step(queue, true)
      local rest = {}
      for i = #step + 1, #queue do rest[#rest + 1] = queue[i] end
      queue = rest
      if pending then flying[#flying + 1] = { out = step, pending = pending } else reply(step) end
    end
    if done then finish(done, vs, ve) end
  end
  for _, f in ipairs(flying) do finish(f, f.pending.collect()) end
  h:poll(50) -- (the last answers written out)
  return true
end

-- ---- the load client (`emmy serve MODEL --bench`) ----------------------------------------------------------

-- num random prompts of token ids the way `vllm bench serve --dataset-name random` draws them: each length uniform
-- in [L·(1 - R), L·(1 + R)] (at least 1), each id uniform over the vocabulary; a fixed seed gives the same prompts.
function M.prompts(num, len, ratio, vocab, seed)
  local state = (seed or 0) * 2654435761 % 4294967296 + 1
  local function rnd(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return state % n
  end
  local lo, hi = math.max(1, math.floor(len * (1 - ratio))), math.max(1, math.ceil(len * (1 + ratio)))
  local out = {}
  for i = 1, num do
    local n = lo + rnd(hi - lo + 1)
    local ids = {}
    for j = 1, n do ids[j] = rnd(vocab) end
    out[i] = ids
  end
  return out
end

local function percentile(sorted, p)
  if #sorted == 0 then return 0 end
  return sorted[math.max(1, math.min(#sorted, math.ceil(p * #sorted)))]
end

-- Drives the server at host:port with the prompts (one request each) over `concurrency` keep-alive connections.
-- Returns the summary {successful, failed, duration_s, input_tokens, request_throughput, token_throughput,
-- latency_mean_ms, latency_median_ms, latency_p99_ms, concurrency}, or nil, msg.
function M.bench(host, port, prompts, concurrency)
  local bodies = {}
  for i, ids in ipairs(prompts) do bodies[i] = cjson.encode { input = ids } end
  local res, dur = require("emmy.http_c").load(host, port, "/v1/embeddings", bodies, concurrency)
  if not res then return nil, dur end
  local ok, failed, tokens, lats = 0, 0, 0, {}
  for i, r in ipairs(res) do
    if r.status == 200 then
      ok = ok + 1
      tokens = tokens + #prompts[i]
      lats[#lats + 1] = r.latency
    else
      failed = failed + 1
    end
  end
  table.sort(lats)
  local sum = 0
  for _, x in ipairs(lats) do sum = sum + x end
  return { successful = ok, failed = failed, duration_s = dur, input_tokens = tokens, concurrency = concurrency,
    request_throughput = ok / dur, token_throughput = tokens / dur, latency_mean_ms = #lats > 0 and 1000 * sum / #lats or 0,
    latency_median_ms = 1000 * percentile(lats, 0.5), latency_p99_ms = 1000 * percentile(lats, 0.99) }
end

-- The malformed requests a soak mixes in, each answered 4xx by a well-behaved server: not JSON, no input, an empty
-- input, a token id outside the vocabulary, a sequence over the model's length (max_len + 1 ids).
local function malformed_bodies(vocab, max_len)
  local long = {}
  for i = 1, max_len + 1 do long[i] = 1 end
  return { "{not json", cjson.encode { model = "x" }, cjson.encode { input = {} }, cjson.encode { input = { { 1, 2, vocab + 7 } } },
    cjson.encode { input = long } }
end

-- The resident memory of process pid in MB (/proc), or nil.
local function rss_mb(pid)
  local f = pid and io.open("/proc/" .. pid .. "/status")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local kb = tonumber(s:match("VmRSS:%s*(%d+)"))
  return kb and kb / 1024
end

-- A soak: the prompts (cycled) over `concurrency` keep-alive connections for `seconds`, a fraction `malformed` of the
-- requests replaced by malformed ones (o.vocab, o.max_len), in rounds of 16 requests a connection, the server's (pid)
-- resident memory sampled after each round. Returns {samples = {{t, ok, failed, malformed_4xx, malformed_other,
-- rss_mb}}, ok, failed (well-formed requests not answered 200), malformed_4xx, malformed_other, rss_start_mb (a
-- quarter into the run, after the warm-up), rss_end_mb, rss_growth, duration_s, input_tokens, token_throughput}.
function M.soak(host, port, prompts, concurrency, seconds, malformed, pid, o)
  local http, sys = require "emmy.http_c", require "emmy.sys"
  local bad = malformed_bodies(o.vocab, o.max_len)
  local state, k = 12345, 0
  local r = { samples = {}, ok = 0, failed = 0, malformed_4xx = 0, malformed_other = 0, input_tokens = 0 }
  local t0 = sys.clock()
  while sys.clock() - t0 < seconds do
    local bodies, kind = {}, {}
    for i = 1, 16 * concurrency do
      state = (state * 1103515245 + 12345) % 2147483648
      if state % 10000 < malformed * 10000 then
        bodies[i], kind[i] = bad[state % #bad + 1], false
      else
        k = k % #prompts + 1
        bodies[i], kind[i] = cjson.encode { input = prompts[k] }, #prompts[k]
      end
    end
    local res, e = http.load(host, port, "/v1/embeddings", bodies, concurrency)
    if not res then return nil, e end
    for i, x in ipairs(res) do
      if kind[i] then
        if x.status == 200 then r.ok, r.input_tokens = r.ok + 1, r.input_tokens + kind[i] else r.failed = r.failed + 1 end
      elseif x.status >= 400 and x.status < 500 then r.malformed_4xx = r.malformed_4xx + 1
      else r.malformed_other = r.malformed_other + 1 end
    end
    r.samples[#r.samples + 1] = { t = sys.clock() - t0, ok = r.ok, failed = r.failed, malformed_4xx = r.malformed_4xx,
      malformed_other = r.malformed_other, rss_mb = rss_mb(pid) }
    if o.progress then o.progress(r.samples[#r.samples]) end
  end
  r.duration_s = sys.clock() - t0
  r.token_throughput = r.input_tokens / r.duration_s
  local first
  for _, sm in ipairs(r.samples) do
    if sm.t >= r.duration_s / 4 and sm.rss_mb then first = sm.rss_mb break end
  end
  local last = r.samples[#r.samples] and r.samples[#r.samples].rss_mb
  if first and last then r.rss_start_mb, r.rss_end_mb, r.rss_growth = first, last, (last - first) / first end
  return r
end

return M
