-- spec_kernels.lua: greedy speculative decoding over examples/gpt.lua's model
-- (loaded with dofile by examples/speculative.lua, spec/speculative_spec.lua
-- and scripts/bench/spec_bench.lua).  The kernels are kernels/speculative.cu's
-- and gpt.cu's matrix products.
--
--   local gpt = dofile("examples/gpt.lua")
--   local spec = dofile("examples/spec_kernels.lua")
--   local m = gpt.new(cfg, w)                          -- the target
--   local d = spec.new(gpt, m, { k = 4, draft_layers = 1, batch = B, tokens = N, prompt = P })
--   local r = d:generate(prompt, "device", gt.tree(spec.body(d, "device")))   -- or "host", "loop"
--   -- r.tokens: batch rows of N ids, the target's greedy tokens; r.rate: the acceptance rate
--
-- The draft is the target's first draft_layers layers with its final
-- layernorm and LM head (the same weights); each has its own KV caches.  A
-- step: the draft proposes k tokens (its first pass feeds the token before
-- the current one and the current one, so its cache catches up with a fully
-- accepted step; k - 1 passes of one token follow); the target runs one
-- forward over the k + 1 positions (the current token and the proposals);
-- the longest prefix of proposals equal to the target's argmax is accepted,
-- plus the target's next token, and the positions advance by that count.
-- Each sequence has its own position on the device (pos[b]), so a batch's
-- sequences accept different counts.
--
-- The target's verify pass reproduces the plain decoder's numbers bit for
-- bit: its matrix products split K as gpt.lua's do for the batch's rows (the
-- same S: gpt.rows_plan) and its attention has the plain decoder's block
-- size, so the emitted tokens are the plain greedy tokens exactly.
--
-- Modes: "host" decides on the host (one tree call a step reads the token
-- table back, the host computes the acceptance and writes the next state:
-- one read and one write a step); "device" runs the acceptance on the device
-- (spec_accept) with the draft loop a gt.loop: one graph launch a step, no
-- host transfer, the host reads the tokens so far and the progress flag
-- every `every` steps; "loop" makes the whole generation a gt.loop until
-- every sequence has its tokens or an eot, `every` steps a tree call (one
-- launch, then the same two reads).
local gt = require "gt"

local M = {}
local ceil, max, min, sqrt = math.ceil, math.max, math.min, math.sqrt

local CPU = gt.backend() == "cpu"

-- A launcher over n elements (1-D grid of 256-thread blocks).
local function flat(f, n) return f:config(max(1, min(ceil(n / 256), 4096)), 256) end

