-- Regenerates the committed graph fixtures from the builders in graphs.lua: emmy tests/lua/gen_fixtures.lua
package.path = EMMY_HOME .. "/tests/lua/?.lua;" .. package.path
local graphs = require "graphs"
local graphjson = require "emmy.graphjson"
local path = EMMY_HOME .. "/tests/fixtures/block.torch.json"
assert(graphjson.write(graphs.block(), path))
print("wrote " .. path)
