-- Regenerates the committed graph fixtures from the builders in graphs.lua: emmy tests/lua/gen_fixtures.lua
package.path = EMMY_HOME .. "/tests/lua/?.lua;" .. package.path
local graphs = require "graphs"
local graphjson = require "emmy.graphjson"
local path = EMMY_HOME .. "/tests/fixtures/block.torch.json"
assert(graphjson.write(graphs.block(), path))
print("wrote " .. path)

-- The emitted-CUDA corpus: the chosen variant of every kernel of Qwen3-Embedding-0.6B layer 0 (dynamic).
local d = os.tmpname()
os.remove(d)
assert(os.execute(("'%s/emmy' compile Qwen/Qwen3-Embedding-0.6B --layer 0 --dynamic seq_len@x:1 --dump-dir %s >/dev/null")
  :format(EMMY_HOME, d)) == 0)
local sys = require "emmy.sys"
local kd = d .. "/" .. table.concat(sys.listdir(d), " "):match("(%d+_lowering_cuda%.kernels)")
local corpus = EMMY_HOME .. "/tests/fixtures/cuda"
assert(sys.mkdir_p(corpus))
for _, f in ipairs(sys.listdir(corpus)) do os.remove(corpus .. "/" .. f) end
for _, f in ipairs(sys.listdir(kd)) do
  if f:match("%.cu$") then
    local src = assert(io.open(kd .. "/" .. f)):read("*a")
    local out = assert(io.open(corpus .. "/" .. f, "wb"))
    out:write(src)
    out:close()
  end
end
os.execute("rm -rf " .. d)
print("wrote " .. corpus)
