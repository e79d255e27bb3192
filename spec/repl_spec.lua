-- repl_spec.lua - the REPL: `gtlua -i` driven through a pipe (and a terminal through
-- script(1) when it is there), and gt.repl's printing and completion in-process.
-- Tests named #gt need lua/gt (require "gt"); they are pending while it is missing.

local BIN = assert(os.getenv("GTLUA_BIN"), "run the specs inside gtlua: build/gtlua $(command -v busted) spec/")
local HAS_GT = pcall(require, "gt")
local repl = require("gt.repl")

local S = require "spec.support"
local shq, spit, slurp, sh = S.shq, S.spit, S.slurp, S.sh

-- `gtlua -i` reading input from a pipe; env: a prefix for env(1).
local function session(input, env)
  return sh("timeout 60 env " .. (env or "") .. ' "$GTLUA" -i', input)
end

local function with_gt(name, fn)
  it(name .. " #gt", function()
    if not HAS_GT then return pending("lua/gt is not there yet (require 'gt' fails)") end
    fn()
  end)
end

local function has(s, part)
  return s:find(part, 1, true) ~= nil
end

describe("gtlua -i through a pipe", function()
  it("prints the banner and how to get help and leave, prompts on stdout, exits 0 at the end of input", function()
    local status, out = session("")
    assert.equal(0, status)
    assert.matches("^gtlua %d+%.%d+%.%d+ %(LuaJIT [^)]+%) backend %S+\n[^\n]*\n> \n$", out)
    assert.truthy(has(out, "?name for help"), out)
    assert.truthy(has(out, "Ctrl-D to exit"), out)
  end)

  it("prints the value of an expression", function()
    local _, out = session("1+1\n")
    assert.truthy(has(out, "\n> 2\n> \n"), out)
  end)

  it("still takes =expr", function()
    local _, out = session("=3*4\n")
    assert.truthy(has(out, "\n> 12\n"), out)
  end)

  it("quotes strings and prints every result", function()
    local _, out = session([["a".."b", 1, nil]] .. "\n")
    assert.truthy(has(out, '\n> "ab"\t1\tnil\n'), out)
  end)

  it("runs statements and prints nothing for them", function()
    local _, out = session("x = 5\nprint(x * 2)\n")
    assert.truthy(has(out, "\n> > 10\n> \n"), out)
  end)

  it("continues an incomplete chunk with >>", function()
    local _, out = session("for i = 1, 2 do\nprint(i)\nend\nfunction f(x)\nreturn x * 2\nend\nf(21)\n")
    assert.truthy(has(out, "\n> >> >> 1\n2\n"), out)
    assert.truthy(has(out, "> >> >> > 42\n"), out)
  end)

  it("reports an error with its traceback and goes on; ?tb shows it again", function()
    local status, out, err = session("function f() error('boom') end\nf()\n?tb\nx = = 1\nprint('after')\n")
    assert.equal(0, status)
    assert.truthy(has(out, "after\n"), out)
    assert.truthy(has(err, "stdin:1: boom\nstack traceback:"), err)
    assert.truthy(has(err, "in function 'f'"), err)
    assert.truthy(has(err, "stdin:1: unexpected symbol near '='\n"), err)   -- (a syntax error: no traceback)
    assert.truthy(has(out, "stack traceback:"), out)               -- ?tb: the last error's
  end)

  it("help prints a first page, help(x) the doc of x #gt", function()
    local _, out = session("help\nhelp(gt.ops.linear)\n")
    assert.truthy(has(out, "A first session"), out)
    assert.truthy(has(out, "gt.compile"), out)
    assert.truthy(has(out, "gt.ops.linear(x, W"), out)
    assert.falsy(has(out, "> nil\n"), out)
    assert.falsy(has(out, '"gt.ops.linear(x, W'), out)   -- printed once, not returned too
  end)

  it("a tree whose calls raised says so when printed #gt", function()
    local _, out = session("t = gt.tree(function(x) error('boom') end, {name = 'bad'})\n"
      .. "pcall(t, 1);\nt\n")
    assert.truthy(has(out, "a call raised an error"), out)
    assert.falsy(has(out, "launched no kernels"), out)
  end)

  it("reports a chunk left incomplete at the end of input", function()
    local status, _, err = session("for i = 1, 2 do\n")
    assert.equal(0, status)
    assert.truthy(has(err, "near '<eof>'"), err)
  end)

  it("suppresses printing after a trailing ;, and keeps the result in _LAST", function()
    local _, out = session("6*7;\n_LAST\n")
    assert.truthy(has(out, "\n> > 42\n"), out)
    assert.falsy(has(out, "> 42\n> 42"), out)
  end)

  it("sets _LAST to the first result", function()
    local _, out = session("10, 20\n_LAST + 1\n")
    assert.truthy(has(out, "\n> 10\t20\n> 11\n"), out)
  end)

  it("shows tables shallowly with sorted keys, objects with __tostring", function()
    local _, out = session("{b = 1, a = 'x', 10, {1}, {}}\n"
      .. "setmetatable({}, {__tostring = function() return 'OBJ' end})\n")
    assert.truthy(has(out, '\n> {10, {...}, {}, a = "x", b = 1}\n'), out)
    assert.truthy(has(out, "\n> OBJ\n"), out)
  end)

  it("prints the time of a command when GTLUA_REPL_TIME=0", function()
    local _, out = session("1\n", "GTLUA_REPL_TIME=0")
    assert.matches("\n> 1\n%(%d+%.%d+ s%)\n", out)
    _, out = session("1\n")
    assert.falsy(out:find(" s)", 1, true), out)
  end)

  it("uses no colours when stdout is not a terminal", function()
    local _, out = session("1, 'a', true, print\n")
    assert.falsy(has(out, "\27["), out)
  end)

  it("answers ?name from gt.docs, else 'no help for name' #gt", function()
    local _, out = session("?gt.tensor\n?nothing_here\n")
    assert.truthy(has(out, "gt.tensor(shape"), out)
    assert.truthy(has(out, "no help for 'nothing_here'"), out)
  end)

  it("runs a script first with -i, then reads commands", function()
    local script = os.tmpname()
    spit(script, "y = 41\n")
    local _, out = sh('timeout 60 "$GTLUA" -i ' .. shq(script), "y + 1\n")
    os.remove(script)
    assert.truthy(has(out, "\n> 42\n"), out)
  end)

  it("Ctrl-C interrupts a running command and the session goes on", function()
    local dir = os.tmpname()
    os.remove(dir)
    local loop = [[do local f = io.open(os.getenv("PIDFILE"), "w") ]]
      .. [[f:write(io.open("/proc/self/stat"):read("*n")) f:close() end jit.off() while true do end]]
    local cmd = table.concat({
      "mkdir " .. shq(dir), "cd " .. shq(dir), "mkfifo in",
      '(PIDFILE=pid timeout 30 "$GTLUA" -i < in > out 2> err; echo $? > st) &',
      "exec 3> in",
      "echo " .. shq(loop) .. " >&3",
      "n=0; while [ ! -s pid ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done",
      "kill -INT $(cat pid)",
      "echo 'print(\"alive\")' >&3",
      "exec 3>&-",
      "wait",
      "cat out; cat err >&2; exit $(cat st)",
    }, "\n")
    local status, out, err = sh(cmd)
    os.execute("rm -rf " .. shq(dir))
    assert.equal(0, status)
    assert.truthy(has(err, "interrupted!"), err)
    assert.truthy(has(out, "alive\n"), out)
  end)

  with_gt("preloads gt and names the backend in the banner", function()
    local _, out = session("gt == require('gt'), gt.backend()\n", "-u GTLUA_NO_GT GTLUA_BACKEND=cpu")
    assert.matches("^gtlua %S+ %(LuaJIT [^)]+%) backend cpu\n", out)
    assert.truthy(has(out, '\n> true\t"cpu"\n'), out)
  end)
end)

