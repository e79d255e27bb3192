-- gpt.lua: a GPT-2-shaped decoder with a KV cache, one decode step per call
-- (loaded with dofile by examples/decode.lua, scripts/bench/gtlua_bench.lua
-- and spec/decode_spec.lua).
--
--   local gpt = dofile("examples/gpt.lua")
--   local m = gpt.new(gpt.TINY)                 -- random weights (or gpt.load(path))
--   local step = gt.tree(m.step, { buckets = { dim = 1, sizes = m.cfg.buckets } })
--   local tok, logits = step(ids, pos, live)    -- ids i32 {B}; pos 0-based; live 0|1
--
-- A step embeds one token per sequence at position pos, runs the layers
-- (pre-layernorm, fused QKV, attention of the one query over the KV cache,
-- MLP with gelu), the final layernorm and the tied LM head, and picks the
-- next token greedily.  The KV caches ([Bmax, T, D] per layer, K and V), the
-- per-sequence end flags and the token history are ordinary tensors made
-- here, outside any tree; kernels inside the step write them at pos, which
-- is a scalar argument: a recorded step replays at every position (one node
-- per batch bucket).  Batches up to the last bucket use the caches' first rows.
local gt = require "gt"
local ffi = require "ffi"
local ops = gt.ops
local scope = gt.scope

local M = {}
local ceil, max, min, sqrt = math.ceil, math.max, math.min, math.sqrt

-- GPT-2 small; TINY is the cpu backend's CI size.  eot: the end token.
M.FULL = { layers = 12, hidden = 768, heads = 12, vocab = 50257, ctx = 1024, eot = 50256,
           buckets = { 1, 2, 4, 8, 16 } }
M.TINY = { layers = 2, hidden = 32, heads = 4, vocab = 97, ctx = 64, eot = 96,
           buckets = { 1, 2, 4, 8, 16 } }
M.MAX_CTX = 1024                  -- kernels/gpt.cu's GPT_MAX_T

-- A copy of cfg with the fields of over (if any) replacing its own.
function M.config(cfg, over)
  local c = {}
  for k, v in pairs(cfg) do c[k] = v end
  for k, v in pairs(over or {}) do c[k] = v end
  assert(c.hidden % c.heads == 0, "gpt: hidden must be a multiple of heads")
  assert(c.ctx <= M.MAX_CTX, "gpt: ctx at most " .. M.MAX_CTX)
  return c
end

-- -- Kernels ---------------------------------------------------------------------

local K
local function kernels()
  if not K then K = gt.load("kernels/gpt.cu") end
  return K
end

-- A launcher over n elements (1-D grid of 256-thread blocks), cached per grid.
local function flat(name)
  local cache = {}
  return function(n)
    local g = max(1, min(ceil(n / 256), 4096))
    local f = cache[g]
    if not f then f = kernels()[name]:config(g, 256); cache[g] = f end
    return f
  end
end

-- -- Host <-> device of raw arrays ------------------------------------------------------

local C, rt = gt._C, gt._rt

local function upload(t, ptr)
  if C.gt_buf_write(rt, t._b, t._off, ptr, t._nb) ~= 0 then error(gt._errmsg(), 2) end
  return t
end

--- read_f32(t) -> a float[] copy of t's values (t contiguous, f32)
function M.read_f32(t)
  assert(t.dtype == "f32" and not t._strides, "read_f32: a contiguous f32 tensor")
  local buf = ffi.new("float[?]", max(t.numel, 1))
  if C.gt_buf_read(rt, t._b, t._off, buf, t._nb) ~= 0 then error(gt._errmsg(), 2) end
  return buf
end

-- -- Weights -----------------------------------------------------------------------------

