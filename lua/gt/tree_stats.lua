-- gt.tree_stats: a tree's statistics, history, trim, benchmark floor and pictures (tree methods).
local ffi = require "ffi"

local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local tonumber = require("gt.host_policy").original.tonumber
local getmetatable, type, pairs = getmetatable, type, pairs
local Tree = gt.Tree

local function skip_table(t)
  local r, reason, count = {}, ffi.new("const char*[1]"), ffi.new("int[1]")
  local i = 0
  while C.gt_tree_skip_reason(t, i, reason, count) == 0 do
    r[ffi.string(reason[0])] = count[0]
    i = i + 1
  end
  return r
end

-- Every distinct site node id's segment ended at, in order of first visit:
-- { site = "model.lua:31", reason = "item", cut = "model.lua:31 item", count = visits }
-- (cut as node.cut writes it; reason "return" at the call's end, "other" for
-- the visits past the first 8 sites).
local function cut_sites(t, id, site, count)
  local list, i = {}, 0
  while C.gt_tree_node_cut(t, id, i, site, count) == 0 do
    local text = ffi.string(site[0])
    local at, reason = text:match("^gt%.cut at (.*)$"), "gt.cut"
    if not at then at, reason = text:match("^(.*:%-?%d+) (.+)$") end      -- "file:line reason"
    if not at then at, reason = text:match("^(%S+) (.+)$") end
    if text == "return" then at, reason = "return", "return"
    elseif text == "other sites" then at, reason = "other sites", "other"
    elseif not at then at, reason = text, text end
    list[#list + 1] = { site = at, reason = reason, cut = text, count = count[0] }
    i = i + 1
  end
  return list
end

-- A tree method's receiver must be a tree: `tree.stats()` (a dot for the colon) raises here,
-- at the user's line, instead of passing nil to the core.
local function me(self, name)
  if getmetatable(self) ~= Tree then
    I.error("tree:" .. name .. "(...): call it with a colon on a tree from gt.tree (tree:" .. name ..
      "(...)), got " .. I.show(self) .. " for the tree", 2)
  end
end

--- tree:stats() -> the plain table of DESIGN.md section 9
function Tree:stats()
  me(self, "stats")
  local s = ffi.new("gt_tree_info")
  C.gt_tree_stats(self._t, s)
  local r = {
    name = self.name, where = self.where, calls = s.calls, nodes = s.nodes, recorded = s.recorded,
    warmups = s.warmups, replays = s.replays, eager = s.eager, updates = s.updates,
    skips = skip_table(self._t), skipped = s.skips, depth = s.depth, fused = s.path_fused,
    pool = { reserved = tonumber(s.reserved), in_use = tonumber(s.in_use), high_water = tonumber(s.high_water) },
    node = {},
  }
  local ni = ffi.new("gt_node_info")
  local site, count = ffi.new("const char*[1]"), ffi.new("int[1]")
  for id = 0, s.nodes - 1 do
    C.gt_tree_node(self._t, id, ni)
    local kids, k = {}, 0
    while true do
      local c = C.gt_tree_child(self._t, id, k)
      if c < 0 then break end
      kids[#kids + 1] = c
      k = k + 1
    end
    r.node[id] = {
      id = id, parent = ni.parent >= 0 and ni.parent or nil, depth = ni.depth, children = kids,
      label = ffi.string(ni.label), kernels = ni.kernels, visits = ni.visits, warmups = ni.warmups,
      recorded = ni.recorded ~= 0, records = ni.records, replays = ni.replays, updates = ni.updates, eager = ni.eager,
      skip = ni.skip ~= nil and ffi.string(ni.skip) or nil,
      record_us = ni.record_us, instantiate_us = ni.instantiate_us, replay_cpu_us = ni.replay_cpu_us,
      gpu_us = ni.gpu_us, planned_bytes = tonumber(ni.planned_bytes), checkpoint_bytes = tonumber(ni.checkpoint_bytes),
      reusable_bytes = tonumber(ni.reusable_bytes), keyed = ni.keyed ~= 0,
      last_call = tonumber(ni.last_call),
      shapes = ni.shapes ~= nil and ffi.string(ni.shapes) or nil, cut = ni.cut ~= nil and ffi.string(ni.cut) or nil,
      why = ni.why ~= nil and ffi.string(ni.why) or nil,
      shared = ni.shared, shared_with = ni.shared_with >= 0 and ni.shared_with or nil,
      cuts = cut_sites(self._t, id, site, count),
    }
  end
  if self._buckets then r.buckets = { verified = self._buckets.verified } end
  if self._evict then r.evictions = self._evictions end   -- (on_limit = "evict": calls after which a recording was dropped)
  if self._keyed then
    local c = self._keyed.stats
    local refused = {}
    for why, count in pairs(c.refused) do refused[why] = count end
    r.keyed = { hits = s.keyed_hits, misses = c.misses, verified = c.verified, refused = refused, fused = s.keyed_fused }
  end
  r.roots = {}
  local k = 0
  while true do
    local c = C.gt_tree_child(self._t, -1, k)
    if c < 0 then break end
    r.roots[#r.roots + 1] = c
    k = k + 1
  end
  return r
end

local counts_info = ffi.new("gt_tree_info")
--- tree:counts() -> calls, recorded, warmups, replays, eager, keyed_hits: the tree's
--- counters as numbers, without the tables tree:stats() builds (cheap enough to
--- read every call: a serving loop tells a step that met a new path by them)
function Tree:counts()
  me(self, "counts")
  local s = counts_info
  C.gt_tree_stats(self._t, s)
  return s.calls, s.recorded, s.warmups, s.replays, s.eager, s.keyed_hits
end

--- tree:history() -> the last calls (up to 1024), oldest first: { call, warmups,
--- records, replays, eager, updates, cpu_us, in_use, reserved } each
function Tree:history()
  me(self, "history")
  local r, ci, i = {}, ffi.new("gt_call_info"), 0
  while C.gt_tree_history(self._t, i, ci) == 0 do
    r[#r + 1] = { call = ci.call, warmups = ci.warmups, records = ci.records, replays = ci.replays, eager = ci.eager,
                  updates = ci.updates, cpu_us = ci.cpu_us >= 0 and ci.cpu_us or nil,   -- (an untimed keyed hit: nil)
                  in_use = tonumber(ci.in_use), reserved = tonumber(ci.reserved) }
    i = i + 1
  end
  return r
end

--- tree:trim([keep = 0]) -> graphs dropped: frees the graphs and memory of
--- all but the keep most recently used recordings (they record again when visited)
function Tree:trim(keep)
  me(self, "trim")
  keep = keep or 0
  if type(keep) ~= "number" or keep < 0 or keep ~= math.floor(keep) or keep >= 2 ^ 31 then
    I.error("tree:trim(keep): keep must be a whole number of graphs to keep, 0 or more, got " .. I.show(keep))
  end
  local n = C.gt_tree_trim(rt, self._t, keep)
  if n < 0 then error(I.errmsg(), 2) end
  return n
end

--- tree:floor(iters [, sync_each [, patch [, calls]]]) -> cpu_us, step_us, patches:
--- the last call's graphs launched back to back from C with no tree logic (the
--- benchmark floor); patch: each step first repeats the kernel-node patches the
--- last call made (patches: how many a step repeats); calls: a list of argument
--- lists (n = their count where nils end them), each called once, whose paths
--- (and patches) the steps then launch in turn.  What the graphs write is
--- copied aside before the steps and back after (floor.c): the floor changes
--- no value a tensor reads
function Tree:floor(iters, sync_each, patch, calls)
  me(self, "floor")
  local what = "tree:floor(iters [, sync_each [, patch [, calls]]])"
  if iters ~= nil and (type(iters) ~= "number" or iters < 1 or iters ~= math.floor(iters) or iters >= 2 ^ 31) then
    I.error(what .. ": iters must be a whole number of steps, 1 or more, got " .. I.show(iters))
  end
  if sync_each ~= nil and type(sync_each) ~= "boolean" then
    I.error(what .. ": sync_each must be true or false, got " .. I.show(sync_each))
  end
  if patch ~= nil and type(patch) ~= "boolean" then
    I.error(what .. ": patch must be true or false, got " .. I.show(patch))
  end
  local t = self._t
  C.gt_tree_floor_clear(t)               -- (marks a failed call left)
  if calls ~= nil then
    if type(calls) ~= "table" or #calls == 0 then I.error("tree:floor: calls must be a list of argument lists") end
    for i, a in ipairs(calls) do
      if type(a) ~= "table" then I.error("tree:floor: calls[" .. i .. "] must be a list of arguments") end
      self(unpack(a, 1, a.n or #a))
      if C.gt_tree_floor_mark(rt, t) < 0 then C.gt_tree_floor_clear(t); error(I.errmsg(), 2) end
    end
  end
  local c, s = ffi.new("double[1]"), ffi.new("double[1]")
  local np = C.gt_tree_bench_floor(rt, t, iters or 100, sync_each == false and 0 or 1, patch and 1 or 0, c, s)
  if calls ~= nil then C.gt_tree_floor_clear(t) end
  if np < 0 then error(I.errmsg(), 2) end
  return c[0], s[0], np
end


--- tree:advise([{measure = true}]) -> the advisor's findings for this tree (gt.advise; gtlua --advise prints them)
function Tree:advise(opts) me(self, "advise"); return require("gt.advise").tree(self, opts) end

--- tree:dot([path]), tree:json([path]), tree:report(path): pictures (gt.report)
function Tree:dot(path) me(self, "dot"); return gt.report.dot(self, path, "tree:dot([path])") end
function Tree:json(path) me(self, "json"); return gt.report.json(self, path, "tree:json([path])") end
function Tree:report(path) me(self, "report"); return gt.report.html(self, path, "tree:report([path])") end

--- tostring(tree): the tree drawn for a terminal
function Tree:__tostring() me(self, "__tostring"); return require("gt.report").draw(self) end