describe("gtlua on a terminal (through script(1))", function()
  local has_script = os.execute("command -v script > /dev/null 2>&1") == 0

  local function terminal(input, history)
    return sh(string.format('GTLUA_HISTORY=%s timeout 60 script -qec "$GTLUA" /dev/null', shq(history)), input)
  end

  it("completes with Tab, colours results and appends to the history file", function()
    if not has_script then return pending("script(1) is not installed") end
    local history = os.tmpname()
    os.remove(history)
    local status, out = terminal("string.fo\t\n1+1\n", history)
    assert.equal(0, status)
    assert.truthy(has(out, "rmat"), out)                      -- string.fo<Tab> -> string.format
    assert.truthy(has(out, "function: builtin#"), out)
    assert.truthy(has(out, "\27[36m2\27[0m"), out)            -- a number, coloured
    assert.equal("_HiStOrY_V2_\nstring.format\n1+1\n", slurp(history))
  end)
end)

describe("gt.repl", function()
  it("formats values for the REPL", function()
    assert.equal('"a\\nb"', repl.format("a\nb"))
    assert.equal("12", repl.format(12))
    assert.equal("{}", repl.format({}))
    assert.equal('{1, 2, {...}, x = "y", [true] = 1}', repl.format({ 1, 2, { 3 }, x = "y", [true] = 1 }))
    assert.equal('{[1.5] = 1, ["a b"] = 2, ["end"] = 3}', repl.format({ [1.5] = 1, ["a b"] = 2, ["end"] = 3 }))
    local long = {}
    for i = 1, 30 do long[i] = i * 1000 end
    assert.matches("^{\n  1000,\n  2000,\n", repl.format(long))
  end)

  it("shows the last line of a multi-line object inside a table", function()
    local obj = setmetatable({}, { __tostring = function() return "1 2\n3 4\n[gt.f32 2x2 cpu]\n" end })
    assert.equal("{[gt.f32 2x2 cpu]}", repl.format({ obj }))
  end)

  with_gt("completes the fields of gt.ops and gt.buckets before their first use", function()
    local status, out = sh('"$GTLUA" -e \'local r = require("gt.repl"); ' ..
      'io.write(table.concat(r.complete("gt.ops.rel"), " "), "|", table.concat(r.complete("gt.buckets.po"), " "))\'')
    assert.equal(0, status)
    assert.equal("gt.ops.relu|gt.buckets.pow2", out)
  end)

  it("completes globals, fields, methods and keywords", function()
    assert.same({ "string.format" }, repl.complete("string.fo"))
    assert.same({ "package.loaded", "package.loaders", "package.loadlib" }, repl.complete("package.loa"))
    assert.same({ "string:upper" }, repl.complete("string:up"))
    assert.same({ "while" }, repl.complete("whil"))
    assert.truthy(#repl.complete("pri") >= 1)
    assert.equal("print", repl.complete("pri")[1])
    assert.same({}, repl.complete("no_such_global.x"))
    assert.same({}, repl.complete("string.format.x"))
  end)

  it("does not touch globals when loaded", function()
    local before = {}
    for k in pairs(_G) do before[k] = true end
    package.loaded["gt.repl"] = nil
    require("gt.repl")
    for k in pairs(_G) do assert.truthy(before[k], "new global " .. tostring(k)) end
  end)

  with_gt("completes gt's fields and prints tensors with __tostring", function()
    local gt, global = require("gt"), rawget(_G, "gt")
    _G.gt = gt          -- completion starts at the globals (GTLUA_NO_GT=1 leaves gt out)
    local names = table.concat(repl.complete("gt.te"), " ")
    _G.gt = global
    assert.truthy(has(names, "gt.tensor"), names)
    local t = gt.zeros({ 2, 3 })
    assert.equal(tostring(t), repl.format(t))
    _G.gt_spec_x = t                                  -- a tensor's methods and fields
    assert.same({ "gt_spec_x:tolist" }, repl.complete("gt_spec_x:tol"))
    assert.same({ "gt_spec_x.shape" }, repl.complete("gt_spec_x.sh"))
    assert.truthy(has(table.concat(repl.complete("gt_spec_x:cl"), " "), "gt_spec_x:clone"))
    _G.gt_spec_x = nil
  end)
end)

describe("gtlua on a pseudo-terminal (python3's pty)", function()
  local pty = S.pty

  local function on_pty(name, steps, check)
    it(name .. " #gt", function()
      if not S.has_pty then return pending("python3 with the pty module is not installed") end
      if not HAS_GT then return pending("lua/gt is not there yet") end
      local ok, out, err = pty(steps)
      assert.truthy(ok, err .. "\n" .. out)
      if check then check(out) end
    end)
  end

  on_pty("the banner says how to get help and how to leave", {
    { "expect", "backend" }, { "expect", "?name for help" }, { "expect", "Ctrl-D to exit" },
    { "expect", "> " }, { "send", "\4" },
  })

  on_pty("Tab after gt. offers gt.ops and gt.buckets before their first use, and no gt._ names", {
    { "expect", "> " }, { "send", "gt.\t\t" }, { "expect", "gt.zeros" }, { "send", "\21print('do' .. 'ne')\r" },
    { "expect", "\ndone" }, { "expect", "> " }, { "send", "\4" },
  }, function(out)
    local listing = out:match("gt%.\t?\r?\n(.-gt%.zeros)") or out
    assert.truthy(has(listing, "gt.ops"), out)
    assert.truthy(has(listing, "gt.buckets"), out)
    assert.falsy(has(listing, "gt._"), out)
  end)

  on_pty("help prints a first page, not nil", {
    { "expect", "> " }, { "send", "help\r" }, { "expect", "A first session" }, { "expect", "> " }, { "send", "\4" },
  }, function(out) assert.falsy(has(out, "\nnil"), out) end)

  on_pty("an error prints its message and traceback; ?tb shows it again", {
    { "expect", "> " }, { "send", "error('boom')\r" }, { "expect", "stdin:1: boom" }, { "expect", "> " },
    { "send", "?tb\r" }, { "expect", "stack traceback:" }, { "expect", "> " }, { "send", "\4" },
  }, function(out)
    local first = out:match("error%('boom'%)\r?\n(.-)> ")
    assert.truthy(first and has(first, "stack traceback:"), out)
  end)

  on_pty("Ctrl-C stops `while true do end` (a loop the JIT would compile) and the session goes on", {
    { "expect", "> " }, { "send", "while true do end\r" }, { "expect", "while true do end" },
    { "sleep", "0.2" }, { "send_now", "\3" }, { "expect", "interrupted!" }, { "expect", "> " },
    { "send", "print('al' .. 'ive')\r" }, { "expect", "alive" }, { "send", "\4" },
  })

  on_pty("a tree whose calls raised says so when printed", {
    { "expect", "> " }, { "send", "t = gt.tree(function(x) return gt.ops.relu(x) end, {name = 'bad'})\r" },
    { "expect", "> " }, { "send", "pcall(t, 42);\r" }, { "expect", "> " }, { "send", "t\r" },
    { "expect", "a call raised an error" }, { "expect", "> " }, { "send", "\4" },
  })
end)