-- The parameter list in file order: name, shape, init = {scale, shift}.
local function layout(c)
  local D, V, T, L = c.hidden, c.vocab, c.ctx, c.layers
  -- matrices 1/sqrt(fan_in) (GPT-2's 0.02 with a tied head makes greedy
  -- decoding of random weights repeat the last token forever)
  local std, proj, fc = 1 / sqrt(D), 1 / sqrt(2 * L * D), 1 / sqrt(8 * L * D)
  local list = { { "wte", { V, D }, 0.02 }, { "wpe", { T, D }, 0.01 } }
  for l = 1, L do
    local p = "h" .. l .. "."
    for _, e in ipairs {
      { "ln1_g", { D }, 0, 1 }, { "ln1_b", { D }, 0 },
      { "wqkv", { D, 3 * D }, std }, { "bqkv", { 3 * D }, 0 },
      { "wproj", { D, D }, proj }, { "bproj", { D }, 0 },
      { "ln2_g", { D }, 0, 1 }, { "ln2_b", { D }, 0 },
      { "wfc", { D, 4 * D }, std }, { "bfc", { 4 * D }, 0 },
      { "wout", { 4 * D, D }, fc }, { "bout", { D }, 0 },
    } do list[#list + 1] = { p .. e[1], e[2], e[3], e[4] } end
  end
  list[#list + 1] = { "lnf_g", { D }, 0, 1 }
  list[#list + 1] = { "lnf_b", { D }, 0 }
  return list
end

-- Tied LM head: lm = wte^T {D, V}, so the logits are one gt.ops.linear.
local function finish_weights(c, w)
  local D, V = c.hidden, c.vocab
  w.lm = gt.tensor { D, V }
  flat("transpose_f32")(V * D)(w.lm, w.wte, V, D)
  w.lm:static()
  w.layers = {}
  for l = 1, c.layers do
    local L, p = {}, "h" .. l .. "."
    for _, k in ipairs { "ln1_g", "ln1_b", "wqkv", "bqkv", "wproj", "bproj", "ln2_g", "ln2_b",
                         "wfc", "bfc", "wout", "bout" } do L[k] = w[p .. k] end
    w.layers[l] = L
  end
  return w
end

--- random_weights(cfg [, seed]) -> weights: normal, embeddings 0.02 / 0.01,
--- matrices 1/sqrt(fan_in) (output projections scaled down by the depth),
--- layernorm 1/0, zero biases; filled on the device.
function M.random_weights(c, seed)
  seed = seed or 1
  local w, fill = {}, flat("randn_f32")
  for i, e in ipairs(layout(c)) do
    local t = gt.tensor(e[2])
    local scale, shift = e[3], e[4] or 0
    if scale == 0 then t:fill(shift) else fill(t.numel)(t, t.numel, seed * 1000 + i, scale, shift) end
    w[e[1]] = t:static()
  end
  return finish_weights(c, w)
end

-- The weight file (scripts/bench/gpt_check.py writes it), little-endian:
--   8 bytes "GTGPT001"; 8 int32: layers, hidden, heads, vocab, ctx, eot, batch, prompt_len;
--   the prompt, int32 [batch, prompt_len]; then every parameter as f32 in
--   layout() order: wte [V, D], wpe [ctx, D], per layer ln1_g, ln1_b,
--   wqkv [D, 3D], bqkv, wproj [D, D], bproj, ln2_g, ln2_b, wfc [D, 4D], bfc,
--   wout [4D, D], bout; lnf_g, lnf_b.  Matrices are {in, out} (x @ W).
M.MAGIC = "GTGPT001"

--- load(path [, over]) -> cfg, weights, prompt (a Lua table of batch rows of token ids)
function M.load(path, over)
  local f = assert(io.open(path, "rb"))
  local magic = f:read(8)
  if magic ~= M.MAGIC then error("gpt.load: " .. path .. " is not a " .. M.MAGIC .. " file", 2) end
  local hdr = ffi.new("int32_t[8]")
  ffi.copy(hdr, assert(f:read(32)), 32)
  local c = M.config(M.FULL, { layers = hdr[0], hidden = hdr[1], heads = hdr[2], vocab = hdr[3], ctx = hdr[4],
                               eot = hdr[5] })
  c = M.config(c, over)
  local B, P = hdr[6], hdr[7]
  local prompt = {}
  if B * P > 0 then
    local s = assert(f:read(4 * B * P))
    local ids = ffi.cast("const int32_t *", s)
    for b = 1, B do
      prompt[b] = {}
      for t = 1, P do prompt[b][t] = ids[(b - 1) * P + t - 1] end
    end
  end
  local w = {}
  for _, e in ipairs(layout(c)) do
    local t = gt.tensor(e[2])
    local s = f:read(t._nb)
    if not s or #s ~= t._nb then error("gpt.load: " .. path .. " ends inside " .. e[1], 2) end
    w[e[1]] = upload(t, s):static()
  end
  f:close()
  return c, finish_weights(c, w), prompt
end

-- -- The model -------------------------------------------------------------------------------

--- new(cfg [, weights]) -> model: { cfg, w, kc, vc, done, hist, step = fn(ids, pos, live) }
function M.new(c, w)
  c = M.config(c)
  w = w or M.random_weights(c, c.seed)
  local D, H, V, T, NL = c.hidden, c.heads, c.vocab, c.ctx, c.layers
  local Dh = D / H
  local Bmax = c.buckets[#c.buckets]
  local scale = 1 / sqrt(Dh)
  local m = { cfg = c, w = w, kc = {}, vc = {}, bmax = Bmax }
  for l = 1, NL do
    m.kc[l] = gt.zeros { Bmax, T, D }
    m.vc[l] = gt.zeros { Bmax, T, D }
  end
  m.done = gt.zeros({ Bmax }, "i32")      -- 1 once a sequence has produced eot
  m.hist = gt.zeros({ Bmax, T }, "i32")   -- generated tokens [b, step] (one size: one tree key)

  local KK = kernels()
  local embed, store = flat("embed_pos_f32"), flat("kv_store_f32")
  local attn_block = max(32, ceil(Dh / 32) * 32)
  local attn_cache = {}
  local function attn(B)
    local f = attn_cache[B]
    if not f then f = KK.attn_decode_f32:config(B * H, attn_block); attn_cache[B] = f end
    return f
  end
  local finish = KK.finish_i32:config(1, 32)
  local finish_big = {}
  local layernorm, linear, add, argmax = ops.layernorm, ops.linear, ops.add, ops.argmax

  -- One transformer block on x {B, D} at position pos; returns the new x.
  local function block(x, L, kc, vc, B, pos)
    local qkv = linear(layernorm(x, L.ln1_g, L.ln1_b), L.wqkv, L.bqkv)
    store(B * D)(kc, vc, qkv, B, D, T, pos)
    local a = gt.tensor { B, D }
    attn(B)(a, qkv, kc, vc, B, H, Dh, T, pos + 1, scale)
    x = add(x, linear(a, L.wproj, L.bproj))
    local h = linear(layernorm(x, L.ln2_g, L.ln2_b), L.wfc, L.bfc, "gelu")
    return add(x, linear(h, L.wout, L.bout))
  end

  --- m.step(ids, pos [, live]) -> tok i32 {B}, logits {B, V}
  -- ids: this position's token per sequence; live = 1 once generating (an
  -- eot then ends the sequence; its later tokens are eot) and the token is
  -- written to m.hist[b, pos - m.hist_base].
  function m.step(ids, pos, live)
    local B = ids.shape[1]
    if B > Bmax then error("gpt: batch " .. B .. " over the caches' " .. Bmax, 2) end
    if pos < 0 or pos >= T then error("gpt: position " .. pos .. " outside the context of " .. T, 2) end
    local x = gt.tensor { B, D }
    embed(B * D)(x, ids, w.wte, w.wpe, B, D, V, pos)
    local layers, kc, vc = w.layers, m.kc, m.vc
    for l = 1, NL do x = scope(block, x, layers[l], kc[l], vc[l], B, pos) end
    local logits = linear(layernorm(x, w.lnf_g, w.lnf_b), w.lm)
    local tok = gt.tensor({ B }, "i32")
    local f = finish
    if B > 32 then
      f = finish_big[B] or KK.finish_i32:config(ceil(B / 32), 32)
      finish_big[B] = f
    end
    local hist = m.hist
    local slot = pos - (m.hist_base or 0)
    f(tok, m.done, hist, argmax(logits), B, c.eot, live or 0, hist.shape[2], slot)
    return tok, logits
  end
  return m
end

-- -- Generation ---------------------------------------------------------------------------------

-- True when the first B end flags are all set (a host read: a sync).
local function all_done(m, B)
  local d = m.done:tolist()
  for b = 1, B do if d[b] == 0 then return false end end
  return true
end

--- generate(m, run, prompt, steps [, opts]) -> result
-- run: m.step or a tree of it; prompt: B rows of P token ids (equal lengths).
-- Feeds the prompt one position at a time, then generates up to `steps`
-- tokens greedily, stopping when every sequence has produced eot (the device
-- flags are read every opts.check_every steps, default 8; opts.all = true
-- never stops early).  opts.on_step(i, tok, logits) sees each generated
-- step's outputs (valid until the next call).  result = { steps, tokens =
-- B rows of ids, seconds (wall time of the loop, synced), calls (of run),
-- host_us (mean wall time of one run call, unsynced: the host's cost) }.
function M.generate(m, run, prompt, steps, opts)
  opts = opts or {}
  local B, P = #prompt, #prompt[1]
  assert(P >= 1 and P + steps - 1 <= m.cfg.ctx, "gpt.generate: prompt + steps beyond the context")
  local k = opts.check_every or 8
  local cols = {}
  for t = 1, P do
    local col = {}
    for b = 1, B do col[b] = prompt[b][t] end
    cols[t] = gt.from(col, "i32")
  end
  m.done:fill(0)
  m.hist:fill(0)
  m.hist_base = P - 1
  gt.sync()
  local t0 = gt.clock()
  local tok, n, host, clock = nil, 0, 0, gt.clock
  for pos = 0, P + steps - 2 do
    local generating = pos >= P - 1
    local c0 = clock()
    local t, logits = run(pos < P and cols[pos + 1] or tok, pos, generating and 1 or 0)
    host = host + (clock() - c0)
    tok = t
    if generating then
      n = n + 1
      if opts.on_step then opts.on_step(n, t, logits) end
      if not opts.all and n % k == 0 and n < steps and all_done(m, B) then break end
    end
  end
  gt.sync()
  local secs = gt.clock() - t0
  local h = m.hist:tolist()
  local tokens = {}
  for b = 1, B do
    tokens[b] = {}
    for i = 1, n do tokens[b][i] = h[b][i] end
  end
  return { steps = n, tokens = tokens, seconds = secs, calls = P - 1 + n, host_us = host * 1e6 / (P - 1 + n) }
end

--- random_prompt(cfg, B, P [, seed]) -> B rows of P token ids (never eot)
function M.random_prompt(c, B, P, seed)
  local r, rows = seed or 12345, {}
  for b = 1, B do
    rows[b] = {}
    for t = 1, P do
      r = (r * 1103515245 + 12345) % 2147483648
      rows[b][t] = math.floor(r / 65536) % (c.vocab - 1)
      if rows[b][t] == c.eot then rows[b][t] = 0 end
    end
  end
  return rows
end

return M
