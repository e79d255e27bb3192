-- gt.json: JSON text through dkjson (Debian lua-dkjson), with gtlua's conventions: arrays marked, keys in a fixed order.
--
--   json.encode(v [, first_keys]) -> indented text; objects' keys: first_keys
--       in that order, then every other key sorted (the same text every run)
--   json.array(t) -> t, marked as an array (so that an empty one is [], not {})
--   json.decode(text) -> the value (null is nil); raises "bad JSON ..." on bad input
--   json.null  a value that writes null and keeps its key in an object
--
-- A table is an array when it is marked, or when its keys are exactly 1..#t
-- (#t > 0); any other table, an empty one included, is an object.  Numbers
-- have 14 significant digits; NaN and infinities are written as null.
local M = {}

local ARRAY, OBJECT = { __jsontype = "array" }, { __jsontype = "object" }

local function dkjson()
  local ok, lib = pcall(require, "dkjson")
  if not ok then
    error("gtlua writes and reads JSON through the Lua module dkjson, which is not on package.path: " ..
          "apt-get install lua-dkjson (or add the directory of dkjson.lua to LUA_PATH)", 0)
  end
  M.null = lib.null
  return lib
end

function M.array(t) return setmetatable(t, ARRAY) end

-- A copy of v with every table marked array or object; adds its string keys to keys.
local function marked(v, keys)
  if type(v) ~= "table" or v == M.null then return v end
  local c, n = {}, 0
  for k, x in pairs(v) do
    c[k], n = marked(x, keys), n + 1
    if type(k) == "string" then keys[k] = true end
  end
  local array = getmetatable(v) == ARRAY or (n > 0 and n == #v)
  return setmetatable(c, array and ARRAY or OBJECT)
end

function M.encode(v, first_keys)
  local lib = dkjson()
  local keys, order, seen = {}, {}, {}
  local c = marked(v, keys)
  for _, k in ipairs(first_keys or {}) do order[#order + 1], seen[k] = k, true end
  local rest = {}
  for k in pairs(keys) do if not seen[k] then rest[#rest + 1] = k end end
  table.sort(rest)
  for _, k in ipairs(rest) do order[#order + 1] = k end
  -- dkjson's encoder runs interpreted: compiled by this LuaJIT (2.1.0-beta3, GC64) a trace
  -- of it read a freed object after a collection and the process died of SIGSEGV (about one
  -- run in eight of spec/errors_sweep_spec.lua's gt.report.json sweep; none in 60 runs without)
  local was = jit and jit.status()
  if was then jit.off() end
  local ok, text = pcall(lib.encode, c, { indent = true, keyorder = order })
  if was then jit.on() end
  if not ok then error(text, 0) end
  return text
end

function M.decode(text)
  local v, pos, err = dkjson().decode(text, 1, nil)
  if err then error("bad JSON: " .. err, 2) end
  return v, pos
end

M.null = {}          -- dkjson's null once dkjson is loaded (below, or at the first call)
pcall(dkjson)

return M
