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
if rt == nil then error("gtlua: " .. ffi.string(C.gt_errmsg(nil)), 0) end

local gt = { _C = C, _rt = rt, version = "0.1.0" }
reg["gtlua.gt"] = gt

-- The last failure of the core as a message.
function gt._errmsg() return ffi.string(C.gt_errmsg(rt)) end

-- Raises the core's last failure at the caller's caller (level 3 by default).
function gt._fail(level) error(gt._errmsg(), level or 3) end

--- gt.backend() -> "cpu" | "cuda"
function gt.backend() return ffi.string(C.gt_backend_name(rt)) end

--- gt.device() -> { backend, name, cc, sms, memory, driver, nvrtc, compiler }
function gt.device()
  local d = ffi.new("gt_device_info")
  if C.gt_device(rt, d) ~= 0 then gt._fail() end
  return {
    backend = ffi.string(d.backend), name = ffi.string(d.name),
    cc = d.cc_major .. "." .. d.cc_minor, sms = d.sms, memory = tonumber(d.total_mem),
    driver = d.driver_version, nvrtc = d.nvrtc_version, compiler = ffi.string(d.compiler),
  }
end

-- Where kernels/ and lua/ live (set by the host).
function gt.home() return os.getenv("GTLUA_HOME") or "." end

require("gt.tensor")(gt)
require("gt.kernel")(gt)
require("gt.tree")(gt)

--- gt.sync(): ends the segment in a tree call, then waits for the device.
function gt.sync()
  if C.gt_tree_active(rt) ~= nil then gt._note_sync("gt.sync", 2); gt._flush(3) end
  if C.gt_sync(rt) ~= 0 then gt._fail() end
end

--- gt.cut(): ends the current segment of a tree call (a no-op outside one).
function gt.cut()
  if C.gt_tree_active(rt) ~= nil then gt._flush(3) end
end

--- gt.profile(on) -> previous: GPU time per node (events on cuda, wall time on cpu).
function gt.profile(on) return C.gt_profile(rt, on and 1 or 0) ~= 0 end

--- gt.compile_counts() -> compiles, cache_hits (cuda: NVRTC runs and CUBIN cache hits; nil elsewhere)
function gt.compile_counts()
  local c, h = ffi.new("int[1]"), ffi.new("int[1]")
  if C.gt_compile_counts(rt, c, h) ~= 0 then return nil end
  return c[0], h[0]
end

--- gt.clock() -> seconds of a monotonic wall clock (for timing steps)
function gt.clock() return C.gt_clock_us() * 1e-6 end

--- gt.memory() -> bytes of ordinary (non-tree) device memory in use
function gt.memory() return tonumber(C.gt_mem_in_use(rt)) end

--- gt.help(obj_or_name): prints the documentation of an API function (gt.docs)
function gt.help(x) return require("gt.docs").help(x) end

-- Called by the host at exit for --stats / --report=FILE.
function gt._at_exit(o) return require("gt.report").at_exit(o) end

-- Modules loaded on first use.
local lazy = { ops = "gt.ops", buckets = "gt.buckets", report = "gt.report", keyed = "gt.keyed" }
setmetatable(gt, { __index = function(t, k)
  local m = lazy[k]
  if not m then return nil end
  local v = require(m)
  rawset(t, k, v)
  return v
end })

return gt
