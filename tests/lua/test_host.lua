-- The host: help, version, scripts with arg, commands, the REPL, one-line errors and exit codes,
-- text-only loading and the search path (never the current directory).
local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local function one_line(s, what)
  local n = #lines_of(s)
  check(n == 1, ("%s: expected one line on stderr, got %d: %s"):format(what, n, s))
end

test("help lists commands", function()
  for _, args in ipairs { {}, { "--help" } } do
    local code, out = emmy(args)
    eq(code, 0, "exit")
    check(out:find("commands:"), "no command list")
    for _, c in ipairs { "graph", "ref", "repl", "info" } do
      check(out:find("\n  " .. c .. " "), "command " .. c .. " not listed:\n" .. out)
    end
  end
end)

test("help CMD shows usage", function()
  local code, out = emmy { "help", "graph" }
  eq(code, 0, "exit")
  check(out:find("usage: emmy graph"), out)
  local code2, out2 = emmy { "ref", "--help" }
  eq(code2, 0, "exit")
  check(out2:find("usage: emmy ref"), out2)
  local code3, _, err3 = emmy { "help", "nope" }
  eq(code3, 2, "exit")
  one_line(err3, "help nope")
end)

test("version has the git revision", function()
  local code, out = emmy { "--version" }
  eq(code, 0, "exit")
  local rc, rev = sh("cd " .. shell_quote(ROOT) .. " && git rev-parse --short=12 HEAD")
  if rc ~= 0 then skip("not a git checkout (the GPU machine gets a copy without .git)") end
  check(out:match("^emmy %d+%.%d+%.%d+ %(git [%w%-]+%)\n$"), out)
  check(out:find(rev:match("%w+"), 1, true), "revision " .. rev .. " not in " .. out)
end)

test("script gets arg", function()
  local d = tmpdir()
  write_file(d .. "/args.lua", "print(arg[0]) for i = 1, #arg do print(i, arg[i]) end print(select('#', ...))")
  local code, out = emmy { d .. "/args.lua", "a", "b c" }
  eq(code, 0, "exit")
  eq(out, d .. "/args.lua\n1\ta\n2\tb c\n2\n", "output")
end)

test("script exit status", function()
  local d = tmpdir()
  write_file(d .. "/rc.lua", "return 3")
  eq((emmy { d .. "/rc.lua" }), 3, "exit")
end)

test("unknown command and script exit 2 with one line", function()
  local code, out, err = emmy { "frobnicate" }
  eq(code, 2, "exit")
  eq(out, "", "stdout")
  one_line(err, "unknown command")
  check(err:find("^emmy: unknown command 'frobnicate'"), err)
  code, out, err = emmy { "/nonexistent/x.lua" }
  eq(code, 2, "exit")
  one_line(err, "missing script")
  check(err:find("no such script"), err)
  code, _, err = emmy { "--frob" }
  eq(code, 2, "exit")
  one_line(err, "unknown option")
end)

test("script error is one line with file:line, exit 1", function()
  local d = tmpdir()
  write_file(d .. "/boom.lua", "local x = 1\nerror('kaboom')\n")
  local code, _, err = emmy { d .. "/boom.lua" }
  eq(code, 1, "exit")
  one_line(err, "script error")
  eq(err, "emmy: " .. d .. "/boom.lua:2: kaboom\n", "message")
  local code2, _, err2 = emmy({ d .. "/boom.lua" }, { env = "EMMY_DEBUG=1" })
  eq(code2, 1, "exit")
  check(err2:find("stack traceback"), "EMMY_DEBUG=1 shows the traceback: " .. err2)
  write_file(d .. "/syntax.lua", "local = 2\n")
  local code3, _, err3 = emmy { d .. "/syntax.lua" }
  eq(code3, 2, "exit")
  one_line(err3, "syntax error")
end)

test("usage error of a command exits 2", function()
  local code, _, err = emmy { "graph" }
  eq(code, 2, "exit")
  one_line(err, "missing arg")
  code, _, err = emmy { "graph", "x.json", "--bogus" }
  eq(code, 2, "exit")
  one_line(err, "bad flag")
  code, _, err = emmy { "ref", "x.json", "--seed", "abc" }
  eq(code, 2, "exit")
  one_line(err, "bad int")
end)

test("bytecode is refused", function()
  local d = tmpdir()
  write_file(d .. "/bc.lua", string.dump(function() print("ran bytecode") end))
  local code, out, err = emmy { d .. "/bc.lua" }
  check(code ~= 0, "bytecode ran")
  check(not out:find("ran bytecode"), out)
  one_line(err, "bytecode")
end)

test("require never searches the current directory", function()
  local d = tmpdir()
  write_file(d .. "/evil.lua", "print('loaded from cwd') return {}")
  write_file(d .. "/main.lua", "local ok = pcall(require, 'evil') print(ok)")
  local code, out = emmy({ "main.lua" }, { cwd = d })
  eq(code, 0, "exit")
  eq(out, "false\n", "require from cwd")
  write_file(d .. "/main2.lua", "local ok, e = pcall(require, 'emmy.cli') print(ok, package.cpath == '')")
  local _, out2 = emmy({ "main2.lua" }, { cwd = d })
  eq(out2, "true\ttrue\n", "emmy modules resolve")
end)

test("EMMY_HOME overrides the script folder", function()
  local code, _, err = emmy({ "--help" }, { env = "EMMY_HOME=/nonexistent" })
  eq(code, 1, "exit")
  one_line(err, "bad home")
  local code2 = emmy({ "--help" }, { env = "EMMY_HOME=" .. shell_quote(ROOT) })
  eq(code2, 0, "exit")
end)

test("repl from piped stdin", function()
  local code, out, err = emmy({ "repl" }, { stdin = "x = 6 * 7\nx\nfor i = 1, 2 do\nprint('i', i)\nend\nir.new('g')\nerror('oops')\nsys.nproc() > 0\n" })
  eq(code, 0, "exit: " .. err)
  local l = lines_of(out)
  eq(l[1], "42", "expression value")
  eq(l[2], "i\t1", "multi-line statement")
  eq(l[3], "i\t2", "multi-line statement")
  check(l[4]:find("emmy.graph 'g'"), l[4])
  eq(l[5], "true", "after an error the repl goes on")
  check(err:find("oops"), "error shown")
end)

test("info runs without a GPU", function()
  local code, out = emmy { "info" }
  eq(code, 0, "exit")
  check(out:find("\ngpu "), out)
  check(out:find("\nnvrtc "), out)
end)

test("cli.sh: a command's exit status and output from the shell (LuaJIT's popen close answers true regardless)", function()
  local sh = require("emmy.cli").sh
  local c, out = sh("echo hi; exit 3")
  eq(c, 3, "status of a failing command")
  eq(out, "hi\n", "its output, the status marker removed")
  c, out = sh("printf 'a\\nb'")
  eq(c, 0, "status of a command that succeeds")
  eq(out, "a\nb", "output without a final newline")
  c = sh("command -v emmy-no-such-binary-here")
  check(c ~= 0, "a missing command is not found")
end)

return T