--- new(gpt, m, opts) -> a decoder for model m (gpt.new's) at batch opts.batch:
--- opts = { k (proposals a step), draft_layers, batch, tokens (to generate
--- per sequence), prompt (its length), every (steps between host reads, 8) }
function M.new(gpt, m, o)
  local c, w = m.cfg, m.w
  local k, Ld, B, N, P = o.k, o.draft_layers, o.batch, o.tokens, o.prompt
  local D, H, V, T, L = c.hidden, c.heads, c.vocab, c.ctx, c.layers
  assert(k >= 1 and Ld >= 1 and Ld <= L, "spec: k >= 1 and 1 <= draft_layers <= layers")
  assert(P >= 2 and P + N + k <= T, "spec: a prompt of 2 or more tokens and prompt + tokens + k within the context")
  local Dh, W = D / H, 2 * k + 3
  local KG, KS = gt.load("kernels/gpt.cu"), gt.load("kernels/speculative.cu")
  local sms = gt.device().sms
  local d = { k = k, B = B, N = N, P = P, W = W, m = m, draft_layers = Ld, every = o.every or 8, cfg = c }
  local function z(shape) return gt.zeros(shape, "i32"):static() end
  d.tok, d.pos, d.cnt, d.done = z { B, W }, z { B }, z { B }, z { B }
  d.hist, d.stat, d.go = z { B, T }, z { B, 3 }, z { 1 }
  d.it, d.dgo, d.hstate, d.ones = z { 1 }, z { 1 }, z { B, 3 }, gt.full({ B }, 1, "i32"):static()
  d.kc, d.vc, d.dkc, d.dvc = {}, {}, {}, {}
  for l = 1, L do d.kc[l], d.vc[l] = gt.zeros({ B, T, D }):static(), gt.zeros({ B, T, D }):static() end
  for l = 1, Ld do d.dkc[l], d.dvc[l] = gt.zeros({ B, T, D }):static(), gt.zeros({ B, T, D }):static() end

  -- rows_linear for Mr rows with the plain decoder's split of K at batch B
  local rowsl = {}
  local function rows_launcher(Mr, Nf, Kd)
    local key = Mr .. ":" .. Nf .. ":" .. Kd
    local r = rowsl[key]
    if not r then
      local S = gpt.rows_plan(B, Nf, Kd, sms).S
      local p = gpt.rows_plan(Mr, Nf, Kd, sms, { S = S })
      r = { f = KG["rows_linear_m" .. p.mt .. "_f32"]:config(p.grid, p.block, p.smem), S = p.S, M = Mr, N = Nf, K = Kd,
            shape = gt.shape { Mr, Nf } }
      rowsl[key] = r
    end
    return r
  end
  local function rows(r, mode, x, Wt, bias, res, g, beta)
    local y = gt.tensor(r.shape)
    r.f(y, x, Wt, bias, res, g, beta, r.M, r.N, r.K, r.S, mode)
    return y
  end
  local LN, BIAS, GELU, RES = gpt.LN, gpt.BIAS, gpt.GELU, gpt.RES
  local attn_threads = CPU and 32 or (B * H <= sms and 1024 or 512)   -- gpt.lua's attn_block(B)

  -- The launchers of a forward over R rows a sequence, made once per R.
  local plans = {}
  local function plan(R)
    local Mr = B * R
    local P_ = {
      x = gt.shape { Mr, D },
      qkv = rows_launcher(Mr, 3 * D, D), proj = rows_launcher(Mr, D, D), fc = rows_launcher(Mr, 4 * D, D),
      out = rows_launcher(Mr, D, 4 * D), lm = rows_launcher(Mr, V, D),
      embed = flat(KS.spec_embed_f32, Mr * D), store = flat(KS.spec_kv_store_f32, Mr * D),
      attn = KS.spec_attn_f32:config(min(Mr * H, 65535), attn_threads),
      argmax = KS.spec_argmax_f32:config(min(Mr, 65535), CPU and 32 or 1024),
    }
    plans[R] = P_
    return P_
  end
  local scale = 1 / sqrt(Dh)
  local function block(x, Lw, kc, vc, P_, R, pos, col0, use_it)
    local qkv = rows(P_.qkv, LN + BIAS, x, Lw.wqkv, Lw.bqkv, x, Lw.ln1_g, Lw.ln1_b)
    P_.store(kc, vc, qkv, pos, d.it, B, R, D, T, col0, use_it)
    local a = gt.tensor(P_.x)
    P_.attn(a, kc, vc, qkv, pos, d.it, B, R, H, Dh, T, col0, use_it, scale)
    x = rows(P_.proj, BIAS + RES, a, Lw.wproj, Lw.bproj, x, x, x)
    local h = rows(P_.fc, LN + BIAS + GELU, x, Lw.wfc, Lw.bfc, x, Lw.ln2_g, Lw.ln2_b)
    return rows(P_.out, BIAS + RES, h, Lw.wout, Lw.bout, x, x, x)
  end

  --- d.forward(nl, kcs, vcs, tok, Wt, R, col0, use_it [, pos]) -> P_, logits {B*R, V}: the first nl
  --- layers over R rows a sequence, the tokens of columns col0 (+ it) .. of tok ([B, Wt])
  function d.forward(nl, kcs, vcs, tok, Wt, R, col0, use_it, pos)
    pos = pos or d.pos
    local P_ = plans[R] or plan(R)
    local x = gt.tensor(P_.x)
    P_.embed(x, tok, w.wte, w.wpe, pos, d.it, B, R, D, V, T, Wt, col0, use_it)
    for l = 1, nl do x = gt.scope(block, x, w.layers[l], kcs[l], vcs[l], P_, R, pos, col0, use_it) end
    return P_, rows(P_.lm, LN, x, w.lm, x, x, w.lnf_g, w.lnf_b)
  end
  local forward = d.forward

  -- The draft's proposals into tok columns 2 .. k+1.  device: passes 2 .. k
  -- are a gt.loop counted by it (one recorded pass); else a Lua loop.
  function d.draft(device)
    local P_, logits = forward(Ld, d.dkc, d.dvc, d.tok, W, 2, 0, 0)   -- prev, cur at pos - 1, pos
    P_.argmax(d.tok, logits, d.it, B, 2, V, W, 2, 0, 1)
    if device then
      KS.spec_draft_begin(1, 1, d.it, d.dgo, k)
      gt.loop(d.dgo, function()
        local Q, lg = forward(Ld, d.dkc, d.dvc, d.tok, W, 1, 1, 1)      -- d_it at pos + it
        Q.argmax(d.tok, lg, d.it, B, 1, V, W, 2, 1, 1)                 -- -> d_{it+1}
        KS.spec_draft_tick(1, 1, d.it, d.dgo, k)
      end, { max = k })
    else
      for i = 1, k - 1 do
        local Q, lg = forward(Ld, d.dkc, d.dvc, d.tok, W, 1, 1 + i, 0)
        Q.argmax(d.tok, lg, d.it, B, 1, V, W, 2 + i, 0, 1)
      end
    end
  end

  -- The target over the current token and the k proposals: argmax into columns k+2 .. 2k+2.
  function d.verify()
    local P_, logits = forward(L, d.kc, d.vc, d.tok, W, k + 1, 1, 0)
    P_.argmax(d.tok, logits, d.it, B, k + 1, V, W, k + 2, 0, 0)
    return logits
  end

  function d.accept()
    KS.spec_accept(1, 1, d.tok, d.pos, d.cnt, d.done, d.hist, d.stat, d.go, B, W, k, T, c.eot, N, P - 1)
  end

  -- One step on the device: draft (its loop a gt.loop), verify, accept.
  local function step()
    d.draft(true)
    d.verify()
    d.accept()
  end

  --- d.device_step(): one step decided on the device, nothing once no sequence generates (go = 0):
  --- a tree body of one graph, no host transfer, so the host may call it a few times past the end
  function d.device_step() gt.cond(d.go, step) end

  --- d.loop_steps(): up to d.every steps while some sequence generates (a tree body: one WHILE node)
  function d.loop_steps()
    gt.loop(d.go, step, { max = d.every })
  end

  --- d.host_step(state): the state {pos, prev, cur per sequence} written, one
  --- step's draft and verify, the token table read back (d.last)
  function d.host_step(state)
    d.hstate:copy(state)
    KS.spec_set_state(1, 32, d.tok, d.pos, d.hstate, B, W)
    d.draft(false)
    d.verify()
    d.last = d.tok:tolist()
  end
  return setmetatable(d, { __index = M })
end

-- -- Generation ------------------------------------------------------------------

-- Both models' caches filled with the prompt's first P - 1 tokens (a forward
-- over P - 1 rows a sequence at positions 0 ..), the state set: pos = P - 1,
-- prev and cur the last two prompt tokens; counters and flags cleared.
function M:prefill(prompt)
  local B, P = self.B, self.P
  assert(#prompt == B and #prompt[1] == P, "spec: the prompt must be batch x prompt tokens")
  local ids = gt.from(prompt, "i32")
  local L = self.cfg.layers
  gt.scope(function()
    self.forward(L, self.kc, self.vc, ids, P, P - 1, 0, 0, self.ones)
    self.forward(self.draft_layers, self.dkc, self.dvc, ids, P, P - 1, 0, 0, self.ones)
  end)
  for _, t in ipairs { self.cnt, self.done, self.hist, self.stat, self.tok } do t:fill(0) end
  local st = {}
  for b = 1, B do st[b] = { P - 1, prompt[b][P - 1], prompt[b][P] } end
  self.hstate:copy(st)
  gt.load("kernels/speculative.cu").spec_set_state(1, 32, self.tok, self.pos, self.hstate, B, self.W)
  self.go:fill(1)
  return st
end

-- The host's acceptance for sequence b of the token table row r (host mode):
-- emits into toks[b], updates st[b] and the counts; true while it generates.
local function host_accept(self, r, st, toks, done, acc)
  local k, N, eot = self.k, self.N, self.cfg.eot
  local n = 0
  while n < k and r[3 + n] == r[k + 3 + n] do n = n + 1 end
  for j = 0, n do
    if #toks >= N then break end
    local t = r[k + 3 + j]
    toks[#toks + 1] = t
    if t == eot then
      while #toks < N do toks[#toks + 1] = eot end
      done = true
    end
  end
  st[1], st[2], st[3] = st[1] + n + 1, r[2 + n], r[k + 3 + n]
  acc.accepted, acc.steps, acc.emitted = acc.accepted + n, acc.steps + 1, acc.emitted + n + 1
  st.steps = (st.steps or 0) + 1
  acc.rounds = max(acc.rounds, st.steps)
  return not done and #toks < N
end

-- Host mode: a tree call a step, the acceptance on the host.
local function run_host(self, run, st)
  local toks, live, acc = {}, {}, { accepted = 0, steps = 0, emitted = 0, rounds = 0 }
  for b = 1, self.B do toks[b], live[b] = {}, true end
  local calls, host, clock = 0, 0, gt.clock
  while true do
    local any = false
    for b = 1, self.B do any = any or live[b] end
    if not any then break end
    local c0 = clock()
    run(st)
    calls = calls + 1
    for b = 1, self.B do
      if live[b] then live[b] = host_accept(self, self.last[b], st[b], toks[b], false, acc) end
    end
    host = host + (clock() - c0)
  end
  self.xfer = gt.transfers()
  return toks, calls, host, acc
end

-- Device modes: tree calls; every `every` steps (device) or each call (loop)
-- the host reads the tokens emitted so far (the generated part of hist) and
-- the progress flag: two reads.
local function run_device(self, run, loop)
  local calls, host, clock = 0, 0, gt.clock
  local every = loop and 1 or self.every
  local out = self.hist:narrow(2, self.P, self.N)
  local toks
  repeat
    local c0 = clock()
    for _ = 1, every do run() end
    calls = calls + every
    toks = out:tolist()
    host = host + (clock() - c0)
  until self.go:item() == 0
  self.xfer = gt.transfers()
  local stat = self.stat:tolist()
  local acc = { accepted = 0, steps = 0, emitted = 0, rounds = 0 }
  for b = 1, self.B do
    acc.accepted, acc.steps, acc.emitted = acc.accepted + stat[b][1], acc.steps + stat[b][2], acc.emitted + stat[b][3]
    acc.rounds = max(acc.rounds, stat[b][2])
  end
  return toks, calls, host, acc
end

--- d:generate(prompt, mode, run) -> { tokens (B rows of N ids), seconds, calls, host_us (per
--- call), accepted (draft tokens), steps (a sequence's steps, summed), emitted, rounds (the
--- steps of the longest sequence), rate (accepted / (steps k)), reads, writes, syncs (the host's
--- transfers while it stepped: gt.transfers) }
--- run: a tree (or the plain function) of d.host_step, d.device_step or d.loop_steps for the mode.
function M:generate(prompt, mode, run)
  local st = self:prefill(prompt)
  gt.sync()
  local t0, x0 = gt.clock(), gt.transfers()
  local toks, calls, host, acc
  if mode == "host" then toks, calls, host, acc = run_host(self, run, st)
  else toks, calls, host, acc = run_device(self, run, mode == "loop") end
  gt.sync()
  local secs = gt.clock() - t0
  return { tokens = toks, seconds = secs, calls = calls, host_us = host * 1e6 / max(calls, 1),
           accepted = acc.accepted, steps = acc.steps, emitted = acc.emitted, rounds = acc.rounds,
           rate = acc.accepted / max(1, acc.steps * self.k),
           reads = self.xfer.reads - x0.reads, writes = self.xfer.writes - x0.writes, syncs = self.xfer.syncs - x0.syncs }
end

--- body(d, mode) -> the step function a tree of this mode wraps
function M.body(d, mode)
  return mode == "host" and d.host_step or mode == "loop" and d.loop_steps or d.device_step
end

--- scale_upper(m, from, a): layers from .. of m's weights get their
--- output projections (attention and MLP) scaled by a, so that a draft of the
--- first from - 1 layers agrees with the target most of the time.
function M.scale_upper(m, from, a)
  local f = gt.load("kernels/speculative.cu").spec_scale_f32
  for l = from, m.cfg.layers do
    local Lw = m.w.layers[l]
    for _, t in ipairs { Lw.wproj, Lw.bproj, Lw.wout, Lw.bout } do flat(f, t.numel)(t, t.numel, a) end
  end
end

return M
