-- gt.advise: the three questions to ask before turning graph trees on, answered per tree from a run's numbers.
--
--   tree:advise()               advise.tree(tree) -> { name, where, findings = {...}, launch, shapes, breaks }
--   gtlua --advise model.lua    advise.text(trees) printed at exit (through report.at_exit)
--   tree:report(path)           the same findings at the top of each tree's section
--
-- 1. Launch-bound?  The host time to issue one step eagerly and by replay
--    (tree:history(), median per call) against the device time of one step
--    (the last path's graphs launched and synced, tree:floor; gt.clock, the
--    device's events on cuda).  On the cpu backend kernels run on the host as
--    they are launched: the question is a GPU's, and the finding says so,
--    with what this backend measures (the kernels' time, an eager launch's
--    host cost, the steps eager and replayed).  A figure that cannot be
--    measured is named in words, with why (launch().missing), never "?".
-- 2. Shapes: the input shapes of the first segments (node.shapes) and their
--    visits give the histogram per input dimension; a bucket set is chosen
--    from it (fewest buckets whose padding stays under 10 %).
-- 3. What breaks the graphs: every cut site (node.cuts: each node's sites,
--    two after the same launches apart) with its visits, a
--    gt.cond suggestion where an item() picks among branches, non-graphable
--    kernels (node.skip), sibling nodes that begin with the same launches (a
--    host branch without gt.cut() where the paths part: node.shared) and what
--    gt.scope would give back (reusable_bytes).
-- Each finding is { n, q = 1|2|3, title, text, advice, level = "ok"|"warn"|"info" }:
-- n numbers the findings 1.. in order (as printed), q is the question answered.
local gt = require "gt"
local I = require "gt.internal"

local format, concat, sort = string.format, table.concat, table.sort
local max, min, floor = math.max, math.min, math.floor

local M = {}

local bytes = require("gt.units").bytes

-- µs in plain numbers: "812 µs", "12.4 ms".  Every caller has the figure
-- (a figure that could not be measured is said so in words, with why).
local function us(v)
  if v < 0.01 then return "< 0.01 µs" end
  if v < 1 then return format("%.2f µs", v) end
  if v >= 1e4 then return format("%.1f ms", v / 1e3) end
  if v >= 100 then return format("%d µs", floor(v + 0.5)) end
  return format("%.1f µs", v)
end
M._us = us

local function median(xs)
  if #xs == 0 then return nil end
  sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) / 2] or (xs[n / 2] + xs[n / 2 + 1]) / 2
end

local function plural(n, word, words) return format("%d %s", n, n == 1 and word or words or (word .. "s")) end

-- -- 1. Launch-bound? ----------------------------------------------------------

local launch_cost   -- host µs to issue one small eager op on this backend (measured once)

-- One tiny op launched eagerly, outside any tree, by gt.clock: the lower
-- quartile of 128 (a busy host's hiccups are not the op's cost).  nil inside
-- a tree call (an op there is queued, not issued).
local function eager_op_us()
  if launch_cost then return launch_cost end
  if I.active then return nil end
  local x, t = gt.zeros({ 1 }), {}
  for _ = 1, 16 do gt.ops.mul(x, 1) end
  gt.sync()
  for i = 1, 128 do
    local t0 = gt.clock()
    gt.ops.mul(x, 1)
    t[i] = (gt.clock() - t0) * 1e6
  end
  gt.sync()
  sort(t)
  launch_cost = t[32]
  return launch_cost
end

