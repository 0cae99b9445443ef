-- emmy.tokenizer — a model's Hugging Face tokenizer.json as a byte-level BPE tokenizer (src/tokenizer.c):
--   local tok, err = require("emmy.tokenizer").load(path)   -- nil, one-line message where it cannot
--   tok:encode(text) -> { ids } | nil, msg                     -- with the post-processor's added tokens
-- What it takes: model BPE over byte-level symbols (with ignore_merges: a piece in the vocabulary is one token); a normalizer of NFC or none; a pre-tokenizer of ByteLevel
-- (GPT-2's split) or a Sequence of Split (regex, behavior Isolated) and ByteLevel without its own regex; added
-- tokens matched literally first; a post-processor of ByteLevel (nothing added) or TemplateProcessing (its single
-- template's special tokens around the sequence). Anything else is refused with its name.
local cjson = require "cjson"
local core = require "emmy.tokenizer_c"

local M = {}

-- GPT-2's pre-tokenizer split, used where ByteLevel carries use_regex
M.GPT2_SPLIT = [['s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+]]

local function pre_split(pt)
  if pt == nil or pt == cjson.null then return nil end
  if pt.type == "ByteLevel" then return pt.use_regex ~= false and M.GPT2_SPLIT or nil end
  if pt.type == "Sequence" then
    local re, bytelevel
    for _, p in ipairs(pt.pretokenizers or {}) do
      if p.type == "Split" and p.pattern and p.pattern.Regex and (p.behavior == "Isolated") and not p.invert and not re then
        re = p.pattern.Regex
      elseif p.type == "ByteLevel" then
        if p.use_regex ~= false then return nil, "a ByteLevel pre-tokenizer with its own regex after a Split" end
        bytelevel = true
      else
        return nil, ("pre-tokenizer %s%s is not supported"):format(p.type, p.behavior and (" (" .. p.behavior .. ")") or "")
      end
    end
    if not bytelevel then return nil, "no ByteLevel pre-tokenizer (emmy's BPE is byte-level)" end
    return re
  end
  return nil, ("pre-tokenizer %s is not supported"):format(tostring(pt.type))
end

local function nfc_of(n)
  if n == nil or n == cjson.null then return false end
  if n.type == "NFC" then return true end
  if n.type == "Sequence" and #(n.normalizers or {}) == 1 and n.normalizers[1].type == "NFC" then return true end
  return nil, ("normalizer %s is not supported"):format(tostring(n.type))
end

-- The post-processor's token ids before and after a single sequence.
local function template(pp, ids_of)
  local pre, post = {}, {}
  if pp == nil or pp == cjson.null or pp.type == "ByteLevel" then return pre, post end
  if pp.type ~= "TemplateProcessing" then return nil, ("post-processor %s is not supported"):format(tostring(pp.type)) end
  local seen = false
  for _, piece in ipairs(pp.single or {}) do
    if piece.Sequence then
      seen = true
    elseif piece.SpecialToken then
      local st = pp.special_tokens and pp.special_tokens[piece.SpecialToken.id]
      local ids = st and st.ids or { ids_of[piece.SpecialToken.id] }
      if not ids or #ids == 0 then return nil, ("post-processor token %s has no id"):format(piece.SpecialToken.id) end
      for _, id in ipairs(ids) do table.insert(seen and post or pre, id) end
    end
  end
  return pre, post
end

function M.load(path)
  local f, e = io.open(path, "rb")
  if not f then return nil, e end
  local text = f:read("*a")
  f:close()
  local ok, j = pcall(cjson.decode, text)
  if not ok then return nil, ("%s: not JSON (%s)"):format(path, tostring(j)) end
  local model = j.model or {}
  if model.type ~= "BPE" then return nil, ("%s: model %s is not supported (BPE only)"):format(path, tostring(model.type)) end
  local re, rerr = pre_split(j.pre_tokenizer)
  if rerr then return nil, path .. ": " .. rerr end
  local nfc, nerr = nfc_of(j.normalizer)
  if nerr then return nil, path .. ": " .. nerr end
  local t = core.new()
  t:vocab(model.vocab or {})
  local merges = {}
  for i, m in ipairs(model.merges or {}) do
    if type(m) == "string" then
      local a, b = m:match("^(.-) (.*)$")
      if not a then return nil, ("%s: merge %d is not 'a b'"):format(path, i) end
      merges[i] = { a, b }
    else
      merges[i] = m
    end
  end
  t:merges(merges)
  if re then
    local okp, perr = t:pattern(re)
    if not okp then return nil, path .. ": " .. perr end
  end
  t:nfc(nfc)
  t:ignore_merges(model.ignore_merges == true)
  local ids_of = {}
  for _, a in ipairs(j.added_tokens or {}) do
    t:added(a.content, a.id)
    ids_of[a.content] = a.id
  end
  local pre, post = template(j.post_processor, ids_of)
  if not pre then return nil, path .. ": " .. post end
  local self = { core = t, pre = pre, post = post }
  function self:encode(s, opts)
    local ids, err = self.core:encode(s)
    if not ids then return nil, err end
    if opts and opts.special == false then return ids end
    local out = {}
    for _, id in ipairs(self.pre) do out[#out + 1] = id end
    for _, id in ipairs(ids) do out[#out + 1] = id end
    for _, id in ipairs(self.post) do out[#out + 1] = id end
    return out
  end
  return self
end

return M
