-- The kernel compiler without a GPU: kernel formation on a Qwen3 layer, reproducers, the rules (edited in a
-- temporary copy via EMMY_RULES, no rebuild), explain, pins, rule-file errors, emission and NVRTC.
local cjson = require "cjson"
local graphjson = require "emmy.graphjson"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local L0 = { "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1" }

-- Most tests pin tiers on Qwen3's q_proj and its k+v dual: their runs form them apart (MERGE_SIBLINGS=0, the default
-- before the forty-second session) unless the test sets EMMY_MERGE_SIBLINGS itself (the default layer, merged q|k|v).
local emmy_default = emmy
local emmy = emmy_pinned("EMMY_MERGE_SIBLINGS=0")
-- The structural knobs with q, k and v apart, for the in-process plans.
local function apart_knobs()
  local all = {}
  for key, v in pairs(require("emmy.compiler").STRUCTURAL) do all[key] = v end
  all.MERGE_SIBLINGS = 0
  return all
end
local function rules_copy()
  local d = tmpdir()
  sh(("cp %s/rules/tile/*.lua %s/"):format(shell_quote(ROOT), d))
  return d
end

test("a Qwen3 layer forms the expected kernels", function()
  local d = tmpdir()
  local code, out, err = emmy(args("compile", L0, "--ir", "kernel", "--dump-dir", d), { env = "EMMY_MERGE_SIBLINGS=1" })
  eq(code, 0, "exit: " .. err)
  -- today's structural defaults: VIEW_OUT=1 (attention written in o_proj's layout), DUAL_GATE=1 (gate/up as a
  -- two-accumulator kernel, SiLU(gate)*up in the epilogue), MERGE_SIBLINGS=1 (q|k|v side by side: one wave at 512 tokens)
  check(out:find("9 kernels (8 distinct)", 1, true), out)
  local kinds = {}
  for _, l in ipairs(lines_of(out)) do
    local name, kind = l:match("^%s*%d+%s+(k_[%w_]+)%s+(%a+)")
    if name then kinds[#kinds + 1] = name:gsub("_%x+$", "") .. ":" .. kind end
  end
  eq(table.concat(kinds, " "), "k_rms_norm:row k_linear:contraction " ..
    "k_rms_norm_rope:row k_rms_norm_rope:row k_sdpa:attention k_linear_add:contraction k_rms_norm:row " ..
    "k_linear_silu_mul:contraction k_linear_add:contraction", "kernel sequence")
  -- the dump: stage files, and per kernel .cu, .torch.json (a reproducer that reads back) and .txt
  local files = table.concat(require("emmy.sys").listdir(d), " ")
  check(files:find("00_graph.torch.json", 1, true) and files:find("_lowering_cuda.kernels", 1, true), files)
  local kd = d .. "/" .. files:match("(%d+_lowering_cuda%.kernels)")
  local index = cjson.decode(read_file(kd .. "/kernels.json"))
  eq(#index.kernels, 9, "index")
  for _, k in ipairs(index.kernels) do
    local g = assert(graphjson.read(kd .. "/" .. k.name .. ".torch.json"))
    eq(g:hash():sub(1, 6), k.name:match("_(%x+)$"), k.name .. " hash in the name")
    check(read_file(kd .. "/" .. k.name .. ".cu"):find("__global__", 1, true), k.name .. ".cu")
    check(read_file(kd .. "/" .. k.name .. ".txt"):find("covers", 1, true), k.name .. ".txt")
  end
  -- the same structure gets the same name in another run (layer 1)
  local _, out2 = emmy(args("compile", "Qwen/Qwen3-Embedding-0.6B", "--layer", "1", "--dynamic", "seq_len@x:1", "--ir", "kernel"))
  local n1 = out:match("k_sdpa_%x+")
  check(out2:find(n1, 1, true), "layer 1 has " .. n1)
end)

test("every kernel's reproducer re-forms into that same kernel (a returned view is homed, not copied), also under non-default structural forks", function()
  -- (a reproducer records the structural knobs it was formed under: a folded RMSNorm or merged siblings re-form
  -- as themselves without the pin, which is what the tuner's worker measures for each fork)
  for _, env in ipairs { "", "EMMY_SPLIT_CONE=0", "EMMY_MERGE_SIBLINGS=1 EMMY_DUAL_GATE=0", "EMMY_MERGE_SIBLINGS=0" } do
    local d = tmpdir()
    eq(emmy_default(args("compile", L0, "--dump-dir", d), { env = env }), 0, "dump " .. env)
    local kd = d .. "/" .. table.concat(require("emmy.sys").listdir(d), " "):match("(%d+_lowering_cuda%.kernels)")
    local n = 0
    for _, f in ipairs(require("emmy.sys").listdir(kd)) do
      local name = f:match("^(k_[%w_]+)%.torch%.json$")
      if name then
        n = n + 1
        local code, out = emmy_default { "compile", "--ir", "kernel", kd .. "/" .. f }
        eq(code, 0, f)
        local got = {}
        for l in out:gmatch("[^\n]+") do
          local k = l:match("^%s*%d+%s+(k_[%w_]+)")
          if k then got[#got + 1] = k end
        end
        eq(table.concat(got, " "), name, f .. " re-forms into itself (" .. env .. ")")
      end
    end
    check(n >= 7, "the layer's reproducers (" .. env .. ")")
  end
end)

test("SPLIT_CONE=0 folds RMSNorm into the next matmul's prologue (a structural fork, by pin)", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_SPLIT_CONE=0 EMMY_DUAL_GATE=0" })
  eq(code, 0, "exit: " .. err)
  -- (v_proj writes V transposed for attention under VIEW_OUT=1, so k and v are two distinct kernels)
  check(out:find("10 kernels (10 distinct)", 1, true), out)
  check(out:find("k_rms_norm_linear_%x+%s+contraction%s+%d+%s+[%w_=,]*SPLIT_CONE=0"), out)
  check(out:find("k_linear_add_%x+%s+contraction%s+%d+%s+[%w_=,]*SPLIT_CONE=1"), "o_proj keeps its operand: " .. out)
  check(not out:find("k_rms_norm_8"), "no standalone input/post-attention RMSNorm kernel")
  local c2, _, e2 = emmy(args("compile", L0), { env = "EMMY_KNOBS=SPLIT_CONE=2" })
  check(c2 ~= 0 and e2:find("SPLIT_CONE=2 must be 0 or 1", 1, true), e2)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if ok and nv.version() then
    local c3, o3, e3 = emmy(args("compile", L0, "--nvrtc"), { env = "EMMY_SPLIT_CONE=0 EMMY_DUAL_GATE=0 EMMY_CUBIN_CACHE=" .. tmpdir() })
    eq(c3, 0, "nvrtc: " .. e3)
    check(o3:find("10 compiled, 0 failed", 1, true), o3)
  end
end)

test("MERGE_SIBLINGS=1 merges q/k/v and gate/up into one kernel each; with SPLIT_CONE=0 too", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "kernel"), { env = "EMMY_MERGE_SIBLINGS=1 EMMY_DUAL_GATE=0 EMMY_VIEW_OUT=0" })
  eq(code, 0, "exit: " .. err)
  check(out:find("10 kernels (9 distinct)", 1, true), out)
  check(out:find("k_linear_%x+%s+contraction%s+aten.linear.default%s+3%s+v19 bf16%[1, seq_len, 2048%], v21"), out)
  check(out:find("k_mul_%x+%s+pointwise"), "silu(gate)*up needs both: a pointwise kernel: " .. out)
  local c2, o2, e2 = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_MERGE_SIBLINGS=1 EMMY_SPLIT_CONE=0 EMMY_DUAL_GATE=0" })
  eq(c2, 0, "both: " .. e2)
  check(o2:find("k_rms_norm_linear_%x+%s+contraction%s+%d+%s+[%w_=,]*MERGE_SIBLINGS=1,[%w_=,]*SPLIT_CONE=0"), o2)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if ok and nv.version() then
    local c3, o3, e3 = emmy(args("compile", L0, "--nvrtc"), { env = "EMMY_MERGE_SIBLINGS=1 EMMY_SPLIT_CONE=0 EMMY_CUBIN_CACHE=" .. tmpdir() })
    eq(c3, 0, "nvrtc: " .. e3)
    check(o3:find("0 failed", 1, true), o3)
  end
  -- under TMA each sibling's weight has its own tensor map; a block loads its B tile from the weight its n0 is in
  local c4, src, e4 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_e4e144"), { env = "EMMY_MERGE_SIBLINGS=1 EMMY_DUAL_GATE=0" })
  eq(c4, 0, "merged TMA: " .. e4)
  check(src:find("if (n0 < 2048LL) em_tma_2d", 1, true) and src:find("else if (n0 < 4096LL) em_tma_2d", 1, true)
    and src:find("&tm3, kt * 64, (int)(n0 - 3072LL)", 1, true), src)
  -- a merged or dual kernel's FLOPs count every weight it applies (the bench's TFLOP/s and the tune DB's flops)
  local frontend, compiler, kernels = require "emmy.frontend", require "emmy.compiler", require "emmy.kernels"
  local g = frontend.load("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } }).graph
  local flops = {}
  for _, kn in ipairs { { MERGE_SIBLINGS = 1, DUAL_GATE = 0 }, { MERGE_SIBLINGS = 0 } } do
    local all = {}
    for key, v in pairs(compiler.STRUCTURAL) do all[key] = kn[key] or v end
    for _, p in ipairs(kernels.plan(compiler.run(g, { knobs = all }))) do
      if p.kernel.kind == "contraction" then flops[p.kernel.name] = kernels.facts(p.kernel).flops end
    end
  end
  eq(flops.k_linear_e4e144, 2 * 512 * 1024 * (2048 + 1024 + 1024), "merged q/k/v")
  eq(flops.k_linear_silu_mul_b9e1e1, 2 * 512 * 1024 * (3072 + 3072), "dual gate/up")
  eq(flops.k_linear_7363a2, 2 * 512 * 1024 * 2048, "q_proj alone")
  local rules = require "emmy.rules"
  local okr, why = rules.resource_check({ kind = "contraction", siblings = 2, sibling_widths = { 2048, 1000 } },
    { MMA = 1, ASYNC = 1, TMA = 1, BK = 64, BM = 64, BN = 64, WM = 2, WN = 2, PAD_SMEM = 0, STAGES = 2 },
    { max_threads = 1024, smem_static = 49152, smem_optin = 232448, regs_per_block = 65536 })
  check(not okr and why:find("does not divide a sibling's width 1000", 1, true), tostring(why))
end)

test("MERGE_SIBLINGS=1 with DUAL_GATE=1: q/k/v merged where one wave at the hint (Qwen3 at 512 tokens, not 4096), gate/up dual, a Llama's RoPE linears apart; the merged kernel persistent, its epilogue a branch a tile", function()
  local function names(extra, env)
    local a = args("compile", L0)
    for _, x in ipairs(extra or {}) do a[#a + 1] = x end
    local code, out, err = emmy(a, { env = env or "EMMY_MERGE_SIBLINGS=1" })
    eq(code, 0, err)
    local t = {}
    for n in out:gmatch("(k_[%w_]+_%x%x%x%x%x%x)%s+contraction") do t[#t + 1] = n end
    return table.concat(t, " "), out
  end
  eq(names(), "k_linear_e4e144 k_linear_add_67d546 k_linear_silu_mul_b9e1e1 k_linear_add_f97280", "512 tokens")
  eq(names({ "--batch", "8" }), "k_linear_c217ff k_linear_09207f k_linear_add_2172d0 k_linear_silu_mul_28c308 k_linear_add_c34d1b",
    "4096 tokens: 4 x 32 x 8 tiles of 128 x 128 are not one wave")
  eq(names({ "--hint", "seq_len=1024" }), "k_linear_7363a2 k_linear_ad15f3 k_linear_add_67d546 k_linear_silu_mul_b9e1e1 k_linear_add_f97280", "1024 tokens")
  -- NORM_EPI=1 puts q_norm/k_norm in the q and k linears' staged tiles: they stay apart (found by forming without merging)
  check(select(2, names({}, "EMMY_MERGE_SIBLINGS=1 EMMY_NORM_EPI=1")):find("k_linear_rms_norm_rope_%x+"), "NORM_EPI=1")
  local code, out, err = emmy(args("compile", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1"), { env = "EMMY_MERGE_SIBLINGS=1" })
  eq(code, 0, err)
  check(out:find("k_linear_rope_88e5e1", 1, true) and out:find("k_linear_rope_4277a7", 1, true) and not out:find("k_rope_"), "RoPE kept: " .. out)
  -- the lead: persistent 128 x 128 in CLUSTER=2 pairs of tile rows, the staged halves (EPI_SMEM=5), 6 stages; its producer
  -- loads the sibling's weight, its epilogue branches on n0
  local _, tile = names({ "--ir", "tile", "--kernel", "k_linear_e4e144" })
  check(tile:find("k_linear_e4e144%s+contraction%s+%d+%s+[%w_=,]*BM=128,BN=128,CLUSTER=2,[%w_=,]*EPI_SMEM=5,MERGE_SIBLINGS=1,[%w_=,]*PERSIST=1,[%w_=,]*STAGES=6"), tile)
  for _, e in ipairs { 0, 3, 5 } do
    local c2, src, e2 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_e4e144", "--pins", "EPI_SMEM=" .. e), { env = "EMMY_MERGE_SIBLINGS=1" })
    eq(c2, 0, e2)
    check(src:find("const long long M = (s_seq_len), N = 4096LL, K = 1024LL;", 1, true), src)
    check(src:find("    if (n0 < 2048LL) {", 1, true) and src:find("    } else if (n0 < 3072LL) {", 1, true) and src:find("    } else {", 1, true), "EPI_SMEM=" .. e .. ": " .. src)
    check(src:find("(n0 - 3072LL) + ", 1, true), src)
    if e == 5 then check(src:find("st.global.v4.b32", 1, true), src) end
  end
  local c3, _, e3 = emmy(args("compile", L0, "--kernel", "k_linear_e4e144", "--pins", "EPI_SMEM=4"), { env = "EMMY_MERGE_SIBLINGS=1" })
  check(c3 ~= 0 and e3:find("EPI_SMEM 0, 3 or 5", 1, true), e3)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if ok and nv.version() then
    local c4, o4, e4 = emmy(args("compile", L0, "--nvrtc", "--kernel", "k_linear_e4e144", "--sample", "6", "--seed", "2"),
      { env = "EMMY_MERGE_SIBLINGS=1 EMMY_CUBIN_CACHE=" .. tmpdir() })
    eq(c4, 0, e4)
    check(o4:find(" 0 failed", 1, true), o4)
  end
end)

test("flash attention copies Q, K and V rows with cp.async, V through its transposed view (strided views)", function()
  -- (FLASH=1 pinned: FLASH=2 leads on sm_90; its own test is below)
  local code, out, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"), { env = "EMMY_VIEW_OUT=0 EMMY_KNOBS=k_sdpa:FLASH=1" })
  eq(code, 0, "exit: " .. err)
  check(out:find("FLASH=1,KVSPLIT=2,KVST=2", 1, true), "flash with two K/V stages, split over two warp halves, is FLASH=1's first: " .. out)
  -- V is transpose(view(v_proj output [1, seq_len, 1024])): row s of kv head h starts at h * 128 + s * 1024
  check(out:find("((x1 / (16LL / 8LL))) * 128LL + (s) * 1024LL + e", 1, true) and out:find("em_cp_async16(&Vd[ss][e]", 1, true), out)
  check(out:find("em_cp_async16(&Kd[ss][e]", 1, true) and out:find("em_cp_async16(&Qs[rr][e]", 1, true), out)
  check(not out:find("kv_k = ", 1, true), "no element-wise K/V fill: " .. out)
  check(out:find("exp2f(", 1, true) and not out:find("expf(", 1, true), "the softmax runs in base 2")
  -- at a hint whose query tiles fill the SMs (2048: 32 tiles x 16 heads) the K/V range is not split
  local c2, o2, e2 = emmy(args("compile", L0, "--hint", "seq_len=2048", "--explain", "--kernel", "k_sdpa"), { env = "EMMY_KNOBS=k_sdpa:FLASH=1" })
  eq(c2, 0, "exit: " .. e2)
  check(o2:find("chosen: APERSIST=0,BKV=32,BQ=64,FLASH=1,KVSPLIT=1,KVST=2", 1, true), "KVSPLIT=1 first at 2048: " .. o2)
end)

test("FLASH=2: wgmma flash attention with a TMA producer leads on sm_90; its parts and its legality", function()
  local code, lead, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"))
  eq(code, 0, "exit: " .. err)
  check(lead:find("BKV=128,BQ=64,FLASH=2,KVSPLIT=1,KVST=3,KV_TILE=0,MINB=1,OSMEM=2,", 1, true),
    "FLASH=2 with 128-key tiles on a 3-deep ring and the 16-byte-store epilogue first at 512 tokens (few query tiles): " .. lead)
  check(lead:find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", 1, true), "S = QK^T on wgmma, 128 keys: " .. lead)
  -- the key parts (KVSPLIT=2, the lead before the fifty-first session)
  local code0, out, err0 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"),
    { env = "EMMY_KNOBS=k_sdpa:KVSPLIT=2,k_sdpa:BKV=64,k_sdpa:KVST=4,k_sdpa:OSMEM=0" })
  eq(code0, 0, "exit: " .. err0)
  check(out:find("FLASH=2,KVSPLIT=2,KVST=4", 1, true), "FLASH=2 with two key parts: " .. out)
  check(out:find("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", 1, true), "S = QK^T on wgmma: " .. out)
  check(out:find("m64n128k16.f32.bf16.bf16 {", 1, true) and out:find("p, 1, 1, 1; }", 1, true), "PV with P from registers, V N-major: " .. out)
  check(out:find("em_tma_2d(kb + ", 1, true) and out:find("&tm1, kcol", 1, true), "K and V by TMA: " .. out)
  check(out:find("setmaxnreg.inc.sync.aligned.u32 232", 1, true) and out:find("__launch_bounds__(384, 1)", 1, true), out)
  check(out:find("bar.sync 1, 256;", 1, true) and out:find("if (kp == 1) return;", 1, true), "the key parts' merge: " .. out)
  check(out:find("ex2.approx.ftz.f32", 1, true) and not out:find("exp2f(", 1, true), "exp2 on the MUFU")
  -- one consumer warpgroup, two CTAs an SM: setmaxnreg within 65536 / 2 registers
  local c1, o1, e1 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"),
    { env = "EMMY_KNOBS=k_sdpa:FLASH=2,k_sdpa:KVSPLIT=1,k_sdpa:BKV=64,k_sdpa:KVST=2,k_sdpa:MINB=2,k_sdpa:OSMEM=1" })
  eq(c1, 0, "exit: " .. e1)
  check(o1:find("__launch_bounds__(256, 2)", 1, true) and o1:find("setmaxnreg.inc.sync.aligned.u32 216", 1, true), o1)
  check(o1:find("bar.sync 2, 128;", 1, true) and o1:find("em_oa(r, dd)", 1, true), "OSMEM=1 stages O: " .. o1)
  -- the resource check counts the Q tile, the ring and the merge, MINB blocks an SM
  local rules = require "emmy.rules"
  local dev = { max_threads = 1024, smem_static = 49152, smem_optin = 232448, regs_per_block = 65536 }
  local k = { kind = "attention", E = 128, Ev = 128 }
  check(rules.resource_check(k, { FLASH = 2, BQ = 128, BKV = 128, KVST = 3, KVSPLIT = 1, MINB = 1 }, dev), "3 x 64 KB + 32 KB fit")
  check(not rules.resource_check(k, { FLASH = 2, BQ = 128, BKV = 128, KVST = 4, KVSPLIT = 1, MINB = 1 }, dev), "4 x 64 KB do not")
  check(not rules.resource_check(k, { FLASH = 2, BQ = 64, BKV = 64, KVST = 4, KVSPLIT = 1, MINB = 2 }, dev), "2 x 145 KB do not")
  -- the emitter's own refusals: a ring too shallow for two key parts
  local c3, _, e3 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"),
    { env = "EMMY_KNOBS=k_sdpa:FLASH=2,k_sdpa:KVSPLIT=2,k_sdpa:KVST=2" })
  check(c3 ~= 0 and (e3:find("KVST=2", 1, true) or e3:find("match no candidate", 1, true)), "KVSPLIT=2 needs KVST=4: " .. e3)
end)

test("APERSIST=1: one CTA an SM loops over (query tile, head) items; the ring's uses and Q's phase carry over", function()
  local pin = "EMMY_KNOBS=k_sdpa:FLASH=2,k_sdpa:BQ=128,k_sdpa:BKV=128,k_sdpa:KVST=3,k_sdpa:OSMEM=2,k_sdpa:PINGPONG=1,k_sdpa:APERSIST=1"
  local c1, tile, e1 = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_sdpa"), { env = pin })
  eq(c1, 0, "tile: " .. e1)
  check(tile:find("cdiv(seq_len,128)*16 x 1 x 1", 1, true), "every item in x (the launcher caps it at the SMs): " .. tile)
  local c2, src, e2 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"), { env = pin })
  eq(c2, 0, "cuda: " .. e2)
  local _, loops = src:gsub("for %(long long em_r = 0;; em_r%+%+, em_n%+%+%)", "")
  check(loops == 2, "the producer and the consumers loop over the same items")
  local _, mirrored = src:gsub("const long long em_t = %(em_r & 1%) %? %(em_r %+ 1%) %* gridDim.x %- 1 %- blockIdx.x : em_r %* gridDim.x %+ blockIdx.x;", "")
  check(mirrored == 2, "causal: the rounds alternate direction")
  check(src:find("const int st = (em_ub + it) % 3;", 1, true) and src:find("em_mbar_wait(&em_qbar, em_n & 1u);", 1, true), "uses counted on")
  check(src:find("em_mbar_wait(&em_qempty, (em_n & 1u) ^ 1u);", 1, true) and src:find("em_smem(&em_qempty)", 1, true),
    "Q reloaded once the consumers left the last item")
  check(src:find("em_bh = em_t % em_nbh, q0 = (em_nq - 1 - em_t / em_nbh) * 128", 1, true), "causal: the longest query tiles first")
  -- legality: not with two key parts, packed heads or two CTAs an SM
  local c3, _, e3 = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_sdpa"),
    { env = "EMMY_KNOBS=k_sdpa:FLASH=2,k_sdpa:KVSPLIT=2,k_sdpa:APERSIST=1" })
  check(c3 ~= 0 and e3:find("match no candidate", 1, true), "KVSPLIT=2 with APERSIST=1 is not offered: " .. e3)
  -- nor O staged over a K/V stage (OSMEM=4) where three 64-row slices reach its V half (BQ=192, head dim 64: wrong on
  -- the H200), which the emitter refuses too
  local LLA = { "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1" }
  local p4 = "EMMY_KNOBS=k_sdpa:FLASH=2,k_sdpa:BQ=192,k_sdpa:BKV=128,k_sdpa:KVST=3,k_sdpa:OSMEM=4,k_sdpa:APERSIST=1"
  local c4, _, e4 = emmy(args("compile", LLA, "--ir", "tile", "--kernel", "k_sdpa"), { env = p4 })
  check(c4 ~= 0 and e4:find("match no candidate", 1, true), "BQ=192 with OSMEM=4 is not offered: " .. e4)
  local c5, _, e5 = emmy(args("compile", LLA, "--ir", "tile", "--kernel", "k_sdpa"), { env = p4:gsub("OSMEM=4", "OSMEM=2") })
  eq(c5, 0, "BQ=192 with OSMEM=2 is: " .. e5)
end)

test("KVSPLIT=2: two warp halves take alternate K/V tiles and merge their softmax states", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"), { env = "EMMY_KNOBS=k_sdpa:FLASH=1,k_sdpa:KVSPLIT=2" })
  eq(code, 0, "exit: " .. err)
  check(out:find("__launch_bounds__(256)", 1, true), "8 warps for BQ=64: " .. out)
  check(out:find("extern __shared__ __align__(16) unsigned char em_smd[];", 1, true), out)
  check(out:find("const int em_t = 2 * it + wp;", 1, true) and out:find("if (wp == 1) return;", 1, true), out)
  check(out:find("lrow[h] = lrow[h] * em_c1[h] + l2 * em_c2[h];", 1, true), out)
end)

test("QSMEM=1 keeps Q in shared memory and reloads its fragments per k-step; MINB=2 bounds registers for two blocks per SM", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"),
    { env = "EMMY_KNOBS=k_sdpa:FLASH=1,k_sdpa:KVSPLIT=2,k_sdpa:QSMEM=1,k_sdpa:MINB=2" })
  eq(code, 0, "exit: " .. err)
  check(out:find("__launch_bounds__(256, 2)", 1, true), out)
  check(not out:find("unsigned qf[", 1, true) and out:find("em_ldsm_x4(qk, &Qs[wr * 16 + (lane & 15)][kd * 16 + (lane >> 4) * 8]);", 1, true), out)
  check(out:find("(*const em_kvb)[136] = em_sm + 64;", 1, true), "K/V stages after the Q rows: " .. out)
  local c0, o0 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"), { env = "EMMY_KNOBS=k_sdpa:FLASH=1,k_sdpa:KVSPLIT=2" })
  check(c0 == 0 and o0:find("(*const em_kvb)[136] = em_sm + 0;", 1, true) and o0:find("__launch_bounds__(256)", 1, true), o0)
  -- the resource check adds the Q rows to the K/V stages
  local rules = require "emmy.rules"
  local dev = { max_threads = 1024, smem_static = 49152, smem_optin = 232448, regs_per_block = 65536 }
  local k = { kind = "attention", E = 128, Ev = 128 }
  local okq = rules.resource_check(k, { FLASH = 1, BQ = 64, BKV = 32, KVST = 2, KVSPLIT = 1, QSMEM = 1 }, dev)
  local ok0 = rules.resource_check(k, { FLASH = 1, BQ = 64, BKV = 32, KVST = 2, KVSPLIT = 1, QSMEM = 0 }, dev)
  check(ok0 and not okq, "64 + 128 rows of 272 B exceed 48 KB of static shared memory; 128 rows fit")
end)

test("TMA=1: tensor maps are launch arguments described by launch.tmaps; the tiles are swizzled", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_add"), { env = "EMMY_KNOBS=TMA=1,WGMMA=0" })
  eq(code, 0, "exit: " .. err)
  check(out:find("const __grid_constant__ em_tmap tm0,%s+const __grid_constant__ em_tmap tm1,%s+long long s_seq_len"), out)
  check(out:find("cp.async.bulk.tensor.2d", 1, true) and out:find("em_mbar_wait(&em_bar[st]", 1, true), out)
  check(out:find("em_ldsm_x4s(af[i], em_swz(", 1, true), out)
  -- the output is written at its flat index: no division survives in the epilogue's address
  check(out:find("out0[(m) * 1024LL + n]", 1, true), out)
  -- the launch description the runtime encodes the maps from
  local compiler, kernels = require "emmy.compiler", require "emmy.kernels"
  local g = require("emmy.frontend").load("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } }).graph
  local plans = kernels.plan(compiler.run(g))
  for _, p in ipairs(plans) do
    if p.kernel.name:find("k_linear_add", 1, true) then
      local knobs = {}
      for key, v in pairs(p.choice.knobs) do knobs[key] = v end
      knobs.TMA, knobs.PAD_SMEM, knobs.BK = 1, 0, 64
      local _, la = kernels.emit(p, knobs)
      eq(#la.tmaps, 2, "A and B maps")
      eq(la.tmaps[1].box[1], 64, "box inner: 64 bf16 = 128 bytes")
      eq(la.tmaps[1].box[2], knobs.BM, "box rows: BM")
      check(la.smem > 48 * 1024 or la.smem >= 1024, "dynamic shared memory: " .. la.smem)
    end
  end
end)

test("SPLIT_K=4: grid z slices K, partials in scratch, the last block sums them in slice order", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_add"), { env = "EMMY_KNOBS=SPLIT_K=4,PERSIST=0" })
  eq(code, 0, "exit: " .. err)
  check(out:find("float *__restrict__ em_scratch,", 1, true), out)
  check(out:find("kt0 = (int)blockIdx.z * em_per", 1, true) and out:find("(kt0 + kt) * 64", 1, true), out)
  check(out:find("for (int z = 0; z < 4; z++) em_s += __ldcg(", 1, true) and out:find("*em_cnt = 0u;", 1, true), out)
  local _, tile = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_linear_add"), { env = "EMMY_KNOBS=SPLIT_K=4,PERSIST=0" })
  check(tile:find("x cdiv(seq_len,64) x 4", 1, true), "grid z is the split: " .. tile)
  -- the scalar tier has no split
  local c2, o2 = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_linear_add"), { env = "EMMY_KNOBS=SPLIT_K=2,MMA=0" })
  check(c2 ~= 0, "SPLIT_K=2 with MMA=0 matches no candidate: " .. o2)
end)

test("WGMMA=1: wgmma.mma_async from shared-memory descriptors of the TMA tiles, a warpgroup per 64 rows", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_add"), { env = "EMMY_KNOBS=WGMMA=1,BM=128,BN=128,PERSIST=0" })
  eq(code, 0, "exit: " .. err)
  check(out:find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,", 1, true), out)
  check(out:find("(unsigned)(wid >> 2) * 8192u", 1, true), "the second warpgroup reads rows 64..127: " .. out)
  check(out:find("__launch_bounds__(256)", 1, true) and out:find("em_wg_wait0();", 1, true), out)
  local c2, _, e2 = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=WGMMA=1,TMA=0" })
  check(c2 ~= 0 and e2:find("no candidate", 1, true), "WGMMA without TMA: " .. e2)
end)

test("WG_WAIT=1: one wgmma group in flight, the previous step's stage refilled after wait_group 1", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_add"), { env = "EMMY_KNOBS=WG_WAIT=1,STAGES=3,PERSIST=0" })
  eq(code, 0, "exit: " .. err)
  -- inside the loop: commit, wait for the group before, barrier, then the load into the freed stage
  check(out:find("em_wg_commit%(%);%s+em_wg_wait1%(%);%s+__syncthreads%(%);%s+if %(kt %+ 2 < nk%) em_load%(%(kt %+ 2%) %% 3, kt %+ 2%);%s+}%s+em_wg_wait0%(%);"),
    out)
  local c2, _, e2 = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=WG_WAIT=1,STAGES=1" })
  check(c2 ~= 0 and e2:find("no candidate", 1, true), "WG_WAIT=1 with one stage: " .. e2)
end)

test("non-causal SDPA (tests/fixtures/sdpa_noncausal.torch.json) takes the flash tier with the whole key range", function()
  local g = ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json"
  local code, out, err = emmy({ "compile", g, "--explain" })
  eq(code, 0, "exit: " .. err)
  check(out:find("flash_tier%s+WORK%s+ok%s+mma.sync flash attention, head dim 128%s"), out)
  local c2, o2 = emmy({ "compile", g, "--ir", "cuda" })
  eq(c2, 0)
  check(o2:find("const long long send = S;", 1, true) and not o2:find("gridDim.x - 1 - blockIdx.x", 1, true), "no causal bound or order")
end)

-- down_proj's emitted CUDA under env ("K=V …"): exit code, source, stderr.
-- (pins without SPLIT_K take SPLIT_K=1: since atom.split2_small the rules' first down_proj candidates are split in two)
local function down_cuda(env)
  if env and not env:find("SPLIT_K", 1, true) then env = env:gsub("EMMY_KNOBS=(%S+)", "EMMY_KNOBS=%1,k_linear_add_f97280:SPLIT_K=1") end
  return emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_add_f97280"), { env = env })
end

-- Each knob pin set in pins leaves down_proj no candidate (the resource check refuses it); env: more variables.
local function refused(pins, env)
  for _, pin in ipairs(pins) do
    local code, _, err = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_linear_add_f97280"),
      { env = (env or "") .. " EMMY_KNOBS=" .. pin })
    check(code ~= 0 and err:find("no candidate", 1, true), pin .. ": " .. err)
  end
end

-- Every kernel of the layer (argv: of `emmy <argv>`) compiles with NVRTC under env, a fresh cubin cache (nothing to
-- check where NVRTC is missing).
local function nvrtc_compiles(env, argv)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then return end
  local code, out, err = emmy(args(argv or args("compile", L0), "--nvrtc"), { env = env .. " EMMY_CUBIN_CACHE=" .. tmpdir() })
  eq(code, 0, "exit: " .. err)
  check(out:find(argv and ", 0 failed" or "9 compiled, 0 failed", 1, true), out)
end

test("CLUSTER=2: 2-CTA clusters along N multicast the shared A tile; an empty barrier per stage; refusals name why", function()
  local code, out, err = down_cuda("EMMY_KNOBS=CLUSTER=2,STAGES=4,PERSIST=0")
  eq(code, 0, "exit: " .. err)
  check(out:find("__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)", 1, true), out)
  check(out:find(".multicast::cluster", 1, true) and out:find("em_mbar_init(&em_empty[s], 2);", 1, true), "multicast, empty barriers")
  -- each CTA loads its half of A's 64 rows (32 rows, 4096 bytes in) into both rings; the stage's full barrier
  -- still expects the whole A tile and this CTA's B tile
  check(out:find("em_mbar_expect(&em_bar[st], 16384u);", 1, true), out)
  check(out:find("em_tma_2d_mc(em_sb + st * 8192u + em_cr * 4096u, &tm0, kt * 64, (int)m0 + (int)em_cr * 32, &em_bar[st], (unsigned short)3);", 1, true), out)
  -- a refill waits for both CTAs' releases of the stage; the ring is filled whole first and refilled STAGES/2 steps
  -- after a release; nobody leaves while the other CTA may still signal it
  check(out:find("if (kt >= 4) em_mbar_wait(&em_empty[st], (unsigned)(kt / 4 - 1) & 1u);", 1, true), out)
  check(out:find("if (3 < nk) em_load(3, 3);", 1, true), "the whole ring first")
  check(out:find("em_mbar_arrive_cluster(&em_empty[(kt - 1) % 4], q);", 1, true) and
    out:find("if (kt >= 2 && kt + 2 < nk) em_load((kt - 2) % 4, kt + 2);", 1, true), out)
  check(out:find("em_wg_wait0%(%);%s+em_cluster_sync%(%);"), out)
  -- unclustered kernels carry none of it
  local c1, o1 = down_cuda("EMMY_KNOBS=CLUSTER=1,PERSIST=0")
  eq(c1, 0)
  check(not o1:find("em_cluster", 1, true) and not o1:find("__cluster_dims__", 1, true) and not o1:find("em_empty", 1, true),
    "no cluster code without CLUSTER=2")
  -- the resource check: two stages, split-K, or no WG_WAIT are refused with the reason
  refused { "CLUSTER=2,STAGES=2,PERSIST=0", "CLUSTER=2,SPLIT_K=2", "CLUSTER=2,WG_WAIT=0" }
  nvrtc_compiles("EMMY_KNOBS=k_linear:CLUSTER=2")
end)

test("PRODUCER=1: a producer warpgroup loads on empty barriers; the consumers only wait for full stages and wgmma", function()
  local code, out, err = down_cuda("EMMY_KNOBS=PRODUCER=1,STAGES=4,PERSIST=0")
  eq(code, 0, "exit: " .. err)
  check(out:find("__launch_bounds__(256)", 1, true), "one warpgroup more than the consumers: " .. out)
  check(out:find("em_mbar_init(&em_empty[s], 4);", 1, true), "an arrival from each consumer warp")
  check(out:find("if (wid >= 4) {", 1, true) and out:find("if (kt >= 4) em_mbar_wait(&em_empty[kt % 4], (unsigned)(kt / 4 - 1) & 1u);", 1, true), out)
  -- the consumers' loop: no block barrier and no load; each warp releases the step before once wait_group retired it
  local loop = out:match("for %(int kt = 0; kt < nk; kt%+%+%) {%s+const int st.-em_wg_wait0%(%);")
  check(loop and not loop:find("__syncthreads", 1, true) and not loop:find("em_load", 1, true), tostring(loop))
  check(loop and loop:find("em_wg_wait1%(%);%s+if %(kt >= 1 && lane == 0%) asm volatile%(\"mbarrier%.arrive%.shared::cta%.b64"), tostring(loop))
  refused { "PRODUCER=1,SPLIT_K=2,PERSIST=0", "PRODUCER=1,SPLIT_K=4,PERSIST=0", "PRODUCER=1,WG_WAIT=0", "PRODUCER=1,CLUSTER=2,PERSIST=0" }
  nvrtc_compiles("EMMY_KNOBS=k_linear:PRODUCER=1")
end)

-- EMMY_KNOBS pinning each K=V of pins for down_proj alone (the layer's other kernels keep their defaults).
local function down_pins(pins)
  if not pins:find("SPLIT_K", 1, true) then pins = pins .. ",SPLIT_K=1" end
  return "EMMY_KNOBS=" .. pins:gsub("([%w_]+=)", "k_linear_add_f97280:%1")
end

test("PERSIST=1: a persistent producer/consumer pipeline — setmaxnreg roles, a tile loop, ring phases across tiles", function()
  local code, out, err = down_cuda(down_pins("PERSIST=1,BM=128,WM=8,BN=128,STAGES=4,RASTER=8,EPI_SMEM=0"))
  eq(code, 0, "exit: " .. err)
  -- one block an SM (the launcher caps the grid at the SM count) with the register cap setmaxnreg needs
  check(out:find("__launch_bounds__(384, 1)", 1, true), out)
  check(out:find("setmaxnreg.dec.sync.aligned.u32 40;", 1, true) and out:find("setmaxnreg.inc.sync.aligned.u32 232;", 1, true), out)
  check(out:find("em_mbar_init(&em_empty[s], 8);", 1, true), "an arrival from each consumer warp")
  -- producer and consumers walk the same tiles in the same grouped order, the ring's use counter running across tiles
  local n = 0
  for _ in out:gmatch("for %(int em_t = blockIdx%.x; em_t < em_tiles; em_t %+= gridDim%.x%) {%s+const int em_grp = 8 %* em_tn") do n = n + 1 end
  eq(n, 2, "two tile loops")
  check(out:find("em_mbar_wait(&em_empty[st], ((unsigned)(em_it / 4) & 1u) ^ 1u);", 1, true), out)
  check(out:find("em_mbar_wait(&em_bar[st], (unsigned)(em_it / 4) & 1u);", 1, true), out)
  -- the first k-slice of a tile starts the accumulators (scale-d 0); no block barrier in the consumers' loop
  check(out:find("\"r\"((kt | kk))", 1, true), out)
  local loop = out:match("for %(int kt = 0; kt < nk; kt%+%+, em_it%+%+%) {%s+const int st = em_it %% 4;%s+em_mbar_wait%(&em_bar.-em_wg_wait0%(%);")
  check(loop and not loop:find("__syncthreads", 1, true) and not loop:find("em_load", 1, true), tostring(loop))
  -- EPI_SMEM=0: the contraction's own epilogue; EPI_SMEM=1: staged behind a consumers-only named barrier, stored
  -- by consecutive threads along N
  check(not out:find("em_ep0", 1, true), "no staging tile")
  local c2, o2, e2 = down_cuda(down_pins("PERSIST=1,BM=128,WM=8,BN=128,STAGES=4,EPI_SMEM=1"))
  eq(c2, 0, "exit: " .. e2)
  check(o2:find("asm volatile(\"bar.sync 1, 256;\" ::: \"memory\");", 1, true), o2)
  check(o2:find("for (int em_e = tid; em_e < 16384; em_e += 256) {", 1, true) and o2:find("em_ep0[ml * 136 + nl]", 1, true), o2)
  -- EPI_SMEM=2: the same loop with a constant trip count, unrolled, the guard inside
  local c4, o4, e4 = down_cuda(down_pins("PERSIST=1,BM=128,WM=8,BN=128,STAGES=4,EPI_SMEM=2"))
  eq(c4, 0, "exit: " .. e4)
  check(o4:find("#pragma unroll 8%s+for %(int em_i = 0; em_i < 64; em_i%+%+%) {"), o4)
  -- the launch: a tile count the launcher caps, the staging tile's shared memory after the ring
  local c3, o3, e3 = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_linear_add_f97280"),
    { env = down_pins("PERSIST=1,BM=128,WM=8,BN=128,STAGES=4,EPI_SMEM=1") })
  eq(c3, 0, "exit: " .. e3)
  check(o3:find("cdiv(seq_len,128)*cdiv(1024,128)", 1, true), o3)
  refused { "PERSIST=1,PRODUCER=0", "PERSIST=1,SPLIT_K=4,EPI_SMEM=1", "PERSIST=1,SPLIT_K=2,CLUSTER=2", "EPI_SMEM=1,PERSIST=0",
    "PERSIST=1,BM=128,WM=8,BN=256,STAGES=4,EPI_SMEM=1" }
  nvrtc_compiles("EMMY_KNOBS=k_linear:PERSIST=1")
  nvrtc_compiles("EMMY_KNOBS=k_linear:PERSIST=1,k_linear:EPI_SMEM=1")
  nvrtc_compiles("EMMY_KNOBS=k_linear:PERSIST=1,k_linear:EPI_SMEM=2")
  -- CLUSTER=2: pairs of tile rows; each CTA multicasts its half of B; releases reach both CTAs; a cluster barrier
  -- after init and before leaving
  local c5, o5, e5 = down_cuda(down_pins("PERSIST=1,BM=128,WM=8,BN=128,STAGES=4,CLUSTER=2"))
  eq(c5, 0, "exit: " .. e5)
  check(o5:find("__cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)", 1, true), o5)
  check(o5:find("em_mbar_init(&em_empty[s], 16);", 1, true) and o5:find("for (int em_t = blockIdx.x / 2; em_t < em_pairs; em_t += gridDim.x / 2) {", 1, true), o5)
  check(o5:find("em_tma_2d_mc(em_sb + 65536u + st * 16384u + em_cr * 8192u, &tm1, kt * 64, (int)n0 + (int)em_cr * 64, &em_bar[st], (unsigned short)3);", 1, true), o5)
  check(o5:find("for (unsigned q = 0; q < 2u; q++) em_mbar_arrive_cluster(&em_empty[(em_it - 1) % 4], q);", 1, true), o5)
  -- no closing cluster barrier: the producer waits as for 4 more loads (its tail: every stage released by both CTAs;
  -- the default since the forty-first session), EMMY_CL2_NOEND=0 the earlier closing barrier
  check(o5:find("for (int em_q = 0; em_q < 4; em_q++, em_it++) em_mbar_wait(&em_empty[em_it % 4], ((unsigned)(em_it / 4) & 1u) ^ 1u);", 1, true)
    and not o5:find("em_cluster_sync%(%); /%* no multicast"), o5)
  local _, o6 = down_cuda("EMMY_CL2_NOEND=0 " .. down_pins("PERSIST=1,BM=128,WM=8,BN=128,STAGES=4,CLUSTER=2"))
  check(o6:find("em_cluster_sync%(%); /%* no multicast") and not o6:find("the producer's tail", 1, true), o6)
  nvrtc_compiles("EMMY_KNOBS=k_linear:PERSIST=1,k_linear:CLUSTER=2")
end)

-- Qwen3 layer 0's plans (in-process), by kernel-name prefix; and a copy of the knobs of plan p's first candidate with
-- every K=V of want, plus extra.
local qwen_plans
local function qwen_plan(prefix)
  if not qwen_plans then
    local compiler, kernels = require "emmy.compiler", require "emmy.kernels"
    local g = require("emmy.frontend").load("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } }).graph
    qwen_plans = kernels.plan(compiler.run(g, { knobs = apart_knobs() }))
  end
  for _, p in ipairs(qwen_plans) do if p.kernel.name:sub(1, #prefix) == prefix then return p end end
  error("no kernel " .. prefix)
end
local function candidate(p, want, extra)
  for _, c in ipairs(p.candidates) do
    local ok = true
    for key, v in pairs(want) do if c.knobs[key] ~= v then ok = false end end
    if ok then
      local kn = {}
      for key, v in pairs(c.knobs) do kn[key] = v end
      for key, v in pairs(extra or {}) do kn[key] = v end
      return kn
    end
  end
  error("no candidate of " .. p.kernel.name .. " has the knobs asked for")
end

test("EPI_SMEM=3, 4: the tile staged in two halves of swizzled 64-column panels (4 stages of 128 x 256 fit); 4 stores each half by TMA", function()
  local code, out, err = down_cuda(down_pins("PERSIST=1,BM=128,WM=8,BN=128,STAGES=4,EPI_SMEM=3"))
  eq(code, 0, "exit: " .. err)
  -- each half: a barrier, this thread's fragments of its columns as 32-bit words at swizzled offsets, a barrier, the
  -- half's elements through the fused ops (unrolled), each loop's values its own
  check(out:find("for (int j = 0; j < 8; j++) {", 1, true) and out:find("for (int j = 8; j < 16; j++) {", 1, true), out)
  check(out:find("const unsigned em_o = em_swz((unsigned)(nh >> 6) * 16384u, ml, nh & 63) + (nh & 7) * 2;", 1, true), out)
  check(out:find("*reinterpret_cast<unsigned *>(em_ep0 + em_o) = em_pk_bf(", 1, true), out)
  check(out:find("const int em_e = tid + em_i * 256, ml = em_e / 64, nh = em_e % 64, nl = nh + 64;", 1, true), out)
  local n = 0
  for _ in out:gmatch("in2%[%(m%) %* 1024LL %+ n%]") do n = n + 1 end
  eq(n, 2, "the residual is read in each half's loop")
  n = 0
  for _ in out:gmatch("bar%.sync 1, 256;") do n = n + 1 end
  eq(n, 4, "two barriers a half")
  check(not out:find("em_tma_store_2d", 1, true) and not out:find("em_clock", 1, true), "no TMA store, no stamps")
  -- the resource check: 128 x 256 at 4 stages fits with the halves (32 KB), not with the whole tile (66 KB)
  local rules, kernels = require "emmy.rules", require "emmy.kernels"
  local dev = kernels.deploy_device()
  local c = { MMA = 1, TMA = 1, ASYNC = 1, WGMMA = 1, WG_WAIT = 1, PERSIST = 1, PRODUCER = 1, BM = 128, BN = 256, BK = 64, WM = 8,
    WN = 1, STAGES = 4, PAD_SMEM = 0 }
  local function fits(k, epi, bn)
    local x = {}
    for key, v in pairs(c) do x[key] = v end
    x.EPI_SMEM, x.BN = epi, bn or 256
    return (rules.resource_check(k, x, dev))
  end
  local plain = { kind = "contraction", tma_store = true }
  check(fits(plain, 3) and fits(plain, 4) and fits(plain, 0), "4 stages of 128 x 256 with the halves")
  check(not fits(plain, 1) and not fits(plain, 2), "the whole staged tile does not fit beside 4 stages")
  check(fits(plain, 3, 64) and fits(plain, 4, 64), "BN 64: the one panel staged whole")
  check(not fits(plain, 3, 32), "whole 64-column panels: BN 64, 128 or 256")
  check(not fits({ kind = "contraction", tma_store = false }, 4), "EPI_SMEM=4 only for a plain store")
  -- the facts: q (its result through a view) may be stored by TMA; down (a residual), gate/up (dual) may not
  eq(kernels.facts(qwen_plan("k_linear_7363a2").kernel).tma_store, true, "q")
  eq(kernels.facts(qwen_plan("k_linear_add_f97280").kernel).tma_store, false, "down")
  eq(kernels.facts(qwen_plan("k_linear_silu_mul").kernel).tma_store, false, "gate/up")
  refused { "PERSIST=1,EPI_SMEM=4", "PERSIST=1,BN=32,EPI_SMEM=3" }
  -- the emitter refuses what the resource check refuses
  local down = qwen_plan("k_linear_add_f97280")
  local src, why = kernels.emit(down, candidate(down, { PERSIST = 1, EPI_SMEM = 0 }, { EPI_SMEM = 4 }))
  check(not src and why:find("EPI_SMEM=4 stores the tile by TMA", 1, true), tostring(why))
  -- EPI_SMEM=4 on q: each half's panels stored by one thread after the writers' proxy fence; the buffer written again
  -- only once those stores have read it; no thread stores the output itself
  local q = qwen_plan("k_linear_7363a2")
  local src4, la = kernels.emit(q, candidate(q, { PERSIST = 1, BM = 128, BN = 256, STAGES = 4, EPI_SMEM = 4, CLUSTER = 1 }))
  check(src4, tostring(la))
  check(src4:find("em_fence_async_smem%(%);%s+asm volatile%(\"bar%.sync 1, 256;\" ::: \"memory\"%);%s+if %(tid == 0%) {%s+"
    .. "em_tma_store_2d%(&tm2, em_epa %+ 0u, %(int%)n0 %+ 128, %(int%)m0%);%s+em_tma_store_2d%(&tm2, em_epa %+ 16384u, %(int%)n0 %+ 192, %(int%)m0%);%s+em_bulk_commit%(%);"), src4)
  check(src4:find("if (tid == 0) em_bulk_wait_read0();", 1, true) and src4:find("if (tid == 0) em_bulk_wait0();", 1, true), src4)
  check(not src4:find("out0[", 1, true), "no per-thread store of the output")
  eq(#la.tmaps, 3, "A, B and the output")
  eq(la.tmaps[3].output, 1, "the map of output 1")
  eq(la.tmaps[3].inner, 2048, "rows of N elements (the output is a [1, seq_len, 16, 128] view)")
  eq(la.tmaps[3].box[1], 64, "64-column panels")
  eq(la.tmaps[3].box[2], 128, "BM rows")
  eq(la.smem, 1024 + 4 * 128 * (128 + 256) + 128 * 256, "the ring and half the tile")
  nvrtc_compiles("EMMY_KNOBS=k_linear:PERSIST=1,k_linear:EPI_SMEM=3")
  nvrtc_compiles("EMMY_KNOBS=k_linear_7363a2:PERSIST=1,k_linear_7363a2:EPI_SMEM=4")
end)

test("the kernel summary's legality facts are the emitter's (ir.ctr_facts): TMA-stored outputs, the heads view, the reductions before and after the matmul; a heads view without RoPE is legal but not offered", function()
  local compiler, kernels, ir = require "emmy.compiler", require "emmy.kernels", require "emmy.ir"
  local g = require("emmy.frontend").load("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } }).graph
  local function plan(set, name)
    local kn = apart_knobs()
    for key, v in pairs(set) do kn[key] = v end
    for _, p in ipairs(kernels.plan(compiler.run(g, { knobs = kn }))) do if p.kernel.name == name then return p end end
    error("no kernel " .. name)
  end
  local function epi7(p)
    for _, c in ipairs(p.candidates) do if c.knobs.EPI_SMEM == 7 then return true end end
    return false
  end
  -- q: its result through a view, stored by TMA (EPI_SMEM=4); down: a residual added, its own shape (7); k+v: a dual
  local q, down, kv = qwen_plan("k_linear_7363a2"), qwen_plan("k_linear_add_f97280"), qwen_plan("k_linear_ad15f3")
  check(q.facts.tma_store and not q.facts.tma_fused, "q")
  check(down.facts.tma_fused and not down.facts.tma_store and not down.facts.tma_heads and epi7(down), "down")
  check(kv.facts.dual and kv.facts.siblings == 2 and not kv.facts.tma_store and not kv.facts.tma_fused, "k+v")
  eq(table.concat(kv.facts.sibling_widths, ","), "1024,1024", "k+v: both widths (the flops count them)")
  -- without RoPE, q's [B, H, S, D] output is the heads view of its plain result: the emitter stores it by TMA
  -- (tma_heads), the rules do not offer it (no GPU has run it); SPLIT_CONE=0: the folded RMSNorm, a prologue reduction
  local qh = plan({ ROPE_EPI = 0, DUAL_GATE = 0 }, "k_linear_ab7fe7")
  check(qh.facts.tma_heads and qh.facts.tma_fused and not qh.facts.tma_store and not epi7(qh), "heads without RoPE")
  local qn = plan({ SPLIT_CONE = 0, ROPE_EPI = 0, DUAL_GATE = 0 }, "k_rms_norm_linear_90b0f2")
  check(qn.facts.prologue_reductions == 1 and qn.facts.split_cone == 0, "the folded RMSNorm")
  -- NORM_EPI=1: q's per-head RMSNorm reads the result (an epilogue reduction); its output is RoPE's, not a heads view
  -- of the result, so it has no TMA store
  local qe = plan({ NORM_EPI = 1 }, "k_linear_rms_norm_rope_e296ba")
  check(qe.facts.epilogue_reductions == 1 and qe.facts.prologue_reductions == 0, "the head-local norm")
  check(not qe.facts.tma_heads and not qe.facts.tma_fused, "no heads view of the result")
  -- the facts are the binding's; a kernel the emitter builds no contraction over has none
  local cf = assert(ir.ctr_facts(down.kernel.repro, down.kernel.anchor))
  check(cf.tma_fused == down.facts.tma_fused and cf.N == 1024 and cf.K == 3072, "down's facts")
  local none, why = ir.ctr_facts(down.kernel.repro, down.kernel.repro:inputs()[1].name)
  check(none == nil and why:find("not a contraction", 1, true), tostring(why))
end)

test("PERSIST=1, SPLIT_K=2: a cluster pair on one tile's K halves, rank 1's accumulators handed to rank 0 in shared memory", function()
  local kernels, rules = require "emmy.kernels", require "emmy.rules"
  local q = qwen_plan("k_linear_7363a2")
  local src, la = kernels.emit(q, candidate(q, { PERSIST = 1, BM = 128, BN = 128, STAGES = 4, EPI_SMEM = 4, CLUSTER = 1, SPLIT_K = 2 }))
  check(src, tostring(la))
  check(src:find("__cluster_dims__(2, 1, 1)", 1, true), "a 2-CTA cluster")
  check(src:find("for (int em_t = blockIdx.x / 2; em_t < em_tiles; em_t += gridDim.x / 2) {", 1, true), "a tile a cluster")
  check(src:find("kt0 = (int)em_cr * em_kh", 1, true) and src:find("em_load(st, kt0 + kt);", 1, true), "each rank its K half")
  check(src:find("em_st_cluster4(em_ra", 1, true) and src:find("em_mbar_wait_acquire(&em_rfull, em_n & 1u);", 1, true),
    "rank 1 stores into rank 0's buffer, rank 0 waits for it")
  eq(la.persistent, 2, "the launcher keeps whole clusters")
  eq(la.smem, 1024 + 4 * 128 * (128 + 128) + 128 * 128 + 4 * 128 * 128, "the ring, half the tile, rank 1's f32 partials")
  eq(la.scratch_per_tile or 0, 0, "no launch scratch (the other tiers' split-K reduces in global memory)")
  -- SPLIT_K=2 pairs CTAs itself: not with CLUSTER=2 (the emitter and the resource check agree)
  local src2, why = kernels.emit(q, candidate(q, { PERSIST = 1, BM = 128, BN = 128, CLUSTER = 1, SPLIT_K = 1 }, { SPLIT_K = 2, CLUSTER = 2 }))
  check(not src2 and why:find("SPLIT_K=1 (2 with PERSIST=1 and CLUSTER=1 but not EPI_SMEM=6 or 7, 4 also with EPI_SMEM=0)", 1, true), tostring(why))
  local dev = kernels.deploy_device()
  local c = { MMA = 1, TMA = 1, ASYNC = 1, WGMMA = 1, WG_WAIT = 1, PERSIST = 1, PRODUCER = 1, BM = 128, BN = 128, BK = 64, WM = 8,
    WN = 1, STAGES = 4, PAD_SMEM = 0, EPI_SMEM = 4, SPLIT_K = 2, CLUSTER = 2 }
  check(not rules.resource_check({ kind = "contraction", tma_store = true }, c, dev), "SPLIT_K=2 with CLUSTER=2 refused")
  c.CLUSTER = 1
  check(rules.resource_check({ kind = "contraction", tma_store = true }, c, dev), "SPLIT_K=2 with CLUSTER=1 fits")
  nvrtc_compiles("EMMY_KNOBS=k_linear:PERSIST=1,k_linear:SPLIT_K=2")
  -- SPLIT_K=4 with the fragment epilogue: a 4-CTA cluster, the partials reduce-scattered (each rank a quarter of the
  -- columns: every other quarter stored into its owner, the owner's own summed with its three peers' in slot order)
  local d = qwen_plan("k_linear_add_f97280")
  local s4, l4 = kernels.emit(d, candidate(d, { PERSIST = 1, BM = 128, BN = 128, STAGES = 4, EPI_SMEM = 0, CLUSTER = 1, SPLIT_K = 4 }))
  check(s4, tostring(l4))
  check(s4:find("__cluster_dims__(4, 1, 1)", 1, true) and s4:find("em_t += gridDim.x / 4) {", 1, true), "a 4-CTA cluster a tile")
  check(s4:find("const int em_kh = (nk + 3) / 4, kt0 = (int)em_cr * em_kh", 1, true), "each rank a K quarter")
  check(s4:find("em_mbar_init(&em_rfull, 1), em_mbar_init(&em_rempty, 24);", 1, true),
    "the owner's one expect_tx arrival; three peers' 8 warps release")
  check(s4:find("if (tid == 0) em_mbar_expect(&em_rfull, 49152u);", 1, true) and s4:find("em_st_async4(em_ra + 0u,", 1, true),
    "the peers' parts by st.async, their bytes (3 peers x 256 threads x 4 float4) expected once")
  check(s4:find("const unsigned em_p = (em_cr + 3u - em_o) % 4u;", 1, true) and s4:find("for (int em_p = 0; em_p < 3; em_p++) {", 1, true), s4)
  check(s4:find("if (!(j / 4 == (int)em_cr)) continue;", 1, true), "the epilogue on this rank's quarter of the columns")
  eq(l4.persistent, 4, "whole 4-CTA clusters")
  eq(l4.smem, 1024 + 4 * 128 * (128 + 128) + 3 * 128 * 128, "the ring and three peers' quarters (f32)")
  local s5, why5 = kernels.emit(d, candidate(d, { PERSIST = 1, BM = 128, BN = 128, STAGES = 4, EPI_SMEM = 1, CLUSTER = 1, SPLIT_K = 1 }, { SPLIT_K = 4 }))
  check(not s5 and why5:find("4 also with EPI_SMEM=0", 1, true), tostring(why5))
end)

test("the rules' shared memory is the emitter's: knobs.ctr_smem against each TMA-ring candidate's launch (one formula, src/ctr_legal.c)", function()
  local kernels, knobs = require "emmy.kernels", require "emmy.knobs"
  local seen, kinds = 0, {}
  for _, prefix in ipairs { "k_linear_7363a2", "k_linear_add_f97280", "k_linear_silu_mul" } do
    local p = qwen_plan(prefix)
    local n = 0
    for _, c in ipairs(p.candidates) do
      if c.knobs.TMA == 1 and n < 40 then
        local src, la = kernels.emit(p, c.knobs)
        if src then
          n = n + 1
          local dyn, bars = knobs.ctr_smem(p.facts, c.knobs)
          eq(la.smem, dyn, p.kernel.name .. " " .. c.string)
          local kn = c.knobs
          local split = (kn.SPLIT_K or 1) >= 2 and (kn.SPLIT_L2 or 0) == 0
          check(bars == (kn.PERSIST == 1 and 16 * kn.STAGES + (split and 16 or 0) or 0), "the static mbarriers: " .. c.string)
          kinds[("%d/%d/%d/%d"):format(kn.PERSIST or 0, kn.EPI_SMEM or 0, kn.SPLIT_K or 1, kn.WG_K or 1)] = true
        end
      end
    end
    seen = seen + n
  end
  local nk = 0
  for _ in pairs(kinds) do nk = nk + 1 end
  check(seen >= 60 and nk >= 6, ("%d candidates, %d kinds of PERSIST/EPI_SMEM/SPLIT_K/WG_K"):format(seen, nk))
end)

test("SPLIT_L2=1: SPLIT_K's parts summed through the launch scratch by a group of consecutive CTAs, no cluster; refusals name why; NVRTC compiles it", function()
  local kernels, rules = require "emmy.kernels", require "emmy.rules"
  local d = qwen_plan("k_linear_add_f97280")
  local kn = candidate(d, { PERSIST = 1, BM = 128, BN = 128, STAGES = 6, EPI_SMEM = 0, CLUSTER = 1, SPLIT_K = 4, SPLIT_L2 = 1 })
  local src, la = kernels.emit(d, kn)
  check(src, tostring(la))
  check(not src:find("__cluster_dims__", 1, true) and not src:find("em_cluster_sync", 1, true), "no cluster")
  check(src:find("const unsigned em_cr = blockIdx.x % 4u;", 1, true) and src:find("em_t += gridDim.x / 4) {", 1, true), "a group of 4 a tile")
  check(src:find("const int em_kh = (nk + 3) / 4, kt0 = (int)em_cr * em_kh", 1, true), "each rank a K quarter")
  check(not src:find("em_rfull", 1, true), "no shared-memory exchange")
  -- the other ranks' quarters into this CTA's slot, flagged; the peers' parts of this rank's quarter read, flags lowered
  check(src:find("__stcg(em_lw + ((em_o * 1 + 0) * 4 + j % 4) * 256, make_float4(acc[0][j][0]", 1, true), src)
  check(src:find("if (tid < 4 && tid != (int)em_cr) em_flag_set(em_lf + blockIdx.x * 4 + tid, 1u);", 1, true), "a flag an owner")
  check(src:find("em_flag_wait(em_lf + (em_lg + tid) * 4 + (int)em_cr, 1u);", 1, true), "the owner waits for its peers")
  check(src:find("const float4 em_x0 = __ldcg(em_lr + (((int)em_cr * 1 + 0) * 4 + j % 4) * 256);", 1, true), "the parts read from L2")
  check(src:find("em_flag_set(em_lf + (em_lg + tid) * 4 + (int)em_cr, 0u); /* read */", 1, true), "the flags lowered once read")
  check(src:find("if (em_n != 0u) { /* the owners have read this CTA's last parts */", 1, true), "a slot rewritten only once read")
  check(src:find("if (!(j / 4 == (int)em_cr)) continue;", 1, true), "the epilogue on this rank's quarter of the columns")
  eq(la.persistent, 1, "no cluster for the launcher")
  eq(la.group, 4, "the grid in whole groups")
  eq(la.scratch_per_tile, 4 * 128 * 128 + 16, "a CTA's slot (the tile's f32 partial sums) and its flags")
  eq(la.smem, 1024 + 6 * 128 * (128 + 128), "the ring alone: no partials in shared memory")
  -- with STAMP=1 the slots follow every CTA's record
  kn.STAMP = 1
  local s2, l2 = kernels.emit(d, kn)
  check(s2 and s2:find("float *const em_lb = em_scratch + (long long)gridDim.x * 40;", 1, true), tostring(l2))
  eq(l2.scratch_per_tile, 4 * 128 * 128 + 16 + 160, "the record, then the slot and flags")
  kn.STAMP = 0
  -- refusals: the emitter and the resource check agree
  local dev = kernels.deploy_device()
  local c = { MMA = 1, TMA = 1, ASYNC = 1, WGMMA = 1, WG_WAIT = 1, PERSIST = 1, PRODUCER = 1, BM = 128, BN = 128, BK = 64, WM = 8,
    WN = 1, STAGES = 6, PAD_SMEM = 0, EPI_SMEM = 0, SPLIT_K = 4, SPLIT_L2 = 1, CLUSTER = 1 }
  check(rules.resource_check({ kind = "contraction" }, c, dev), "SPLIT_K=4 through L2 fits (no partials in shared memory)")
  for _, bad in ipairs { { SPLIT_K = 1 }, { EPI_SMEM = 5 }, { PERSIST = 0 } } do
    local c2 = {}
    for key, v in pairs(c) do c2[key] = v end
    for key, v in pairs(bad) do c2[key] = v end
    check(not rules.resource_check({ kind = "contraction" }, c2, dev), "refused: " .. next(bad))
  end
  local s3, why3 = kernels.emit(d, candidate(d, { PERSIST = 1, BM = 128, BN = 128, STAGES = 6, EPI_SMEM = 5, CLUSTER = 1, SPLIT_K = 1 }, { SPLIT_K = 4, SPLIT_L2 = 1 }))
  check(not s3 and why3:find("SPLIT_L2=1 sums", 1, true), tostring(why3))
  local s4, why4 = kernels.emit(d, candidate(d, { PERSIST = 1, BM = 128, BN = 128, STAGES = 6, EPI_SMEM = 0, CLUSTER = 1, SPLIT_K = 1 }, { SPLIT_L2 = 1 }))
  check(not s4 and why4:find("SPLIT_K 2 or 4", 1, true), tostring(why4))
  -- the default text is unchanged without it: the cluster's reduce-scatter
  local s5 = assert(kernels.emit(d, candidate(d, { PERSIST = 1, BM = 128, BN = 128, STAGES = 4, EPI_SMEM = 0, CLUSTER = 1, SPLIT_K = 4 })))
  check(s5:find("__cluster_dims__(4, 1, 1)", 1, true) and not s5:find("em_flag", 1, true), "SPLIT_L2=0: the cluster")
  local pins = ("PERSIST=1,BM=128,WM=8,BN=128,EPI_SMEM=0,WG_K=1,SPLIT_K=4,SPLIT_L2=1,STAGES=6"):gsub("([%w_]+=)", "k_linear_add:%1")
  nvrtc_compiles("EMMY_KNOBS=" .. pins)
end)

test("WG_PP=1: two consumer warpgroups take alternate 64-row tiles, their K loops in turn on named barriers 4 and 5; refusals name why; NVRTC compiles it", function()
  local kernels, rules = require "emmy.kernels", require "emmy.rules"
  local d = qwen_plan("k_linear_add_f97280")
  local kn = candidate(d, { PERSIST = 1, BM = 64, EPI_SMEM = 0, CLUSTER = 1, WG_K = 1, WG_PP = 1 })
  local src, la = kernels.emit(d, kn)
  check(src, tostring(la))
  eq(la.block[1], 384, "two consumer warpgroups and the producer's")
  check(src:find("em_mbar_init(&em_empty[s], 4);", 1, true), "a stage released by the one warpgroup that used it")
  check(src:find("for (int em_t = blockIdx.x + em_g * gridDim.x; em_t < em_tiles; em_t += 2 * gridDim.x) {", 1, true), "alternate tiles")
  check(src:find("em_it = em_i * nk;", 1, true), "the tile's ring uses where the producer put them")
  -- the turn: a warpgroup's K loop waits for the other's last (its uses of a stage are then the next ones), and
  -- lets the other's next start once its own is done
  check(src:find('if (em_i >= 1) asm volatile("bar.sync %0, 256;" :: "r"(5 - em_g) : "memory");', 1, true), "the wait for the turn")
  check(src:find('if (em_t + (int)gridDim.x < em_tiles) asm volatile("bar.arrive %0, 256;" :: "r"(4 + em_g) : "memory");', 1, true), "the turn given")
  local k1 = src:find("em_wg_wait0();", 1, true)
  local a1 = src:find("bar.arrive %0, 256;", 1, true)
  local e1 = src:find("em_rbf(acc[i][j][q])", 1, true)
  check(k1 and a1 and e1 and k1 < a1 and a1 < e1, "the turn given before the epilogue")
  -- refusals: the emitter and the resource check agree
  local dev = kernels.deploy_device()
  local c = { MMA = 1, TMA = 1, ASYNC = 1, WGMMA = 1, WG_WAIT = 1, PERSIST = 1, PRODUCER = 1, BM = 64, BN = 64, BK = 64, WM = 4,
    WN = 1, STAGES = 8, PAD_SMEM = 0, EPI_SMEM = 0, SPLIT_K = 1, CLUSTER = 1, WG_K = 1, WG_PP = 1 }
  check(rules.resource_check({ kind = "contraction" }, c, dev), "WG_PP=1 at 64 x 64 fits")
  for _, bad in ipairs { { BM = 128, WM = 8 }, { EPI_SMEM = 5 }, { WG_K = 2 }, { SPLIT_K = 2 } } do
    local c2 = {}
    for key, v in pairs(c) do c2[key] = v end
    for key, v in pairs(bad) do c2[key] = v end
    check(not rules.resource_check({ kind = "contraction" }, c2, dev), "refused: " .. next(bad))
  end
  local s3, why3 = kernels.emit(d, candidate(d, { PERSIST = 1, BM = 64, EPI_SMEM = 5, CLUSTER = 1, WG_K = 1 }, { WG_PP = 1 }))
  check(not s3 and why3:find("WG_PP=1 gives", 1, true), tostring(why3))
  -- without it the text is the one warpgroup's
  kn.WG_PP = 0
  local s0 = assert(kernels.emit(d, kn))
  check(not s0:find("const int em_g = ", 1, true) and not s0:find("bar.arrive", 1, true), "WG_PP=0: one warpgroup")
  nvrtc_compiles("EMMY_KNOBS=f97280:WG_PP=1,f97280:PERSIST=1,f97280:BM=64,f97280:EPI_SMEM=0")
end)

test("WG_K=2 needs a ring of 3+ stages (a group frees its step u - 2 after waiting for step u: one stage over 2, a deadlock on the GPU); the emitter and the resource check agree", function()
  local kernels, rules = require "emmy.kernels", require "emmy.rules"
  local d = qwen_plan("k_linear_add_f97280")
  local kn = candidate(d, { PERSIST = 1, BM = 64, EPI_SMEM = 5, CLUSTER = 1, WG_K = 2, STAGES = 4 })
  check(kernels.emit(d, kn), "WG_K=2 over 4 stages emits")
  kn.STAGES = 2
  local s2, why2 = kernels.emit(d, kn)
  check(not s2 and why2:find("STAGES >= 3", 1, true), tostring(why2))
  local dev = kernels.deploy_device()
  local c = { MMA = 1, TMA = 1, ASYNC = 1, WGMMA = 1, WG_WAIT = 1, PERSIST = 1, PRODUCER = 1, BM = 64, BN = 64, BK = 64, WM = 4,
    WN = 1, STAGES = 3, PAD_SMEM = 0, EPI_SMEM = 0, SPLIT_K = 1, CLUSTER = 1, WG_K = 2, WG_PP = 0 }
  check(rules.resource_check({ kind = "contraction", K = 1024 }, c, dev), "WG_K=2 over 3 stages fits")
  c.STAGES = 2
  local ok, why = rules.resource_check({ kind = "contraction", K = 1024 }, c, dev)
  check(not ok and why:find("STAGES >= 3", 1, true), tostring(why))
  for _, p in ipairs { d, qwen_plan("k_linear_silu_mul") } do
    for _, cand in ipairs(p.candidates) do
      check(not (cand.knobs.WG_K == 2 and cand.knobs.STAGES < 3), p.kernel.name .. ": " .. cand.string)
    end
  end
end)

test("merged siblings in CLUSTER=2's pairs of tile rows: each CTA multicasts half of its sibling's weight tile (a half box a weight); PAIR_A=1 refused (the pair's columns could straddle two weights)", function()
  local function pins(p) return args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_e4e144", "--pins", p) end
  local code, src, err = emmy_default(pins("CLUSTER=2,STAGES=4"))
  eq(code, 0, err)
  check(src:find("__cluster_dims__(2, 1, 1)", 1, true), src)
  check(src:find("if (n0 < 2048LL) em_tma_2d_mc(em_sb + 65536u + st * 16384u + em_cr * 8192u, &tm1, kt * 64, (int)(n0 - 0LL) + (int)em_cr * 64,", 1, true), src)
  check(src:find("else if (n0 < 4096LL) em_tma_2d_mc(em_sb + 65536u + st * 16384u + em_cr * 8192u, &tm3, kt * 64, (int)(n0 - 3072LL) + (int)em_cr * 64,", 1, true), src)
  local c2, _, e2 = emmy_default(pins("CLUSTER=2,PAIR_A=1"))
  check(c2 ~= 0 and e2:find("PERSIST=1 over merged siblings", 1, true) and e2:find("PAIR_A=0", 1, true), e2)
  local rules = require "emmy.rules"
  local c = { MMA = 1, TMA = 1, ASYNC = 1, WGMMA = 1, WG_WAIT = 1, PERSIST = 1, PRODUCER = 1, BM = 128, BN = 128, BK = 64, WM = 8,
    WN = 1, STAGES = 4, PAD_SMEM = 0, EPI_SMEM = 0, SPLIT_K = 1, CLUSTER = 2, PAIR_A = 0, WG_K = 1, WG_PP = 0 }
  local k = { kind = "contraction", K = 1024, N = 4096, siblings = 3 }
  local dev = require("emmy.kernels").deploy_device()
  check(rules.resource_check(k, c, dev), "CLUSTER=2 over merged siblings fits")
  c.PAIR_A = 1
  local ok, why = rules.resource_check(k, c, dev)
  check(not ok and why:find("PAIR_A=0", 1, true), tostring(why))
end)

test("kernels.pin_notes: a pin that takes a candidate differing from the rules' choice in knobs it did not pin is named, with both values; a pin the choice already has, none", function()
  local compiler, kernels = require "emmy.compiler", require "emmy.kernels"
  local g = require("emmy.frontend").load("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } }).graph
  local ctx = compiler.run(g)
  local function notes(spec)
    local env = function(k) if k == "EMMY_KNOBS" then return spec end end
    return kernels.pin_notes(kernels.plan(ctx, { env = env }))
  end
  local n = notes("k_linear_e4:EPI_SMEM=0")
  eq(#n, 1, table.concat(n, "\n"))
  check(n[1]:find("^pins: k_linear_e4e144 runs [%w_=,]+ beyond its pins %(the first candidate with them; the rules' choice has [%w_=,]+%)$"), n[1])
  check(not n[1]:find("EPI_SMEM", 1, true), "the pinned knob is not a difference: " .. n[1])
  eq(#notes("k_linear_e4:EPI_SMEM=5"), 0, "the choice's own value")
  eq(#notes(nil), 0, "no pins")
end)

test("EMMY_PDL=4: the norms trigger the next launch at their start; the projections do not, nor the default text", function()
  local whole = args("compile", L0, "--ir", "cuda")
  local p4, p0 = select(2, emmy_default(whole, { env = "EMMY_PDL=4" })), select(2, emmy_default(whole))
  eq(select(2, p0:gsub("launch_dependents", "")), 0, "the default: no trigger")
  local rows = 0
  for kname, body in p4:gmatch("// kernel (k_[%w_]+): (.-)\n}\n") do
    local trig = body:find("griddepcontrol.launch_dependents", 1, true) ~= nil
    check(trig == (kname:find("^k_rms_norm") ~= nil), kname .. (trig and ": a trigger" or ": none"))
    if trig then rows = rows + 1 end
  end
  eq(rows, 3, "Qwen3's three distinct norms")
end)

test("STAMP=1: clock marks in both roles summed into a per-CTA record in the launch scratch; none at STAMP=0", function()
  local kernels = require "emmy.kernels"
  local q = qwen_plan("k_linear_7363a2")
  local kn = candidate(q, { PERSIST = 1, BM = 128, BN = 256, EPI_SMEM = 1, CLUSTER = 1 })
  local plain = assert(kernels.emit(q, kn))
  check(not plain:find("em_clock", 1, true) and not plain:find("em_scratch", 1, true), "STAMP=0 adds nothing")
  kn.STAMP = 1
  local src, la = kernels.emit(q, kn)
  check(src, tostring(la))
  eq(la.scratch_per_tile, 160, "4 roles x 10 unsigned a CTA")
  check(src:find("static __device__ __forceinline__ unsigned em_clock() {", 1, true), "the stamp prelude")
  check(src:find("unsigned *const em_st = reinterpret_cast<unsigned *>(em_scratch) + blockIdx.x * 40;", 1, true), src)
  check(src:find("const unsigned long long em_g0 = em_gtime(); const unsigned em_e0 = em_clock();", 1, true), "the CTA's entry")
  -- the producer: its empty-barrier waits and load issue, written by its lane to role 2
  check(src:find("const unsigned em_c0 = em_clock%(%);%s+em_mbar_wait%(&em_empty%[st%]"), src)
  check(src:find("unsigned *const em_w = em_st + 20;", 1, true), src)
  -- the consumers: full wait, wgmma issue to wait_group 1, release per k-step; tail and epilogue per tile; the first
  -- thread of each warpgroup writes its role
  check(src:find("const unsigned em_c0 = em_clock%(%);%s+em_mbar_wait%(&em_bar%[st%]"), src)
  check(src:find("em_wg_wait1();\n      const unsigned em_c2 = em_clock();", 1, true), src)
  check(src:find("em_sw += em_c1 - em_c0, em_sm += em_c2 - em_c1, em_sr += em_clock() - em_c2;", 1, true), src)
  check(src:find("em_stl += em_c4 - em_c3, em_se += em_clock() - em_c4;", 1, true), src)
  check(src:find("if ((tid & 127) == 0) {\n    unsigned *const em_w = em_st + (tid >> 7) * 10;", 1, true), src)
  -- the kernel is otherwise the same: the STAMP=0 kernel's lines appear in order, and every other line is stamp code
  local function body_lines(text)
    local out = {}
    for l in text:match("\n// kernel [^\n]*\n(.*)"):gmatch("[^\n]+") do out[#out + 1] = l end
    return out
  end
  local want, got, i = body_lines(plain), body_lines(src), 1
  for _, l in ipairs(got) do
    if l == want[i] then
      i = i + 1
    else
      local stamp = l:match("^%s*[{}]$") or l:find("if ((tid & 127) == 0) {", 1, true) or l:find("if (tid == 0) {", 1, true)
      for _, id in ipairs { "em_clock", "em_scratch", "em_st", "em_w", "em_s0", "em_sn", "em_sw ", "em_si", "em_gtime", "em_g1" } do
        stamp = stamp or l:find(id, 1, true)
      end
      check(stamp, "a line STAMP=1 adds that is no stamp code: " .. l)
    end
  end
  eq(i, #want + 1, "every line of the STAMP=0 kernel, in order")
  -- refused off the persistent pipeline
  local off = candidate(q, { PERSIST = 0 }, { STAMP = 1 })
  local none, why = kernels.emit(q, off)
  check(not none and why:find("STAMP=1 stamps the roles of the persistent GEMM", 1, true), tostring(why))
  -- NVRTC compiles it (nothing to check where NVRTC is missing)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if ok and nv.version() then
    local r = nv.compile_many({ { source = src, arch = "sm_90a", name = "stamp.cu", options = { "-std=c++17" } } })[1]
    eq(r.status, "ok", "NVRTC: " .. tostring(r.log))
  end
end)

test("emmy.stamps: the CTAs' records summed per role, the SM clock from the slowest CTA, the printed table", function()
  local stamps = require "emmy.stamps"
  local F = stamps.FIELDS
  -- two CTAs that ran (BM 128: two consumer warpgroups) and one record left at zero
  local rec = {
    { { 4, 256, 2560, 256000, 2560, 400, 40000, 350000, 2000, 0 }, { 4, 256, 5120, 256000, 2560, 400, 40000, 349000, 0, 0 },
      { 0, 256, 25600, 5120, 0, 0, 0, 348000, 0, 0 }, { -1000, 1, -800, 1, 3000, 800, 1200, 400, 0, 1 } },
    { { 3, 192, 1920, 192000, 1920, 300, 30000, 262500, 1500, 0 }, { 3, 192, 3840, 192000, 1920, 300, 30000, 262000, 0, 0 },
      { 0, 192, 19200, 3840, 0, 0, 0, 261000, 0, 0 }, { -500, 1, -700, 1, 1000, 600, 900, 300, 0, 1 } },
    { { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
      { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 } },
  }
  eq(F, 10, "ten fields a role")
  local v = {}
  for _, cta in ipairs(rec) do for _, role in ipairs(cta) do for f = 1, F do v[#v + 1] = role[f] end end end
  local r = stamps.summarize(v, #rec)
  eq(r[1].ctas, 2, "consumer records")
  eq(r[1].f[2], 448, "k-steps")
  eq(r[1].max_total, 350000, "the slowest CTA")
  eq(r[3].f[3], 44800, "producer empty waits")
  local text = stamps.render(r, 200, 1755)
  check(text:find("2 CTAs; a CTA 3.50 tiles, 224.0 k-steps; SM clock ≈ 1.75 GHz (the slowest CTA's 350000 cycles in 200.0 µs); "
    .. "the clock probe after it: 1755 MHz", 1, true), text)
  -- consumer wg0: 10 cycles of full wait, 1000 of wgmma, 10 of release a k-step; 500 of head, 100 of tail, 10000 of
  -- epilogue a tile; the tile ends (head, tail, epilogue) 12% of the total
  check(text:find("consumer wg0%s+10%.0%s+1000%.0%s+10%.0%s+500%.0%s+100%.0%s+10000%.0%s+5%.7%s+306250%.0%s+350000%s+75%%%s+12%%"), text)
  check(text:find("producer%s+100%.0%s+20%.0"), text)
  -- the timeline (role 4, the global timer's words as i32 read them: -1000 is 2^32 - 1000 ns): entries 0.50 µs
  -- apart, exits 0.10, first entry to last exit 0.30 µs; the prologue 2000 cycles on average
  check(text:find("the CTAs entered over 0.50 µs and left over 0.10 µs; first entry to last exit 0.30 µs of the launch's "
    .. "200.0 µs; the prologue (entry to the consumers' loop) 2000 cycles a CTA", 1, true), text)
  -- the split-K reduce-scatter's parts, thread 0's sums over the 7 tiles: stores 200, wait 300, reads and release 100
  check(text:find("split-K reduce-scatter (thread 0): its stores 200 cycles a tile, its wait for the peers' parts 300, "
    .. "its reads, adds and release 100", 1, true), text)
  -- a buffer read back: download as i32, as many records as it holds
  local buf = { size = function() return 4 * F * 4 * #rec end,
    download = function(_, dt, shape)
      eq(dt, "i32")
      eq(shape[1], #v)
      return { to_table = function() return v end }
    end }
  eq(stamps.read(buf)[1].ctas, 2, "read")
  -- a scratch kept at a larger launch's size: only this launch's records (its slots follow them)
  local big = { size = function() return 3 * buf.size() end, download = buf.download }
  eq(stamps.read(big, nil, #rec)[1].ctas, 2, "the launch's CTAs, not the buffer's")
end)

test("emmy.stamps: FLASH=2 attention's records (5 roles) summed per role, the timeline, the printed table", function()
  local stamps = require "emmy.stamps"
  local A = stamps.ATTENTION
  -- one CTA: consumer warpgroup 0 (1 item, 3 steps: K wait 30, turn 0, issue 300, S wait 60, softmax 900, PV wait
  -- 90, epilogue 500, total 6000), warpgroups 1 and 2 absent, the producer (1 item, 4 loads, waits 400, issue 80,
  -- total 5000), the timeline (entry 1000 ns, end 3000 ns, 700 cycles to the consumers' start)
  local rec = { { 1, 3, 30, 0, 300, 60, 900, 90, 500, 6000 }, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { 1, 4, 400, 80, 0, 0, 0, 0, 0, 5000 }, { 1000, 0, 3000, 0, 700, 0, 0, 0, 0, 1 } }
  local v = {}
  for _, role in ipairs(rec) do for f = 1, A.FIELDS do v[#v + 1] = role[f] end end
  local buf = { size = function() return 4 * A.FIELDS * A.ROLES end,
    download = function(_, dt, shape) eq(dt, "i32"); eq(shape[1], #v); return { to_table = function() return v end } end }
  local r = assert(stamps.read_attention(buf))
  eq(r[1].ctas, 1, "consumer wg0")
  eq(r[2].ctas, 0, "wg1 absent")
  eq(r[4].f[2], 4, "the producer's loads")
  eq(r.timeline.prologue, 700, "entry to the consumers' start")
  local text = stamps.render_attention(r, 3.0)
  -- per step 10 / 0 / 100 / 20 / 300 / 30; epilogue 500 and the rest 6000 - 1380 - 500 = 4120 an item
  check(text:find("consumer wg0%s+10%s+0%s+100%s+20%s+300%s+30%s+500%s+4120%s+6000%s+6000%s+23%%"), text)
  check(text:find("producer%s+100%s+%-%s+20"), text)
  check(text:find("first entry to last end 2.00 µs of the launch's 3.0 µs; entry to the consumers' start 700 cycles", 1, true), text)
end)

test("the wide one-wave leads (atom.wide_one_wave): Qwen3-4B's q at 128 x 128 with the TMA store, o and down at 128 x 80 with the fragment epilogue, RASTER=8, 6 stages; NVRTC compiles them", function()
  local q4 = { "Qwen/Qwen3-4B", "--layer", "0", "--dynamic", "seq_len@x:1" }
  local c, o = emmy(args("compile", q4, "--ir", "tile"))
  eq(c, 0, o)
  local function knobs_of(name) return o:match(name .. "%s+contraction%s+%d+%s+(%S+)") or "" end
  local q = knobs_of("k_linear_f0274a")
  check(q:find("BM=128,BN=128,", 1, true) and q:find("EPI_SMEM=4,", 1, true) and q:find("PERSIST=1,", 1, true) and
    q:find("RASTER=8,", 1, true) and q:find("STAGES=6,", 1, true), q)
  for _, name in ipairs { "k_linear_add_cbbea5", "k_linear_add_d4f3d9" } do
    local k = knobs_of(name)
    check(k:find("BM=128,BN=80,", 1, true) and k:find("EPI_SMEM=0,", 1, true) and k:find("PERSIST=1,", 1, true) and
      k:find("RASTER=8,", 1, true) and k:find("STAGES=6,", 1, true) and k:find("SPLIT_K=1,", 1, true), name .. ": " .. k)
  end
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then return end
  local cc, co, ce = emmy(args("compile", q4, "--kernel", "k_linear", "--nvrtc"), { env = "EMMY_CUBIN_CACHE=" .. tmpdir() })
  eq(cc, 0, ce)
  check(co:find(" compiled, 0 failed", 1, true), co)
end)

test("PERSIST=1 leads where a 128 x 128 tile grid fills every SM (batch 8), and at batch 1 where its tiles make one wave", function()
  local _, o8 = emmy(args("compile", L0, "--batch", "8", "--ir", "tile", "--kernel", "k_linear_add"))
  check(o8:find("PERSIST=1", 1, true), o8)
  -- batch 1, 512 tokens (atom.persist_small): q_proj at 128 x 64 with the TMA store, 8 stages; o and down at 128 x
  -- 64 split in two over K (atom.split2_small), the fragment epilogue, 6 stages; k+v (one wave of 64 x 64 dual tiles, atom.dual_one_wave) persistent at 64 x 64
  -- with the 16-byte stores, 6 stages; gate/up keeps the non-persistent 64 x 64 tile, its weight tiles side by side
  -- (DUAL_WIDE=1), 3 stages
  local _, o1 = emmy(args("compile", L0, "--ir", "cuda"))
  local function knobs_of(name) return o1:match("// kernel " .. name .. "[^\n]*") or "" end
  local q, o, d = knobs_of("k_linear_7363a2"), knobs_of("k_linear_add_67d546"), knobs_of("k_linear_add_f97280")
  check(q:find("BM=128,BN=64,", 1, true) and q:find("EPI_SMEM=4,", 1, true) and q:find("PERSIST=1,", 1, true) and q:find("STAGES=8,", 1, true), q)
  for _, k in ipairs { o, d } do
    check(k:find("BM=128,BN=64,", 1, true) and k:find("EPI_SMEM=0,", 1, true) and k:find("PERSIST=1,", 1, true) and k:find("STAGES=6,", 1, true)
      and k:find("SPLIT_K=2,", 1, true) and k:find("WG_K=1,", 1, true) and k:find("WM=8,", 1, true), k)
  end
  local kv = knobs_of("k_linear_ad15f3")
  check(kv:find("BM=64,BN=64,", 1, true) and kv:find("EPI_SMEM=5,", 1, true) and kv:find("PERSIST=1,", 1, true) and kv:find("STAGES=6,", 1, true)
    and kv:find("WG_K=1,", 1, true), kv)
  local gu = knobs_of("k_linear_silu_mul_b9e1e1")
  check(gu:find("PERSIST=0,", 1, true) and gu:find("DUAL_WIDE=1,", 1, true) and gu:find("STAGES=3,", 1, true), gu)
  -- the residual (the 64 x 64 staged lead before atom.split2_small, pinned): every chunk's 16-byte load issued
  -- together after the tile is staged (ws_chunk_prefetch), each chunk reads its own
  local _, o2 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_add_f97280"),
    { env = "EMMY_KNOBS=k_linear_add_f97280:BM=64,k_linear_add_f97280:WM=4,k_linear_add_f97280:SPLIT_K=1,"
      .. "k_linear_add_f97280:EPI_SMEM=5,k_linear_add_f97280:WG_K=2,k_linear_add_f97280:STAGES=12" })
  local body = o2:match("// kernel k_linear_add_f97280.-\n}\n") or ""
  check(body:find("if (em_rva0[em_i]) em_rqa0[em_i] = *reinterpret_cast<const uint4 *>(in2 + ", 1, true), body)
  check(body:find("const uint4 em_rq = em_rqa0[em_i];", 1, true) and not body:find("em_pf[j]", 1, true), body)
  -- (WG_K=2: K group 0 issues them before its K loop, ws_kgroup_ahead)
  local ld, loop = body:find("em_rqa0[em_i] = *reinterpret_cast", 1, true), body:find("for (int kt = em_g; kt < nk; kt += 2)", 1, true)
  check(ld and loop and ld < loop, body)
end)

test("VIEW_OUT=1 writes attention in o_proj's layout, so o_proj's operand is a plain input (cp.async)", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "kernel"), { env = "EMMY_VIEW_OUT=1" })
  eq(code, 0, "exit: " .. err)
  check(out:find("k_sdpa_%x+%s+attention%s+%S+%s+%d+%s+v%d+ bf16%[1, seq_len, 2048%]"), out)
  local _, ex = emmy(args("compile", L0, "--explain", "--kernel", "k_linear_add"), { env = "EMMY_VIEW_OUT=1" })
  check(ex:find("cp_async%s+COPY%s+ok"), ex)
end)

test("DUAL_GATE=1: gate/up in one kernel with two accumulators and SiLU(gate)*up as its epilogue", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "kernel"), { env = "EMMY_DUAL_GATE=1" })
  eq(code, 0, "exit: " .. err)
  check(out:find("10 kernels (9 distinct)", 1, true), out)
  check(out:find("k_linear_silu_mul_%x+%s+contraction%s+aten.linear.default%s+4%s+v82 bf16%[1, seq_len, 3072%]"), out)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if ok and nv.version() then
    for _, mma in ipairs { "0", "1" } do
      local c3, o3, e3 = emmy(args("compile", L0, "--nvrtc"), { env = "EMMY_DUAL_GATE=1 EMMY_MMA=" .. mma .. " EMMY_CUBIN_CACHE=" .. tmpdir() })
      eq(c3, 0, "nvrtc MMA=" .. mma .. ": " .. e3)
      check(o3:find("9 compiled, 0 failed", 1, true), o3)
    end
  end
end)

test("the main-job workflow does every GPU-free step, says which need a GPU, records run.json; --from", function()
  local w = tmpdir()
  local code, out, err = emmy({ ROOT .. "/scripts/workflows/tune_model.lua", "--sample", "2", "--work", w, "--report", w .. "/report.md" },
    { env = "EMMY_CUBIN_CACHE=" .. tmpdir() })
  eq(code, 0, "exit: " .. err .. out)
  for _, s in ipairs { "  setup    ok", "  trace    ok", "  compile  ok" } do check(out:find(s, 1, true), out) end
  local has_gpu = require("emmy.sys").cuda() ~= nil
  if not has_gpu then check(out:find("need a GPU, skipped: run, tune, triage, report", 1, true), out) end
  local run = require("cjson").decode(assert(io.open(w .. "/run.json")):read("*a"))
  check(run.command:find("tune_model.lua --sample 2", 1, true) and #run.steps >= 3, "run.json records the steps")
  -- --from: only the later steps run, the earlier ones' entries stay in run.json
  local c2, o2, e2 = emmy({ ROOT .. "/scripts/workflows/tune_model.lua", "--work", w, "--from", "compile", "--sample", "2", "--report", w .. "/report.md" },
    { env = "EMMY_CUBIN_CACHE=" .. tmpdir() })
  eq(c2, 0, e2 .. o2)
  check(not o2:find("trace: emmy trace", 1, true) and o2:find("compile: emmy compile", 1, true) and o2:find("  trace    ok", 1, true), o2)
  local run2 = require("cjson").decode(assert(io.open(w .. "/run.json")):read("*a"))
  eq(run2.command, run.command, "the full run's command stays")
  check(#run2.reruns == 1 and run2.reruns[1].from == "compile" and run2.reruns[1].command:find("--from compile", 1, true), "the re-run listed")
  local c3, _, e3 = emmy { ROOT .. "/scripts/workflows/tune_model.lua", "--from", "nowhere" }
  check(c3 == 2 and e3:find("--from nowhere (one of setup, trace", 1, true), e3)
end)

test("the workflow's --shard I/N: its share of the NVRTC compiles, the merge's steps left to it, the merge command printed", function()
  local w = tmpdir()
  local code, out, err = emmy({ ROOT .. "/scripts/workflows/tune_model.lua", "--sample", "2", "--shard", "1/3", "--work", w, "--report", w .. "/report.md" },
    { env = "EMMY_CUBIN_CACHE=" .. tmpdir() })
  eq(code, 0, "exit: " .. err .. out)
  check(out:find("--shard 1/3", 1, true) and out:find("nvrtc: shard 1/3 of the variants", 1, true), out)
  for _, step in ipairs { "run", "triage", "report" } do
    check(out:find(step .. ": left to the merge of the shards (--shard 1/3)", 1, true), step .. ": " .. out)
  end
  check(out:find("emmy db merge OUT.db", 1, true) and out:find(w .. "/tune.db", 1, true), out)
  local c2, _, e2 = emmy { ROOT .. "/scripts/workflows/tune_model.lua", "--shard", "3/3" }
  check(c2 == 2 and e2:find("--shard 3/3: I/N with 0 <= I < N", 1, true), e2)
end)

test("an epilogue never reads the anchor at another index (a roll of a matmul is its own kernel)", function()
  local ir = require "emmy.ir"
  local g = ir.new("roll")
  local a = assert(g:input("a", "bf16", { 4, 16 }))
  local b = assert(g:input("b", "bf16", { 16, 8 }))
  local y = assert(g:node("aten.mm.default", { self = a, mat2 = b }))
  local hi = assert(g:node("aten.slice.Tensor", { self = y, dim = -1, start = 4, ["end"] = 8 }))
  local lo = assert(g:node("aten.slice.Tensor", { self = y, dim = -1, start = 0, ["end"] = 4 }))
  local z = assert(g:node("aten.cat.default", { tensors = { hi, lo }, dim = -1 }))
  assert(g:output(assert(g:node("aten.add.Tensor", { self = y, other = z }))))
  local d = tmpdir()
  assert(graphjson.write(g, d .. "/roll.torch.json"))
  local code, out, err = emmy { "compile", d .. "/roll.torch.json", "--ir", "kernel" }
  eq(code, 0, "exit: " .. err)
  check(out:find("2 kernels", 1, true), out)
  check(out:find("k_mm_%x+%s+contraction%s+aten.mm.default%s+1%s"), "the matmul kernel holds only the matmul: " .. out)
end)

test("ROPE_EPI=1: a Llama q/k projection takes RoPE's rotate_half as its epilogue, over a staged result tile", function()
  local LL = { "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1" }
  local code, out, err = emmy(args("compile", LL, "--ir", "kernel"))
  eq(code, 0, "exit: " .. err)
  check(out:find("8 kernels (7 distinct)", 1, true), out)
  check(not out:find("k_rope_", 1, true), "no pointwise RoPE kernel is left: " .. out)
  check(out:find("k_linear_rope_%x+%s+contraction%s+aten.linear.default%s+16%s+v36 bf16%[1, 32, seq_len, 64%]"), out)
  -- the structural fork's other side: the slices, neg and cat form pointwise kernels
  local c0, o0 = emmy(args("compile", LL, "--ir", "kernel"), { env = "EMMY_ROPE_EPI=0" })
  eq(c0, 0, "ROPE_EPI=0")
  check(o0:find("12 kernels (11 distinct)", 1, true) and o0:find("k_rope_", 1, true), o0)
  -- the non-persistent tiers stage the tile in shared memory (over the operand ring), then the epilogue reads the
  -- partner column there
  local c1, src, e1 = emmy(args("compile", LL, "--ir", "cuda", "--kernel", "k_linear_rope"), { env = "EMMY_KNOBS=k_linear_rope:PERSIST=0" })
  eq(c1, 0, "cuda: " .. e1)
  check(src:find("em_stage0[ml * 72 + nl] = ", 1, true) and src:find("/* v19, staged */", 1, true), src)
  -- (two kernels, each element's partner in the other half: two reads an element, the fragment epilogue takes
  -- its elements in adjacent pairs)
  check(select(2, src:gsub("/%* v%d+, staged %*/", "")) == 8, "two staged partner reads (the two halves) for each of a pair, in each kernel")
  -- BN must hold whole heads (64 columns): the rule refuses BN=32 with the head width in its reason
  local rules = require "emmy.rules"
  local ok, why = rules.resource_check({ kind = "contraction", stage = 64 }, { BM = 64, BN = 32, MMA = 0, TM = 4, TN = 4, BK = 16 },
    { max_threads = 1024, smem_static = 49152, smem_optin = 232448, regs_per_block = 65536 })
  check(not ok and why:find("whole heads of 64 columns", 1, true), tostring(why))
  local ok2, nv = pcall(require, "emmy.nvrtc")
  if ok2 and nv.version() then
    for _, k in ipairs { "MMA=0", "WGMMA=0,TMA=0,PAD_SMEM=8", "SPLIT_K=2" } do
      local c3, o3, e3 = emmy(args("compile", LL, "--nvrtc", "--kernel", "k_linear_rope"),
        { env = "EMMY_KNOBS=" .. k .. " EMMY_CUBIN_CACHE=" .. tmpdir() })
      eq(c3, 0, "nvrtc " .. k .. ": " .. e3)
      check(o3:find("2 compiled, 0 failed", 1, true), o3)
    end
  end
end)

test("RoPE from the thread's own fragments: rotate_half shifts by 32 columns (meta stage_step), PERSIST=1 with EPI_SMEM=0 reads the partner in registers", function()
  local LL = { "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1" }
  local d = tmpdir()
  local code, _, err = emmy(args("compile", LL, "--dump-dir", d))
  eq(code, 0, "dump: " .. err)
  local p = io.popen("cat " .. d .. "/*.kernels/k_linear_rope_*.torch.json 2>/dev/null")
  local repro = p:read("*a")
  p:close()
  check(repro:find('"stage_step": *"32"'), "the kernels' meta names the shift's gcd: " .. repro:sub(1, 200))
  local pin = "EMMY_KNOBS=k_linear_rope:PERSIST=1,k_linear_rope:EPI_SMEM=0"
  local c1, src, e1 = emmy(args("compile", LL, "--ir", "cuda", "--kernel", "k_linear_rope"), { env = pin })
  eq(c1, 0, "cuda: " .. e1)
  check(not src:find("em_stage0", 1, true) and not src:find("em_ep0", 1, true), "no staged tile")
  -- the partner: a select on the read's shift from the element's own column, over constant registers once j is
  -- unrolled; each row split into batch and position once, before the element loop
  check(src:find("acc[i][(j + 4 >= 0 && j + 4 < 8) ? j + 4 : 0][q]", 1, true) and src:find("/* v19, staged */", 1, true),
    "the partner by its shift")
  check(src:find("em_mq[i][h] = (m) / (s_seq_len)", 1, true) and not src:find("((m) / (s_seq_len)) * 32LL", 1, true), "the row split once")
  -- cos and sin loaded ahead of the K loop, in column pairs, as a residual is
  check(src:find("em_pf1[j][q >> 1] = ", 1, true) and src:find("em_bf2f((unsigned short)em_pf2[j][q >> 1])", 1, true), "cos/sin ahead")
  -- a 128 x 256 tile (32 column groups, four heads of 64): cos and sin read a column only modulo the head width, so
  -- the first head's 8 groups are loaded ahead and every head reads them (32 registers, not 128 and a spill)
  for _, epi in ipairs { 0, 7 } do
    local wide = ("EMMY_KNOBS=88e5e1:PERSIST=1,88e5e1:BM=128,88e5e1:BN=256,88e5e1:WM=8,88e5e1:STAGES=4,88e5e1:EPI_SMEM=%d"):format(epi)
    local c6, s6, e6 = emmy(args("compile", LL, "--hint", "seq_len=2048", "--ir", "cuda", "--kernel", "k_linear_rope_88e5e1"), { env = wide })
    eq(c6, 0, "128 x 256: " .. e6)
    check(s6:find("unsigned em_pf1[8][2];", 1, true) and s6:find("if (j < 8) { /* (the first head's column groups", 1, true)
      and s6:find("em_bf2f((unsigned short)em_pf2[j % 8][q >> 1])", 1, true), "EPI_SMEM=" .. epi .. ": one head's cos/sin ahead")
  end
  -- the lead where the grid is one wave or less (atom.rope_regs): q 128 x 64, the k+v pair 64 x 64, both 8 stages;
  -- q's one output of one batch stored into heads by TMA (atom.rope_heads), the pair's from the fragments
  local c4, tile, e4 = emmy(args("compile", LL, "--ir", "tile"))
  eq(c4, 0, "tile: " .. e4)
  check(tile:find("k_linear_rope_88e5e1%s.-BM=128,BN=64,.-EPI_SMEM=7,.-PERSIST=1,.-STAGES=8,"), tile)
  check(tile:find("k_linear_rope_4277a7%s.-BM=64,BN=64,.-EPI_SMEM=0,.-PERSIST=1,.-STAGES=8,"), tile)
  -- where 128-row tiles fill the SMs (2048 tokens) q's 128 x 256 tile leads (atom.rope_in_regs), into heads at one
  -- batch; at 8 batches with the fragment epilogue (a tile may span two batches there)
  local c5, tile5, e5 = emmy(args("compile", LL, "--hint", "seq_len=2048", "--ir", "tile"))
  eq(c5, 0, "tile at 2048: " .. e5)
  check(tile5:find("k_linear_rope_88e5e1%s.-BM=128,BN=256,.-EPI_SMEM=7,.-PERSIST=1,"), tile5)
  local c7, tile7, e7 = emmy(args("compile", LL, "--batch", "8", "--ir", "tile"))
  eq(c7, 0, "tile at batch 8: " .. e7)
  check(tile7:find("k_linear_rope_8f300b%s.-BM=128,BN=256,.-EPI_SMEM=0,.-PERSIST=1,"), tile7)
  -- the columns split over a cluster (SPLIT_K=2) leave the partner in another CTA: refused with the condition
  local c2, _, e2 = emmy(args("compile", LL, "--ir", "tile", "--kernel", "k_linear_rope"), { env = pin .. ",k_linear_rope:SPLIT_K=2" })
  check(c2 ~= 0 and e2:find("match no candidate together", 1, true), "SPLIT_K=2 with EPI_SMEM=0 refused: " .. e2)
  -- the resource check says the same without the meta's step
  local rules = require "emmy.rules"
  local dev = { max_threads = 1024, smem_static = 49152, smem_optin = 232448, regs_per_block = 65536 }
  -- (PAD_SMEM given: a knob the candidate leaves out is at the knob table's default, 8, which TMA=1's swizzled tiles
  -- refuse, as the emitter would)
  local c = { BM = 128, BN = 64, BK = 64, MMA = 1, TMA = 1, ASYNC = 1, WGMMA = 1, WG_WAIT = 1, PRODUCER = 1, PERSIST = 1,
    EPI_SMEM = 0, STAGES = 4, WM = 8, WN = 1, SPLIT_K = 1, PAD_SMEM = 0 }
  check(rules.resource_check({ kind = "contraction", stage = 64, stage_step = 32 }, c, dev), "step 32: legal")
  local ok, why = rules.resource_check({ kind = "contraction", stage = 64, stage_step = 4 }, c, dev)
  check(not ok and why:find("multiples of 8", 1, true), tostring(why))
  c.SPLIT_K = 2
  local ok2, why2 = rules.resource_check({ kind = "contraction", stage = 64, stage_step = 32 }, c, dev)
  check(not ok2 and why2:find("SPLIT_K=1", 1, true), tostring(why2))
end)

test("the tensor maps prefetched before the wait, WG_K=2's split epilogue, OSMEM=4's slices synchronized and the masked SDPA on FLASH=2 (the defaults since the twenty-sixth session)", function()
  local L = { "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1" }
  -- each tensor map prefetched before the grid dependency wait; none in a row kernel
  local c1, src, e1 = emmy(args("compile", L, "--ir", "cuda", "--kernel", "k_linear_7363a2"))
  eq(c1, 0, "cuda: " .. e1)
  local pf, wait = src:find("prefetch.tensormap", 1, true), src:find("griddepcontrol.wait", 1, true)
  check(pf and wait and pf < wait and src:find("(&tm1)", 1, true), "the prefetches come before the wait: " .. src)
  local c2, src2 = emmy(args("compile", L, "--ir", "cuda", "--kernel", "k_rms_norm"))
  eq(c2, 0, "row")
  check(not src2:find("prefetch.tensormap", 1, true), "row kernels have no tensor maps")
  -- WG_K=2's epilogue split by columns (the exchange's barriers, each group its own columns)
  -- (down's 64 x 64 staged lead before atom.split2_small, pinned)
  local c3, src3 = emmy(args("compile", L, "--ir", "cuda", "--kernel", "k_linear_add_f97280"),
    { env = "EMMY_KNOBS=k_linear_add_f97280:BM=64,k_linear_add_f97280:WM=4,k_linear_add_f97280:SPLIT_K=1,"
      .. "k_linear_add_f97280:EPI_SMEM=5,k_linear_add_f97280:WG_K=2,k_linear_add_f97280:STAGES=12" })
  eq(c3, 0, "kg split")
  check(src3:find("bar.sync 3, 256;", 1, true) and src3:find("nl = nh + (em_g * 32)", 1, true) and src3:find("bar.sync 4, 128;", 1, true), src3)
  -- OSMEM=4 with two slices waits for the other's last QK^T before staging O (the batch-8 lead)
  local c4, src4 = emmy(args("compile", L, "--batch", "8", "--ir", "cuda", "--kernel", "k_sdpa"))
  eq(c4, 0, "os4 sync")
  check(src4:find("\"r\"(6 + wq)", 1, true) and src4:find("\"r\"(7 - wq)", 1, true), src4)
  -- the whole model's masked SDPA on FLASH=2; its base-2 factor 1 is a float literal ("1.0f": a bare "1f" did not
  -- compile)
  -- (a one-layer Qwen3 of head dim 64, so that the whole model compiles in seconds)
  local dir = tmpdir()
  local f = assert(io.open(dir .. "/config.json", "w"))
  f:write(require("cjson").encode { architectures = { "Qwen3ForCausalLM" }, model_type = "qwen3", hidden_size = 128,
    intermediate_size = 256, num_hidden_layers = 1, num_attention_heads = 2, num_key_value_heads = 1, head_dim = 64,
    hidden_act = "silu", max_position_embeddings = 1024, rms_norm_eps = 1e-6, rope_theta = 10000, tie_word_embeddings = true,
    vocab_size = 512, attention_bias = false, torch_dtype = "bfloat16" })
  f:close()
  local W = { dir, "--dynamic", "seq_len@input_ids:1", "--dynamic", "seq_len@attention_mask:2",
    "--dynamic", "seq_len@attention_mask:3", "--dynamic", "seq_len@position_ids:1" }
  local c5, src5, e5 = emmy(args("compile", W, "--ir", "cuda", "--kernel", "k_sdpa"))
  eq(c5, 0, "masked: " .. e5)
  check(src5:find("FLASH=2", 1, true) and src5:find("mx0 * 1.0f", 1, true) and not src5:find("* 1f", 1, true), src5:sub(1, 3000))
  -- EMMY_MASK_RANGE=1 (an experiment): the key tiles bounded by the mask's votes, the rest in a scope of their own
  check(not src5:find("em_kf", 1, true), "no mask range unless asked")
  local c6, src6, e6 = emmy(args("compile", W, "--ir", "cuda", "--kernel", "k_sdpa"), { env = "EMMY_MASK_RANGE=1" })
  eq(c6, 0, "mask range: " .. e6)
  check(src6:find("bar.red.or.pred q, %2, 128, p", 1, true) and src6:find("const int kp = em_kf, ntw = em_kt;", 1, true), src6:sub(1, 3000))
end)

test("NORM_EPI=1: Qwen3's q_norm/k_norm + RoPE become the q/k projections' epilogue, a per-head reduction over the staged tile", function()
  local code, out, err = emmy(args("compile", L0, "--ir", "kernel"), { env = "EMMY_NORM_EPI=1" })
  eq(code, 0, "exit: " .. err)
  check(out:find("8 kernels (7 distinct)", 1, true), out)
  check(not out:find("k_rms_norm_rope_", 1, true), "no q_norm/k_norm row kernel is left: " .. out)
  check(out:find("k_linear_rms_norm_rope_%x+%s+contraction%s+aten.linear.default%s+%d+%s+v54 bf16%[1, 16, seq_len, 128%]"), out)
  -- off by default: the row kernels stay; with ROPE_EPI=0 (no staged tile) NORM_EPI=1 forms the same kernels as
  -- NORM_EPI=0 (its kernel could not be emitted there: every variant was an emit_fail in a tune on the H200)
  local c0, o0 = emmy(args("compile", L0, "--ir", "kernel"))
  check(c0 == 0 and o0:find("k_rms_norm_rope_", 1, true), o0)
  local c2, o2 = emmy(args("compile", L0, "--ir", "kernel"), { env = "EMMY_NORM_EPI=1 EMMY_ROPE_EPI=0" })
  local c4, o4 = emmy(args("compile", L0, "--ir", "kernel"), { env = "EMMY_ROPE_EPI=0" })
  check(c2 == 0 and c4 == 0 and not o2:find("k_linear_rms_norm", 1, true), o2)
  eq(o2, o4, "NORM_EPI=1 with ROPE_EPI=0 forms the ROPE_EPI=0 kernels")
  local c1, src, e1 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_linear_rms_norm_rope"), { env = "EMMY_NORM_EPI=1" })
  eq(c1, 0, "cuda: " .. e1)
  -- a warp per (row, head) sums the squares over the staged tile; the epilogue reads its own row's and head's mean
  check(src:find("__shared__ float em_hred0%[64%];") and src:find("em_hred0%[%(m %- m0%) %* 1 %+ %(n %- n0%) / 128%]"), src)
  check(not src:find("em_pre0", 1, true), "the head norm is not a prologue reduction")
  local _, ex = emmy(args("compile", L0, "--explain", "--kernel", "k_linear_rms_norm_rope"), { env = "EMMY_NORM_EPI=1" })
  check(ex:find("per-head norm + RoPE epilogue", 1, true) and ex:find("split_cone%s+STRUCT%s+ok%s+operand read from memory"), ex)
  local ok2, nv = pcall(require, "emmy.nvrtc")
  if ok2 and nv.version() then
    for _, e in ipairs { "", "EMMY_KNOBS=MMA=0", "EMMY_KNOBS=WGMMA=0,TMA=0,PAD_SMEM=8", "EMMY_KNOBS=SPLIT_K=2", "EMMY_SPLIT_CONE=0" } do
      local c3, o3, e3 = emmy(args("compile", L0, "--nvrtc", "--kernel", "rope"),
        { env = "EMMY_NORM_EPI=1 " .. e .. " EMMY_CUBIN_CACHE=" .. tmpdir() })
      eq(c3, 0, "nvrtc " .. e .. ": " .. e3)
      check(o3:find("2 compiled, 0 failed", 1, true), e .. ": " .. o3)
    end
  end
end)

test("the fork tree's leaves are walked one at a time: the product in order, later families override, empty ones skipped", function()
  local rules = require "emmy.rules"
  local got, defaults, keys = {}, { P = 4, X = 0, Y = 0 }, { "P", "X", "Y" }
  rules.each_leaf({ "a", "none", "b" }, { a = { { X = 1 }, { X = 2, P = 0 } }, none = {}, b = { { Y = 1, P = 8 }, { Y = 2 } } },
    defaults, keys, function(c) got[#got + 1] = rules.knob_string(c) end)
  eq(table.concat(got, " "), "P=8,X=1,Y=1 P=4,X=1,Y=2 P=8,X=2,Y=1 P=0,X=2,Y=2", "the defaults under each leaf's options")
  local n = 0
  rules.each_leaf({}, {}, { Z = 3 }, { "Z" }, function(c) n = n + 1; eq(c.Z, 3) end)
  eq(n, 1, "no family: one leaf of the defaults")
end)

test("passes list and stop-after", function()
  local code, out = emmy { "compile", "--passes" }
  eq(code, 0, "exit")
  check(out:find("form_kernels", 1, true) and out:find("020_form_kernels.lua", 1, true), out)
  local code2, out2 = emmy(args("compile", L0, "--stop-after", "canonicalize"))
  eq(code2, 0, "stop-after")
  check(out2:find("aten.linear.default", 1, true), out2)
end)

test("a reproducer is named with run --ir FILE; --ir misuse is a one-line usage error", function()
  local d = tmpdir()
  local code = emmy(args("compile", L0, "--kernel", "k_linear_add", "--dump-dir", d))
  eq(code, 0, "dump")
  local kd = d .. "/" .. table.concat(require("emmy.sys").listdir(d), " "):match("(%d+_lowering_cuda%.kernels)")
  local repro
  for _, f in ipairs(require("emmy.sys").listdir(kd)) do if f:match("^k_linear_add.*%.torch%.json$") then repro = kd .. "/" .. f end end
  check(repro, "no k_linear_add reproducer in " .. kd)
  -- without a GPU the graph loads and the run stops at the driver; with one it runs (either way, not a usage error)
  local c1, o1, e1 = emmy { "run", "--ir", repro }
  check(c1 ~= 2 and (o1 .. e1):find("graph " .. repro, 1, true), o1 .. e1)
  local c2, _, e2 = emmy { "run", "--ir", "Qwen/Qwen3-Embedding-0.6B" }
  eq(c2, 2, "run --ir MODEL")
  check(e2:find("--ir takes a .torch.json graph file", 1, true), e2)
  local c3, _, e3 = emmy { "run", repro, "--ir", repro .. ".other.json" }
  eq(c3, 2, "two inputs")
  check(e3:find("give the graph once", 1, true), e3)
  local c4, _, e4 = emmy { "compile", "--ir", repro }
  eq(c4, 2, "compile --ir FILE")
  check(e4:find("give the graph file as INPUT", 1, true) and #lines_of(e4) == 1, e4)
  -- model flags on a graph file are errors, not silently ignored; run's --seq-len binds seq_len
  local c5, _, e5 = emmy { "compile", repro, "--layer", "0" }
  eq(c5, 2, "compile FILE --layer")
  check(e5:find("--layer applies to a model, not to the graph file", 1, true), e5)
  local c6, _, e6 = emmy { "compile", repro, "--seq-len", "7" }
  eq(c6, 2, "compile FILE --seq-len")
  local c7, _, e7 = emmy { "run", "--ir", repro, "--seq-len", "7", "--bind", "seq_len=8" }
  eq(c7, 2, "run --seq-len vs --bind")
  check(e7:find("conflicts with --bind seq_len=8", 1, true), e7)
  local c8, o8, e8 = emmy { "run", "--ir", repro, "--seq-len", "7" }
  check(c8 ~= 2, "run FILE --seq-len 7 is accepted: " .. o8 .. e8)
end)

test("explain names every gate, its verdict and reason", function()
  local code, out = emmy(args("compile", L0, "--explain", "--kernel", "k_linear_add"))
  eq(code, 0, "exit")
  check(out:find("warp_tier%s+TILE%s+ok%s+mma.sync m16n8k16 bf16, K=%d+, M symbolic %(masked%)"), out)
  check(out:find("rules/tile/010_partition_loops.lua:%d+"), out)
  check(out:find("scalar_contraction%s+TILE%s+ok"), out)
  check(out:find("use_tma%s+STAGE%s+ok%s+both operands are kernel inputs"), out)
  -- a folded RMSNorm prologue computes the left operand: no copy engine can move it
  local c2, o2 = emmy(args("compile", L0, "--explain", "--kernel", "k_rms_norm_linear"), { env = "EMMY_SPLIT_CONE=0" })
  eq(c2, 0, "exit")
  check(o2:find("use_tma%s+STAGE%s+REFUSED%s+the left operand is computed in the kernel"), o2)
end)

test("editing a rule in EMMY_RULES changes variants and explain without a rebuild", function()
  local d = rules_copy()
  local _, before = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_rms_norm_8"))
  local n_before = tonumber(before:match("row%s+(%d+)"))
  local src = read_file(d .. "/010_partition_loops.lua")
  src = src:gsub('return true, %("rows of %%s elements"%):format%(tostring%(k%.L%)%)',
    'if k.L > 512 then return false, "edited: rows over 512 refused" end return true, "edited"')
  src = src:gsub("for _, t in ipairs { 256, 128, 512, 64, 1024, 32 } do", "for _, t in ipairs { 128, 64 } do")
  write_file(d .. "/010_partition_loops.lua", src)
  local code, after = emmy(args("compile", L0, "--ir", "tile", "--kernel", "k_rms_norm_rope"), { env = "EMMY_RULES=" .. d })
  eq(code, 0, "exit: " .. after)
  eq(tonumber(after:match("row%s+(%d+)")), 19, "the measured first point + 2 THREADS x 4 RPB x 2 CACHE candidates + the first two with UNROLL=1 after the edit (was " ..
    tostring(n_before) .. ")")
  local _, ex = emmy(args("compile", L0, "--explain", "--kernel", "k_rms_norm_8"), { env = "EMMY_RULES=" .. d })
  check(ex:find("edited: rows over 512 refused", 1, true), ex)
end)

test("rule file errors are one line, non-zero", function()
  local d = rules_copy()
  write_file(d .. "/020_broken.lua", "return { { name = 'x', family = 'TILE', gate = function(k) return tru end } ")
  local code, _, err = emmy(args("compile", L0), { env = "EMMY_RULES=" .. d })
  check(code ~= 0 and #lines_of(err) == 1 and err:find("020_broken.lua", 1, true), err)
  write_file(d .. "/020_broken.lua", "return { { name = 'x', family = 'TILE', gate = function(k) return tru, 'oops' end } }")
  code, _, err = emmy(args("compile", L0), { env = "EMMY_RULES=" .. d })
  check(code ~= 0 and #lines_of(err) == 1 and err:find("unknown global 'tru'", 1, true), err)
  write_file(d .. "/020_broken.lua", "os.execute('true') return {}")
  code, _, err = emmy(args("compile", L0), { env = "EMMY_RULES=" .. d })
  check(code ~= 0 and err:find("unknown global 'os'", 1, true), err)
end)

test("pins: a refused pin names the gate; an unknown value lists the choices; a good pin applies", function()
  local code, _, err = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_TMA=1 EMMY_SPLIT_CONE=0" })
  check(code == 2 and #lines_of(err) == 1, err)
  check(err:find("pin TMA=1 is refused by gate use_tma (rules/tile/050_use_tma.lua:", 1, true), err)
  code, _, err = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=BM=48" })
  check(code == 2 and err:find("BM takes", 1, true), err)
  local out
  code, out = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_KNOBS=k_linear_add:BM=32,THREADS=128" })
  eq(code, 0, "exit")
  check(out:find("k_linear_add_%x+%s+contraction%s+%d+%s+[%w_=,]*BK=%d+,BM=32"), out)
  local c4, o4 = emmy(args("compile", L0, "--ir", "tile"), { env = "EMMY_MMA=0" })
  eq(c4, 0, "MMA=0")
  check(o4:find("k_linear_add_%x+%s+contraction%s+%d+%s+[%w_=,]*MMA=0"), o4)
  check(out:find("k_rms_norm_8%x+%s+row%s+%d+%s+[%w_=,]*THREADS=128"), out)
  check(out:find("\nk_linear_%x+%s+contraction%s+%d+%s+[%w_=,]*BK=%d+,BM=64"), "unpinned kernel keeps BM=64: " .. out)
end)

test("the resource check and the emitter agree: 60 random candidates of every kernel of both layers, at batch 1 and 8, emit", function()
  local compiler, kernels, frontend = require "emmy.compiler", require "emmy.kernels", require "emmy.frontend"
  for _, m in ipairs { "Qwen/Qwen3-Embedding-0.6B", "TinyLlama/TinyLlama-1.1B-Chat-v1.0" } do
    for _, b in ipairs { 1, 8 } do
      local g = frontend.load(m, { layer = 0, dynamic = { "seq_len@x:1" }, batch = b }).graph
      for _, p in ipairs(kernels.plan(compiler.run(g))) do
        for _, cand in ipairs(kernels.sample(p.candidates, 60, 7)) do
          local src, why = kernels.emit(p, cand.knobs)
          check(src, ("%s b%d %s %s: %s"):format(m, b, p.kernel.name, cand.string, tostring(why)))
        end
      end
    end
  end
end)

test("every emitted kernel compiles with NVRTC (sm_90a), resources recorded", function()
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then skip("NVRTC not found: " .. tostring(select(2, nv.version()))) end
  local cache = tmpdir()
  local code, out, err = emmy(args("compile", L0, "--nvrtc"), { env = "EMMY_CUBIN_CACHE=" .. cache })
  eq(code, 0, "exit: " .. err)
  check(out:find("9 compiled, 0 failed", 1, true), out)
  check(out:find("k_sdpa_%x+%s+[%w_=,]*QROWS=%d+[%w_=,]*%s+ok%s+%d+"), out)
end)

-- The op cases run on the GPU only in tests/gpu/op_cases.lua; three of them once emitted text that NVRTC refused or no
-- text at all (a derived dim's cdiv, a 1-d matmul operand). Here every op case's chosen variant and 3 sampled ones
-- are emitted and compiled without a GPU.
test("every op case emits and compiles with NVRTC: the chosen variant and 3 sampled", function()
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then skip("NVRTC not found") end
  local graphs, gj = require "graphs", require "emmy.graphjson"
  local d, bad = tmpdir(), {}
  for _, c in ipairs(graphs.op_cases) do
    local g = graphs.case_graph(c)
    local file = d .. "/" .. c.name .. ".torch.json"
    assert(gj.write(g, file, { sync = false }))
    for _, extra in ipairs { {}, { "--sample", "3", "--seed", "5" } } do
      local code, out, err = emmy(args("compile", file, "--nvrtc", unpack(extra)),
        { env = "EMMY_CUBIN_CACHE=" .. d .. "/cc" })
      if code ~= 0 or not out:find(" 0 failed", 1, true) then
        bad[#bad + 1] = ("%s %s: exit %s %s"):format(c.name, table.concat(extra, " "), tostring(code),
          (err ~= "" and err or out):match("[^\n]*fail[^\n]*") or err)
      end
    end
  end
  check(#bad == 0, table.concat(bad, "\n"))
end)

test("sampled knob points of every structural fork compile with NVRTC", function()
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then skip("NVRTC not found") end
  local cache = tmpdir()
  for _, env in ipairs { "", "EMMY_SPLIT_CONE=0", "EMMY_MERGE_SIBLINGS=1", "EMMY_DUAL_GATE=0", "EMMY_VIEW_OUT=0",
    "EMMY_KNOBS=k_sdpa:FLASH=0" } do
    local code, out, err = emmy(args("compile", L0, "--nvrtc", "--sample", "8", "--seed", "3"),
      { env = (env ~= "" and env .. " " or "") .. "EMMY_CUBIN_CACHE=" .. cache })
    eq(code, 0, env .. ": " .. err)
    check(out:find(" 0 failed", 1, true), env .. ": " .. out)
    -- one summary row per distinct kernel: variants compiled, none failed, a register range
    check(out:find("kernel%s+variants%s+failed%s+regs"), env .. ": " .. out)
    check(out:find("\nk_sdpa_%x+%s+%d+%s+0%s+%d+"), env .. ": no k_sdpa summary row\n" .. out)
  end
end)

test("--variants-out lists the variants once; --variants compiles a shard of that list without planning, equal to one process; its bad input is one line", function()
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then skip("NVRTC not found") end
  local d = tmpdir()
  local env = { env = "EMMY_CUBIN_CACHE=" .. d .. "/cc" }
  local code, out, err = emmy(args("compile", L0, "--nvrtc", "--sample", "2", "--variants-out", d .. "/v.jsonl"), env)
  eq(code, 0, "exit: " .. err)
  check(out:find("wrote " .. d .. "/v.jsonl: 18 variants", 1, true), out)
  code, out, err = emmy(args("compile", L0, "--nvrtc", "--sample", "2", "--results", d .. "/one.jsonl"), env)
  eq(code, 0, "exit: " .. err)
  local merged = {}
  for i = 0, 2 do
    code, out, err = emmy(args("compile", L0, "--nvrtc", "--variants", d .. "/v.jsonl", "--shard", i .. "/3", "--results",
      ("%s/s%d.jsonl"):format(d, i)), env)
    eq(code, 0, "exit: " .. err)
    check(out:find("18 variants from", 1, true) and err:find(("shard %d/3: 6 of 18 variants"):format(i), 1, true), out .. err)
    for l in read_file(("%s/s%d.jsonl"):format(d, i)):gmatch("[^\n]+") do merged[#merged + 1] = l end
  end
  table.sort(merged)
  eq(table.concat(merged, "\n") .. "\n", read_file(d .. "/one.jsonl"), "the shards' results, sorted, are one process's")
  -- bad input: one line, a usage exit
  write_file(d .. "/bad.jsonl", '{"kernel":"k_nowhere_000000","knobs":{},"string":""}\n')
  code, _, err = emmy(args("compile", L0, "--nvrtc", "--variants", d .. "/bad.jsonl"))
  check(code ~= 0 and err:find("bad.jsonl:1: kernel k_nowhere_000000 is not a kernel of this model", 1, true), err)
  write_file(d .. "/bad.jsonl", "not json\n")
  code, _, err = emmy(args("compile", L0, "--nvrtc", "--variants", d .. "/bad.jsonl"))
  check(code ~= 0 and err:find("bad.jsonl:1: not a variant line", 1, true), err)
  code, _, err = emmy(args("compile", L0, "--variants", d .. "/v.jsonl"))
  check(code == 2 and err:find("--variants needs --nvrtc", 1, true), err)
  code, _, err = emmy(args("compile", L0, "--nvrtc", "--variants", d .. "/v.jsonl", "--sample", "3"))
  check(code == 2 and err:find("not with --sample", 1, true), err)
end)

test("an NVRTC error is one line and a non-zero exit", function()
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then skip("NVRTC not found") end
  local d = rules_copy()
  -- a planted compile error (PLANT=4: an #error in the kernel; legal for the rules and the emitter, rejected by the
  -- CUDA compiler) in every contraction
  write_file(d .. "/900_broken.lua", "return { { name = 'broken', family = 'PLANT', kinds = { 'contraction' }, "
    .. "knobs = { PLANT = 0 }, fork = function(k, dev) return { { PLANT = 4 } } end } }")
  local code, _, err = emmy(args("compile", L0, "--nvrtc", "--kernel", "k_linear_add"),
    { env = "EMMY_MMA=0 EMMY_RULES=" .. d .. " EMMY_CUBIN_CACHE=" .. tmpdir() })
  eq(code, 1, "exit")
  local l = lines_of(err)
  check(#l >= 1 and l[#l]:find("compile_fail") or err:find("error", 1, true), err)
end)

test("emitted CUDA matches the committed corpus (regenerate: emmy tests/lua/gen_fixtures.lua)", function()
  local d = tmpdir()
  local code = emmy(args("compile", L0, "--dump-dir", d), { env = "EMMY_MERGE_SIBLINGS=1" }) -- (the defaults)
  eq(code, 0, "exit")
  local kd = d .. "/" .. table.concat(require("emmy.sys").listdir(d), " "):match("(%d+_lowering_cuda%.kernels)")
  local corpus = ROOT .. "/tests/fixtures/cuda"
  local n = 0
  for _, f in ipairs(require("emmy.sys").listdir(corpus) or {}) do
    if f:match("%.cu$") then
      n = n + 1
      eq(read_file(kd .. "/" .. f), read_file(corpus .. "/" .. f), f)
    end
  end
  check(n >= 5, "corpus has the layer's kernels")
end)

test("EMMY_SOURCE_OVERRIDE: DIR/<kernel>.cu replaces the emitted source, its emmy-launch smem line the launch's", function()
  local gpu = require "emmy.gpu"
  local d = tmpdir()
  local la = { smem = 1024, block = { 128, 1, 1 } }
  local env = function(k) return k == "EMMY_SOURCE_OVERRIDE" and d or nil end
  local src, l2 = gpu.source_override("k_x", "emitted", la, env)
  eq(src, "emitted", "no file: the emitted source")
  eq(l2, la, "no file: the same launch")
  local f = assert(io.open(d .. "/k_x.cu", "w"))
  f:write("// emmy-launch smem=4096\nextern \"C\" __global__ void k_x() {}\n")
  f:close()
  src, l2 = gpu.source_override("k_x", "emitted", la, env)
  check(src:find("void k_x", 1, true), "the file's text")
  eq(l2.smem, 4096, "smem from the emmy-launch line")
  eq(l2.block[1], 128, "the rest of the launch kept")
  eq(la.smem, 1024, "the emitter's launch untouched")
  local _, l3 = gpu.source_override("k_x", "emitted", la, function() return nil end)
  eq(l3, la, "unset: nothing changes")
  -- a file without the PDL wait is launched plainly; one with it keeps the emitter's programmatic launch
  local lp = { smem = 0, block = { 128, 1, 1 }, pdl = true }
  eq(select(2, gpu.source_override("k_x", "emitted", lp, env)).pdl, false, "no griddepcontrol.wait: no pdl")
  f = assert(io.open(d .. "/k_x.cu", "w"))
  f:write("extern \"C\" __global__ void k_x() {\n  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n}\n")
  f:close()
  eq(select(2, gpu.source_override("k_x", "emitted", lp, env)).pdl, true, "the wait: pdl kept")
end)

test("the tile split (EMMY_TILE_SPLIT=0 leaves it out): the RoPE projection's head split folds to the lane's offset and its partner to a constant; without it the earlier text; NVRTC compiles the layer", function()
  local LL = { "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1", "--ir", "cuda", "--kernel", "k_linear_rope_88e5e1" }
  -- (the fragment epilogue, EPI_SMEM=0: its pair stores; the lead at one batch stages them for TMA)
  local frag = "EMMY_KNOBS=88e5e1:EPI_SMEM=0"
  local c0, plain, e0 = emmy(args("compile", LL), { env = frag .. " EMMY_TILE_SPLIT=0" })
  eq(c0, 0, e0)
  local c1, split, e1 = emmy(args("compile", LL), { env = frag })
  eq(c1, 0, e1)
  check(plain:find("if ((n) % 64LL < (0LL + 32LL))", 1, true), "the text without the switch: " .. plain:sub(1, 300))
  check(split:find("if ((j * 8 + (lane & 3) * 2) < (0LL + 32LL))", 1, true), "the head split folded: " .. split:sub(1, 300))
  check(not split:find("(n) % 64LL", 1, true), "no column divided by the head width")
  check(split:find("const int v%d+ = %(int%)%(%(32LL %+"), "the partner's shift as the parts' difference")
  check(split:find("if ((((j * 8 + (lane & 3) * 2 + 1)) - ((j * 8 + (lane & 3) * 2))) == 1", 1, true), "the pair store's adjacency from the parts")
  local ok, nv = pcall(require, "emmy.nvrtc")
  if ok and nv.version() then
    local c3, o3, e3 = emmy(args("compile", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1", "--nvrtc"),
      { env = "EMMY_CUBIN_CACHE=" .. tmpdir() })
    eq(c3, 0, "nvrtc: " .. e3)
    check(o3:find(", 0 failed", 1, true), o3)
  end
end)

test("EPI_SMEM=7 into heads: the RoPE projection's [B, H, S, D] output stored by TMA through a map of its own dims, the rows past its first batch by the threads; refused for the dual k+v; NVRTC compiles it at 128 x 128 and 128 x 256", function()
  local LL = { "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1" }
  local pins = function(kn, p) return "EMMY_KNOBS=" .. p:gsub("([%w_]+=)", kn .. ":%1") end
  local c1, src, e1 = emmy(args("compile", LL, "--ir", "cuda", "--kernel", "k_linear_rope_88e5e1"), { env = pins("88e5e1", "EPI_SMEM=7") })
  eq(c1, 0, e1)
  check(src:find("em_tma_store_4d(&tm2, em_epa + 0u, (int)((n0 + 0) % 64), em_s0, (int)((n0 + 0) / 64), em_b0);", 1, true),
    "the panel's store at (d, s, h, b): " .. src:sub(-1500))
  -- the rows in the batches after the tile's first by the threads (a TMA store's box may not start at a negative row)
  check(src:find("if (em_s0 + " .. src:match("BM=(%d+)") .. " > em_hs && em_b0 + 1 < em_hb) {", 1, true) and
    src:find("*reinterpret_cast<uint4 *>(out0 + ((em_b * 32LL + em_n / 64LL) * em_hs + em_s) * 64LL + em_n % 64LL) = em_v;", 1, true),
    "the later batches' rows from the panels")
  check(not src:find("em_s0 - ", 1, true), "no box at a negative row")
  check(src:find("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group", 1, true), "the 4-d store's prelude")
  check(not src:find("out0[", 1, true), "no per-thread store of the output")
  -- the launch's map: the output's own dims
  local d = tmpdir()
  local c2, _, e2 = emmy(args("compile", LL, "--dump-dir", d), { env = pins("88e5e1", "EPI_SMEM=7") })
  eq(c2, 0, e2)
  local txt = read_file(d .. "/40_lowering_cuda.kernels/k_linear_rope_88e5e1.txt")
  check(txt:find("EPI_SMEM=7", 1, true), txt:sub(1, 400))
  -- k+v+RoPE (a dual pair) has no EPI_SMEM=7
  local c3, _, e3 = emmy(args("compile", LL, "--ir", "cuda", "--kernel", "k_linear_rope_4277a7"), { env = pins("4277a7", "EPI_SMEM=7") })
  check(c3 ~= 0 and e3:find("EPI_SMEM takes", 1, true), "the dual refuses it: " .. e3)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if ok and nv.version() then
    for _, p in ipairs { "BM=128,BN=128,EPI_SMEM=7,STAGES=4", "BM=128,BN=256,EPI_SMEM=7,STAGES=4" } do
      local c4, o4, e4 = emmy(args("compile", LL, "--batch", "8", "--nvrtc"), { env = pins("8f300b", p) .. " EMMY_CUBIN_CACHE=" .. tmpdir() })
      eq(c4, 0, p .. ": " .. e4)
      check(o4:find(", 0 failed", 1, true), o4)
    end
  end
end)

test("gpu.tmap_spec: rows x inner, or the tensor's own dims innermost first with byte strides and a box of one in each outer dim", function()
  local gpu = require "emmy.gpu"
  local s = gpu.tmap_spec({ box = { 64, 128 } }, "bf16", { 1, 512, 2048 }, 0)
  eq(table.concat(s.dims, ","), "2048,512") eq(table.concat(s.strides, ","), "4096") eq(table.concat(s.box, ","), "64,128")
  s = gpu.tmap_spec({ box = { 64, 128 }, inner = 1024 }, "bf16", { 1, 512, 2048 }, 0)
  eq(table.concat(s.dims, ","), "1024,1024") eq(table.concat(s.strides, ","), "2048")
  s = gpu.tmap_spec({ box = { 64, 128 }, own = true }, "bf16", { 8, 32, 37, 64 }, 0)
  eq(table.concat(s.dims, ","), "64,37,32,8")
  eq(table.concat(s.strides, ","), "128,4736,151552")
  eq(table.concat(s.box, ","), "64,128,1,1")
end)

test("EMMY_EXP_SPLIT=K and EMMY_SMX_PAIRS=1 (attention experiments): every K-th column group's exponentials by the polynomial, the row maxima and sums in two partials; NVRTC compiles them", function()
  local args1 = args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa")
  local c0, plain, e0 = emmy(args1)
  eq(c0, 0, e0)
  check(not plain:find("em_ex2p", 1, true) and not plain:find("my0", 1, true), "the default text has neither")
  local c1, src, e1 = emmy(args1, { env = "EMMY_EXP_SPLIT=8 EMMY_SMX_PAIRS=1" })
  eq(c1, 0, e1)
  check(src:find("auto em_ex2p = [](float x) -> float {", 1, true), "the polynomial's lambda")
  check(src:find("const bool em_pe = j % 8 == 7;", 1, true), "every 8th column group")
  check(src:find("if (j & 1) rt0 += p0 + p1, rt1 += p2 + p3;", 1, true) and src:find("mx0 = fmaxf(mx0, my0), mx1 = fmaxf(mx1, my1);", 1, true),
    "two partials")
  nvrtc_compiles("EMMY_EXP_SPLIT=8 EMMY_SMX_PAIRS=1", args("compile", L0))
end)

test("EMMY_KVMC=1 (an attention experiment): a non-causal FLASH=2 kernel's two CTAs of a cluster load half of each K/V tile each, multicast into both, release both CTAs' stages, meet at cluster barriers (persistent: items paired); causal kernels unchanged; NVRTC compiles it", function()
  local NC = { ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json", "--ir", "cuda" }
  local pins = "EMMY_KNOBS=FLASH=2,BQ=64,BKV=128,KVST=2,APERSIST=0,OSMEM=2"
  local c0, plain, e0 = emmy(args("compile", NC), { env = pins })
  eq(c0, 0, e0)
  local c1, src, e1 = emmy(args("compile", NC), { env = pins .. " EMMY_KVMC=1" })
  eq(c1, 0, e1)
  check(not plain:find("__cluster_dims__", 1, true) and src:find("__cluster_dims__(2, 1, 1)", 1, true), "a 2-CTA cluster")
  check(src:find("em_mbar_init(&em_empty[s], 8);", 1, true) and plain:find("em_mbar_init(&em_empty[s], 4);", 1, true), "both CTAs' warps release")
  check(select(2, src:gsub("em_tma_2d_mc%(kb %+ %d+u %+ em_r %* 8192u, &tm%d, [kv]col %+ %d+, [kv]row %+ it %* 128 %+ %(int%)em_r %* 64, &em_f[kv]%[st%], 3%);", "")) == 4,
    "K and V, two column blocks each, half the rows: " .. src)
  check(src:find("if (lane == 0) for (unsigned q = 0; q < 2u; q++) em_mbar_arrive_cluster(&em_empty[st], q);", 1, true), "the release")
  check(select(2, src:gsub("em_cluster_sync%(%);", "")) == 3, "after the init, the producer's end, the consumers' end")
  -- APERSIST=1: a pair of items a round for the cluster's CTAs, a head's query tiles counted up to even, OSMEM=4's
  -- release on both CTAs
  local c4, per, e4 = emmy(args("compile", NC), { env = "EMMY_KVMC=1 EMMY_KNOBS=FLASH=2,BQ=128,BKV=128,KVST=3,APERSIST=1,OSMEM=4,PINGPONG=1" })
  eq(c4, 0, e4)
  check(per:find("const long long em_t = 2 * (em_r * (gridDim.x / 2) + blockIdx.x / 2) + (blockIdx.x & 1);", 1, true) and
    per:find("em_nq = 2 * ((Lq + 255) / 256)", 1, true), per)
  check(per:find("if (kp < ntw && lane == 0) for (unsigned q = 0; q < 2u; q++) em_mbar_arrive_cluster(&em_empty[em_lst], q);", 1, true), per)
  -- causal (Qwen3's layer) takes no cluster
  local c2, causal, e2 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"), { env = "EMMY_KVMC=1" })
  eq(c2, 0, e2)
  check(not causal:find("__cluster_dims__", 1, true), "causal: unchanged")
  nvrtc_compiles(pins .. " EMMY_KVMC=1", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
end)

test("PINGPONG's turns carried from item to item (the default since the fifty-sixth session; EMMY_PP_CARRY=0 emits the earlier text): the first turn handed over on the first item only, taken back on the last only, the items' meeting kept for short items; elsewhere unchanged; NVRTC compiles both", function()
  local NC = { ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json", "--ir", "cuda" }
  local pins = "EMMY_KNOBS=FLASH=2,BQ=128,BKV=128,KVST=3,APERSIST=1,OSMEM=4,PINGPONG=1"
  local c0, plain, e0 = emmy(args("compile", NC), { env = pins .. " EMMY_PP_CARRY=0" })
  eq(c0, 0, e0)
  local c1, src, e1 = emmy(args("compile", NC), { env = pins })
  eq(c1, 0, e1)
  local lines = {
    { 'if (wq == 1) asm volatile("bar.arrive 4, 256;" ::: "memory");', 'if (wq == 1 && em_r == 0) asm volatile("bar.arrive 4, 256;" ::: "memory");' },
    { 'if (wq == 0) asm volatile("bar.sync 4, 256;" ::: "memory");',
      'if (wq == 0 && em_t + gridDim.x >= em_items) asm volatile("bar.sync 4, 256;" ::: "memory");' },
    { 'asm volatile("bar.sync 1, 256;" ::: "memory");', 'if (nt < 3) asm volatile("bar.sync 1, 256;" ::: "memory"); /* EMMY_PP_CARRY: short items meet */' },
  }
  for _, l in ipairs(lines) do
    check(plain:find(l[1], 1, true) and not plain:find(l[2], 1, true) and src:find(l[2], 1, true), l[2])
  end
  -- the same text otherwise: the three lines swapped back give the earlier kernel
  local back = src
  for _, l in ipairs(lines) do back = back:gsub(l[2]:gsub("%p", "%%%0"), (l[1]:gsub("%%", "%%%%"))) end
  eq(back, plain, "only the three lines differ")
  -- not where items differ or no turns are taken: causal (Qwen3's layer), APERSIST=0, no ping-pong
  local c2, causal, e2 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"))
  local c3, causal0, e3 = emmy(args("compile", L0, "--ir", "cuda", "--kernel", "k_sdpa"), { env = "EMMY_PP_CARRY=0" })
  eq(c2, 0, e2) eq(c3, 0, e3)
  eq(causal, causal0, "causal: unchanged")
  local np_knobs = "EMMY_KNOBS=FLASH=2,BQ=128,BKV=128,KVST=3,APERSIST=0,OSMEM=2,PINGPONG=1"
  local c4, np, e4 = emmy(args("compile", NC), { env = np_knobs })
  local c5, np0, e5 = emmy(args("compile", NC), { env = "EMMY_PP_CARRY=0 " .. np_knobs })
  eq(c4, 0, e4) eq(c5, 0, e5)
  eq(np, np0, "APERSIST=0: unchanged")
  nvrtc_compiles(pins, { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
  nvrtc_compiles(pins .. " EMMY_PP_CARRY=0", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
end)

-- The CUDA of graph g (emmy compile --ir cuda) under environment env, and under env with an experiment's switch: both
-- compile; returns the two texts.
local NCG = ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json"
local function cuda_with(g, env, switch)
  local c0, a, e0 = emmy(args("compile", g, "--ir", "cuda"), { env = env })
  local c1, b, e1 = emmy(args("compile", g, "--ir", "cuda"), { env = env .. " " .. switch })
  eq(c0, 0, e0) eq(c1, 0, e1)
  return a, b
end

test("EMMY_O_STSM=1 (an attention experiment): the staged O written by stmatrix x4 (o[j], o[j + 1], both row halves an instruction) instead of a 32-bit store a pair (head dim 128: OSMEM=4, OSMEM=2 with O by TMA, Qwen3's layer); OSMEM=0 and unset: the text before; NVRTC compiles it", function()
  local pins = "EMMY_KNOBS=FLASH=2,BQ=128,BKV=128,KVST=3,APERSIST=1,OSMEM=4,PINGPONG=1"
  local plain, src = cuda_with(NCG, pins, "EMMY_O_STSM=1")
  local pair = "*reinterpret_cast<unsigned *>(em_oa(r, d)) = "
  check(plain:find(pair, 1, true) and not plain:find("EMMY_O_STSM", 1, true), "unset: the pair stores")
  check(not src:find(pair, 1, true), "set: no pair stores")
  check(src:find('const int em_m = lane >> 3, r = (wid & 3) * 16 + (em_m & 1) * 8 + (lane & 7), d = (j + (em_m >> 1)) * 8;', 1, true), src)
  check(src:find('"r"(em_pk_bf(o[j + 0][0] * em_il[0], o[j + 0][1] * em_il[0])), "r"(em_pk_bf(o[j + 0][2] * em_il[1], o[j + 0][3] * em_il[1])),', 1, true), src)
  check(src:find('"r"(em_pk_bf(o[j + 1][0] * em_il[0], o[j + 1][1] * em_il[0])), "r"(em_pk_bf(o[j + 1][2] * em_il[1], o[j + 1][3] * em_il[1])) : "memory");', 1, true), src)
  -- OSMEM=0 stores from the registers: unchanged
  local k0 = "EMMY_KNOBS=FLASH=2,BQ=64,BKV=128,KVST=2,APERSIST=0,OSMEM=0"
  local r0, r1 = cuda_with(NCG, k0, "EMMY_O_STSM=1")
  eq(r1, r0, "OSMEM=0: unchanged")
  nvrtc_compiles(pins .. " EMMY_O_STSM=1", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
  nvrtc_compiles("EMMY_O_STSM=1 EMMY_KNOBS=FLASH=2,BQ=64,BKV=128,KVST=2,APERSIST=0,OSMEM=2,OTMA=1", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
  nvrtc_compiles("EMMY_O_STSM=1")
end)

test("EMMY_ASPLIT=1 (an attention experiment): persistent non-causal items shared out by key tiles (the stream-K schedule of emit_streamk.c), a piece handed over through the launch scratch, the owner's merge before the epilogue; a grid of every key tile; causal and unset: the text before; NVRTC compiles it", function()
  local pins = "EMMY_KNOBS=FLASH=2,BQ=128,BKV=128,KVST=3,APERSIST=1,OSMEM=4,PINGPONG=1"
  local plain, src = cuda_with(NCG, pins, "EMMY_ASPLIT=1")
  check(not plain:find("EMMY_ASPLIT", 1, true) and plain:find("for (long long em_r = 0;; em_r++, em_n++) {", 1, true), "unset: the strided items")
  check(src:find("for (int em_j = 0; em_j < em_ndp + em_nsk; em_j++, em_n++) {", 1, true), src)
  check(src:find("const int em_klo = em_kb, nt = em_ke - em_kb;", 1, true), "the piece's key tiles")
  check(src:find("em_tma_2d(kb + 0u, &tm1, kcol + 0, krow + (it + em_klo) * 128, &em_fk[st]);", 1, true), "the producer from the piece's first tile")
  check(src:find("if (wq == 0 && em_j + 1 >= em_ndp + em_nsk) asm volatile(\"bar.sync 4, 256;\"", 1, true), "the carried turns' last item")
  -- the hand-over: OSMEM=4's barrier taken, O, maxima and sums to the CTA's slot (2 warpgroups x 17 float4 x 128 threads)
  check(src:find('if (em_u >= 0 && em_ke < nk) { /* EMMY_ASPLIT: a piece handed over */\n      asm volatile("bar.sync %0, 256;" :: "r"(7 - wq) : "memory");', 1, true), src)
  check(src:find("em_skb + (long long)blockIdx.x * 17408LL) + wq * 2176 + (tid & 127);", 1, true), "the slot")
  check(src:find("lrow[h] = lrow[h] * c1 + l2 * c2;\n            em_k1[h] = c1, em_k2[h] = c2, mrow[h] = mn;", 1, true), "the owner's merge")
  local c2, tile, e2 = emmy(args("compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json", "--ir", "tile"), { env = pins .. " EMMY_ASPLIT=1" })
  eq(c2, 0, e2)
  check(tile:find("cdiv(seq_len,128)*16*cdiv(seq_len,128) x 1 x 1", 1, true), tile)
  -- not persistent: unchanged
  local k0 = "EMMY_KNOBS=FLASH=2,BQ=64,BKV=128,KVST=2,APERSIST=0,OSMEM=2"
  local r0, r1 = cuda_with(NCG, k0, "EMMY_ASPLIT=1")
  eq(r1, r0, "APERSIST=0: unchanged")
  nvrtc_compiles(pins .. " EMMY_ASPLIT=1", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
  nvrtc_compiles("EMMY_ASPLIT=1 EMMY_KNOBS=FLASH=2,BQ=64,BKV=128,KVST=3,APERSIST=1,OSMEM=4,OTMA=1", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
end)

test("EMMY_PV_SUM=1 (an attention experiment): head dim 64's row sums of P by PV's wgmma over a ones block (N 72, the leading offset pointing there and moved back each k16 step); no row-sum adds in the softmax; the epilogue's sums from o[8]; head dim 128 and unset: the text before; NVRTC compiles it", function()
  local G = tmpdir()
  local c0, _, e0 = emmy({ "bench/attention.lua", "--layout", "bhsd", "--shapes", "b1s2048", "--heads", "64:32:4", "--causal", "0",
    "--torch", "none", "--graphs", G, "--dry-run" })
  eq(c0, 0, e0)
  local g = G .. "/sdpa_b1s2048_d64_h32kv4_full_bhsd.torch.json"
  local plain, src = cuda_with(g, "EMMY_NONE=1", "EMMY_PV_SUM=1")
  check(plain:find("rs0 += p0 + p1;", 1, true) and not plain:find("m64n72k16", 1, true), "unset: the sums by FADD")
  check(not src:find("rs0 +=", 1, true) and src:find("wgmma.mma_async.sync.aligned.m64n72k16.f32.bf16.bf16", 1, true), src)
  check(src:find("((unsigned long long)((em_sb + 106496u - em_va) >> 4) << 16)", 1, true), "the leading offset at the ones block")
  check(src:find("add.s64 db, %40, -8388480;", 1, true), "the second k16 step: 2048 bytes on, the leading offset as far back")
  check(src:find("const float em_l = o[8][h * 2];", 1, true) and src:find("float o[9][4];", 1, true), "the sums in o[8]")
  check(src:find("make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u);", 1, true), "the ones block")
  -- head dim 128: unchanged
  local r0, r1 = cuda_with(NCG, "EMMY_NONE=1", "EMMY_PV_SUM=1")
  eq(r1, r0, "head dim 128: unchanged")
  nvrtc_compiles("EMMY_PV_SUM=1", { "compile", g })
  nvrtc_compiles("EMMY_PV_SUM=1 EMMY_KNOBS=FLASH=2,BQ=128,BKV=128,KVST=3,APERSIST=1,OSMEM=4,PINGPONG=1", { "compile", g })
end)

test("EMMY_UNIFORM_KV=1 (an attention experiment): with one key part (KVSPLIT=1) a consumer warpgroup's first key tile is the constant 0, not wg / NQ from the thread index, so the ring's stage, its shared addresses and the K/V descriptors are uniform; =2 broadcasts the warpgroup index from lane 0 too; KVSPLIT=2 and unset: the text before; NVRTC compiles it", function()
  local pins = "EMMY_KNOBS=FLASH=2,BQ=128,BKV=128,KVST=3,APERSIST=1,OSMEM=4,PINGPONG=1"
  local plain, src = cuda_with(NCG, pins, "EMMY_UNIFORM_KV=1")
  check(plain:find("const int wg = wid >> 2, wq = wg % 2, kp = wg / 2;", 1, true), "unset: kp from the thread index")
  check(src:find("const int wg = wid >> 2, wq = wg % 2, kp = 0; /* EMMY_UNIFORM_KV: one key part */", 1, true), src)
  eq(select(2, src:gsub("kp = 0;", "")), 1, "the one line changed")
  -- KVSPLIT=2: the key parts are the warpgroups'
  local k2 = "EMMY_KNOBS=FLASH=2,BQ=64,BKV=64,KVST=4,KVSPLIT=2,APERSIST=0,OSMEM=0"
  local r0, r1 = cuda_with(NCG, k2, "EMMY_UNIFORM_KV=1")
  eq(r1, r0, "KVSPLIT=2: unchanged")
  -- =2: the warpgroup index broadcast from lane 0 as well
  local _, src2 = cuda_with(NCG, pins, "EMMY_UNIFORM_KV=2")
  check(src2:find("const int wg = __shfl_sync(0xffffffffu, wid >> 2, 0), wq = wg % 2, kp = 0; /* EMMY_UNIFORM_KV=2 */", 1, true), src2)
  nvrtc_compiles(pins .. " EMMY_UNIFORM_KV=1", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
  nvrtc_compiles(pins .. " EMMY_UNIFORM_KV=2", { "compile", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json" })
  nvrtc_compiles("EMMY_UNIFORM_KV=2")
end)

test("emmy compile --pins: the selected kernels' chosen knobs with the set over them, shown by --ir cuda (a variant the rules need not list); one set only; a knob the kernel does not read is an error", function()
  local LL = { "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1", "--ir", "cuda", "--kernel", "k_linear_rope_88e5e1" }
  local c1, src, e1 = emmy(args("compile", LL, "--pins", "STAMP=1,STAGES=7"))
  eq(c1, 0, e1)
  check(src:find("em_clock", 1, true) and src:find("for (int s = 0; s < 7; s++) em_mbar_init(&em_bar[s], 1);", 1, true), "STAMP=1 at 7 stages")
  local c2, _, e2 = emmy(args("compile", LL, "--pins", "STAMP=1;STAGES=7"))
  eq(c2, 2, "two sets") check(e2:find("--pins takes one set", 1, true), e2)
  local c3, _, e3 = emmy(args("compile", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1", "--ir", "cuda",
    "--kernel", "k_rms_norm", "--pins", "STAGES=7"))
  check(c3 ~= 0 and e3:find("STAGES=7 is not read by this kernel's emitter", 1, true), e3)
end)

-- Qwen3-Embedding-0.6B layer 0's RoPE norms as CUDA (dynamic seq_len), compiled with the environment env
local function rope_norm_src(env, extra)
  local a = { "compile", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--kernel", "k_rms_norm_rope", "--ir", "cuda" }
  for _, x in ipairs(extra or {}) do a[#a + 1] = x end
  local c, o, e = emmy(a, { env = env })
  eq(c, 0, e)
  return o
end

test("EMMY_UNIT_OUTER=1: at batch 1 the dynamic sequence index is the rest of the flat index (no division by seq_len); batch 4 keeps it", function()
  local src = rope_norm_src
  local on, off = src("EMMY_UNIT_OUTER=1"), src("EMMY_UNIT_OUTER=0")
  check(on:find("const long long x0 = 0LL;\n    const long long x1 = (row) / 8LL;", 1, true), on)
  check(not on:find("% (s_seq_len)", 1, true), "no remainder by the sequence length")
  check(off:find("const long long x1 = ((row) / 8LL) % (s_seq_len);", 1, true), "off: the earlier text")
  local b4 = src("EMMY_UNIT_OUTER=1", { "--batch", "4" })
  check(b4:find("const long long x1 = ((row) / 8LL) % (s_seq_len);", 1, true), "batch 4: the division stays")
end)

test("row kernels by default (EMMY_WARP_RED, EMMY_ROW_EXACT, EMMY_TID_ASSUME; 0 the earlier text): a warp-a-row kernel reduces by shuffles without block barriers; rows a multiple of RPB drop the guard; the block's shape assumed", function()
  local function src(env) return rope_norm_src(env):match("// kernel .-\n}\n") end -- the first kernel, not the next one's prelude
  local off, on = src("EMMY_WARP_RED=0 EMMY_ROW_EXACT=0 EMMY_TID_ASSUME=0"), src("EMMY_NONE=1")
  eq(src("EMMY_WARP_RED=1 EMMY_ROW_EXACT=1 EMMY_TID_ASSUME=1"), on)
  check(on:find("__builtin_assume(threadIdx.x < 32u); __builtin_assume(threadIdx.y < 8u);", 1, true), "the block's shape")
  check(not off:find("__builtin_assume", 1, true), "off: the earlier text")
  check(off:find("em_block_sum(em_acc, em_red)", 1, true) and off:find("const bool live = row < rows;", 1, true), off)
  check(on:find("em_acc += __shfl_xor_sync(0xffffffffu, em_acc, em_o);", 1, true), on)
  check(not on:find("em_red", 1, true) and not on:find("__syncthreads", 1, true), "no shared reduction, no barrier")
  check(on:find("const bool live = true; /* rows: a multiple of 8 */", 1, true), "16 and 8 rows a token, 8 a block")
  -- a row count that RPB does not divide keeps the guard: the input norm's seq_len rows
  local c, o, e = emmy({ "compile", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--kernel", "k_rms_norm_",
    "--ir", "cuda", "--pins", "RPB=2" })
  eq(c, 0, e)
  check(o:find("const bool live = row < rows;", 1, true), o)
end)

test("EMMY_ROW_VEC: a row kernel's columns in chunks — one load of a chunk a tensor, one store; RoPE's partner stays an element load; unset: chunks in a kernel without a concatenation only; 0 the text before", function()
  local function src(env, model, kernel)
    local c, o, e = emmy({ "compile", model, "--layer", "0", "--dynamic", "seq_len@x:1", "--kernel", kernel, "--ir", "cuda" }, { env = env })
    eq(c, 0, e)
    return o:match("// kernel .-\n}\n")
  end
  local Q, LL = "Qwen/Qwen3-Embedding-0.6B", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
  -- TinyLlama's input norm (2048 columns, 256 threads): 16-byte chunks by itself (1) or asked (8)
  for _, env in ipairs { "EMMY_ROW_VEC=1", "EMMY_ROW_VEC=8", "EMMY_NONE=1" } do
    local t = src(env, LL, "k_rms_norm")
    check(t:find("const long long em_cb = (threadIdx.x + em_i * 256LL) * 8;", 1, true), t)
    check(select(2, t:gsub("__ldg%(%(const uint4 %*%)%(in", "")) == 3, "the input (both passes) and the weight, a chunk each: " .. t)
    check(t:find("asm volatile(\"st.global.v4.b32", 1, true), "one 16-byte store")
    check(not t:find("in%d%[") , "no element load left: " .. t)
  end
  -- Qwen3's q_norm with RoPE (128 columns, a warp): chunks of 2 (half the thread's columns: the rotate-half partner
  -- chunk is the thread's own); x, cos, sin and the weight a 4-byte load, the partner's x and weight element loads
  local q = src("EMMY_ROW_VEC=1", Q, "k_rms_norm_rope_40c43c")
  check(q:find("const long long em_cb = (threadIdx.x + em_i * 32LL) * 2;", 1, true), q)
  check(select(2, q:gsub("__ldg%(%(const unsigned %*%)%(in", "")) == 5, "x (both passes), cos, sin, weight: " .. q)
  check(q:find("if (em_c0 < (0LL + 64LL)) {", 1, true) and q:find("em_bf2f(in2[", 1, true), "the partner, an element load")
  check(q:find("*(unsigned *)(out0 + (", 1, true), "a 4-byte store")
  -- an f32 model: chunks of 4 (16 bytes), float4 loads and store
  local c4, f4, e4 = emmy({ "compile", LL, "--layer", "0", "--dynamic", "seq_len@x:1", "--dtype", "f32", "--kernel", "k_rms_norm",
    "--ir", "cuda" }, { env = "EMMY_ROW_VEC=1" })
  eq(c4, 0, e4)
  check(f4:find("__ldg((const float4 *)(in1 + (em_cb)))", 1, true) and f4:find("*(float4 *)(out0 + (", 1, true), f4)
  -- a row whose thread's columns are not a multiple of V: the text before; unset, a kernel with RoPE's
  -- concatenation: the text before (its chunks measured slower); 0: no chunks
  eq(src("EMMY_ROW_VEC=8", Q, "k_rms_norm_rope_40c43c"), src("EMMY_ROW_VEC=0", Q, "k_rms_norm_rope_40c43c"))
  eq(src("EMMY_NONE=1", Q, "k_rms_norm_rope_40c43c"), src("EMMY_ROW_VEC=0", Q, "k_rms_norm_rope_40c43c"))
  check(not src("EMMY_ROW_VEC=0", LL, "k_rms_norm"):find("em_cb", 1, true), "0: no chunks")
end)

test("EMMY_ROW_PRELOAD=1: a chunked row's loads of both passes made once, before the first — x and the weight ahead of the reduction; =2 the weight before the grid dependency wait; unset the text before", function()
  local function src(env, model)
    local c, o, e = emmy({ "compile", model, "--layer", "0", "--dynamic", "seq_len@x:1", "--kernel", "k_rms_norm", "--ir", "cuda" }, { env = env })
    eq(c, 0, e)
    return o:match("// kernel .-\n}\n")
  end
  local LL = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
  local t = src("EMMY_ROW_PRELOAD=1", LL)
  check(select(2, t:gsub("__ldg%(%(const uint4 %*%)%(in", "")) == 2, "x once and the weight: " .. t)
  check(t:find("unsigned short em_vr0%[1%]%[8%];") and t:find("em_vr0[em_i][7]", 1, true), t)
  local ld, red = t:find("__ldg((const uint4 *)(in1", 1, true), t:find("em_block_sum", 1, true)
  check(ld and red and ld < red, "the weight loaded before the reduction")
  check(t:find("asm volatile(\"st.global.v4.b32", 1, true), "one 16-byte store")
  -- Qwen3's input norm (1024 columns, chunks of 4): x and the weight, a load each
  local q = src("EMMY_ROW_PRELOAD=1", "Qwen/Qwen3-Embedding-0.6B")
  check(select(2, q:gsub("__ldg%(", "")) == 2, q)
  check(not src("EMMY_NONE=1", LL):find("[em_i]", 1, true), "unset: the text before")
  -- =2: the weight's chunk (a param at the column alone) loaded once, before the grid dependency wait; x after it
  local w = src("EMMY_ROW_PRELOAD=2", LL)
  local wl, gw, xl = w:find("__ldg((const uint4 *)(in1 + (em_cb)))", 1, true), w:find("griddepcontrol.wait", 1, true),
    w:find("__ldg((const uint4 *)(in0", 1, true)
  check(wl and gw and xl and wl < gw and gw < xl, w)
  check(select(2, w:gsub("__ldg%(", "")) == 2, w)
  -- a row the default does not chunk (Qwen3's q_norm with RoPE): chunks of one column, its loads made ahead (x, cos,
  -- sin, the weight), the rotate-half partner read from the thread's own chunk two strides on (64 columns, wrapping)
  local function rope(env)
    local c1, r, e1 = emmy({ "compile", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--kernel",
      "k_rms_norm_rope_40c43c", "--ir", "cuda" }, { env = env })
    eq(c1, 0, e1)
    return r:match("// kernel .-\n}\n")
  end
  local r = rope("EMMY_ROW_PRELOAD=1")
  check(select(2, r:gsub("__ldg%(%(const unsigned short %*%)", "")) == 4 and r:find("unsigned short em_vr0[4][1];", 1, true), r)
  local l4, sh = r:find("__ldg((const unsigned short *)(in1", 1, true), r:find("__shfl_xor_sync", 1, true)
  check(l4 and sh and l4 < sh, "sin loaded before the reduction")
  check(select(2, r:gsub("em_vr0%[%(em_i %+ 2%) %% 4%]%[0%]", "")) == 2 and not r:find("in2[", 1, true), "the partner's x: " .. r)
  -- with the RoPE norm chunked by two (EMMY_ROW_VEC=1): a 4-byte load a tensor and chunk, the partner one chunk on
  local r2 = rope("EMMY_ROW_PRELOAD=1 EMMY_ROW_VEC=1")
  check(select(2, r2:gsub("__ldg%(%(const unsigned %*%)", "")) == 4 and r2:find("(em_i + 1) % 2][", 1, true), r2)
  check(not r2:find("in2[", 1, true) and not r2:find("in3[", 1, true), "no element load left")
end)

test("kernels.apply_picks: a tune's picks become the choices of the kernels that are tuned ones; the rest say why not", function()
  local kernels = require "emmy.kernels"
  local function plan(name, ...)
    local cands = {}
    for i, s in ipairs { ... } do cands[i] = { string = s, knobs = {} } end
    return { kernel = { name = name }, candidates = cands, choice = cands[1] }
  end
  local plans = { plan("k_a", "X=1", "X=2"), plan("k_b", "Y=1", "Y=2"), plan("k_a", "X=1", "X=2"), plan("k_c", "Z=1") }
  local r = kernels.apply_picks(plans, { { name = "k_a", best_knobs = "X=2" }, { name = "k_b", best_knobs = "Y=9" },
    { name = "k_gone", best_knobs = "Q=1" }, { name = "k_c" } })
  eq(plans[1].choice.string, "X=2", "picked")
  eq(plans[3].choice.string, "X=2", "every instance of the kernel")
  eq(plans[2].choice.string, "Y=1", "a pick that is not a candidate leaves the rules' choice")
  eq(r.applied, 1)
  eq(r.kernels, 3)
  eq(table.concat(r.absent, ","), "k_gone")
  eq(table.concat(r.refused, ","), "k_b")
  eq(kernels.picks_line(r, "t.json"), "picks: 1 of 3 distinct kernels take the tune's pick from t.json; not in this graph: k_gone; not a candidate here: k_b")
  local d = tmpdir()
  write_file(d .. "/bad.json", "{}")
  local none, err = kernels.read_picks(d .. "/bad.json")
  check(none == nil and err:find("not a tune's summary", 1, true), tostring(err))
  check(select(2, kernels.read_picks(d .. "/missing.json")):find("--picks", 1, true), "a missing file")
end)

return T
