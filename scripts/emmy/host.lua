-- host.lua — what `emmy ARGS…` does: `emmy FILE.lua args…` runs a script with `arg` set, `emmy COMMAND args…`
-- runs scripts/commands/COMMAND.lua, `emmy`/`--help` lists the commands, `help CMD` shows one, `--version`.
-- Returns the process exit status (main.c exits with it).
local cli = require "emmy.cli"
local sys = require "emmy.sys"

local argv = EMMY_ARGV

local function version_line()
  local v, rev = sys.version()
  return ("emmy %s (git %s)"):format(v, rev)
end

local function print_help()
  print(version_line() .. " — CUDA kernel compiler and autotuner for transformer models")
  print("")
  print("usage: emmy COMMAND [args…]     run a command")
  print("       emmy FILE.lua [args…]    run a Lua script with the emmy modules")
  print("       emmy help COMMAND        a command's usage")
  print("       emmy --version")
  print("")
  print("commands:")
  local cmds = cli.list_commands()
  local w = 0
  for _, c in ipairs(cmds) do w = math.max(w, #c.name) end
  for _, c in ipairs(cmds) do print(("  %-" .. w .. "s  %s"):format(c.name, c.summary or "")) end
  print("")
  print("environment: EMMY_HOME (emmy's folder), EMMY_DEBUG=1 (tracebacks)")
  return 0
end

local function command_help(name)
  if not name then return print_help() end
  local cmd = cli.load_command(name)
  if not cmd then cli.usage("unknown command '%s' (emmy --help lists them)", name) end
  print(("emmy %s — %s"):format(cmd.name, cmd.summary or ""))
  print("")
  print(cmd.usage or ("usage: emmy " .. name))
  return 0
end

local function run_script(path, rest)
  if sys.stat(path) ~= "file" then cli.usage("no such script '%s'", path) end
  local chunk, err = loadfile(path)
  if not chunk then cli.usage("%s", err) end
  local a = { [0] = path }
  for i, v in ipairs(rest) do a[i] = v end
  _G.arg = a
  local rc = chunk(unpack(rest))
  return tonumber(rc) or 0
end

local function main()
  local first = argv[1]
  local rest = {}
  for i = 2, #argv do rest[#rest + 1] = argv[i] end
  if first == nil or first == "--help" or first == "-h" then return print_help() end
  if first == "--version" or first == "-V" then
    print(version_line())
    return 0
  end
  if first == "help" then return command_help(rest[1]) end
  if first:match("%.lua$") then return run_script(first, rest) end
  if first:sub(1, 1) == "-" then cli.usage("unknown option '%s' (emmy --help)", first) end
  local cmd = cli.load_command(first)
  if not cmd then cli.usage("unknown command '%s' (emmy --help lists them)", first) end
  if rest[1] == "--help" or rest[1] == "-h" then return command_help(first) end
  return cmd.run(rest)
end

return cli.protect(main)
