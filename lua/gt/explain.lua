-- gt.explain: the notes a new node gets from Lua after its segment ends: where and why it was cut, its shapes.
--
-- The C core knows the launches; Lua knows the user's line, the API that cut
-- the segment, and tensor shapes.  I.flush asks the core what the node it
-- just visited lacks (gt_tree_explain_wanted) and this module answers: on a
-- node's first visit (and, for the cut site, on visits the core cannot count
-- by the API alone: warmups, records, an API other than last time), so
-- replays pay one FFI call per segment.
local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local getmetatable, type, pairs, concat = getmetatable, type, pairs, table.concat
local band = require("bit").band
local WANT_CUT, WANT_SHAPES, WANT_FIRST = C.GT_WANT_CUT, C.GT_WANT_SHAPES, C.GT_WANT_FIRST   -- gt_tree_explain_wanted's bits

-- Frames of gtlua's own Lua modules are skipped when naming the user's line.
local here = debug.getinfo(1, "S").source
local own_dir = here:match("^(@.*[/\\])[^/\\]+$") or "@lua/gt/"

local API = { cut = "gt.cut", sync = "gt.sync", item = "item", tolist = "tolist" }
local by_func   -- the API functions themselves: a tail-called frame has no name


-- "file:line api" ("gt.cut at file:line" for gt.cut) for a segment cut at a sync point: the outermost gtlua
-- frame names the API, the first frame outside gtlua the user's line.
local function cut_site()
  if not by_func then
    local T = gt.Tensor
    by_func = { [gt.cut] = "cut", [gt.sync] = "sync", [T.item] = "item", [T.tolist] = "tolist" }
  end
  local api, lvl, fixed = nil, 3, false
  while true do
    local info = debug.getinfo(lvl, "Slnf")
    if not info then return "? " .. (API[api] or "sync point") end
    local own = info.source:sub(1, #own_dir) == own_dir or info.what == "C"
    if not own then
      local name = API[api] or (api and ("host copy (" .. api .. ")")) or "sync point"
      local at = info.short_src:match("[^/\\]*$") .. ":" .. (info.currentline or 0)
      if api == "cut" then return "gt.cut at " .. at end     -- (DESIGN's form: "gt.cut at model.lua:12")
      return at .. " " .. name
    end
    if info.what == "C" then fixed = true              -- the tree's own pcall: the user's frame was a tail call
    elseif not fixed then
      local f = by_func[info.func]
      if f then api, fixed = f, true else api = info.name or api end
    end
    lvl = lvl + 1
  end
end

local function tensor_text(t) return I.shape_str(t._shape) .. " " .. t.dtype end

-- The names of a tree's function's parameters (cached per function).
local PNAMES = setmetatable({}, { __mode = "k" })
local function param_names(tree)
  local names = PNAMES[tree.fn]
  if names then return names end
  names = {}
  for i = 1, 16 do
    local nm = debug.getlocal(tree.fn, i)
    if not nm then break end
    names[i] = nm
  end
  PNAMES[tree.fn] = names
  return names
end

-- The call's tensor inputs as the body saw them: "x 8x256 f32, batch.ids 8 i32".
local function inputs_text(tree)
  local names, parts = param_names(tree), {}
  local args = { tree._in1, tree._in2, tree._in3, tree._in4 }
  for i = 1, math.min(tree._inn or 0, 4) do
    local x, nm = args[i], names[i] or ("arg" .. i)
    if gt.is_tensor(x) then parts[#parts + 1] = nm .. " " .. tensor_text(x)
    elseif type(x) == "table" and getmetatable(x) == nil then
      local keys = {}
      for k, v in pairs(x) do if gt.is_tensor(v) then keys[#keys + 1] = k end end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do parts[#parts + 1] = nm .. "." .. tostring(k) .. " " .. tensor_text(x[k]) end
    end
  end
  local b = tree._buckets                      -- count buckets: the path is theirs ("decode bucket 4")
  for _, cs in ipairs(b and b.counts or {}) do
    if cs.n then parts[#parts + 1] = (cs.name or names[cs.count] or ("arg" .. cs.count)) .. " bucket " .. cs.p end
  end
  return concat(parts, ", ")
end

-- The segment's outputs.  At the call's end (results: the body's results,
-- results.n of them): the tensors the call returns, in order, and those one
-- level into a returned plain table (its list part, then its named fields as
-- "name 2x3 f32").  At a cut, where what later segments will read is not
-- known yet: the last tensor the segment made.
local function results_text(results)
  local parts = {}
  for i = 1, results.n do
    local x = results[i]
    if gt.is_tensor(x) then parts[#parts + 1] = tensor_text(x)
    elseif type(x) == "table" and getmetatable(x) == nil then
      local n, keys = #x, {}
      for j = 1, n do if gt.is_tensor(x[j]) then parts[#parts + 1] = tensor_text(x[j]) end end
      for k, v in pairs(x) do
        if gt.is_tensor(v) and not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
      end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. " " .. tensor_text(x[k]) end
    end
  end
  return #parts > 0 and concat(parts, ", ") or "(no tensors returned)"
end
local function output_text(tree, results)
  if results then return results_text(results) end
  local last = I.last_made
  if last[0] > 0 and C.gt_tree_nbufs(tree._t) > (tree._seg0 or 0) then
    return I.shape_str(I.shapes[last[0]]) .. " " .. I.dtype_of_code[last[1]]
  end
  return "(nothing made)"
end

-- want: gt_tree_explain_wanted's bits; level: the caller of I.flush's caller;
-- reason: "return" at the end of the call, nil at a sync point (read off the stack);
-- results: at the end of the call, the body's results ({n = count, ...}).
function I.explain(want, level, reason, results)
  local tree = I.active
  local cut = band(want, WANT_CUT) ~= 0 and (reason or cut_site()) or nil
  local shapes
  if band(want, WANT_SHAPES) ~= 0 and tree then
    local ins = band(want, WANT_FIRST) ~= 0 and inputs_text(tree) or ""
    shapes = (ins ~= "" and (ins .. " ") or "") .. "-> " .. output_text(tree, results)
  end
  C.gt_tree_note(rt, cut, shapes)
end
