-- gt.tree_warm: tree:warm(calls): paths recorded ahead of time, the largest
-- first, in the tree's one pool (a smaller path's memory fits in what the
-- largest reserved; vLLM and SGLang capture in that order for that reason).
local ffi = require "ffi"
local gt = require "gt"
local I = require "gt.internal"
local C = I.C
local type, getmetatable = require("gt.host_policy").original.type, getmetatable
local Tree = gt.Tree

-- A call's padded size, the order's measure: the product of its buckets'
-- sizes (each at least 1; a size beyond the last bucket counts as itself),
-- or without buckets the elements of its tensor arguments.
local function volume(self, args)
  local b, fit, v, sum = self._buckets, gt.buckets.fit, 1, 0
  if not b then
    v = 0
    for i = 1, args.n do if gt.is_tensor(args[i]) then v = v + args[i].numel end end
    return v
  end
  for _, cs in ipairs(b.counts) do
    local x = args[cs.count]
    if type(x) == "number" then
      local p = fit(cs.sizes, x) or x
      v, sum = v * math.max(p, 1), sum + p
    end
  end
  for k, sp in ipairs(b) do
    local x = sp.arg and args[sp.arg]
    if not x then for i = 1, args.n do if gt.is_tensor(args[i]) then x = args[i] break end end end
    if gt.is_tensor(x) and x:dim() >= sp.dim then
      local n = x:size(sp.dim)
      local p = fit(sp.sizes, n) or n
      v, sum = v * math.max(p, 1), sum + p
    elseif k == 1 then v = v * sp.sizes[#sp.sizes] end
  end
  return v, sum
end

-- Whether the last call of the tree launched its path without recording:
-- a keyed hit (keyed trees), else a call whose segments all replayed.
local function settled(self, info, before)
  if self._keyed then return info.keyed_hits > before.keyed_hits end
  return info.replays > before.replays and info.warmups == before.warmups and info.recorded == before.recorded and
    info.eager == before.eager
end

--- tree:warm(calls) -> { paths, settled, calls, seconds }: records the path of
--- each argument list in calls (n = their count where nils end them) ahead
--- of time, the largest padded size first (buckets' sizes multiplied, then added), each
--- called until it replays (a keyed tree: until a hit) or warmup + 5 times;
--- settled: the paths that did.  The calls are calls of the tree (counted,
--- their writes done): give it inputs whose writes land nowhere that matters.
function Tree:warm(calls)
  if getmetatable(self) ~= Tree then I.error("tree:warm(calls): call it with a colon on a tree from gt.tree", 2) end
  if type(calls) ~= "table" or #calls == 0 then
    I.error("tree:warm(calls): calls must be a non-empty list of argument lists, e.g. {{1, 8}, {2, 8}}, got " ..
      I.show(calls), 2)
  end
  local list = {}
  for i, a in ipairs(calls) do
    if type(a) ~= "table" then I.error(("tree:warm(calls): calls[%d] must be an argument list (a table), got %s")
      :format(i, I.show(a)), 2) end
    local args = { n = a.n or #a }
    for j = 1, args.n do args[j] = a[j] end
    local v, sum = volume(self, args)
    list[i] = { args = args, v = v, sum = sum or 0, i = i }
  end
  table.sort(list, function(x, y)
    if x.v ~= y.v then return x.v > y.v end
    if x.sum ~= y.sum then return x.sum > y.sum end
    return x.i < y.i
  end)
  local info, before = ffi.new("gt_tree_info"), ffi.new("gt_tree_info")
  local tries = (self.opts.warmup or 1) + 5
  local t0, ncalls, nsettled = gt.clock(), 0, 0
  for _, e in ipairs(list) do
    for _ = 1, tries do
      C.gt_tree_stats(self._t, before)
      self(unpack(e.args, 1, e.args.n))
      ncalls = ncalls + 1
      C.gt_tree_stats(self._t, info)
      if settled(self, info, before) then nsettled = nsettled + 1 break end
    end
  end
  gt.sync()
  return { paths = #list, settled = nsettled, calls = ncalls, seconds = gt.clock() - t0 }
end
