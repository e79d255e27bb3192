-- serve.lua: an offline serving simulation on one tree: continuous batching,
-- chunked prefill and a paged KV cache (examples/paged.lua over
-- examples/gpt.lua's model, greedy sampling, an end token).
--
--   gtlua examples/serve.lua [--tiny|--full] [--requests 40] [--rate 20] [--prompt 4:24] [--output 4:40]
--        [--seed 1] [--trace FILE] [--decode 0,1,2,4,8] [--chunk 0,4,8,16] [--budget N] [--block 4]
--        [--blocks 48] [--clock steps|wall] [--dt 0.01] [--mode keyed|tree|eager] [--warm]
--        [--max-recordings N] [--ignore-eot] [--dtype f32|bf16|f16] [--json FILE] [--report FILE]
--        [--check [--corrupt N]]
--
-- The workload is seeded (scripts/bench/serve_twin.py draws the same one):
-- Poisson arrivals at --rate requests/s, prompt and output lengths uniform
-- in the given ranges (or --trace FILE: one request a line, "arrival_s
-- prompt_len output_len"), prompt tokens from the same generator.  The
-- scheduler keeps a running set of at most the largest decode bucket's
-- sequences; each step decodes every running sequence that has its prompt
-- in the cache and feeds at most one chunk of a prompt (up to the largest
-- chunk bucket, within the token budget), admitting a waiting request when
-- its chunk's KV blocks are free; a decode that needs a block when none is
-- free preempts the most recently admitted sequence (its blocks freed, its
-- prompt and tokens so far recomputed later).  One tree serves every step:
-- count buckets over (decodes, chunk tokens), keyed by whether the step has
-- a chunk, so a step of known buckets launches its graph without running
-- the Lua body.  --clock steps (the default with --check) advances a
-- virtual clock --dt a step, so the batches formed do not depend on the
-- machine; --clock wall times the steps themselves.
--
-- --ignore-eot: a request ends at its output length only (the end token is
-- another token), so the schedule depends on the workload alone: the
-- PyTorch twin, with other weights, then runs the same batches.
-- --check then decodes every request alone (no batching, no tree: its
-- prompt a token a step, then its output) and exits non-zero unless every
-- request's tokens are identical.
local gt = require "gt"
local json = require "gt.json"
local here = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$")) or "examples"
local paged = dofile(here .. "/paged.lua")
local gpt = paged.gpt
local fit = gt.buckets.fit

local USAGE = "usage: gtlua examples/serve.lua [--tiny|--full] [--requests N] [--rate R] [--prompt A:B] " ..
  "[--output A:B] [--seed N] [--trace FILE] [--decode S,..] [--chunk S,..] [--budget N] [--block N] [--blocks N] " ..
  "[--clock steps|wall] [--dt S] [--mode keyed|tree|eager] [--warm] [--max-recordings N] [--ignore-eot] [--json FILE] " ..
  "[--dtype f32|bf16|f16] [--report FILE] [--check]"

local VALUED = { corrupt = 1, requests = 1, rate = 1, prompt = 1, output = 1, seed = 1, trace = 1, decode = 1, chunk = 1,
                 budget = 1, block = 1, blocks = 1, clock = 1, dt = 1, mode = 1, ["max-recordings"] = 1, json = 1,
                 report = 1, vocab = 1, ctx = 1, dtype = 1 }

local function parse(argv)
  local o, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    local k = a:match("^%-%-(.+)$")
    if a == "--tiny" or a == "--full" then o.size = k
    elseif a == "--check" or a == "--warm" or a == "--ignore-eot" then o[k:gsub("%-", "_")] = true
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    elseif k and VALUED[k] then
      if argv[i + 1] == nil then error(USAGE .. "\n" .. a .. " needs a value", 0) end
      o[k:gsub("%-", "_")] = argv[i + 1]
      i = i + 1
    else error(USAGE .. "\nunknown argument: " .. tostring(a), 0) end
    i = i + 1
  end
  return o
end

local function list(s)
  local r = {}
  for v in s:gmatch("[^,]+") do r[#r + 1] = assert(tonumber(v), "a list of numbers: " .. s) end
  return r
end
local function range(s)
  local a, b = s:match("^(%d+):(%d+)$")
  assert(a, "a range A:B, got " .. s)
  return tonumber(a), tonumber(b)
end

-- -- The workload (scripts/bench/serve_twin.py's workload() draws the same) ---------

-- MINSTD: exact in doubles (x * 48271 < 2^47), so Lua and Python agree.
local function rng(seed)
  local x = seed % 2147483646 + 1
  return function()
    x = (x * 48271) % 2147483647
    return x / 2147483647
  end
end

-- The requests: { id, arrival (s), prompt (token ids), max_out }, by arrival.
local function workload(o, cfg)
  local u = rng(tonumber(o.seed) or 1)
  local pmin, pmax = range(o.prompt)
  local omin, omax = range(o.output)
  local rate, reqs = tonumber(o.rate), {}
  local function tokens(n)
    local p = {}
    for j = 1, n do
      local id = math.floor(u() * (cfg.vocab - 1))
      p[j] = id == cfg.eot and 0 or id
    end
    return p
  end
  local function add(t, P, O)
    P = math.max(1, math.min(P, cfg.ctx - 1))
    O = math.max(1, math.min(O, cfg.ctx - P))
    reqs[#reqs + 1] = { id = #reqs + 1, arrival = t, prompt = tokens(P), max_out = O }
  end
  if o.trace then
    for line in io.lines(o.trace) do
      local t, P, O = line:match("^%s*([%d.eE+-]+)%s+(%d+)%s+(%d+)")
      if t then add(tonumber(t), tonumber(P), tonumber(O)) end
    end
    return reqs
  end
  local t = 0
  for _ = 1, tonumber(o.requests) do
    t = t - math.log(1 - u()) / rate
    local P = pmin + math.floor(u() * (pmax - pmin + 1))
    local O = omin + math.floor(u() * (omax - omin + 1))
    add(t, P, O)
  end
  return reqs
end

-- -- The KV blocks ---------------------------------------------------------------

local function new_cache(m)
  local c = { m = m, free = {}, rows = {}, bs = m.block }
  for b = m.blocks - 1, 0, -1 do c.free[#c.free + 1] = b end
  for s = m.seqs - 1, 0, -1 do c.rows[#c.rows + 1] = s end
  return c
end

-- Blocks r needs to hold positions [0, upto).
local function need(c, r, upto) return math.ceil(upto / c.bs) - #r.blocks end

local function grow(c, r, upto)
  for _ = 1, need(c, r, upto) do
    local b = table.remove(c.free)
    r.blocks[#r.blocks + 1] = b
    c.m.h.btab[r.row * c.m.nbt + #r.blocks - 1] = b
  end
  c.m.btab_dirty = true
end

local function release(c, r)
  for i = #r.blocks, 1, -1 do c.free[#c.free + 1] = r.blocks[i]; r.blocks[i] = nil end
  if r.row then c.rows[#c.rows + 1] = r.row; r.row = nil end
end

local function slot_of(c, r, p) return r.blocks[math.floor(p / c.bs) + 1] * c.bs + p % c.bs end

-- -- The scheduler -------------------------------------------------------------------

local function remove(t, x) for i = 1, #t do if t[i] == x then table.remove(t, i) return end end end

-- Preempts the most recently admitted running request: blocks freed, to the front of the queue.
local function preempt(S)
  local v = S.running[#S.running]
  table.remove(S.running)
  release(S.cache, v)
  v.computed, v.preempted = 0, v.preempted + 1
  table.insert(S.waiting, 1, v)
  S.preemptions = S.preemptions + 1
  return v
end

-- The step's decode rows: every running request with its tokens but the
-- last in the cache, each given a block for its next position (preempting when none is free).
local function pick_decodes(S)
  local dec, c = {}, S.cache
  local i = 1
  while i <= #S.running do
    local r = S.running[i]
    if r.computed == #r.tokens - 1 then
      while need(c, r, r.computed + 1) > #c.free do
        if preempt(S) == r then r = nil break end
      end
      if r then grow(c, r, r.computed + 1); dec[#dec + 1] = r end
    end
    if r and S.running[i] == r then i = i + 1 end
  end
  return dec
end

-- The step's chunk: the running request still prefilling, else the first
-- waiting one that has arrived when a row and its chunk's blocks are free.
local function pick_chunk(S, nd, now)
  local c, pre = S.cache, nil
  for _, r in ipairs(S.running) do if r.computed < #r.tokens - 1 then pre = r break end end
  local fresh = false
  if not pre then
    local w = S.waiting[1]
    if not (w and w.arrival <= now and #S.running < S.max_running and #c.rows > 0) then return nil, 0 end
    pre, fresh = w, true
  end
  local n = math.min(S.cmax, #pre.tokens - pre.computed, S.budget - nd)
  if n <= 0 then return nil, 0 end
  local blocks = math.ceil((pre.computed + n) / c.bs) - #pre.blocks
  if blocks > #c.free then return nil, 0 end         -- (admission when the blocks are free)
  if fresh then
    table.remove(S.waiting, 1)
    pre.row = table.remove(c.rows)
    S.running[#S.running + 1] = pre
    pre.admitted = S.steps
  end
  grow(c, pre, pre.computed + n)
  return pre, n
end

-- The host's arrays of one row.
local function put_row(m, i, tok, pos, slot, seq)
  local h = m.h
  h.tok[i], h.pos[i], h.slot[i], h.seq[i] = tok, pos, slot, seq
end

-- Fills the step's rows (decodes at [0, Bp), the chunk at [Bp, Bp + Cp), pads between).
local function fill_rows(S, dec, pre, nc, Bp, Cp)
  local m, c = S.m, S.cache
  for i = 0, Bp + Cp - 1 do put_row(m, i, 0, 0, -1, 0) end
  for i, r in ipairs(dec) do put_row(m, i - 1, r.tokens[r.computed + 1], r.computed, slot_of(c, r, r.computed), r.row) end
  for j = 0, nc - 1 do
    local p = pre.computed + j
    put_row(m, Bp + j, pre.tokens[p + 1], p, slot_of(c, pre, p), pre.row)
  end
  m.upload(Bp + Cp)
end

local function finish(S, r, now)
  r.finish_t = now
  remove(S.running, r)
  release(S.cache, r)
  S.done = S.done + 1
end

local function append(S, r, t, now)
  r.tokens[#r.tokens + 1] = t
  r.out[#r.out + 1] = t
  if #r.out == 1 then r.first_t = now end
  if t == S.eot or #r.out >= r.max_out then finish(S, r, now) end
end

-- -- The loop ------------------------------------------------------------------------

-- The tree's recordings and warmups so far: a step that changed either met a new path.
local function tree_counts(tree)
  if not tree then return 0, 0 end
  local _, recorded, warmups = tree:counts()
  return recorded, warmups
end

-- One step: the rows picked, written, run; the tokens read (a sync) and appended.
local function one_step(S, now)
  local dec = pick_decodes(S)
  local pre, nc = pick_chunk(S, #dec, now)
  local nd = #dec
  if nd + nc == 0 then return false end
  local Bp, Cp = fit(S.dsizes, nd) or nd, fit(S.csizes, nc) or nc
  local rec0, warm0 = tree_counts(S.tree)
  local t0 = gt.clock()
  fill_rows(S, dec, pre, nc, Bp, Cp)
  local ids = S.run(nd, nc):tolist()
  local dt = gt.clock() - t0
  local rec1, warm1 = tree_counts(S.tree)
  S.steps = S.steps + 1
  S.lat[#S.lat + 1] = dt
  S.run_n[#S.run_n + 1] = #S.running
  if rec1 ~= rec0 or warm1 ~= warm0 then S.new_path[#S.new_path + 1] = dt end
  S.shapes[Bp .. "x" .. Cp] = (S.shapes[Bp .. "x" .. Cp] or 0) + 1
  local t = S.now(dt)
  for i, r in ipairs(dec) do
    r.computed = r.computed + 1
    append(S, r, ids[i], t)
  end
  if pre then
    pre.computed = pre.computed + nc
    if pre.computed == #pre.tokens then append(S, pre, ids[Bp + 1], t) end
  end
  return true
end

-- Serves every request; returns the run's state (requests, latencies, counts).
local function serve(m, reqs, run, tree, o)
  local S = { m = m, cache = new_cache(m), running = {}, waiting = {}, run = run, tree = tree,
              eot = not o.ignore_eot and m.cfg.eot or nil,
              dsizes = o.dsizes, csizes = o.csizes, cmax = o.csizes[#o.csizes], budget = o.budget,
              max_running = math.min(o.dsizes[#o.dsizes], m.seqs), steps = 0, preemptions = 0, done = 0,
              lat = {}, new_path = {}, shapes = {}, run_n = {} }
  for _, r in ipairs(reqs) do
    r.tokens, r.out, r.blocks, r.computed, r.preempted = {}, {}, {}, 0, 0
    for j, t in ipairs(r.prompt) do r.tokens[j] = t end
    S.waiting[#S.waiting + 1] = r
  end
  local vt, skipped, wall0 = 0, 0, gt.clock()
  if o.clock == "wall" then
    S.now = function() return gt.clock() - wall0 + skipped end
  else
    S.now = function() vt = vt + o.dt; return vt end
  end
  local function now() if o.clock == "wall" then return gt.clock() - wall0 + skipped end return vt end
  while S.done < #reqs do
    if not one_step(S, now()) then                 -- idle: on to the next arrival
      local w = S.waiting[1]
      assert(w and w.arrival > now(), "serve: nothing to run and nothing to wait for")
      if o.clock == "wall" then skipped = skipped + (w.arrival - now()) else vt = w.arrival end
    end
  end
  S.wall = gt.clock() - wall0
  S.span = now() - reqs[1].arrival
  return S
end

-- -- Metrics ------------------------------------------------------------------------

local function pct(t, p)
  if #t == 0 then return nil end
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  return s[math.max(1, math.ceil(p / 100 * #s))]
end

local function mean(t)
  local sum = 0
  for _, v in ipairs(t) do sum = sum + v end
  return #t > 0 and sum / #t or nil
end

local function metrics(S, reqs, tree, o)
  local ttft, tpot, ntok = {}, {}, 0
  for _, r in ipairs(reqs) do
    ntok = ntok + #r.out
    ttft[#ttft + 1] = r.first_t - r.arrival
    if #r.out > 1 then tpot[#tpot + 1] = (r.finish_t - r.first_t) / (#r.out - 1) end
  end
  local shapes = 0
  for _ in pairs(S.shapes) do shapes = shapes + 1 end
  local span = o.clock == "wall" and S.span or S.wall
  local r = {
    backend = gt.backend(), mode = o.mode, clock = o.clock, dtype = S.m.cfg.dtype, requests = #reqs, output_tokens = ntok, steps = S.steps,
    preemptions = S.preemptions, shapes = shapes, seconds = span, wall_seconds = S.wall,
    output_tokens_per_s = ntok / span, requests_per_s = #reqs / span,
    ttft_s = { p50 = pct(ttft, 50), p90 = pct(ttft, 90), p99 = pct(ttft, 99) },
    tpot_s = { p50 = pct(tpot, 50), p90 = pct(tpot, 90), p99 = pct(tpot, 99) },
    step_s = { p50 = pct(S.lat, 50), p99 = pct(S.lat, 99), max = pct(S.lat, 100) },
    new_path_steps = { count = #S.new_path, p50_s = pct(S.new_path, 50), max_s = pct(S.new_path, 100) },
    steps_by_shape = S.shapes,
    running = { mean = mean(S.run_n), p50 = pct(S.run_n, 50), max = pct(S.run_n, 100) },
  }
  if tree then
    local s = tree:stats()
    local kern = 0
    for _, n in pairs(s.node) do if n.recorded then kern = kern + n.kernels end end
    r.tree = { nodes = s.nodes, recorded = s.recorded, replays = s.replays, warmups = s.warmups, eager = s.eager,
               keyed_hits = s.keyed and s.keyed.hits or 0, keyed_misses = s.keyed and s.keyed.misses or 0,
               pool_reserved = s.pool.reserved, pool_high_water = s.pool.high_water,
               graph_kernel_nodes = kern, graph_bytes_est = kern * 3072, evictions = s.evictions or 0 }
  end
  r.device_bytes = gt.memory()
  return r
end

local function ms(v) return v and ("%.3f ms"):format(v * 1e3) or "-" end

local function show(r)
  print(("serve: %d requests, %d output tokens in %d steps (%d shapes), %d preemptions; %s clock, %.3f s")
    :format(r.requests, r.output_tokens, r.steps, r.shapes, r.preemptions, r.clock, r.seconds))
  print(("  %.1f output tokens/s, %.2f requests/s; wall %.3f s; running sequences mean %.1f, max %d")
    :format(r.output_tokens_per_s, r.requests_per_s, r.wall_seconds, r.running.mean or 0, r.running.max or 0))
  print(("  TTFT p50 %s p90 %s p99 %s; TPOT p50 %s p90 %s p99 %s"):format(ms(r.ttft_s.p50), ms(r.ttft_s.p90),
    ms(r.ttft_s.p99), ms(r.tpot_s.p50), ms(r.tpot_s.p90), ms(r.tpot_s.p99)))
  print(("  step p50 %s p99 %s max %s; %d steps visited a new path (p50 %s, max %s)"):format(ms(r.step_s.p50),
    ms(r.step_s.p99), ms(r.step_s.max), r.new_path_steps.count, ms(r.new_path_steps.p50_s),
    ms(r.new_path_steps.max_s)))
  local by = {}
  for k, n in pairs(r.steps_by_shape) do by[#by + 1] = { k, n } end
  table.sort(by, function(a, b) if a[2] ~= b[2] then return a[2] > b[2] end return a[1] < b[1] end)
  for i, e in ipairs(by) do by[i] = e[1] .. " " .. e[2] end
  print("  steps by (decode x chunk) bucket: " .. table.concat(by, ", "))
  local t = r.tree
  if t then
    local graphs = t.graph_bytes and ("%.1f MiB (the device's free bytes before and after, less the pool)")
      :format(t.graph_bytes / 2 ^ 20) or ("~%.1f MiB (%d kernel nodes x 3 KiB: no device count on this backend)")
      :format(t.graph_bytes_est / 2 ^ 20, t.graph_kernel_nodes)
    print(("  tree: %d nodes, %d recorded, %d replays, %d keyed hits; pool %.1f MiB reserved, %.1f MiB high water; " ..
      "graphs %s"):format(t.nodes, t.recorded, t.replays, t.keyed_hits, t.pool_reserved / 2 ^ 20,
      t.pool_high_water / 2 ^ 20, graphs))
  end
end

-- -- The check: every request alone ----------------------------------------------------

-- Request r decoded alone, eagerly: its prompt a token a step, then its
-- output, in a cache of its own rows (block table row 0).
local function alone(m, r, eot)
  local c = new_cache(m)
  local q = { tokens = {}, blocks = {}, row = table.remove(c.rows) }
  for j, t in ipairs(r.prompt) do q.tokens[j] = t end
  local out = {}
  for p = 0, #r.prompt + r.max_out - 2 do
    grow(c, q, p + 1)
    m.h.tok[0], m.h.pos[0], m.h.slot[0], m.h.seq[0] = q.tokens[p + 1], p, slot_of(c, q, p), q.row
    m.upload(1)
    local t = m.step(1, 0):tolist()[1]
    if p >= #r.prompt - 1 then
      out[#out + 1] = t
      q.tokens[#q.tokens + 1] = t
      if t == eot then break end
    end
  end
  return out
end

local function check(m, reqs, eot)
  local ntok, bad = 0, nil
  for _, r in ipairs(reqs) do
    local want = alone(m, r, eot)
    local same = #want == #r.out
    for i = 1, #want do same = same and want[i] == r.out[i] end
    ntok = ntok + #want
    if not same and not bad then
      bad = ("request %d (prompt %d, preempted %d times): alone %s, served %s"):format(r.id, #r.prompt, r.preempted,
        table.concat(want, " "), table.concat(r.out, " "))
    end
  end
  return ntok, bad
end

-- -- Main -------------------------------------------------------------------------------

local function options(argv)
  local o = parse(argv)
  local tiny = (o.size or (gt.backend() == "cpu" and "tiny" or "full")) == "tiny"
  o.size = tiny and "tiny" or "full"
  o.requests = o.requests or (tiny and "40" or "256")
  o.rate = o.rate or (tiny and "20" or "40")
  o.prompt = o.prompt or (tiny and "4:24" or "32:256")
  o.output = o.output or (tiny and "4:36" or "32:256")
  o.dsizes = list(o.decode or (tiny and "0,1,2,4,8" or "0,1,2,4,8,16,24,32"))
  o.csizes = list(o.chunk or (tiny and "0,4,8,16" or "0,16,32,64"))
  o.budget = tonumber(o.budget) or (o.dsizes[#o.dsizes] + o.csizes[#o.csizes])
  o.block = tonumber(o.block) or (tiny and 4 or 16)
  o.blocks = tonumber(o.blocks) or (tiny and 32 or 2048)
  o.clock = o.clock or ((o.check or tiny) and "steps" or "wall")
  o.dt = tonumber(o.dt) or 0.01
  o.mode = o.mode or "keyed"
  assert(o.clock == "steps" or o.clock == "wall", "--clock steps|wall")
  assert(o.mode == "keyed" or o.mode == "tree" or o.mode == "eager", "--mode keyed|tree|eager")
  assert(o.dsizes[1] == 0 and o.csizes[1] == 0, "--decode and --chunk start at 0 (a step with none of them)")
  return o
end

-- The one tree of every step: count buckets over (decodes, chunk tokens), keyed by whether there is a chunk.
local function make_tree(m, o)
  if o.mode == "eager" then return nil, m.step end
  local opts = { name = "serve", warn_shapes = false,
                 buckets = { { count = 1, sizes = o.dsizes, name = "decode" }, { count = 2, sizes = o.csizes, name = "chunk" } },
                 max_recordings = tonumber(o.max_recordings), on_limit = o.max_recordings and "evict" or nil }
  if o.mode == "keyed" then opts.key = function(_, nc) return nc > 0 end end
  local tree = gt.tree(m.step, opts)
  return tree, tree
end

local function warm(tree, o)
  local calls = {}
  for _, d in ipairs(o.dsizes) do for _, c in ipairs(o.csizes) do
    if d + c > 0 then calls[#calls + 1] = { d, c } end
  end end
  local w = tree:warm(calls)
  print(("serve: warmed %d paths (%d settled) in %d calls, %.3f s, largest first"):format(w.paths, w.settled, w.calls,
    w.seconds))
end

local function main(argv)
  io.stdout:setvbuf("line")
  local o = options(argv)
  local cfg = gpt.config(o.size == "tiny" and gpt.TINY or gpt.FULL, { vocab = tonumber(o.vocab), ctx = tonumber(o.ctx),
                                                                    dtype = o.dtype })
  local m = paged.new(cfg, { blocks = o.blocks, block = o.block, seqs = o.dsizes[#o.dsizes] + 1,
                             rows = o.dsizes[#o.dsizes] + o.csizes[#o.csizes] })
  local reqs = workload(o, cfg)
  print(("serve: backend %s, %s %s model (%d layers, hidden %d, vocab %d, context %d), %d kernels a step; %d requests, " ..
    "%s; KV %d blocks of %d; decode buckets %s, chunk buckets %s, budget %d; %s")
    :format(gt.backend(), o.size, cfg.dtype, cfg.layers, cfg.hidden, cfg.vocab, cfg.ctx, paged.kernels_per_step(cfg), #reqs,
      o.trace and ("trace " .. o.trace) or ("rate " .. o.rate .. "/s, prompt " .. o.prompt .. ", output " .. o.output ..
      ", seed " .. (o.seed or 1)), o.blocks, o.block, table.concat(o.dsizes, ","), table.concat(o.csizes, ","),
      o.budget, o.mode))
  gt.sync()
  local free0 = gt.device().free                   -- (cuda: graphs' memory shows only in the device's free bytes)
  local tree, run = make_tree(m, o)
  if o.warm and tree then warm(tree, o) end
  local S = serve(m, reqs, run, tree, o)
  gt.sync()
  local free1 = gt.device().free
  local r = metrics(S, reqs, tree, o)
  if r.tree and free0 > 0 then                     -- what the tree took beyond its pool: its graphs (and the driver's)
    r.tree.device_taken = free0 - free1
    r.tree.graph_bytes = math.max(free0 - free1 - r.tree.pool_reserved, 0)
  end
  show(r)
  if tree then print(tree) end
  if o.report and tree then tree:report(o.report) end
  if o.json then
    local f = assert(io.open(o.json, "w"))
    f:write(json.encode(r), "\n")
    f:close()
  end
  if o.check then
    local bad_req = reqs[tonumber(o.corrupt or 0)]    -- (--corrupt N: a wrong served token, so a spec sees the check fail)
    if bad_req then bad_req.out[1] = (bad_req.out[1] + 1) % cfg.vocab end
    local ntok, bad = check(m, reqs, not o.ignore_eot and cfg.eot or nil)
    if bad then
      print(("serve --check: tokens differ: %s"):format(bad))
      os.exit(1)
    end
    print(("serve --check: %d requests, %d tokens identical (%d shapes, %d preemptions)"):format(#reqs, ntok,
      r.shapes, r.preemptions))
  end
end

main({ ... })
