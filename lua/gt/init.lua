-- gt: the Lua API of gtlua, over LuaJIT's FFI and the C core (src/gt.h).
-- One runtime per process: the module lives in the registry, so reloading it
-- (Busted's insulation does) returns the same table and defines nothing twice.
local reg = debug.getregistry()
if reg["gtlua.gt"] then return reg["gtlua.gt"] end

local ffi = require "ffi"
local C = ffi.C

if not pcall(ffi.typeof, "gt_buf") then
  ffi.cdef "const char *gt_header_text(void);"
  local h = "\n" .. ffi.string(C.gt_header_text())
  h = h:gsub("\n#[^\n]*", "\n"):gsub("const char %*gt_header_text%(void%);", "")
  ffi.cdef(h)
end

local rt = C.gt_runtime_open(nil)
if rt == nil then
  -- an error object with __tostring: the host prints it once, without a traceback
  local msg = ffi.string(C.gt_errmsg(nil)):gsub("^gtlua: ", "")
  error(setmetatable({ msg = msg }, { __tostring = function(e) return e.msg end }), 0)
end

local policy = require "gt.host_policy"   -- what gt changes for the whole process, and why
policy.jit()

local gt = { version = "0.1.0" }
package.loaded.gt = gt   -- the modules below (gt.tensor, ...) require "gt" while it loads
reg["gtlua.gt"] = gt
local I = require "gt.internal"   -- the names gt's modules share (internal.lua lists them)
I.C, I.rt = C, rt

policy.exit(gt)   -- (os.exit(code, true) marks gt closing: tree.lua's finalizers)

-- The last failure of the core as a message.
function I.errmsg() return ffi.string(C.gt_errmsg(rt)) end

-- -- Errors at the user's line -------------------------------------------------
-- Every error gt raises names the first stack frame outside gt itself (lua/gt/*.lua,
-- generated launchers "=gt.*", C functions such as pcall): the user's file:line,
-- however deep inside gt the check was.  When that frame is only the caller of a
-- function that tail-called into gt (`return gt.ops.linear(h, W, b)` as the last
-- line of a step), the user's own line is gone from the stack; the message names
-- the nearest frame there is and says so.
local GT_DIR = (debug.getinfo(1, "S").source:match("^@(.*/)[^/]*$") or "")

local function internal(info)
  if info.what == "C" then return true end
  local src = info.source
  if src:sub(1, 4) == "=gt." then return true end
  if src:sub(1, 1) ~= "@" then return false end
  src = src:sub(2)
  return (GT_DIR ~= "" and src:sub(1, #GT_DIR) == GT_DIR) or src:find("^lua/gt/[%w_]+%.lua$") ~= nil
    or src:find("/lua/gt/[%w_]+%.lua$") ~= nil
end

-- The public functions by value, for telling a tail call from a direct call.
local public_names, names_ops
local function public_name(f)
  if not public_names or names_ops ~= rawget(gt, "ops") then
    names_ops = rawget(gt, "ops")
    public_names = {}
    local function add(tbl, prefix, sep)
      if type(tbl) ~= "table" then return end
      for k, v in pairs(tbl) do
        if type(v) == "function" and type(k) == "string" and k:sub(1, 1) ~= "_" then
          public_names[v] = public_names[v] or { prefix .. sep .. k, k }
        end
      end
    end
    add(rawget(gt, "ops"), "gt.ops", ".")
    add(gt.Tensor, "t", ":")
    add(rawget(gt, "buckets"), "gt.buckets", ".")
    add(gt, "gt", ".")
  end
  return public_names[f]
end

-- I.where([level]) -> "file:line: " of the first stack frame outside gt (the
-- user's line), or "" when there is none, and the public function's name when
-- it was reached by a tail call; level: where to start (default: the caller).
function I.where(level)
  local l = (level or 1) + 1
  local callee, tail   -- the gt frame just below; a public function the caller did not call by name
  while true do
    local info = debug.getinfo(l, "Slnf")
    if not info then return "" end
    local inside = internal(info)
    if callee and (not inside or info.what == "C") then
      -- a public function called from a user frame or from pcall (a tree calling the
      -- step) under a name not its own: the user's function tail-called it.  Unless
      -- the C frame is a pcall the user's code made with it (pcall(gt.zeros, {-1})):
      -- that called it directly, and the user's line is the next frame's.
      local pub = public_name(callee.func)
      if pub and callee.name ~= pub[2] then
        local up = info.what == "C" and callee.name == nil and debug.getinfo(l + 1, "S")
        if not (up and not internal(up)) then tail = pub[1] end
      end
    end
    if not inside then
      return info.short_src .. ":" .. (info.currentline > 0 and info.currentline or "?") .. ": ", tail
    end
    callee = info.what ~= "C" and info or nil
    l = l + 1
  end
end

-- I.error(msg [, level]): error() for gt's modules: msg at the user's line (I.where);
-- level 0 (an already placed message) and non-string errors pass through unchanged
function I.error(msg, level)
  if level == 0 or type(msg) ~= "string" then error(msg, level == 0 and 0 or (level or 1) + 1) end
  local where, tail = I.where(2)
  if where == "" then error(msg, (level or 1) + 1) end
  if tail then
    local tree = I.active
    msg = msg .. " (in " .. tail .. ", reached by a tail call `return " .. tail .. "(...)`" ..
      (tree and (" in the function of tree '" .. tostring(tree.name) .. "' (" .. tostring(tree.where) .. ")") or "") ..
      "; the line shown is the nearest caller left on the stack)"
  end
  error(where .. msg, 0)
end

-- I.show(v) -> v for a message: strings quoted, numbers as written, a tensor as
-- "a tensor 4x4 f32", else its type ("a table"); what an argument error says it got.
function I.show(v)
  local t = type(v)
  if t == "cdata" and gt.is_tensor and gt.is_tensor(v) then
    local shape = v._shape
    return (#shape == 0 and "a scalar tensor " or ("a tensor " .. I.shape_str(shape) .. " ")) .. v.dtype
  end
  if t == "string" then return string.format("%q (a string)", v) end
  if t == "number" then
    if v ~= v then return "nan" end
    if v == math.huge or v == -math.huge then return v > 0 and "inf" or "-inf" end
    local s = string.format("%.14g", v)
    return tonumber(s) == v and s or string.format("%.17g", v)
  end
  if t == "boolean" or t == "nil" then return tostring(v) end
  return "a " .. t
end

-- I.opts(opts, what) -> opts, or {} for nil; raises at the user's line when opts is
-- not a table (what: the call as the user wrote it, e.g. "gt.randn(shape [, opts])").
function I.opts(opts, what)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    I.error(what .. ": options must be a table (or nil), got " .. I.show(opts))
  end
  return opts
end

-- Raises the core's last failure at the user's line.
function I.fail() I.error(I.errmsg(), 2) end

--- gt.backend() -> "cpu" | "cuda"
function gt.backend() return ffi.string(C.gt_backend_name(rt)) end

--- gt.device() -> { backend, name, cc, sms, memory, free, driver, nvrtc, compiler }
--- (free: device bytes free now, cuda only: where graphs' own memory shows; cpu: 0)
function gt.device()
  local d = ffi.new("gt_device_info")
  if C.gt_device(rt, d) ~= 0 then I.fail() end
  return {
    backend = ffi.string(d.backend), name = ffi.string(d.name),
    cc = d.cc_major .. "." .. d.cc_minor, sms = d.sms, memory = tonumber(d.total_mem),
    driver = d.driver_version, nvrtc = d.nvrtc_version, compiler = ffi.string(d.compiler),
    free = tonumber(d.free_mem),
  }
end

-- Where kernels/ and lua/ live (set by the host).
function gt.home() return os.getenv("GTLUA_HOME") or "." end

require("gt.tensor")
require("gt.kernel")
require("gt.tree")
policy.coroutines(I)                    -- (no yield out of a tree call)

--- gt.sync(): ends the segment in a tree call, then waits for the device.
function gt.sync()
  if C.gt_tree_active(rt) ~= nil then I.note_sync("gt.sync", 2); I.flush(3, nil, C.GT_CUT_SYNC) end
  if C.gt_sync(rt) ~= 0 then I.fail() end
end

--- gt.cut(): ends the current segment of a tree call (a no-op outside one).
function gt.cut()
  if C.gt_tree_active(rt) ~= nil then I.flush(3, nil, C.GT_CUT_CUT) end
end

require("gt.cond")   -- gt.cond, gt.loop (wraps gt.sync and I.flush: no syncs inside a body)
require("gt.safetensors")   -- gt.safetensors.load, save

--- gt.profile(on) -> previous: GPU time per node (events on cuda, wall time on cpu).
function gt.profile(on) return C.gt_profile(rt, on and 1 or 0) ~= 0 end

--- gt.compile_counts() -> compiles, cache_hits (cuda: NVRTC runs and CUBIN cache hits; nil elsewhere)
function gt.compile_counts()
  local c, h = ffi.new("int[1]"), ffi.new("int[1]")
  if C.gt_compile_counts(rt, c, h) ~= 0 then return nil end
  return c[0], h[0]
end

--- gt.transfers() -> { reads, writes, syncs }: the host's device -> host reads
--- (item, tolist, a p read on the host), host -> device writes (gt.from, a
--- copy from a table) and gt.sync waits so far; a step the device decides adds none
function gt.transfers()
  local x = ffi.new("gt_transfers")
  C.gt_transfer_counts(rt, x)
  return { reads = tonumber(x.reads), writes = tonumber(x.writes), syncs = tonumber(x.syncs) }
end

--- gt.clock() -> seconds of a monotonic wall clock (for timing steps)
function gt.clock() return C.gt_clock_us() * 1e-6 end

--- gt.memory() -> bytes in use outside the trees' pools: ordinary device memory plus every tree's
--- graph memory; and { ordinary = bytes, graphs = bytes (segment graphs: what gt.graph_memory bounds),
--- path_graphs = bytes (paths launched as one graph) }
function gt.memory()
  local o, g, p = tonumber(C.gt_mem_in_use(rt)), tonumber(C.gt_graph_mem(rt)), tonumber(C.gt_path_graph_mem())
  return o + g + p, { ordinary = o, graphs = g, path_graphs = p }
end

--- gt.graph_memory([limit]) -> the process-wide graph-memory budget before (bytes, or false: none).
--- With limit (bytes, or false): past it the graphs of the tree called least recently (its least
--- recently visited first) are dropped, and instantiated again on their next visit.
function gt.graph_memory(limit)
  if limit ~= nil and limit ~= false and not (type(limit) == "number" and limit >= 1 and limit < 2 ^ 63 and limit == math.floor(limit)) then
    I.error("gt.graph_memory(limit): limit must be a whole number of bytes >= 1, or false for no budget; got " ..
      I.show(limit), 2)
  end
  local old
  if limit == nil then
    old = C.gt_graph_mem_limit(rt, 0)
    C.gt_graph_mem_limit(rt, old)
  else
    old = C.gt_graph_mem_limit(rt, limit or 0)
  end
  old = tonumber(old)
  return old > 0 and old or false
end

--- gt.help(obj_or_name): prints the documentation of an API function (gt.docs)
function gt.help(x) return require("gt.docs").help(x) end

-- Called by the host at exit for --stats / --report=FILE.
function gt._at_exit(o) return require("gt.report").at_exit(o) end

-- math.floor, type and the like take keyed calls' traced numbers (gt.trace):
-- set last, so that gt's modules loaded so far hold the originals (those
-- loaded on first use take them from gt.host_policy's original).
policy.traced_numbers(require "gt.trace")

-- Modules loaded on first use.
local lazy = { ops = "gt.ops", buckets = "gt.buckets", report = "gt.report", keyed = "gt.keyed", dist = "gt.dist" }
setmetatable(gt, { __lazy = { "buckets", "ops" }, __index = function(t, k)   -- __lazy: for completion
  local m = lazy[k]
  if not m then return nil end
  local v = require(m)
  rawset(t, k, v)
  return v
end })

return gt