-- The last call's nodes (its path) and their launches.
local function last_path(s)
  local ids, launches = {}, 0
  for id = 0, s.nodes - 1 do
    local n = s.node[id]
    if n and n.last_call == s.calls then ids[#ids + 1] = id; launches = launches + n.kernels end
  end
  return ids, launches
end

-- Relaunching the last path's graphs (tree:floor) times the device, but a
-- graph that writes to memory outside the pool (an in-place update of a
-- weight) would apply its writes again: done at exit, or when asked.
-- Without it, the device time is the sampled launches' (node.gpu_us).
M.relaunch = false

-- Why a figure is missing, in words (the findings say which figure and why).
local WHY = {
  device = "no launch of the last path was sampled, and its graphs are relaunched to time them only at exit " ..
    "(gtlua --advise) or with tree:advise{measure = true}",
  replay = "no call of this run replayed all of its segments (each one recorded, warmed up or ran eagerly " ..
    "somewhere); call the tree until its paths replay",
  eager = "no call after the first (which also compiles kernels) ran wholly eagerly",
  op = "a tiny eager op cannot be timed inside a tree call",
}

--- advise.launch(tree, stats, measure) -> the figures of question 1: launches, segments, sync (a
--- synchronous backend: cpu), device_us, eager_us (host µs to issue a step eagerly), replay_us (by
--- replay; nil on cpu), eager_step, replay_step, speedup, bound (nil on cpu: judged on a GPU),
--- op_us, and missing = { figure = why } for each figure that could not be measured.
function M.launch(tree, s, measure)
  local sync = gt.backend() == "cpu"                    -- launches run to completion before they return
  local h = tree:history()
  local eager, replay = {}, {}
  for _, c in ipairs(h) do
    local pure_eager = c.replays + c.records + c.updates == 0 and c.warmups + c.eager > 0
    if pure_eager and c.call > 1 then eager[#eager + 1] = c.cpu_us end   -- the first call also compiles kernels
    if c.replays > 0 and c.records + c.updates + c.warmups + c.eager == 0 then replay[#replay + 1] = c.cpu_us end
    -- (an untimed call, a keyed hit past the first 64 calls, has no cpu_us: the medians are of timed calls)
  end
  local ids, launches = last_path(s)
  local r = { launches = launches, segments = #ids, sync = sync, eager_calls = #eager, replay_calls = #replay,
              missing = {} }
  local ok, fcpu, fstep = false, nil, nil
  if measure then ok, fcpu, fstep = pcall(tree.floor, tree, 20, true) end
  if ok then r.device_us, r.device_how, r.graph_launch_us = fstep, "the last path's graphs launched and synced, median of 20", fcpu
  else
    local g = 0
    for _, id in ipairs(ids) do g = g + (s.node[id].gpu_us or 0) end
    if g > 0 then r.device_us, r.device_how = g, "sampled launches of the last path's nodes (their gpu_us)" end
  end
  local D, op = r.device_us, eager_op_us()
  r.op_us = op
  local He, Hr = median(eager), median(replay)        -- host µs per call
  if not D then r.missing.device = WHY.device end
  if not Hr then r.missing.replay = WHY.replay end
  if sync then
    -- Each launch returns when its kernel is done: a call's host time is its
    -- step time.  What issuing costs beyond the kernels is the launches times
    -- one tiny op's cost (measured here); whether that bounds the step is a
    -- GPU's question (its kernels run while the host issues the next).
    r.replay_step = Hr
    if He then r.eager_step, r.eager_how = He, format("measured over %s", plural(#eager, "eager call")) end
    if op then r.eager_us = launches * op else r.missing.eager = WHY.op end
    if not He then r.missing.eager_step = WHY.eager end
    r.speedup = r.eager_step and r.replay_step and r.eager_step / r.replay_step
    return r
  end
  -- Launches are queued: a call's host time is its issue time.
  r.replay_us = Hr
  if He then r.eager_us, r.eager_how = He, format("measured over %s", plural(#eager, "eager call"))
  elseif Hr and op then
    r.eager_us = max(Hr - (r.graph_launch_us or 0), 0) + launches * op
    r.eager_how = format("estimated: replay's host time + %d launches x %s per eager op", launches, us(op))
  else
    r.missing.eager = WHY.eager .. ", and it cannot be estimated: " .. (op and WHY.replay or WHY.op)
  end
  if D and r.eager_us then r.eager_step = max(r.eager_us, D) end
  if D and Hr then r.replay_step = max(Hr, D) end
  if D and r.eager_us then
    r.bound = r.eager_us > D
    r.replay_bound = r.replay_us and r.replay_us > D
    r.speedup = r.replay_step and r.eager_step and r.eager_step / r.replay_step
  end
  return r
end

-- On the cpu backend: launch-boundness is a GPU's question; what this backend
-- shows is the host bookkeeping of issuing a step, counted, and the steps measured.
local function launch_finding_cpu(s, r)
  local f = { q = 1, title = "Launch-bound?", level = "info" }
  local parts = { "Judged on a GPU: on the cpu backend kernels run on the host as they are launched, so a step " ..
    "takes its kernels' time and no launch overlaps another; whether the host's issuing bounds a step shows only where " ..
    "the device runs while the host issues." }
  if r.device_us then
    parts[#parts + 1] = format("Here the step's kernels take %s (%s).", us(r.device_us), r.device_how)
  else
    parts[#parts + 1] = "The kernels' time is not measured: " .. r.missing.device .. "."
  end
  local segs = plural(r.segments, "graph launch", "graph launches")
  if r.eager_us then
    parts[#parts + 1] = format("On a GPU a replay saves the host's issuing: eagerly %s a step, each checked and sent " ..
      "on (here %s each, %s a step, counted from a tiny eager op), against %s.", plural(r.launches, "launch", "launches"),
      us(r.op_us), us(r.eager_us), segs)
  else
    parts[#parts + 1] = format("On a GPU a replay saves the host's issuing: eagerly %s a step against %s; the cost of " ..
      "one eager launch is not measured: %s.", plural(r.launches, "launch", "launches"), segs, r.missing.eager)
  end
  local same = "On this backend a graph launch runs the recorded kernels on the host as eager launches do, so the " ..
    "steps measure the same kernels"
  if r.eager_step and r.replay_step then
    parts[#parts + 1] = format("%s: %s eagerly (%s), %s by replay (median of %s).", same, us(r.eager_step),
      r.eager_how, us(r.replay_step), plural(r.replay_calls, "replayed call"))
  elseif r.replay_step then
    parts[#parts + 1] = format("%s: %s by replay (median of %s); the eager step is not measured: %s.", same,
      us(r.replay_step), plural(r.replay_calls, "replayed call"), r.missing.eager_step)
  else
    parts[#parts + 1] = same .. "; the replayed step is not measured: " .. r.missing.replay .. "."
  end
  f.text = concat(parts, " ")
  f.advice = "Judge launch-boundness on a GPU (gtlua --advise there): this backend shows the tree, its results and " ..
    "its memory plan as a GPU has them, not a GPU's launch saving."
  return f
end

local function launch_finding(s, r)
  if r.sync then return launch_finding_cpu(s, r) end
  local f = { q = 1, title = "Launch-bound?" }
  if not (r.device_us and r.eager_us) then
    local why = {}
    if not r.device_us then why[#why + 1] = "the device time is not measured: " .. r.missing.device end
    if not r.eager_us then why[#why + 1] = "the host time to issue a step eagerly is not measured: " .. r.missing.eager end
    if r.missing.replay then why[#why + 1] = "the replay's host time is not measured: " .. r.missing.replay end
    f.level = "info"
    f.text = format("Not enough to tell (%s replay-only): %s.", plural(r.replay_calls, "call"), concat(why, "; "))
    f.advice = "Run gtlua --advise model.lua (it times the device at exit), or tree:advise{measure = true}, " ..
      "after enough steps for each path to replay."
    return f
  end
  local idle = r.bound and (1 - r.device_us / r.eager_us) * 100 or 0
  local text = format("%s in eager: the host issues a step's %d launches in %s (%s), the device runs the step in %s (%s)%s.",
    r.bound and "Yes, launch-bound" or "No, device-bound", r.launches, us(r.eager_us), r.eager_how, us(r.device_us),
    r.device_how, r.bound and format(", so the device idles %.0f%% of the step", idle) or "")
  if r.speedup then
    text = text .. format(" Replay issues it in %s: a step of %s becomes %s (%.1fx).", us(r.replay_us), us(r.eager_step),
      us(r.replay_step), r.speedup)
  else
    text = text .. " The replay's host time is not measured: " .. r.missing.replay .. "."
  end
  f.text = text
  if r.bound and not r.speedup then
    f.level = "ok"
    f.advice = "Keep the tree on: the step is launch-bound, which replay addresses; call the tree until its paths " ..
      "replay to see the saving measured."
  elseif r.bound and r.speedup >= 1.2 then
    f.level = "ok"
    f.advice = format("Keep the tree on: replay makes the step %.1fx faster here.", r.speedup)
    if r.replay_bound then
      f.advice = f.advice .. format(" The host still bounds it (%s of Lua body and patching per step): fuse small ops " ..
        "or key the calls to skip the body.", us(r.replay_us))
    end
  elseif r.bound then
    f.level = "warn"
    f.advice = format("The host bounds the step even in replay (%s per step): graphs gain %.1fx; fuse small ops to cut launches.",
      us(r.replay_us), r.speedup)
  else
    f.level = "info"
    f.advice = format("A tree is optional here: the device needs %s per step and eager issues it in %s, so replay saves " ..
      "%s; keep it for the fixed memory plan, or drop it and its %s.", us(r.device_us), us(r.eager_us),
      r.speedup and format("at most %.0f%% of a step", (1 - 1 / max(r.speedup, 1)) * 100) or "little of a step",
      plural(s.recorded, "recording"))
  end
  return f
end

-- -- 2. Shapes -------------------------------------------------------------------

-- "x 8x256 f32, m.ids 8 i32 -> 8x8 f32" -> { {name, dims = {8, 256}, dtype}, ... } (the inputs).
local function parse_inputs(shapes)
  local ins = shapes and shapes:match("^(.-)%s*%->") or ""
  local out = {}
  for part in (ins .. ","):gmatch("%s*([^,]+),") do
    local name, shape, dtype = part:match("^(%S+) (%S+) (%S+)$")
    if name then
      local dims = {}
      for d in shape:gmatch("%d+") do dims[#dims + 1] = tonumber(d) end
      out[#out + 1] = { name = name, dims = dims, dtype = dtype }
    end
  end
  return out
end
M._parse_inputs = parse_inputs

-- Padding of sizes (ascending, with counts) into buckets: extra elements / real ones.
local function padding(sizes, counts, buckets)
  local real, extra, b = 0, 0, 1
  for i, v in ipairs(sizes) do
    while buckets[b] and buckets[b] < v do b = b + 1 end
    local to = buckets[b] or v
    real, extra = real + v * counts[i], extra + (to - v) * counts[i]
  end
  return real > 0 and extra / real or 0
end

-- The k observed sizes (the largest among them) that pad least: a DP over
-- sorted sizes, cost of a bucket = sum over the sizes it serves of (b - s) * count.
local function best_buckets(sizes, counts, k)
  local n = #sizes
  local function cost(i, j)   -- sizes i..j served by bucket sizes[j]
    local c = 0
    for t = i, j do c = c + (sizes[j] - sizes[t]) * counts[t] end
    return c
  end
  local INF = math.huge
  local dp, from = {}, {}
  for m = 0, k do dp[m], from[m] = { [0] = m == 0 and 0 or INF }, {} end
  for j = 1, n do dp[0][j] = INF end
  for m = 1, k do
    for j = 1, n do
      dp[m][j], from[m][j] = INF, 0
      for i = m, j do
        local v = dp[m - 1][i - 1] + cost(i, j)
        if v < dp[m][j] then dp[m][j], from[m][j] = v, i end
      end
    end
  end
  local out, j, m = {}, n, k
  while m > 0 and j > 0 do
    out[#out + 1] = sizes[j]
    j, m = from[m][j] - 1, m - 1
  end
  sort(out)
  return out
end
M._best_buckets = best_buckets

-- Graph memory per first segment: the bytes of the graphs its paths hold
-- (the node and every node below it), and their mean over the first segments holding any.
local function path_graph_bytes(s)
  local function below(id)
    local n = s.node[id]
    local b = n.graph_bytes or 0
    for _, c in ipairs(n.children) do b = b + below(c) end
    return b
  end
  local sum, held = 0, 0
  for _, r in ipairs(s.roots) do
    local b = below(r)
    if b > 0 then sum, held = sum + b, held + 1 end
  end
  return held > 0 and sum / held or 0
end

function M.shapes(tree, s)
  local hist, order = {}, {}
  for _, r in ipairs(s.roots) do
    local n = s.node[r]
    for _, inp in ipairs(parse_inputs(n.shapes)) do
      for d, size in ipairs(inp.dims) do
        local key = inp.name .. "#" .. d
        local e = hist[key]
        if not e then e = { name = inp.name, dim = d, count = {} }; hist[key] = e; order[#order + 1] = key end
        e.count[size] = (e.count[size] or 0) + n.visits
      end
    end
  end
  local dims, vary = {}, nil
  for _, key in ipairs(order) do
    local e = hist[key]
    e.sizes, e.counts = {}, {}
    for size in pairs(e.count) do e.sizes[#e.sizes + 1] = size end
    sort(e.sizes)
    for i, size in ipairs(e.sizes) do e.counts[i] = e.count[size] end
    dims[#dims + 1] = e
    if #e.sizes > 1 and (not vary or #e.sizes > #vary.sizes) then vary = e end
  end
  local r = { dims = dims, vary = vary, roots = #s.roots, buckets = tree._buckets and true or false,
              limit = s.skips and s.skips.max_recordings or 0, graph_bytes = s.graph_bytes or 0,
              graph_measured = (s.graph_measured or 0) == s.recorded, path_graph_bytes = path_graph_bytes(s),
              budget_drops = s.budget_drops or 0, reinstantiations = s.reinstantiations or 0 }
  if vary then
    local nsz = #vary.sizes
    for k = 1, min(nsz, 8) do
      local b = best_buckets(vary.sizes, vary.counts, k)
      local p = padding(vary.sizes, vary.counts, b)
      if p <= 0.10 or k == min(nsz, 8) then r.bucket_sizes, r.padding = b, p break end
    end
    local pow = gt.buckets.pow2(vary.sizes[nsz])
    r.pow2_padding = padding(vary.sizes, vary.counts, pow)
    local used = {}
    for _, v in ipairs(vary.sizes) do for _, b in ipairs(pow) do if b >= v then used[b] = true break end end end
    r.pow2_used = 0
    for _ in pairs(used) do r.pow2_used = r.pow2_used + 1 end
  end
  return r
end

local function size_list(sizes, counts, limit)
  local parts = {}
  for i = 1, min(#sizes, limit or 12) do parts[i] = counts and format("%d (%d)", sizes[i], counts[i]) or tostring(sizes[i]) end
  if #sizes > (limit or 12) then parts[#parts + 1] = format("... %d more", #sizes - (limit or 12)) end
  return concat(parts, ", ")
end

-- What the graphs cost in memory, and what buckets would save of it (k: the buckets suggested, or nil).
local function memory_text(r, k)
  if r.graph_bytes == 0 then return "" end
  local t = format(" Graph memory: %s in all (%s); each first segment's paths hold about %s of graphs, what each " ..
    "extra shape costs.", bytes(r.graph_bytes), r.graph_measured and "measured" or "partly estimated", bytes(r.path_graph_bytes))
  if r.budget_drops > 0 then
    t = t .. format(" The graph-memory budget dropped %s and instantiated %d again.", plural(r.budget_drops, "graph"),
      r.reinstantiations)
  end
  if k and r.vary and #r.vary.sizes > k then
    t = t .. format(" Buckets would hold about %s less graph memory (%d paths instead of %d)%s.",
      bytes((#r.vary.sizes - k) * r.path_graph_bytes), k, #r.vary.sizes,
      r.budget_drops > 0 and ", and fewer re-instantiations" or "")
  end
  return t
end

local function shapes_finding(s, r)
  local f = { q = 2, title = "How many shapes?" }
  local facts = {}
  for _, e in ipairs(r.dims) do
    if #e.sizes > 1 then
      facts[#facts + 1] = format("%s dim %d takes %d sizes, size (calls): %s", e.name, e.dim, #e.sizes, size_list(e.sizes, e.counts))
    end
  end
  local fixed = {}
  for _, e in ipairs(r.dims) do if #e.sizes == 1 then fixed[#fixed + 1] = format("%s dim %d = %d", e.name, e.dim, e.sizes[1]) end end
  if #fixed > 0 then facts[#facts + 1] = "fixed: " .. concat(fixed, ", ") end
  local head = format("%d first segment%s, %d node%s, %d recorded%s.", r.roots, r.roots == 1 and "" or "s", s.nodes,
    s.nodes == 1 and "" or "s", s.recorded,
    r.limit > 0 and format("; %d visits ran eagerly past max_recordings", r.limit) or "")
  f.text = head .. (#facts > 0 and (" " .. concat(facts, "; ") .. ".") or " No tensor inputs were seen.")
  if r.buckets then
    f.level = "ok"
    f.advice = "Buckets are in use: each bucket is one recording" ..
      ((s.skips or {})["beyond buckets"] and format("; %d calls were beyond the last bucket (add a larger one)", s.skips["beyond buckets"]) or ".")
  elseif not r.vary then
    f.level = "ok"
    f.advice = "One shape per input: every recording is reused; no buckets needed."
  elseif #r.vary.sizes <= 3 and r.limit == 0 then
    f.level = "ok"
    f.advice = format("%d sizes of %s dim %d make %d recordings, few enough; if more sizes come, use buckets = { dim = %d, sizes = { %s } }.",
      #r.vary.sizes, r.vary.name, r.vary.dim, #r.vary.sizes, r.vary.dim, size_list(r.bucket_sizes))
  else
    f.level = "warn"
    f.advice = format("Use buckets = { dim = %d, sizes = { %s } }: %d recordings of the first segment instead of %d, " ..
      "for %.1f%% padding (extra %s rows computed; gt.buckets.pow2(%d) would need %d with %.1f%%).",
      r.vary.dim, size_list(r.bucket_sizes), #r.bucket_sizes, #r.vary.sizes, r.padding * 100, r.vary.name,
      r.vary.sizes[#r.vary.sizes], r.pow2_used, r.pow2_padding * 100)
  end
  f.text = f.text .. memory_text(r, not r.buckets and r.vary and #r.bucket_sizes or nil)
  return f
end

-- -- 3. What breaks the graphs ---------------------------------------------------

function M.breaks(s)
  local sites, order, skips, reusable, most = {}, {}, {}, 0, nil
  for id = 0, s.nodes - 1 do
    local n = s.node[id]
    if n then
      local below = 0                         -- calls that ended right after it took an empty branch
      for _, c in ipairs(n.children) do below = below + s.node[c].visits end
      local cuts = n.cuts or (n.cut and { { cut = n.cut, count = n.visits } }) or {}   -- (a table from before node.cuts)
      for _, c in ipairs(cuts) do
        if c.cut ~= "return" then
          local key = c.cut == "other sites" and ("other sites of [" .. id .. "]") or c.cut
          local e = sites[key]
          if not e then
            e = { site = key, reason = c.reason, visits = 0, nodes = {}, kids = 0 }
            sites[key] = e
            order[#order + 1] = key
          end
          e.visits = e.visits + c.count
          e.nodes[#e.nodes + 1] = id
          e.kids = max(e.kids, #n.children + (n.visits > below and 1 or 0))
        end
      end
      if n.skip then
        local e = skips[n.skip] or { reason = n.skip, visits = 0, nodes = {} }
        skips[n.skip] = e
        e.visits = e.visits + n.eager
        e.nodes[#e.nodes + 1] = id
      end
      local rb = n.reusable_bytes or 0
      reusable = reusable + rb
      if rb > 0 and (not most or rb > s.node[most].reusable_bytes) then most = id end
    end
  end
  local list = {}
  for _, k in ipairs(order) do list[#list + 1] = sites[k] end
  sort(list, function(a, b) return a.visits > b.visits end)
  local sk = {}
  for _, e in pairs(skips) do sk[#sk + 1] = e end
  sort(sk, function(a, b) return a.reason < b.reason end)
  return { sites = list, skips = sk, reusable = reusable, most = most }
end

local function ids_text(ids)
  local p = {}
  for i = 1, min(#ids, 6) do p[i] = "[" .. ids[i] .. "]" end
  if #ids > 6 then p[#p + 1] = "..." end
  return concat(p, " ")
end

local function cut_finding(s, e)
  local f = { q = 3, title = "Graph break at " .. e.site, level = "info" }
  local api = e.reason or (e.site:match("^gt%.cut at") and "gt.cut") or e.site:match("%S+ (.*)$") or e.site
  f.text = format("The segment ends at %s: %d visits over %d node%s (%s); each visit is one more graph launch%s.",
    e.site, e.visits, #e.nodes, #e.nodes == 1 and "" or "s", ids_text(e.nodes),
    (api == "item" or api == "tolist" or api == "gt.sync") and " and a wait for the device" or "")
  if api == "other" then
    f.advice = "More than 8 sites end this node's segment: read values back in fewer places, or after the call."
  elseif api == "item" and e.kids > 1 then
    f.level = "warn"
    f.advice = format("The value read back picks among %d branches: compute the condition as a one-element tensor and use " ..
      "gt.cond(p, then_fn, else_fn): one graph per step, no sync.", e.kids)
  elseif api == "item" or api == "tolist" then
    f.advice = format("A value is read back every call (%d syncs); if it only feeds logging, read it every n steps or after the loop.", e.visits)
  elseif api == "gt.cut" then
    f.advice = e.kids > 1 and format("Keep it: the segment before it is shared by %d branches.", e.kids)
      or "Remove it unless it separates work shared by branches: it only splits the graph."
  elseif api == "gt.sync" then
    f.level = "warn"
    f.advice = "Remove gt.sync from the tree's body: outputs are ready when they are read."
  else
    f.level = "warn"
    f.advice = "Move the host copy out of the call: upload before it and pass the tensor in."
  end
  return f
end

-- A node's kernels from its label ("linear_f32 gelu_f32 x2 ..." -> {linear_f32, gelu_f32, gelu_f32}),
-- and whether the label was cut short (then only the names before the cut are known).
local function label_kernels(label)
  local out, short = {}, false
  for w in (label or ""):gmatch("%S+") do
    local rep = w:match("^x(%d+)$")
    if w == "..." then short = true
    elseif rep and #out > 0 then for _ = 2, tonumber(rep) do out[#out + 1] = out[#out] end
    else out[#out + 1] = w end
  end
  return out, short
end
M._label_kernels = label_kernels

-- Siblings that begin with the same launches (a new branch's node.shared, counted
-- against node.shared_with): a branch on the host where no gt.cut() separates the
-- shared launches from the paths, so each path records them in its own graph.
function M.shared(s)
  local out = {}
  for id = 0, s.nodes - 1 do
    local n = s.node[id]
    if n and (n.shared or 0) > 0 and n.shared_with and s.node[n.shared_with] then
      out[#out + 1] = { a = n.shared_with, b = id, launches = n.shared, root = n.parent == nil }
    end
  end
  return out
end

local function shared_finding(s, e)
  local a, b = s.node[e.a], s.node[e.b]
  local ka, kb = label_kernels(a.label), label_kernels(b.label)
  local names = {}
  for i = 1, min(e.launches, 3) do names[i] = ka[i] end
  local known = #names == min(e.launches, 3) and e.launches <= #ka and e.launches <= #kb
  local shared = format("the same %s", e.launches == 1 and "first launch" or (e.launches .. " leading launches"))
  if known then shared = shared .. " (" .. concat(names, " ") .. (e.launches > 3 and " ..." or "") .. ")" end
  local f = { q = 3, level = "warn", title = format("Launches recorded twice: [%d] and [%d]", e.a, e.b) }
  f.text = format("Nodes [%d] and [%d]%s begin with %s and part after %s: each path records and replays " ..
    "them in a graph of its own (a branch on the host with no gt.cut() where the paths part).", e.a, e.b,
    e.root and ", first segments of the tree," or ", siblings,", shared, e.launches == 1 and "it" or "them")
  local last, na, nb = ka[e.launches], ka[e.launches + 1], kb[e.launches + 1]
  local where
  if known and last and (na or nb) then
    where = format("after the code that launches %s, before the branch that picks %s", last,
      na and nb and (na .. " or " .. nb) or ((na or nb) .. " or returns"))
  else
    where = format("after the %d shared launch%s, before the branch", e.launches, e.launches == 1 and "" or "es")
  end
  f.advice = format("Add gt.cut() where the paths part (%s): the shared launches then become one node, recorded " ..
    "once, with a child per path.", where)
  return f
end

local function break_findings(s, r)
  local out = {}
  if #r.sites == 0 then
    out[1] = { q = 3, title = "Graph breaks", level = "ok", text = "Every call ends at its return: no sync points inside the tree.",
               advice = "No sync point to remove: each path is one graph per segment." }
  end
  for _, e in ipairs(r.shared or {}) do out[#out + 1] = shared_finding(s, e) end
  for _, e in ipairs(r.sites) do out[#out + 1] = cut_finding(s, e) end
  for _, e in ipairs(r.skips) do
    out[#out + 1] = { q = 3, title = "Runs eagerly (" .. e.reason .. ")", level = "warn",
      text = format("%d eager visits of %s: %s.", e.visits, ids_text(e.nodes), e.reason),
      advice = e.reason:match("graphable") and "Give the kernel a graphable variant or launch it outside the tree."
        or e.reason == "max_recordings" and "Bound the recordings with buckets, or raise max_recordings."
        or "Fix the cause above so the segment can be recorded." }
  end
  if r.reusable > 0 then
    out[#out + 1] = { q = 3, title = "Memory gt.scope would give back", level = "info",
      text = format("Freeing each temporary after its last use would save %s at the peak of node [%d] (%s over all nodes).",
        bytes(s.node[r.most].reusable_bytes), r.most, bytes(r.reusable)),
      advice = format("Wrap the temporaries of [%d] (%s) in gt.scope(fn, ...) or :free() them after their last use.",
        r.most, s.node[r.most].label) }
  else
    out[#out + 1] = { q = 3, title = "Memory", level = "ok",
      text = "The memory plan is already ideal: no tensor outlives its last use by more than the plan needs.",
      advice = "No gt.scope needed." }
  end
  return out
end

-- -- Per tree, and as text ---------------------------------------------------------

local MARK = { ok = "ok", warn = "!!", info = "--" }

-- text wrapped at width columns, every line after the first indented.
local function wrap(text, width, indent, first)
  local lines, line = {}, first or ""
  for word in text:gmatch("%S+") do
    if line ~= "" and #line + 1 + #word > width then lines[#lines + 1] = line; line = indent .. word
    else line = line:match("^%s*$") and (line .. word) or (line .. " " .. word) end
  end
  lines[#lines + 1] = line
  return concat(lines, "\n")
end

-- A tree's findings as text: print(tree:advise()).
local Findings = { __tostring = function(a)
  local out = { format("tree '%s' (%s): %s, %s, %d recorded", a.name, a.where, plural(a.calls, "call"),
    plural(a.nodes, "node"), a.recorded) }
  for _, f in ipairs(a.findings) do
    local sep = f.title:match("%?$") and " " or ". "
    out[#out + 1] = wrap(format("[%s] %d. %s%s%s", MARK[f.level] or "--", f.n, f.title, sep, f.text), 100, "       ")
    out[#out + 1] = wrap("-> " .. f.advice, 100, "          ", "       ")
  end
  return concat(out, "\n")
end }

--- advise.tree(tree [, {measure = bool}]) -> { name, where, calls, nodes, launch, shapes, breaks, findings }
--- measure (default: advise.relaunch, true at exit): relaunch the last path's graphs to time the device
function M.tree(tree, opts)
  if type(tree) ~= "table" or getmetatable(tree) ~= gt.Tree then
    I.error("gt.advise.tree: expected a tree (from gt.tree), got " .. I.show(tree))
  end
  if opts ~= nil then
    local what = "tree:advise([opts])"
    if type(opts) ~= "table" then
      I.error(what .. ": options must be a table such as {measure = true}, or nil, got " .. I.show(opts))
    end
    for k, v in pairs(opts) do
      if k ~= "measure" then
        I.error(what .. ": unknown option " .. (type(k) == "string" and ("'" .. k .. "'") or I.show(k)) ..
          ": the one option is measure (true or false)")
      elseif type(v) ~= "boolean" then
        I.error(what .. ": option measure must be true or false, got " .. I.show(v))
      end
    end
  end
  local s = tree:stats()
  local r = setmetatable({ name = s.name, where = s.where, calls = s.calls, nodes = s.nodes, recorded = s.recorded }, Findings)
  if s.nodes == 0 then
    r.findings = { { q = 1, n = 1, title = "No nodes", level = "info", text = "The tree has no calls that launched kernels.",
                     advice = "Call it (inside the script) before asking." } }
    return r
  end
  local measure = M.relaunch
  if opts and opts.measure ~= nil then measure = opts.measure end
  r.launch, r.shapes, r.breaks = M.launch(tree, s, measure), M.shapes(tree, s), M.breaks(s)
  r.breaks.shared = M.shared(s)
  r.findings = { launch_finding(s, r.launch), shapes_finding(s, r.shapes) }
  for _, f in ipairs(break_findings(s, r.breaks)) do r.findings[#r.findings + 1] = f end
  for i, f in ipairs(r.findings) do f.n = i end          -- numbered once, in order (f.q: the question it answers)
  return r
end


local function no_trees()
  local out = { "", "No graph trees were made: the three questions are about a step wrapped in gt.tree(fn)." }
  local op = eager_op_us()
  if op then
    out[#out + 1] = wrap(format("Here one small eager op costs %s of host time: a step whose kernels each run shorter " ..
      "than that is launch-bound%s, and a tree (local step = gt.tree(model)) would replay it as one graph launch per " ..
      "segment.", us(op), gt.backend() == "cpu" and " on a GPU (the cpu backend runs kernels as they are launched)" or ""),
      100, "  ")
  end
  return out
end

--- advise.text(trees) -> the findings of each tree as text (what gtlua --advise prints)
function M.text(trees)
  local out = { format("gtlua --advise: %d graph tree%s, backend %s", #trees, #trees == 1 and "" or "s", gt.backend()) }
  if #trees == 0 then for _, l in ipairs(no_trees()) do out[#out + 1] = l end end
  for _, t in ipairs(trees) do
    out[#out + 1] = ""
    out[#out + 1] = tostring(M.tree(t))
  end
  return concat(out, "\n")
end

return M
