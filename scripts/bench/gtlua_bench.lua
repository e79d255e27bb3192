-- gtlua_bench: the gtlua benchmark scenarios (chain, branch, shapes, grow, decode) in eager, tree and floor modes.
--
--   gtlua scripts/bench/gtlua_bench.lua [--quick] [--each] [--json FILE] [--only chain,grow,decode]
--   (--each: every scenario in a process of its own; --only =NAME: that scenario alone)
--
-- Every figure is a median in microseconds after warmup steps:
--   cpu_us   wall time around one step call, no sync (the host's cost to issue)
--   step_us  the same step followed by gt.sync() (issue + device time)
--   pipe_us  N steps back to back, one sync, divided by N
-- eager = the model function called outside any tree (launches one by one);
-- tree = the same function in gt.tree, replaying; floor = tree:floor(), the
-- last call's recorded graphs launched back to back from C with no tree logic.
-- decode-B: one greedy decode step of examples/gpt.lua's GPT-2-small-shaped
-- model (KV cache, tree with batch buckets 1..16) at batch B, the position
-- cycling over the cache; tokens/s = B / pipe_us, host µs per token = cpu_us / B.
-- Loaded with dofile() the file returns its functions (spec/bench_spec.lua).
local gt = require "gt"

local M = {}
local clock, floor, sqrt, max, min = gt.clock, math.floor, math.sqrt, math.max, math.min
local format, concat, sort = string.format, table.concat, table.sort
local function pack(...) return { n = select("#", ...), ... } end

-- -- Configuration -------------------------------------------------------------

-- Same sizes as shared/anchors/torch_trees.py; reps shrink as kernels grow
-- (reps * 32 / kernels, at least min_reps); min_reps 300 gives every block
-- 50 measured steps.  Fewer steps a block measure the first calls after a
-- mode change, whose host caches hold the other mode's data, and the
-- paired keyed / floor ratios then rise well above a keyed hit's own
-- (op_probe.lua).
-- warm: calls before a mode is measured, at least 200 whatever the kernels:
-- LuaJIT compiles a call's own code (the tree call, a keyed hit) only after
-- some hundred calls, and with fewer a 512-kernel keyed hit is measured
-- interpreted (many times its compiled cost).
-- prime: seconds of replays (a 32-kernel chain tree, unmeasured; bursts,
-- and synced steps as the modes are measured) before the first scenario
-- (5 s): without it a process's first scenario measures every mode
-- slower, the floor (graphs launched from C) included, as the host and the
-- driver warm up over a process's first seconds.  For the same reason
-- run.sh does not use --each: with every scenario in a fresh process the
-- floors vary 2-3x between processes.
-- rounds: the tree, keyed and floor modes are measured in turn, in this many
-- rounds of blocks (M.interleave).
M.FULL = {
  hidden = 256, batch = 8, layers = 32, prefix = 8, suffix = 8,
  batches = { 1, 2, 4, 8, 16, 32, 64 }, grow = { 8, 32, 128, 512 },
  warm = 200, reps = 300, pipe = 1000, min_reps = 300, min_pipe = 50,
  heap_mb = 100, heap_grow = 128, prime = 5, rounds = 6,
  decode = { model = "FULL", batches = { 1, 8 }, ctx = 256 },
}

-- CI-sized: the cpu backend's linear kernel is slow, so few, small steps.
M.QUICK = {
  hidden = 16, batch = 4, layers = 6, prefix = 2, suffix = 2,
  batches = { 1, 2, 4 }, grow = { 2, 4, 8 },
  warm = 2, reps = 3, pipe = 3, min_reps = 2, min_pipe = 2, quick = true, rounds = 2,
  heap_mb = 4, heap_grow = 8,
  decode = { model = "TINY", batches = { 1, 2 }, ctx = 16 },
}

-- -- Small helpers -----------------------------------------------------------------

local function median(v)
  local s = {}
  for i = 1, #v do s[i] = v[i] end
  sort(s)
  local n = #s
  if n == 0 then return 0 / 0 end
  if n % 2 == 1 then return s[(n + 1) / 2] end
  return (s[n / 2] + s[n / 2 + 1]) / 2
end
M.median = median


-- Values of a tensor (any shape) as a flat Lua array.
local function flat(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for i = 1, #v do walk(v[i]) end else out[#out + 1] = v end
  end
  walk(t:tolist())
  return out
end

-- Reps for a step of k kernels: fewer for long chains.
local function reps_for(n, least, kernels)
  return max(least, min(n, floor(n * 32 / max(kernels, 1))))
end

-- -- The model: weights and layer stacks ---------------------------------------------

-- Weights as torch_trees.py: W = randn(H, H) / sqrt(H), b = randn(H) * 0.01,
-- all :static(); nb = -b, so that suffix b's tanh(x @ W - b) is one linear kernel.
function M.model(cfg)
  local H, L = cfg.hidden, max(cfg.layers, cfg.prefix + 2 * cfg.suffix)
  local W, B, NB = {}, {}, {}
  for i = 1, L do
    W[i] = gt.randn({ H, H }, { seed = i, scale = 1 / sqrt(H) }):static()
    B[i] = gt.randn({ H }, { seed = 1000 + i, scale = 0.01 }):static()
    NB[i] = gt.ops.mul(B[i], -1):static()
  end
  local linear = gt.ops.linear
  local m = { W = W, B = B, NB = NB, L = L }

  -- n layers of relu(x @ W + b), weights cycling through the first cfg.layers.
  -- (layers: a local, as Lua code keeps a loop's constants: LuaJIT compiles
  -- (i - 1) % layers of an upvalue never assigned again to a mask, where
  -- cfg.layers, a table's field, is read again and divided in floating
  -- point each layer: 12 ns a layer on the cpu backend's dev host, 40% of
  -- a replayed op; the model's arithmetic, not gtlua's.)
  local layers = cfg.layers
  function m.chain(x, n)
    n = n or layers
    for i = 1, n do
      local k = (i - 1) % layers + 1
      x = linear(x, W[k], B[k], "relu")
    end
    return x
  end

  -- layers first..first+count-1 of relu(x @ W + b) or tanh(x @ W - b)
  local function stack(x, first, count, act, bias)
    for k = first, first + count - 1 do x = linear(x, W[k], bias[k], act) end
    return x
  end

  -- prefix, a segment boundary (the host branch), then suffix a or b
  function m.branchy(x, route)
    local h = stack(x, 1, cfg.prefix, "relu", B)
    gt.cut()
    if route % 2 == 0 then return stack(h, cfg.prefix + 1, cfg.suffix, "relu", B) end
    return stack(h, cfg.prefix + cfg.suffix + 1, cfg.suffix, "tanh", NB)
  end
  return m
end

-- -- Scenarios -----------------------------------------------------------------------

-- A scenario: fn (the model step), args(i) (its arguments at step i),
-- variants (the distinct steps a cycle visits: floor is their mean),
-- kernels per step, and the tree options.
function M.scenarios(cfg, m)
  local H = cfg.hidden
  local x = gt.randn({ cfg.batch, H }, { seed = 7 })
  local xs = {}
  for i, b in ipairs(cfg.batches) do xs[i] = gt.randn({ b, H }, { seed = 100 + b }) end
  local nb = #cfg.batches
  local function chain(v) return m.chain(v) end
  local function at_size(i) return xs[(i - 1) % nb + 1] end
  local one = function() return 0 end
  local list = {
    { name = "chain", label = format("%d x linear+relu, batch %d, hidden %d", cfg.layers, cfg.batch, H),
      fn = chain, args = function() return x end, variants = 1, kernels = cfg.layers, keyed = { key = one } },
    { name = "branch", label = format("%d-layer prefix, cut, one of two %d-layer suffixes, alternating", cfg.prefix, cfg.suffix),
      fn = m.branchy, args = function(i) return x, i end, variants = 2, kernels = cfg.prefix + cfg.suffix, siblings = true,
      -- keyed: the route is the key (an argument that is a number is part of the key: pass the parity)
      keyed = { key = function(_, r) return r end, args = function(i) return x, i % 2 end } },
    { name = "shapes", label = format("the chain over batch sizes %s, cycling", concat(cfg.batches, ",")),
      fn = chain, args = at_size, variants = nb, kernels = cfg.layers, keyed = { key = one }, siblings = true },
    { name = "shapes+buckets", label = format("shapes with buckets = pow2(%d)", cfg.batches[nb]),
      fn = chain, args = at_size, variants = nb, kernels = cfg.layers,
      opts = { buckets = { dim = 1, sizes = gt.buckets.pow2(cfg.batches[nb]), narrow = { 1 } } } },
  }
  for _, n in ipairs(cfg.grow) do
    list[#list + 1] = { name = "grow-" .. n, grow = n, label = format("chain of %d linear+relu kernels", n),
      fn = function(v) return m.chain(v, n) end, args = function() return x end, variants = 1, kernels = n,
      keyed = { key = one } }
  end
  for _, sc in ipairs(M.decode_scenarios(cfg)) do list[#list + 1] = sc end
  return list
end

-- The decode scenarios: one per batch size, sharing one model that the first
-- one's setup makes (outside any tree).  A step returns the logits.
function M.decode_scenarios(cfg)
  local d = cfg.decode
  if not d then return {} end
  local gpt, gm, c
  local function setup()
    if gm then return end
    gpt = dofile("examples/gpt.lua")
    c = gpt.config(gpt[d.model], { ctx = d.ctx })
    gm = gpt.new(c)
  end
  local list = {}
  for _, B in ipairs(d.batches) do
    local ids
    local sc = { name = "decode-" .. B, batch = B, variants = 1,
      label = format("GPT decode step, batch %d", B), kernels = 0,   -- both refined by setup
      opts = { buckets = { dim = 1, sizes = { 1, 2, 4, 8, 16 }, narrow = { 1 } } },
      fn = function(x, pos) local _, logits = gm.step(x, pos, 1); return logits end,
      args = function(i) return ids, (i - 1) % d.ctx end,
      -- keyed: the same buckets, the position patched
      keyed = { key = function() return 0 end, patch = { 2 } },
      -- the floor at the middles of eight equal spans of the position cycle
      -- (attention reads pos + 1 cached positions), the position patched
      floor_points = {}, floor_patch = true }
    for k = 0, 7 do sc.floor_points[k + 1] = floor((2 * k + 1) * d.ctx / 16) + 1 end
    sc.setup = function()
      setup()
      ids = gt.from(gpt.random_prompt(c, 1, B, B)[1], "i32")
      sc.kernels = gm.kernels
      sc.label = format("GPT decode step (%s: %d layers, hidden %d, vocab %d, KV cache %d), batch %d, buckets 1..16",
        d.model == "FULL" and "GPT-2 small" or "tiny", c.layers, c.hidden, c.vocab, d.ctx, B)
    end
    list[#list + 1] = sc
  end
  return list
end

-- -- Measuring -----------------------------------------------------------------------

-- cpu / step medians over reps steps after warm steps, then pipelined over pipe steps.
-- (LuaJIT's traces are not flushed between modes: on the cpu backend a flush
-- before each mode, or each scenario, made shapes 15% quicker and grow-128
-- and grow-512 30% slower, medians of 6 processes; a compiled loop that a
-- flush drops is not always compiled as well again.)
function M.measure(step, warm, reps, pipe)
  for i = 1, warm do step(i) end
  gt.sync()
  collectgarbage()
  local c, st = M.steps_block(step, warm)(reps)
  return { cpu_us = c, step_us = st, pipe_us = M.pipe(step, pipe, warm + reps) }
end

-- A block of measured steps: n synced calls of step (numbered on from
-- where the last block stopped, so that a cycle of variants goes on); the
-- medians of their host and synced µs.
function M.steps_block(step, first)
  local i = first or 0
  return function(n)
    local cpu, full = {}, {}
    for k = 1, n do
      i = i + 1
      local t0 = clock()
      step(i)
      local t1 = clock()
      gt.sync()
      local t2 = clock()
      cpu[k], full[k] = (t1 - t0) * 1e6, (t2 - t0) * 1e6
    end
    return median(cpu), median(full)
  end
end

-- Modes measured in turn: rounds of blocks, one block of each mode (order)
-- a round, reps steps a mode in all; a mode's cpu_us and step_us are the
-- medians of its blocks' medians.  A shared GPU host changes speed by up
-- to 2x from one minute to the next (the floor too): modes measured one
-- after the other take different spells, and their ratios move with them.  With ref
-- (a mode's name), every other mode also gets vs_<ref>_cpu and
-- vs_<ref>_step: the medians over the rounds of its block's figure over
-- ref's block of the same round (paired ratios: blocks seconds apart share
-- the host's spell).  The order turns by one place each round: a block
-- right after another mode's pays for the caches that mode filled (keyed
-- always measured after tree reads higher against the floor than keyed
-- measured after the floor).
function M.interleave(blocks, order, reps, rounds, ref)
  rounds = max(1, min(rounds, reps))
  local per = math.ceil(reps / rounds)
  local got = {}
  for _, name in ipairs(order) do got[name] = { cpu = {}, step = {}, rcpu = {}, rstep = {} } end
  for round = 1, rounds do
    local this = {}
    for j = 1, #order do
      local name = order[(j + round - 2) % #order + 1]   -- each round one place on: every mode follows every other
      local c, st = blocks[name](per)
      local g = got[name]
      g.cpu[#g.cpu + 1], g.step[#g.step + 1] = c, st
      this[name] = { c, st }
    end
    local r = ref and this[ref]
    if r and r[1] > 0 and r[2] > 0 then
      for _, name in ipairs(order) do
        local g = got[name]
        if name ~= ref then g.rcpu[#g.rcpu + 1], g.rstep[#g.rstep + 1] = this[name][1] / r[1], this[name][2] / r[2] end
      end
    end
  end
  local out = {}
  for _, name in ipairs(order) do
    local g = got[name]
    out[name] = { cpu_us = median(g.cpu), step_us = median(g.step) }
    if #g.rcpu > 0 then
      out[name]["vs_" .. ref .. "_cpu"], out[name]["vs_" .. ref .. "_step"] = median(g.rcpu), median(g.rstep)
    end
  end
  return out
end

-- Pipelined: n steps back to back (numbered from first + 1), one sync; µs per step.
function M.pipe(step, n, first)
  collectgarbage()
  local t0 = clock()
  for i = 1, n do step(first + i) end
  gt.sync()
  return (clock() - t0) * 1e6 / n
end

-- Steps (name -> step(i), measured in order's order) and their floor
-- (launch_floor(n, sync_each) -> cpu µs, step µs: tree:floor) measured in turn:
-- warm steps of each, then M.interleave (ratios to the floor paired), then
-- each pipelined.  Returns the modes by name, the floor's as "floor".
-- Every block first runs M.SETTLE steps of its mode unmeasured: the first
-- calls after another mode's block find the host's caches full of that
-- mode's data, and with few steps a block (grow-512's reps) those first
-- calls would be the block's median.
M.SETTLE = 2
function M.in_turn(steps, order, launch_floor, warm, reps, pipe, rounds)
  for _, name in ipairs(order) do for i = 1, warm do steps[name](i) end end
  gt.sync()
  collectgarbage()
  local settle = M.SETTLE
  local blocks, all = { floor = function(n) launch_floor(settle, true); return launch_floor(n, true) end }, {}
  for k, name in ipairs(order) do
    local block = M.steps_block(steps[name], warm)
    blocks[name], all[k] = function(n) block(settle); return block(n) end, name
  end
  all[#all + 1] = "floor"
  local m = M.interleave(blocks, all, reps, rounds, "floor")
  for _, name in ipairs(order) do m[name].pipe_us = M.pipe(steps[name], pipe, warm + reps + rounds * settle) end
  local _, fp = launch_floor(pipe, false)
  m.floor.pipe_us = fp
  return m
end

-- The collector's share of a step's host time, and the Lua memory a step
-- allocates (bytes; the last round's steps with the collector stopped: its
-- loop compiled).  In rounds, a block of synced steps with the collector
-- running and one with it stopped, the order turning each round; the share
-- is the median over the rounds of 1 - stopped / running, each a block's
-- median host µs.  (Measured one after the other, a spell of a shared
-- host would fall on one of the two and read as the collector's share.)
local table_new = require "table.new"
function M.gc_share(step, reps, rounds)
  rounds = max(1, min(rounds or 6, reps))
  local per, i, shares, bytes = math.ceil(reps / rounds), 0, {}, 0
  local function block(stop)
    collectgarbage()
    if stop then collectgarbage("stop") end
    local c = table_new(per, 0)              -- (its array made first: not counted as the steps')
    for k = 1, per do c[k] = 0 end
    local m0 = collectgarbage("count")
    for k = 1, per do
      i = i + 1
      local t0 = clock()
      step(i)
      c[k] = (clock() - t0) * 1e6
      gt.sync()
    end
    if stop then bytes = (collectgarbage("count") - m0) * 1024 / per end   -- (the last round's: its loop compiled)
    collectgarbage("restart")
    return median(c)
  end
  for round = 1, rounds do
    local on, off
    if round % 2 == 1 then on = block(false); off = block(true) else off = block(true); on = block(false) end
    shares[round] = on > 0 and max(0, 1 - off / on) or 0
  end
  return median(shares), bytes
end

-- Ids of the nodes that hold a graph.
local function recorded_ids(s)
  local r = {}
  for id, n in pairs(s.node) do if n.recorded then r[id] = true end end
  return r
end

-- Calls the tree n times; each call that recorded a node is an event
-- { call, call_us, nodes, kernels, record_us, instantiate_us }.
function M.startup(tree, args, n)
  local events, before = M.array {}, recorded_ids(tree:stats())
  for i = 1, n do
    local t0 = clock()
    tree(args(i))
    local us = (clock() - t0) * 1e6
    local s = tree:stats()
    local now = recorded_ids(s)
    local e = { call = i, call_us = us, nodes = 0, kernels = 0, record_us = 0, instantiate_us = 0 }
    for id in pairs(now) do
      if not before[id] then
        local nd = s.node[id]
        e.nodes, e.kernels = e.nodes + 1, e.kernels + nd.kernels
        e.record_us, e.instantiate_us = e.record_us + nd.record_us, e.instantiate_us + nd.instantiate_us
      end
    end
    if e.nodes > 0 then events[#events + 1] = e end
    before = now
  end
  return events
end

-- The record event that recorded the most kernels (the last of equals: for
-- branch, a sibling recorded after the prefix replayed).
local function main_record(events)
  local best
  for _, e in ipairs(events) do if not best or e.kernels >= best.kernels then best = e end end
  return best
end

-- The floor's calls (tree:floor): the argument lists of the steps a cycle
-- visits (each variant's), whose paths are launched from C in turn, the
-- medians over the steps as for the other modes.  A scenario whose steps
-- patch a scalar (decode's position) gives floor_points, the steps whose
-- arguments stand for its cycle (the device's work grows with the position),
-- and floor_patch: each step repeats its call's patches with their values,
-- as any launcher of these graphs at a new position must.
function M.floor_calls(sc)
  local points = sc.floor_points
  if not points then
    points = {}
    for v = 1, sc.variants do points[v] = v end
  end
  local calls = {}
  for k, i in ipairs(points) do calls[k] = pack(sc.args(i)) end
  return calls
end

-- Largest |eager - tree| over every variant's output, and the largest |value|.
function M.agree(tree, sc)
  local diff, mag, n = 0, 0, 0
  for v = 1, sc.variants do
    local e = flat(sc.fn(sc.args(v)))
    local t = flat(tree(sc.args(v)))
    if #e ~= #t then return { max_abs_diff = 1 / 0, max_abs = 0, values = 0 } end
    for i = 1, #e do
      diff, mag = max(diff, math.abs(e[i] - t[i])), max(mag, math.abs(e[i]))
    end
    n = n + #e
  end
  return { max_abs_diff = diff, max_abs = mag, values = n }
end

-- The call that records a new path while the Lua heap holds heap_mb of live
-- tables: nothing at record time may depend on the heap's size (no GC).
function M.record_with_heap(sc, heap_mb)
  local heap, row = {}, {}
  collectgarbage()
  local base = collectgarbage("count")
  while collectgarbage("count") - base < heap_mb * 1024 do
    for i = 1, 1000 do row[i] = { i, i + 0.5 } end
    heap[#heap + 1] = row
    row = {}
  end
  local live_mb = (collectgarbage("count") - base) / 1024
  local tree = gt.tree(sc.fn, { name = sc.name .. "+heap", warmup = 0, warn_shapes = false })
  gt.sync()
  local t0 = clock()
  tree(sc.args(1))
  local us = (clock() - t0) * 1e6
  gt.sync()
  local nd = tree:stats().node[0] or {}
  heap = nil
  collectgarbage()
  return { heap_mb = live_mb, call_us = us, kernels = nd.kernels, record_us = nd.record_us,
           instantiate_us = nd.instantiate_us }
end

local function stats_summary(s)
  return { calls = s.calls, nodes = s.nodes, recorded = s.recorded, warmups = s.warmups, replays = s.replays,
           eager = s.eager, updates = s.updates, skipped = s.skipped, pool_reserved = s.pool.reserved,
           pool_high_water = s.pool.high_water }
end

-- Sibling paths share the pool (anchors: "pool high-water = largest path,
-- not the sum"): each variant's path alone in a tree of its own (warmed up,
-- recorded, replayed), its pool's high-water; the largest of them.
function M.siblings(sc, opts)
  local each = {}
  for v = 1, sc.variants do
    local t = gt.tree(sc.fn, opts)
    for _ = 1, 3 do t(sc.args(v)) end
    gt.sync()
    each[v] = t:stats().pool.high_water
  end
  collectgarbage()
  return { each = M.array(each), largest = max(unpack(each)) }
end

-- One scenario in all three modes, filled into r as it goes (a failure
-- keeps what was measured before it).
function M.run_scenario(cfg, sc, r)
  if sc.setup then sc.setup() end
  local reps = reps_for(cfg.reps, cfg.min_reps, sc.kernels)
  local pipe = reps_for(cfg.pipe, cfg.min_pipe, sc.kernels)
  local warm = max(cfg.warm, 2 * sc.variants)
  local fn, args = sc.fn, sc.args
  r = r or {}
  r.name, r.label, r.kernels, r.grow, r.reps, r.pipe_reps = sc.name, sc.label, sc.kernels, sc.grow, reps, pipe
  r.batch = sc.batch
  r.modes = {}
  local opts = { name = sc.name, warn_shapes = false }
  for k, v in pairs(sc.opts or {}) do opts[k] = v end
  local tree = gt.tree(fn, opts)
  r.records = M.startup(tree, args, max(warm, 3 * sc.variants))
  r.record = main_record(r.records)
  local kt, kargs
  if sc.keyed then   -- the same step as a keyed tree: known paths replay without running the body
    local ko = { name = sc.name .. "+keyed", warn_shapes = false, key = sc.keyed.key, patch = sc.keyed.patch,
                 buckets = sc.opts and sc.opts.buckets }
    kt, kargs = gt.tree(fn, ko), sc.keyed.args or args
    M.startup(kt, kargs, max(warm, 4 * sc.variants))
  end
  -- tree, keyed and floor in turn
  local steps, order = { tree = function(i) return tree(args(i)) end }, { "tree" }
  if kt then steps.keyed, order[2] = function(i) return kt(kargs(i)) end, "keyed" end
  local calls = M.floor_calls(sc)
  local m = M.in_turn(steps, order, function(n, sync) return tree:floor(n, sync, sc.floor_patch, calls) end,
    warm, reps, pipe, cfg.rounds or 6)
  r.modes.tree, r.modes.floor, r.modes.keyed = m.tree, m.floor, m.keyed
  if kt then
    local k = kt:stats().keyed
    r.keyed = { hits = k.hits, misses = k.misses, refused = k.refused }
  end
  r.modes.tree.gc_share, r.modes.tree.lua_bytes = M.gc_share(steps.tree, reps)
  r.stats = stats_summary(tree:stats())
  if sc.siblings then r.siblings = M.siblings(sc, opts) end
  r.agree = M.agree(tree, sc)
  if sc.grow and sc.grow == cfg.heap_grow then r.record_heap = M.record_with_heap(sc, cfg.heap_mb) end
  -- eager last: the model function's loops compile for the mode measured
  -- first, and a mode measured after another runs them as side traces (the
  -- tree's replays 8% slower per op on the cpu backend at grow-512)
  r.modes.eager = M.measure(function(i) return fn(args(i)) end, warm, reps, pipe)
  return r, tree
end

-- -- Output --------------------------------------------------------------------------

-- JSON through gt.json (dkjson): M.array(t) marks an array (an empty one is []);
-- M.encode(v) -> indented text, objects' keys sorted.
local json = require "gt.json"
M.array = json.array
function M.encode(v) return json.encode(v) end

local function fmt(x) return x and format("%10.1f", x) or format("%10s", "-") end

local function ratio(a, b) return a and b and b > 0 and a / b or 0 / 0 end

--- table_text(results) -> the readable table
function M.table_text(res)
  local out = { format("gtlua %s on %s (%s)%s", res.version, res.device.name, res.backend, res.quick and ", quick" or ""),
                format("%-16s %7s %-6s %10s %10s %10s", "scenario", "kernels", "mode", "cpu_us", "step_us", "pipe_us") }
  for _, r in ipairs(res.scenarios) do
    for j, mode in ipairs { "eager", "tree", "keyed", "floor" } do
      local m = r.modes[mode] or {}
      out[#out + 1] = format("%-16s %7s %-6s %s %s %s", j == 1 and r.name or "", j == 1 and r.kernels or "", mode,
        fmt(m.cpu_us), fmt(m.step_us), fmt(m.pipe_us))
    end
  end
  out[#out + 1] = ""
  out[#out + 1] = format("%-16s %7s %12s %12s %12s %10s %10s", "new path", "kernels", "call_us", "record_us",
                         "inst_us", "tree/floor", "eager~tree")
  for _, r in ipairs(res.scenarios) do
    local e, t, f = r.record or {}, r.modes.tree or {}, r.modes.floor or {}
    out[#out + 1] = format("%-16s %7s %12.1f %12.1f %12.1f %9.2fx %10.2g", r.name, e.kernels or "-", e.call_us or 0,
      e.record_us or 0, e.instantiate_us or 0, ratio(t.cpu_us, f.cpu_us), r.agree and r.agree.max_abs_diff or 0 / 0)
  end
  local head = false
  for _, r in ipairs(res.scenarios) do
    if r.batch then
      if not head then
        head = true
        out[#out + 1] = ""
        out[#out + 1] = format("%-16s %5s %12s %12s %12s %14s %14s", "decode", "batch", "eager tok/s", "tree tok/s",
                               "floor tok/s", "eager host/tok", "tree host/tok")
      end
      local e, t, f = r.modes.eager or {}, r.modes.tree or {}, r.modes.floor or {}
      local function rate(m) return m.pipe_us and r.batch * 1e6 / m.pipe_us or 0 / 0 end
      out[#out + 1] = format("%-16s %5d %12.1f %12.1f %12.1f %14.2f %14.2f", r.name, r.batch, rate(e), rate(t), rate(f),
        (e.cpu_us or 0 / 0) / r.batch, (t.cpu_us or 0 / 0) / r.batch)
    end
  end
  for _, r in ipairs(res.scenarios) do
    local h = r.record_heap
    if h then
      out[#out + 1] = format("%-16s %7s %12.1f %12.1f %12.1f   (with %.0f MB of live Lua heap)", r.name .. "+heap",
        h.kernels or "-", h.call_us, h.record_us or 0, h.instantiate_us or 0, h.heap_mb)
    end
  end
  for _, r in ipairs(res.scenarios) do
    if r.error then out[#out + 1] = format("FAILED %s: %s", r.name, r.error) end
  end
  return concat(out, "\n")
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- -- Running -------------------------------------------------------------------------

-- only: names separated by commas; "grow" selects grow-8 ... and "shapes"
-- shapes+buckets too; "=shapes" that one alone.
local function selected(only, name)
  if not only then return true end
  for w in only:gmatch("[^,]+") do
    if w:sub(1, 1) == "=" then
      if name == w:sub(2) then return true end
    elseif name == w or name:sub(1, #w + 1) == w .. "-" or name:sub(1, #w + 1) == w .. "+" then return true end
  end
  return false
end

-- Seconds of replays of a 32-kernel chain tree, unmeasured (see cfg.prime);
-- its own loop, so that the scenarios' model function forms its traces as
-- it would without it.
function M.prime(cfg, m, seconds)
  local x = gt.randn({ cfg.batch, cfg.hidden }, { seed = 7 })
  local linear = gt.ops.linear
  local t = gt.tree(function(v)
    for i = 1, 32 do v = linear(v, m.W[(i - 1) % cfg.layers + 1], m.B[(i - 1) % cfg.layers + 1], "relu") end
    return v
  end, { name = "prime", warn_shapes = false })
  local t0 = clock()
  repeat
    for _ = 1, 20 do t(x) end
    gt.sync()
    for _ = 1, 20 do t(x); gt.sync() end   -- also as the modes are measured: a step, a sync
  until clock() - t0 >= seconds
end

-- The names of the selected scenarios (--each runs each in a process of its own).
function M.names(cfg, only)
  local out = {}
  for _, sc in ipairs(M.scenarios(cfg, M.model(cfg))) do
    if selected(only, sc.name) then out[#out + 1] = sc.name end
  end
  return out
end

-- The calling thread onto cpu BENCH_MAIN_CPU alone (run.sh sets it: the
-- quickest core of those the process is pinned to), where Linux has
-- sched_setaffinity; the cpu, or nil when nothing was pinned.  Threads
-- started before (the driver's) keep the process's cores.
local ffi = require "ffi"
function M.pin_main(cpu)
  cpu = tonumber(cpu or os.getenv("BENCH_MAIN_CPU"))
  if not cpu or cpu < 0 or cpu >= 1024 or ffi.os ~= "Linux" then return nil end
  if not pcall(function() return ffi.C.sched_setaffinity end) and
     not pcall(ffi.cdef, "int sched_setaffinity(int pid, size_t cpusetsize, const void *mask);") then return nil end
  local mask = ffi.new("uint64_t[16]")
  mask[floor(cpu / 64)] = bit.lshift(1ULL, cpu % 64)
  local ok, r = pcall(ffi.C.sched_setaffinity, 0, ffi.sizeof(mask), mask)
  return ok and r == 0 and cpu or nil
end

--- run(cfg [, only [, log]]) -> results: every selected scenario, with device info
function M.run(cfg, only, log)
  local main_cpu = M.pin_main()
  local m = M.model(cfg)
  local res = { tool = "gtlua", version = gt.version, backend = gt.backend(), device = gt.device(),
                date = os.date("!%Y-%m-%dT%H:%M:%SZ"), luajit = jit and jit.version, quick = cfg.quick or false,
                config = { hidden = cfg.hidden, batch = cfg.batch, layers = cfg.layers, prefix = cfg.prefix,
                           suffix = cfg.suffix, batches = cfg.batches, grow = cfg.grow, warm = cfg.warm,
                           decode = cfg.decode,
                           reps = cfg.reps, pipe = cfg.pipe },
                main_cpu = main_cpu,
                scenarios = M.array {} }
  if cfg.prime then M.prime(cfg, m, cfg.prime) end
  for _, sc in ipairs(M.scenarios(cfg, m)) do
    if selected(only, sc.name) then
      local t0, r = clock(), {}
      res.scenarios[#res.scenarios + 1] = r
      local ok, err = xpcall(M.run_scenario, debug.traceback, cfg, sc, r)
      if not ok then
        r.error, res.failed = tostring(err), (res.failed or 0) + 1
      end
      if log then log(format("gtlua bench: %s %s in %.1f s", sc.name, ok and "done" or "FAILED", clock() - t0)) end
    end
  end
  return res
end

-- -- Several processes ------------------------------------------------------------

-- --each: every scenario in a process of its own (this program again, with
-- --only =NAME; the children inherit the cores it is pinned to), their
-- results joined into one: each scenario's traces form without the others'
-- (the model function is shared, and LuaJIT keeps a loop or function that
-- aborted often from compiling again for the rest of the process).  For
-- looking at one scenario on the cpu backend; run.sh does not use it (see
-- prime in the configuration).
function M.each(o, log)
  local bin = os.getenv("GTLUA_BIN") or (arg and arg[-1]) or "gtlua"
  local script = (arg and arg[0]) or "scripts/bench/gtlua_bench.lua"
  local cfg = o.quick and M.QUICK or M.FULL
  local res, failed = nil, 0
  for _, name in ipairs(M.names(cfg, o.only)) do
    local out = os.tmpname()
    local cmd = format("%q %q %s--only =%s --json %q", bin, script, o.quick and "--quick " or "", name, out)
    local ok = os.execute(cmd)
    local f = io.open(out, "r")
    local r = f and json.decode(f:read("*a"))
    if f then f:close() end
    os.remove(out)
    if not r or not r.scenarios or not r.scenarios[1] then
      r = { scenarios = M.array { { name = name, error = "its process failed (" .. tostring(ok) .. ")", modes = {} } },
            failed = 1 }
    end
    local list = r.scenarios
    if not res then res = r; res.scenarios = M.array {} end
    for _, sc in ipairs(list) do res.scenarios[#res.scenarios + 1] = sc end
    failed = failed + (r.failed or 0)
    if log then log(format("gtlua bench: %s in its own process: %s", name, r.failed and "FAILED" or "done")) end
  end
  res = res or { scenarios = M.array {} }
  res.failed = failed > 0 and failed or nil
  return res
end

-- LuaJIT's traces form differently from one process to the next, so run.sh
-- runs the scenarios in several processes and merges them: every number of a
-- mode becomes the median over the runs, and mode.spread[field] = {min, max}.
function M.merge(runs)
  local res = runs[1]
  res.runs = #runs
  for si, r in ipairs(res.scenarios) do
    for name, m in pairs(r.modes or {}) do
      m.spread = {}
      for field, v in pairs(m) do
        if type(v) == "number" then
          local vals = {}
          for _, other in ipairs(runs) do
            local o = other.scenarios[si]
            local om = o and o.name == r.name and o.modes and o.modes[name]
            if om and type(om[field]) == "number" then vals[#vals + 1] = om[field] end
          end
          sort(vals)
          m[field] = median(vals)
          m.spread[field] = M.array { vals[1], vals[#vals] }
        end
      end
    end
  end
  return res
end

local USAGE = "usage: gtlua scripts/bench/gtlua_bench.lua [--quick] [--each] [--json FILE] [--only NAME,...]\n" ..
  "       gtlua scripts/bench/gtlua_bench.lua --merge FILE... --json FILE"

function M.parse_args(argv)
  local o, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    if a == "--quick" then o.quick = true
    elseif a == "--each" then o.each = true
    elseif a == "--json" then i = i + 1; o.json = argv[i]
    elseif a == "--only" then i = i + 1; o.only = argv[i]
    elseif a == "--merge" then
      o.merge = {}
      while argv[i + 1] and argv[i + 1]:sub(1, 2) ~= "--" do i = i + 1; o.merge[#o.merge + 1] = argv[i] end
    elseif a == "-h" or a == "--help" then o.help = true
    else error(USAGE .. "\nunknown argument: " .. tostring(a), 0) end
    if (a == "--json" or a == "--only") and not argv[i] then error(USAGE .. "\n" .. a .. " needs a value", 0) end
    i = i + 1
  end
  return o
end

function M.main(argv)
  io.stdout:setvbuf("line")
  local o = M.parse_args(argv)
  if o.help then print(USAGE) return end
  if o.merge then
    local runs = {}
    for _, path in ipairs(o.merge) do
      local f = io.open(path, "r")
      if f then runs[#runs + 1] = json.decode(f:read("*a")); f:close() end
    end
    if #runs == 0 then error("gtlua_bench --merge: none of the files could be read", 0) end
    write_file(assert(o.json, "--merge needs --json OUT"), M.encode(M.merge(runs)) .. "\n")
    print(("merged %d runs into %s"):format(#runs, o.json))
    return
  end
  local log = function(s) io.stderr:write(s, "\n") end
  local res
  if o.each then res = M.each(o, log) else res = M.run(o.quick and M.QUICK or M.FULL, o.only, log) end
  print(M.table_text(res))
  if o.json then
    write_file(o.json, M.encode(res) .. "\n")
    print("wrote " .. o.json)
  end
  if res.failed then os.exit(1) end
end

if arg and arg[0] and arg[0]:match("gtlua_bench%.lua$") then
  M.main({ ... })
end

return M
