-- bench/verdict.lua — issues 19 and 20's Done-when rows, each against its bound, from bench/status.sh's folders:
--   ./emmy bench/verdict.lua DIR [DIR…] [--json FILE]
-- A DIR holds some of status_squares.json, status_gemm.json, status_attention.json and status_layer_<model>.json
-- (bench/status.sh writes them to $OUT, or /tmp; in a device call packed into status.tar.gz: `tar xzf` it into a
-- folder); each file is read from the last folder that has it, so two calls' sections make one table, and a file in
-- none is named under the table. Prints the device, a markdown table (emmy's chosen variant, the fastest timed one,
-- torch's, the ratio the issue bounds, met or not) and the count met; says whether the device is the H200 the issues
-- are judged on. No GPU: it reads files only.
local cli = require "emmy.cli"
local sys = require "emmy.sys"
local verdict = require "emmy.verdict"
local read_json = require("emmy.triage").read_json

local CMD = "bench/verdict.lua"
local opts, pos = cli.parse(arg, { flags = { ["--json"] = { kind = "string" } }, positional = { "dirs..." } }, CMD)
if #pos.dirs == 0 then cli.usage("%s: missing DIR (usage: ./emmy bench/verdict.lua DIR [DIR…] [--json FILE])", CMD) end
for _, d in ipairs(pos.dirs) do
  if sys.stat(d) ~= "dir" then cli.usage("%s: %s is not a folder", CMD, d) end
end
local v = verdict.collect(pos.dirs, read_json)
if #v.rows == 0 then
  cli.fail("%s: no bench/status.sh files in %s (status_squares.json, status_gemm.json, status_attention.json)", CMD,
    table.concat(pos.dirs, ", "))
end
print(table.concat(verdict.markdown(v), "\n"))
if opts.json then cli.must(sys.write_file(opts.json, require("cjson").encode(v))) end
return 0
