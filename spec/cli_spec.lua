-- cli_spec.lua - the gtlua command line, run as a subprocess: -e, scripts and arg,
-- exit codes and tracebacks, -, -v, --help, -l, GTLUA_INIT, --backend, --stats, Ctrl-C.
-- Tests named #gt need lua/gt (require "gt"); they are pending while it is missing.

local BIN = assert(os.getenv("GTLUA_BIN"), "run the specs inside gtlua: build/gtlua $(command -v busted) spec/")
local HAS_GT = pcall(require, "gt")

local S = require "spec.support"
local shq, spit, slurp, gtlua, tmpfile = S.shq, S.spit, S.slurp, S.gtlua, S.tmpfile

local function with_gt(name, fn)
  it(name .. " #gt", function()
    if not HAS_GT then return pending("lua/gt is not there yet (require 'gt' fails)") end
    fn()
  end)
end

describe("gtlua command line", function()
  it("-e runs code", function()
    local status, out = gtlua("-e 'print(1+1)'")
    assert.equal(0, status)
    assert.equal("2\n", out)
  end)

  it("runs -e and -l in order, then the script", function()
    local status, out = gtlua("-e 'x = 1' -e 'x = x * 10' -e 'print(x)'")
    assert.equal(0, status)
    assert.equal("10\n", out)
  end)

  it("gives a script its arguments in arg and in ... as lua.c does", function()
    local script = tmpfile('print(arg[0], arg[-1], arg[-2], arg[-3], arg[1], arg[2], #arg, select("#", ...), ...)\n')
    local status, out = gtlua("-e 'y=1' " .. shq(script) .. " a 'b c'")
    os.remove(script)
    assert.equal(0, status)
    assert.equal(table.concat({ script, "y=1", "-e", BIN, "a", "b c", "2", "2", "a", "b c" }, "\t") .. "\n", out)
  end)

  it("sets arg without a script: the interpreter at 0", function()
    local _, out = gtlua("-e 'print(arg[0], arg[1], #arg)'")
    assert.equal(BIN .. "\t-e\t2\n", out)
  end)

  it("exits 1 with the message and a traceback on stderr when a script fails", function()
    local script = tmpfile('local function inner() error("boom") end\ninner()\n')
    local status, out, err = gtlua(shq(script))
    os.remove(script)
    assert.equal(1, status)
    assert.equal("", out)
    assert.matches("^gtlua: [^\n]*:1: boom\n", err)
    assert.truthy(err:find("stack traceback:", 1, true))
    assert.truthy(err:find(script .. ":2: in main chunk", 1, true))
  end)

  it("exits 1 on an error in -e, a syntax error, a missing script, an error object", function()
    assert.equal(1, (gtlua("-e 'error(\"x\")'")))
    local status, _, err = gtlua("-e 'x = = 1'")
    assert.equal(1, status)
    assert.matches("^gtlua: %(command line%):1: unexpected symbol", err)
    status, _, err = gtlua("/nonexistent/script.lua")
    assert.equal(1, status)
    assert.matches("cannot open /nonexistent/script.lua", err)
    status, _, err = gtlua("-e 'error({})'")
    assert.equal(1, status)
    assert.matches("%(error object is a table value%)", err)
  end)

  it("'-' runs the script from stdin, with arguments", function()
    local status, out = gtlua("- x y", { stdin = 'print("stdin", arg[0], ...)\n' })
    assert.equal(0, status)
    assert.equal("stdin\t-\tx\ty\n", out)
  end)

  it("runs stdin as the script when there is none and stdin is not a terminal", function()
    local status, out = gtlua("", { stdin = "print(40 + 2)\n" })
    assert.equal(0, status)
    assert.equal("42\n", out)
  end)

  it("'--' stops the options", function()
    local script = tmpfile("print(...)\n")
    local status, out = gtlua("-- " .. shq(script) .. " -e -v")
    os.remove(script)
    assert.equal(0, status)
    assert.equal("-e\t-v\n", out)
  end)

  it("-v prints the version and exits", function()
    local status, out = gtlua("-v")
    assert.equal(0, status)
    assert.matches("^gtlua %d+%.%d+%.%d+ %(LuaJIT [^)]+%) backend %S+\n$", out)
  end)

  it("--help prints the usage to stdout", function()
    local status, out = gtlua("--help")
    assert.equal(0, status)
    assert.matches("^usage: gtlua %[options%] %[script %[args%]%]", out)
    assert.truthy(out:find("--backend=", 1, true))
  end)

  it("rejects a bad option, an unknown backend, -e without code", function()
    local status, _, err = gtlua("-z")
    assert.equal(1, status)
    assert.matches("^gtlua: unrecognized option '%-z'\nusage:", err)
    status, _, err = gtlua("--backend=gpu -e 'print(1)'")
    assert.equal(1, status)
    assert.matches("unknown backend 'gpu'", err)
    status, _, err = gtlua("-e")
    assert.equal(1, status)
    assert.matches("'%-e' needs argument", err)
  end)

  it("-l requires a module into a global, -l g=mod into g", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. shq(dir))
    spit(dir .. "/mymod.lua", "return { v = 7 }\n")
    local status, out = gtlua("-l mymod -l m=mymod -e 'print(mymod.v, m.v, m == mymod)'", { cd = dir })
    os.execute("rm -rf " .. shq(dir))
    assert.equal(0, status)
    assert.equal("7\t7\ttrue\n", out)
  end)

  it("runs GTLUA_INIT first, as code or @file", function()
    local _, out = gtlua("-e 'print(x + 1)'", { env = "GTLUA_INIT='x = 41'" })
    assert.equal("42\n", out)
    local init = tmpfile("x = 99\n")
    _, out = gtlua("-e 'print(x + 1)'", { env = "GTLUA_INIT=@" .. init })
    os.remove(init)
    assert.equal("100\n", out)
    local status, _, err = gtlua("-e 'print(1)'", { env = "GTLUA_INIT='error(\"init\")'" })
    assert.equal(1, status)
    assert.matches("GTLUA_INIT:1: init", err)
  end)

  it("finds lua/ from any directory and exports GTLUA_HOME and GTLUA_BIN", function()
    local status, out = gtlua([[-e 'print(require("gt.repl") ~= nil, os.getenv("GTLUA_HOME"), os.getenv("GTLUA_BIN"))']],
      { cd = "/", env = "-u GTLUA_HOME" })
    assert.equal(0, status)
    local ok, home, bin = out:match("^(%S+)\t(%S+)\t(%S+)\n$")
    assert.equal("true", ok)
    assert.equal(BIN, bin)
    assert.truthy(io.open(home .. "/lua/gt/repl.lua"), "no lua/gt/repl.lua under " .. home)
  end)

  it("--stats and --report=FILE call gt._at_exit at exit, also after an error", function()
    local env = [[GTLUA_NO_GT=1 GTLUA_INIT='gt = { _at_exit = function(o) print("at_exit", o.stats, o.report) end }']]
    local status, out = gtlua("--stats --report=r.html -e 'print(1)'", { env = env })
    assert.equal(0, status)
    assert.equal("1\nat_exit\ttrue\tr.html\n", out)
    status, out = gtlua("--report=r.html -e 'error(\"x\")'", { env = env })
    assert.equal(1, status)
    assert.equal("at_exit\tfalse\tr.html\n", out)
    _, out = gtlua("-e 'print(1)'", { env = env })
    assert.equal("1\n", out)
  end)

  it("GTLUA_NO_GT=1 runs a plain LuaJIT host", function()
    local status, out = gtlua("-e 'print(gt, jit.version)'", { env = "GTLUA_NO_GT=1" })
    assert.equal(0, status)
    assert.matches("^nil\tLuaJIT", out)
  end)

  it("Ctrl-C interrupts the running chunk, not the process", function()
    local pidfile, out, err, st = os.tmpname(), os.tmpname(), os.tmpname(), os.tmpname()
    os.remove(pidfile)
    local script = tmpfile([[
      local f = io.open(arg[1], "w")
      f:write(io.open("/proc/self/stat"):read("*n"))
      f:close()
      jit.off()   -- hooks do not reach compiled loops
      while true do end
    ]])
    os.execute(string.format("timeout 30 %s %s %s > %s 2> %s & p=$!; n=0;"
      .. " while [ ! -s %s ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done;"
      .. " kill -INT $(cat %s); wait $p; echo $? > %s",
      shq(BIN), shq(script), shq(pidfile), shq(out), shq(err), shq(pidfile), shq(pidfile), shq(st)))
    os.remove(script)
    os.remove(pidfile)
    local status, stderr = tonumber(slurp(st)), slurp(err)
    slurp(out)
    assert.equal(1, status)
    assert.matches("^gtlua: interrupted!\nstack traceback:", stderr)
  end)

  with_gt("--backend=cpu selects the cpu backend, and gt is preloaded", function()
    local status, out = gtlua("--backend=cpu -e 'print(gt.backend(), gt == require(\"gt\"))'", { env = "-u GTLUA_NO_GT" })
    assert.equal(0, status)
    assert.equal("cpu\ttrue\n", out)
    local _, version = gtlua("--backend=cpu -v", { env = "-u GTLUA_NO_GT" })
    assert.matches("backend cpu\n$", version)
  end)

  it("exits 1 with the error when require 'gt' fails", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. shq(dir .. "/lua/gt"))
    spit(dir .. "/lua/gt/init.lua", 'error("gt is broken")\n')
    local status, _, err = gtlua("-e 'print(1)'", { env = "-u GTLUA_NO_GT GTLUA_HOME=" .. shq(dir) })
    os.execute("rm -rf " .. shq(dir))
    assert.equal(1, status)
    assert.matches("gt is broken", err)
  end)

  it("-h prints the usage like --help", function()
    local status, out = gtlua("-h")
    assert.equal(0, status)
    assert.matches("^usage: gtlua", out)
    assert.truthy(out:find("--busted", 1, true), out)
  end)

  it("a binary copied away from lua/ says to set GTLUA_HOME, without a search list or traceback", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. shq(dir .. "/bin") .. " && cp " .. shq(BIN) .. " " .. shq(dir .. "/bin/gtlua"))
    local status, _, err = S.sh("env -u GTLUA_HOME -u GTLUA_NO_GT " .. shq(dir .. "/bin/gtlua") .. " -e 'print(1)'")
    os.execute("rm -rf " .. shq(dir))
    assert.equal(1, status)
    assert.truthy(err:find("GTLUA_HOME", 1, true), err)
    assert.truthy(err:find("make install", 1, true), err)
    assert.falsy(err:find("no file", 1, true), err)
    assert.falsy(err:find("stack traceback", 1, true), err)
  end)

  with_gt("a backend that cannot open says why once, without a traceback", function()
    local status, _, err = gtlua("-e 'print(1)'", { env = "-u GTLUA_NO_GT GTLUA_BACKEND=cuda CUDA_VISIBLE_DEVICES=-1" })
    if status == 0 then return pending("the cuda backend opened here") end
    assert.equal(1, status)
    assert.matches("^gtlua: [^\n]+\n$", err)
    assert.falsy(err:find("gtlua: gtlua:", 1, true), err)
  end)

  with_gt("--busted runs a user's spec file with gt and gt.busted's assertions", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. shq(dir))
    spit(dir .. "/my_spec.lua", [[
describe("my model", function()
  it("replays", function()
    local step = gt.tree(function(x) return gt.ops.relu(x) end)
    local x = gt.ones { 4 }
    for _ = 1, 3 do step(x) end
    assert.recorded(step, 1)
    assert.replayed(step, 1)
    assert.tensor_near({ 1, 1, 1, 1 }, step(x))
  end)
  it("fails visibly", function() assert.nodes(gt.tree(function() end), 5) end)
end)
]])
    local status, out = gtlua("--busted my_spec.lua", { cd = dir, env = "-u GTLUA_NO_GT" })
    -- and as DESIGN runs specs: Busted's runner as the script, gt's assertions loaded for it
    local busted = os.getenv("GTLUA_BUSTED") or "/usr/bin/busted"
    local status2, out2 = gtlua(shq(busted) .. " my_spec.lua", { cd = dir, env = "-u GTLUA_NO_GT" })
    os.execute("rm -rf " .. shq(dir))
    assert.equal(1, status)
    assert.truthy(out:find("1 success / 1 failure", 1, true), out)
    assert.truthy(out:find("Expected tree", 1, true), out)
    assert.equal(1, status2)
    assert.truthy(out2:find("1 success / 1 failure", 1, true), out2)
  end)

  it("make test's runner (scripts/test.sh) prints only failures, skips with their reason, and one closing total", function()
    -- a stand-in for the C tests (one failing check) and spec/fixtures/quiet_suite.lua for the specs
    local fake = tmpfile('#!/bin/sh\necho "check failed: src/x.c:12: 1 == 2"\necho "C tests: 5 passed, 1 failed"\n')
    os.execute("chmod +x " .. shq(fake))
    local busted = os.getenv("GTLUA_BUSTED") or "/usr/bin/busted"
    local env = "GTLUA_BIN_UNDER_TEST=" .. shq(BIN) .. " GTLUA_TEST_BIN=" .. shq(fake) .. " BUSTED=" .. shq(busted) ..
      " BUSTED_ARGS=spec/fixtures/quiet_suite.lua"
    local status, out, err = S.sh(env .. " sh scripts/test.sh")
    local cstatus, cout = S.sh(env .. " QUIET_SUITE_CRASH=1 sh scripts/test.sh")
    os.remove(fake)
    assert.equal(1, status, err)
    assert.equal("", err)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    -- the structure checks (2), the C checks and the specs in one total, last
    assert.equal("9 passed, 3 failed", lines[#lines], out)
    assert.equal("check failed: src/x.c:12: 1 == 2", lines[1], out)
    assert.truthy(out:find("not ok 2 - quiet suite fails\n# spec/fixtures/quiet_suite.lua @ 10\n", 1, true), out)
    assert.truthy(out:find("not ok 4 - quiet suite raises\n", 1, true), out)
    assert.truthy(out:find("boom in a spec", 1, true), out)
    assert.truthy(out:find("\nskipped: quiet suite is pending: [^\n]*needs a widget\n"), out)
    for _, noise in ipairs { "stray", "^ok ", "\nok ", "1%.%.", "passed, 0 failed", "specs:", "backend:", "C tests:" } do
      assert.falsy(out:find(noise), noise .. " in:\n" .. out)
    end
    local totals = select(2, out:gsub("%d+ passed, %d+ failed", ""))
    assert.equal(1, totals, out)
    -- a run that ends without its plan crashed: what it printed after its last result, and one more failure
    assert.equal(1, cstatus)
    local tail = "\nlast words\nbusted ended without its TAP plan line (it crashed?)\n8 passed, 4 failed\n"
    assert.equal(tail, cout:sub(-#tail), cout)
  end)
end)
