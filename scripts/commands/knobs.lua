-- emmy knobs — the knob table (src/knobs.h): every knob an emitter reads or a rule declares, with its family,
-- default, legal values, the kernels that have it and its doc; and the table of docs/formats.md generated from it.
local cli = require "emmy.cli"
local knobs = require "emmy.knobs"
local tbl = require "emmy.tbl"

local DOCS = "docs/formats.md"
local BEGIN = "<!-- the knob table: generated from src/knobs.h by `emmy knobs --update-docs`; edit it there -->"
local END = "<!-- end of the generated knob table -->"

-- The markdown table of every knob (the text between docs/formats.md's markers, without them).
local function markdown()
  local out = { "| knob | family | default | values | kernels | meaning |", "| --- | --- | --- | --- | --- | --- |" }
  for _, k in ipairs(knobs.list()) do
    out[#out + 1] = ("| %s | %s | %d | %s | %s | %s |"):format(k.name, k.family, k.default, k.values:gsub(",", ", "),
      k.kinds, k.doc)
  end
  return table.concat(out, "\n") .. "\n"
end

-- The docs file's text split at the markers: before (through BEGIN's line), the table, after (from END's line).
local function split_docs(text)
  local a, b = text:find(BEGIN, 1, true)
  local c = text:find(END, 1, true)
  if not a or not c or c < b then return nil end
  return text:sub(1, b + 1), text:sub(b + 2, c - 1), text:sub(c)
end

return {
  summary = "list the knobs (family, default, legal values, kernels, doc); regenerate the docs' knob table",
  usage = "usage: emmy knobs [KNOB] [--json] [--markdown] [--update-docs]\n\n" ..
    "  Every knob of the knob table (src/knobs.h): the emitters read these, the rules declare them, EMMY_KNOBS pins\n" ..
    "  them; a knob outside the table is an error everywhere.\n" ..
    "  KNOB           one knob in full\n" ..
    "  --json         the table as JSON\n" ..
    "  --markdown     the markdown table of " .. DOCS .. "\n" ..
    "  --update-docs  rewrite that table in " .. DOCS .. " (a test fails while they differ)",
  markdown = markdown,
  split_docs = split_docs,
  run = function(argv)
    local opts, pos = cli.parse(argv, { flags = { ["--json"] = { kind = "bool" }, ["--markdown"] = { kind = "bool" },
      ["--update-docs"] = { kind = "bool" } }, positional = { "knob" } }, "knobs")
    if opts.update_docs then
      local path = EMMY_HOME .. "/" .. DOCS
      local f = io.open(path, "rb")
      if not f then cli.fail("knobs: cannot read %s", path) end
      local text = f:read("*a")
      f:close()
      local before, _, after = split_docs(text)
      if not before then cli.fail("knobs: %s lacks the knob table's markers (%s … %s)", path, BEGIN, END) end
      f = io.open(path, "wb")
      if not f then cli.fail("knobs: cannot write %s", path) end
      f:write(before, markdown(), after)
      f:close()
      print(("%s: the knob table rewritten (%d knobs)"):format(DOCS, #knobs.list()))
      return 0
    end
    if opts.markdown then
      io.write(markdown())
      return 0
    end
    local list = knobs.list()
    if pos.knob then
      local k = knobs.info(pos.knob)
      if not k then cli.usage("knobs: %s", select(2, knobs.check(pos.knob, 0))) end
      list = { k }
    end
    if opts.json then
      print(require("cjson").encode { knobs = list })
      return 0
    end
    if pos.knob then
      local k = list[1]
      print(("%s  family %s, default %d, values %s\n  kernels: %s\n  %s"):format(k.name, k.family, k.default, k.values,
        k.kinds, k.doc))
      return 0
    end
    local rows = {}
    for _, k in ipairs(list) do
      rows[#rows + 1] = { k.name, k.family, k.default, k.values, (k.kinds:match("^[^(]*"):gsub("%s+$", "")) }
    end
    tbl.print { header = { "knob", "family", "default", "values", "kernels" }, rows = rows, align = "llrll" }
    print(("\n%d knobs; `emmy knobs KNOB` shows one in full"):format(#list))
    return 0
  end,
}
