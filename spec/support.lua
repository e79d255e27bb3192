-- spec/support.lua: helpers the specs share (files, quoting, gtlua as a subprocess, comparing tensors).
-- Not a spec itself (no _spec suffix): specs load it with require "spec.support".
local M = {}

--- M.BIN: the gtlua binary the specs run in (the host sets GTLUA_BIN)
M.BIN = os.getenv("GTLUA_BIN")

--- M.shq(s): s quoted for sh
function M.shq(s) return "'" .. tostring(s):gsub("'", [['\'']]) .. "'" end

--- M.spit(path, text): writes a file
function M.spit(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

--- M.tmpfile(text) -> the path of a new temporary file holding text
function M.tmpfile(text)
  local path = os.tmpname()
  M.spit(path, text)
  return path
end

--- M.slurp(path [, keep]): a file's text; the file is removed unless keep
function M.slurp(path, keep)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  if not keep then os.remove(path) end
  return s
end

--- M.sh(cmdline [, input]) -> status, stdout, stderr: a shell command line with
--- "$GTLUA" naming the binary and input on its stdin
function M.sh(cmdline, input)
  local inp, out, err, st = os.tmpname(), os.tmpname(), os.tmpname(), os.tmpname()
  M.spit(inp, input or "")
  os.execute(string.format("(GTLUA=%s; %s) < %s > %s 2> %s; echo $? > %s",
    M.shq(M.BIN), cmdline, M.shq(inp), M.shq(out), M.shq(err), M.shq(st)))
  os.remove(inp)
  return tonumber(M.slurp(st)), M.slurp(out), M.slurp(err)
end

--- M.gtlua(args [, {stdin=, env=, cd=}]) -> status, stdout, stderr: `gtlua <args>`
--- (a shell fragment) with a 60 s limit; env: a prefix for env(1), cd: a directory
function M.gtlua(args, opts)
  opts = opts or {}
  return M.sh(string.format('%s timeout 60 env %s "$GTLUA" %s', opts.cd and ("cd " .. M.shq(opts.cd) .. " &&") or "",
    opts.env or "", args), opts.stdin)
end

-- A pty driver (python3's pty module): steps from a file, one a line:
-- "S<text>" sends text once the line editor reads, "N<text>" at once, "W<seconds>" sleeps, "E<text>" waits (10 s at most) until the output so far
-- contains text; both with Python escapes (\t, \x03, \n).  The transcript goes
-- to stdout; exit 1 when an expectation timed out.
local PTY_DRIVER = [[
import codecs, os, pty, select, sys, termios, time
steps = [l.rstrip("\n") for l in open(sys.argv[1])]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
out, pos, ok = b"", 0, True
def read(t):
    global out
    r, _, _ = select.select([fd], [], [], t)
    if r:
        try: out += os.read(fd, 65536)
        except OSError: return False
    return True
for st in steps:
    kind, text = st[:1], codecs.decode(st[1:], "unicode_escape").encode()
    if kind == "N":
        os.write(fd, text)
    elif kind == "S":
        # libedit flushes input typed before it set up the terminal: wait (1 s at
        # most: a running command keeps it canonical) until it reads raw
        end = time.time() + 1
        while time.time() < end and termios.tcgetattr(fd)[3] & termios.ICANON:
            read(0.01)
        os.write(fd, text)
    elif kind == "W":
        time.sleep(float(text))
    elif kind == "E":
        end = time.time() + 10
        while text not in out[pos:] and time.time() < end:
            if not read(0.05): break
        if text not in out[pos:]:
            sys.stderr.write("pty: timed out waiting for %r\n" % text); ok = False; break
        pos = out.index(text, pos) + len(text)
end = time.time() + (5 if ok else 0)
while time.time() < end:
    try:
        done = os.waitpid(pid, os.WNOHANG)[0]
    except OSError:
        break
    if not read(0.02) or done:
        break
try: os.kill(pid, 9)
except OSError: pass
sys.stdout.write(out.decode("utf-8", "replace"))
sys.exit(0 if ok else 1)
]]

--- M.has_pty: python3 with its pty module is there (M.pty needs it)
M.has_pty = os.execute("python3 -c 'import pty' > /dev/null 2>&1") == 0

--- M.pty(steps [, args [, env]]) -> ok, transcript, stderr: gtlua (with args) on a
--- pseudo-terminal; steps: { {"send", text} | {"expect", text} | {"sleep", "seconds"}, ... };
--- send waits (1 s at most) until the line editor reads; send_now (a Ctrl-C into a running command) does not
function M.pty(steps, args, env)
  local drv, st = os.tmpname(), os.tmpname()
  M.spit(drv, PTY_DRIVER)
  local lines = {}
  for i, s in ipairs(steps) do
    local esc = s[2]:gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub("\t", "\\t"):gsub("%c", function(c)
      return string.format("\\x%02x", c:byte()) end)
    lines[i] = ({ send = "S", send_now = "N", expect = "E", sleep = "W" })[s[1]] .. esc
  end
  M.spit(st, table.concat(lines, "\n") .. "\n")
  local status, out, err = M.sh(string.format('timeout 60 env TERM=dumb GTLUA_HISTORY= %s python3 %s %s "$GTLUA" %s',
    env or "", M.shq(drv), M.shq(st), args or ""))
  os.remove(drv)
  os.remove(st)
  return status == 0, out, err
end

-- The largest difference between two tensors of the same 1-D or 2-D shape.
function M.maxdiff(a, b)
  local x, y = a:tolist(), b:tolist()
  local d = 0
  for i = 1, #x do
    if type(x[i]) == "table" then for j = 1, #x[i] do d = math.max(d, math.abs(x[i][j] - y[i][j])) end
    else d = math.max(d, math.abs(x[i] - y[i])) end
  end
  return d
end

return M
