-- emmy repl — an interactive LuaJIT prompt with the emmy modules loaded.
local cli = require "emmy.cli"
local sys = require "emmy.sys"

local function pretty(v, depth)
  depth = depth or 0
  if type(v) ~= "table" or depth > 2 then return tostring(v) end
  local parts, n = {}, 0
  for k, x in pairs(v) do
    n = n + 1
    if n > 20 then parts[#parts + 1] = "…"; break end
    parts[#parts + 1] = (type(k) == "number" and "" or tostring(k) .. " = ") .. pretty(x, depth + 1)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

return {
  summary = "interactive LuaJIT prompt with the emmy modules loaded",
  usage = [[usage: emmy repl [--db PATH]

  Reads Lua lines (statements or expressions; an expression's values are printed). Preloaded globals:
  ir, ref, sys, graphjson, inputs, cjson. Works with piped stdin (no prompt is printed then).
  Example: g = graphjson.read("tests/fixtures/rmsnorm.torch.json"); print(g:hash())
  --db PATH  also opens a tune DB as the global db (its context with the most rows), with helpers:
             db:kernels()                      the kernels: {name, hash, kind, measured, ok, best_us}
             db:variants{kernel = "linear"}    emmy eval variants' data (top = N)
             db:failures()                     emmy eval failures' clusters (kernel = SUBSTR)
             db:knobs(), db:online()           emmy eval knobs / online's data
             db:sql("SELECT … WHERE x = ?", v) a read query, parameters bound
  Example: for _, k in ipairs(db:kernels()) do print(k.name, k.best_us) end]],
  run = function(argv)
    local opts = cli.parse(argv, { flags = { ["--db"] = { kind = "string" } } }, "repl")
    local env = setmetatable({ ir = require "emmy.ir", ref = require "emmy.ref", sys = sys,
      graphjson = require "emmy.graphjson", inputs = require "emmy.inputs", cjson = require "cjson",
      pretty = pretty }, { __index = _G })
    if opts.db then
      local db, err = require("emmy.evalviews").repl_db(opts.db)
      if not db then cli.usage("repl: %s", err) end
      env.db = db
    end
    local tty = sys.isatty(0)
    if tty then print("emmy repl — LuaJIT with emmy modules (ir, ref, sys, graphjson, inputs); Ctrl-D exits") end
    local buf = ""
    while true do
      if tty then io.write(buf == "" and "emmy> " or "  ... ") io.flush() end
      local line = io.read("*l")
      if not line then break end
      buf = buf == "" and line or buf .. "\n" .. line
      local chunk, err = loadstring("return " .. buf, "=repl")
      if not chunk then chunk, err = loadstring(buf, "=repl") end
      if not chunk and err:match("<eof>") then
        -- incomplete statement: keep reading
      else
        buf = ""
        if not chunk then
          io.stderr:write(err, "\n")
        else
          setfenv(chunk, env)
          local res = { pcall(chunk) }
          if not res[1] then
            io.stderr:write(tostring(res[2]), "\n")
          elseif #res > 1 then
            local out = {}
            for i = 2, #res do out[#out + 1] = pretty(res[i]) end
            print(table.concat(out, "\t"))
          end
        end
      end
    end
    if tty then print("") end
    return 0
  end,
}
