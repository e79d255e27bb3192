-- spec/support.lua: helpers the specs share (files, quoting, gtlua as a subprocess).
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

return M
