-- gpt.lua: a GPT-2-shaped decoder with a KV cache, one decode step per call
-- (loaded with dofile by examples/decode.lua, scripts/bench/gtlua_bench.lua
-- and spec/decode_spec.lua).
--
--   local gpt = dofile("examples/gpt.lua")
--   local m = gpt.new(gpt.TINY)                 -- random weights (or gpt.load(path))
--   local step = gt.tree(m.step, { buckets = { dim = 1, sizes = m.cfg.buckets, narrow = { 1, 2 } } })
--   local tok, logits = step(ids, pos, live)    -- ids i32 {B}; pos 0-based; live 0|1
--
-- A step embeds one token per sequence at position pos, runs the layers
-- (pre-layernorm, fused QKV, attention of the one query over the KV cache,
-- MLP with gelu), the final layernorm and the tied LM head, and picks the
-- next token greedily: 5 kernels a layer and 3 more (m.kernels per step).
-- The matrix products are kernels/gpt.cu's rows_linear_m*_f32, which read each
-- weight once per step and fuses the layernorm before it and the bias, gelu
-- and residual add after it; attention also stores this position's K and V.
-- The KV caches ([Bmax, T, D] per layer, K and V), the per-sequence end
-- flags and the token history are ordinary tensors made here, outside any
-- tree; kernels inside the step write them at pos, a scalar argument, so a
-- recorded step replays at every position (one node per batch bucket), and
-- pos and live flow unchanged into kernel scalars (a keyed tree may patch
-- them: key = function() return 0 end, patch = {2, 3}).  Batches up to the
-- last bucket use the caches' first rows.
local gt = require "gt"
local ffi = require "ffi"
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
  assert((c.hidden / c.heads) % 4 == 0, "gpt: hidden / heads must be a multiple of 4 (float4 rows)")
  assert(c.ctx <= M.MAX_CTX, "gpt: ctx at most " .. M.MAX_CTX)
  c.dtype = c.dtype or "f32"        -- the weights' (matrices and embeddings): f32, bf16 or f16
  assert(c.dtype == "f32" or c.dtype == "bf16" or c.dtype == "f16", "gpt: dtype f32, bf16 or f16")
  return c
end

--- kernels_per_step(cfg) -> kernels one step launches
function M.kernels_per_step(c) return 5 * c.layers + 3 end

-- -- Kernels ---------------------------------------------------------------------

-- kernels/gpt.cu, or for half-precision weights (dt "bf16", "f16") kernels/gpt_half.cu.
local KS = {}
local function kernels(dt)
  dt = dt or "f32"
  if not KS[dt] then
    KS[dt] = dt == "f32" and gt.load("kernels/gpt.cu") or
      gt.load("kernels/gpt_half.cu", dt == "bf16" and { options = "-DGPT_BF16" } or nil)
  end
  return KS[dt]
end

--- kernel(name [, dt]) -> the kernel of that name for weights of dtype dt (kernels/gpt.cu for
--- f32, gpt_half.cu for bf16/f16; examples/paged.lua binds its own launchers)
function M.kernel(name, dt) return kernels(dt)[name] end

local CPU = gt.backend() == "cpu"

-- A launcher over n elements (1-D grid of 256-thread blocks), cached per grid.
local function flat(name, dt)
  local cache = {}
  return function(n)
    local g = max(1, min(ceil(n / 256), 4096))
    local f = cache[g]
    if not f then f = kernels(dt)[name]:config(g, 256); cache[g] = f end
    return f
  end
end

-- rows_linear_m*_f32's mode bits (kernels/gpt.cu).
local LN, BIAS, GELU, RES = 1, 2, 4, 8
M.LN, M.BIAS, M.GELU, M.RES = LN, BIAS, GELU, RES

-- Launch shape of rows_linear_m<mt>_f32 for M rows, N features of K (pure: the
-- same inputs give the same plan).  Warps a block nw (8; 2 on the cpu
-- backend, whose threads are fibers).  Rows are staged mt at a time: the
-- smallest power of two >= M (at most 16) whose mt*K floats fit in 96 KiB.
-- All blocks run in one wave: at most bps a multiprocessor (3 for mt <= 4,
-- 2 above: the kernels use 72-78 and 90-105 registers a thread at 256
-- threads; 96 KiB of rows fit twice), blocks striding over the features
-- beyond.  K is split over S warps (S doubling while the blocks still fit in
-- the wave and every slice keeps >= 128 floats, a warp's float4 pass), so
-- that narrow matrices (N = 768) keep every multiprocessor streaming.
function M.rows_plan(Mr, N, Kd, sms, force)
  force = force or {}
  local nw = force.nw or (CPU and 2 or 8)
  local mt = 1
  while mt < 16 and mt < Mr do mt = mt * 2 end
  while mt > 1 and mt * Kd * 4 > 96 * 1024 do mt = mt / 2 end
  mt = force.mt or mt
  local cap = (mt <= 4 and 3 or 2) * sms
  local S = 1
  while 2 * S <= nw and ceil(N / (nw / (2 * S))) <= cap and Kd / (2 * S) >= 128 do S = S * 2 end
  S = force.S or S
  local grid = max(1, min(ceil(N / (nw / S)), cap))
  return { mt = mt, S = S, grid = grid, block = 32 * nw, smem = mt * Kd * 4 }
end

local SMS                          -- multiprocessors (cpu: worker threads)
local row_plans = {}               -- [dt][N][K][M] -> { f = launcher, S, M, N, K, shape }

-- The cached plan and launcher for M rows x N features of K (weights of dtype dt, default f32).
local function rows_launcher(Mr, N, Kd, dt)
  dt = dt or "f32"
  local plans = row_plans[dt] or {}
  row_plans[dt] = plans
  local byN = plans[N]
  if not byN then byN = {}; plans[N] = byN end
  local byK = byN[Kd]
  if not byK then byK = {}; byN[Kd] = byK end
  local r = byK[Mr]
  if not r then
    SMS = SMS or gt.device().sms
    local p = M.rows_plan(Mr, N, Kd, SMS)
    r = { f = kernels(dt)["rows_linear_m" .. p.mt .. (dt == "f32" and "_f32" or "_h")]:config(p.grid, p.block, p.smem),
          S = p.S, M = Mr, N = N, K = Kd, shape = gt.shape { Mr, N } }
    byK[Mr] = r
  end
  return r
end

--- rows_linear(mode, x, W [, bias, res, g, beta [, force]]) -> y {M, N}
--- y = epilogue(in @ W^T): x {M, K}, W {N, K} (a feature per row), in =
--- layernorm(x; g, beta) when mode has M.LN, then + bias (M.BIAS), gelu
--- (M.GELU), + res {M, N} (M.RES).  force = {mt=, S=, nw=} overrides the
--- plan (tests).
function M.rows_linear(mode, x, W, bias, res, g, beta, force)
  local Mr, Kd, N = x:size(1), W:size(2), W:size(1)     -- (t:size(d) reads a size; t.shape would copy the table)
  if x:size(2) ~= Kd or x:dim() ~= 2 then
    error(("gpt.rows_linear: x is %s, W is %dx%d: x must be {M, %d}"):format(table.concat(x.shape, "x"), N, Kd, Kd), 2)
  end
  if Kd % 4 ~= 0 or W._off % 16 ~= 0 or x._off % 16 ~= 0 then
    error("gpt.rows_linear: K must be a multiple of 4 and x, W 16-byte aligned (float4 loads)", 2)
  end
  local r
  if force then
    SMS = SMS or gt.device().sms
    local p = M.rows_plan(Mr, N, Kd, SMS, force)
    r = { f = kernels()["rows_linear_m" .. p.mt .. "_f32"]:config(p.grid, p.block, p.smem), S = p.S,
          shape = { Mr, N } }
  else
    r = rows_launcher(Mr, N, Kd, W.dtype)
  end
  local y = gt.tensor(r.shape)
  r.f(y, x, W, bias or x, res or x, g or x, beta or x, Mr, N, Kd, r.S, mode)
  return y
end
local rows_linear = M.rows_linear

-- -- Host <-> device of raw arrays ------------------------------------------------------

local I = require "gt.internal"
local C, rt = I.C, I.rt

local function upload(t, ptr)
  if C.gt_buf_write(rt, t._b, t._off, ptr, t._nb) ~= 0 then error(I.errmsg(), 2) end
  return t
end

--- read_f32(t) -> a float[] copy of t's values (t contiguous, f32)
function M.read_f32(t)
  assert(t.dtype == "f32" and not t._strides, "read_f32: a contiguous f32 tensor")
  local buf = ffi.new("float[?]", max(t.numel, 1))
  if C.gt_buf_read(rt, t._b, t._off, buf, t._nb) ~= 0 then error(I.errmsg(), 2) end
  return buf
end

-- -- Weights -----------------------------------------------------------------------------

-- The parameter list in file order: name, shape in the file, init = {scale,
-- shift}, and true for a matrix (file {in, out}; kept on the device as
-- {out, in}, a feature per row, for rows_linear).
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
      { "wqkv", { D, 3 * D }, std, 0, true }, { "bqkv", { 3 * D }, 0 },
      { "wproj", { D, D }, proj, 0, true }, { "bproj", { D }, 0 },
      { "ln2_g", { D }, 0, 1 }, { "ln2_b", { D }, 0 },
      { "wfc", { D, 4 * D }, std, 0, true }, { "bfc", { 4 * D }, 0 },
      { "wout", { 4 * D, D }, fc, 0, true }, { "bout", { D }, 0 },
    } do list[#list + 1] = { p .. e[1], e[2], e[3], e[4], e[5] } end
  end
  list[#list + 1] = { "lnf_g", { D }, 0, 1 }
  list[#list + 1] = { "lnf_b", { D }, 0 }
  return list
end

-- The matrices and embeddings of weights w in half precision (c.dtype);
-- biases and layernorm parameters stay f32.
local HALF_NAMES = { wte = true, wpe = true, wqkv = true, wproj = true, wfc = true, wout = true }
local function to_dtype(c, w)
  if c.dtype == "f32" then return end
  for k, t in pairs(w) do
    if HALF_NAMES[k:match("[^%.]+$")] and t.dtype ~= c.dtype then w[k] = t:to(c.dtype):static(); t:free() end
  end
end

-- Per-layer tables; the tied LM head is wte itself ({V, D}: a token per row).
local function finish_weights(c, w)
  to_dtype(c, w)
  w.lm = w.wte
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
    local t = gt.tensor(e[5] and { e[2][2], e[2][1] } or e[2])
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
--   wout [4D, D], bout; lnf_g, lnf_b.  Matrices are {in, out} (x @ W); load
--   transposes them to {out, in}.
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
  local w, transpose = {}, flat("transpose_f32")
  for _, e in ipairs(layout(c)) do
    local t = gt.tensor(e[2])
    local s = f:read(t._nb)
    if not s or #s ~= t._nb then error("gpt.load: " .. path .. " ends inside " .. e[1], 2) end
    upload(t, s)
    if e[5] then                                   -- {in, out} -> {out, in}
      local r, cn = e[2][1], e[2][2]
      local tt = gt.tensor { cn, r }
      transpose(r * cn)(tt, t, r, cn)
      t:free()
      t = tt
    end
    w[e[1]] = t:static()
  end
  f:close()
  return c, finish_weights(c, w), prompt
end

-- -- Hugging Face checkpoints -----------------------------------------------------------------

-- Hugging Face GPT-2 names (an optional "transformer." prefix; h.N counts from
-- 0) of gpt.lua's parameters (layer l counts from 1).  Conv1D weights are
-- {in, out} (x @ W), c_attn's columns q | k | v, as layout() has them.
local HF = { ln1_g = "ln_1.weight", ln1_b = "ln_1.bias", wqkv = "attn.c_attn.weight", bqkv = "attn.c_attn.bias",
             wproj = "attn.c_proj.weight", bproj = "attn.c_proj.bias", ln2_g = "ln_2.weight", ln2_b = "ln_2.bias",
             wfc = "mlp.c_fc.weight", bfc = "mlp.c_fc.bias", wout = "mlp.c_proj.weight", bout = "mlp.c_proj.bias" }

-- The file's config.json (save_pretrained writes one beside the weights), or {}.
local function hf_config(path)
  local f = io.open((path:match("^(.*)/[^/]*$") or ".") .. "/config.json", "r")
  if not f then return {} end
  local text = f:read("*a")
  f:close()
  local ok, j = pcall(require("gt.json").decode, text)
  return ok and type(j) == "table" and j or {}
end

--- load_hf(path [, opts [, over]]) -> cfg, weights: a Hugging Face GPT-2 checkpoint
--- (model.safetensors); opts.dtype "f32" | "bf16" | "f16" for the matrices and embeddings.
--- Layers, hidden size, vocabulary and context come from the shapes, the heads from
--- config.json beside the file (n_head), else opts.heads, else hidden / 64.
function M.load_hf(path, opts, over)
  opts = opts or {}
  local function wanted(name)                   -- (the tied head and the causal-mask buffers are not read)
    return name ~= "lm_head.weight" and not name:find("%.attn%.bias$") and not name:find("%.attn%.masked_bias$")
  end
  local raw = gt.safetensors.load(path, { dtype = "f32", names = wanted })
  local t = {}
  for name, v in pairs(raw) do
    if name ~= "__metadata__" then t[name:gsub("^transformer%.", "")] = v end
  end
  local function need(n)
    local v = t[n]
    if not v then error("gpt.load_hf: " .. path .. " has no tensor " .. n .. " (a GPT-2 checkpoint?)", 3) end
    return v
  end
  local wte, wpe = need("wte.weight"), need("wpe.weight")
  local L = 0
  while t["h." .. L .. ".ln_1.weight"] do L = L + 1 end
  if L == 0 then error("gpt.load_hf: " .. path .. " has no layers (h.0.ln_1.weight)", 2) end
  local V, D, T = wte:size(1), wte:size(2), wpe:size(1)
  local j = hf_config(path)
  local H = opts.heads or j.n_head or D / 64
  local c = M.config(M.FULL, { layers = L, hidden = D, heads = H, vocab = V, ctx = math.min(T, M.MAX_CTX),
                               eot = j.eos_token_id or (V >= 50257 and 50256 or V - 1), dtype = opts.dtype or "f32" })
  c = M.config(c, over)
  local w = { wte = wte:static(), wpe = wpe:static(), lnf_g = need("ln_f.weight"):static(), lnf_b = need("ln_f.bias"):static() }
  for l = 1, L do
    for k, hf in pairs(HF) do
      local v = need("h." .. (l - 1) .. "." .. hf)
      if v:dim() == 2 then local tt = gt.ops.transpose(v); v:free(); v = tt end   -- {in, out} -> {out, in}
      w["h" .. l .. "." .. k] = v:static()
    end
  end
  return c, finish_weights(c, w)
end

-- -- The model -------------------------------------------------------------------------------

--- new(cfg [, weights]) -> model: { cfg, w, kc, vc, done, hist, kernels, step = fn(ids, pos, live) }
function M.new(c, w)
  c = M.config(c)
  w = w or M.random_weights(c, c.seed)
  local D, H, V, T, NL = c.hidden, c.heads, c.vocab, c.ctx, c.layers
  local Dh = D / H
  local Bmax = c.buckets[#c.buckets]
  local scale = 1 / sqrt(Dh)
  local m = { cfg = c, w = w, kc = {}, vc = {}, bmax = Bmax, kernels = M.kernels_per_step(c) }
  -- The model's state lives as long as the model, at one address: static,
  -- as the weights (a tree bakes its address and replays test it as a
  -- weight's, where a tensor from outside is numbered and patched).
  for l = 1, NL do
    m.kc[l] = gt.zeros({ Bmax, T, D }):static()
    m.vc[l] = gt.zeros({ Bmax, T, D }):static()
  end
  m.done = gt.zeros({ Bmax }, "i32"):static()      -- 1 once a sequence has produced eot
  m.hist = gt.zeros({ Bmax, T }, "i32"):static()   -- hist[b, pos]: the token generated at pos
  m.posd = gt.zeros({ 1 }, "i32"):static()         -- the step's position on the device (embed writes it, attention reads it)

  local KK = kernels()
  local embed = flat(c.dtype == "f32" and "embed_pos_f32" or "embed_pos_h", c.dtype)
  local rows_launcher = function(Mr, N, Kd) return rows_launcher(Mr, N, Kd, c.dtype) end   -- (the weights' dtype)
  local tensor = gt.tensor
  local hstride = m.hist:size(2)
  -- attention: a block per (sequence, head), 1024 threads while the blocks
  -- fit on the multiprocessors at one each (54 registers a thread), else 512;
  -- argmax: a block per sequence
  assert(Dh / 4 <= 32, "gpt: hidden / heads at most 128")
  local function attn_block(B)
    if CPU then return 32 end
    SMS = SMS or gt.device().sms
    return B * H <= SMS and 1024 or 512
  end

  -- What a step at batch B launches, made on its first call: the bound
  -- launchers and the shapes of its tensors (the hot path looks nothing up).
  local plans = {}
  local function plan(B)
    local P = {
      x = gt.shape { B, D }, tok = gt.shape { B },
      qkv = rows_launcher(B, 3 * D, D), proj = rows_launcher(B, D, D),
      fc = rows_launcher(B, 4 * D, D), out = rows_launcher(B, D, 4 * D), lm = rows_launcher(B, V, D),
      attn = KK.attn_decode_f32:config(min(B * H, 65535), attn_block(B)),
      finish = KK.argmax_finish_f32:config(min(B, 65535), CPU and 32 or 1024),
      embed = embed(B * D),
    }
    plans[B] = P
    return P
  end

  -- y = rows_linear(mode, x, W, ...) through a prepared launcher r.
  local function rows(r, mode, x, W, bias, res, g, beta)
    local y = tensor(r.shape)
    r.f(y, x, W, bias, res, g, beta, r.M, r.N, r.K, r.S, mode)
    return y
  end

  -- One transformer block on x {B, D} at the position posd holds (on the device); returns the new x.
  local function block(x, L, kc, vc, P, B, posd)
    local qkv = rows(P.qkv, LN + BIAS, x, L.wqkv, L.bqkv, x, L.ln1_g, L.ln1_b)
    local a = tensor(P.x)
    P.attn(a, kc, vc, qkv, B, H, Dh, T, posd, scale)
    x = rows(P.proj, BIAS + RES, a, L.wproj, L.bproj, x, x, x)
    local h = rows(P.fc, LN + BIAS + GELU, x, L.wfc, L.bfc, x, L.ln2_g, L.ln2_b)
    return rows(P.out, BIAS + RES, h, L.wout, L.bout, x, x, x)
  end

  --- m.step(ids, pos [, live]) -> tok i32 {B}, logits {B, V}
  -- ids: this position's token per sequence; live = 1 once generating (an
  -- eot then ends the sequence; its later tokens are eot) and the token is
  -- written to m.hist[b, pos].
  function m.step(ids, pos, live)
    local B = ids:size(1)
    if B > Bmax then error("gpt: batch " .. B .. " over the caches' " .. Bmax, 2) end
    if pos < 0 or pos >= T then error("gpt: position " .. pos .. " outside the context of " .. T, 2) end
    local P = plans[B] or plan(B)
    local x = tensor(P.x)
    P.embed(x, m.posd, ids, w.wte, w.wpe, B, D, V, pos)
    local layers, kc, vc = w.layers, m.kc, m.vc
    local posd = m.posd
    for l = 1, NL do x = scope(block, x, layers[l], kc[l], vc[l], P, B, posd) end
    local logits = rows(P.lm, LN, x, w.lm, x, x, w.lnf_g, w.lnf_b)
    local tok = tensor(P.tok, "i32")
    P.finish(tok, m.done, m.hist, logits, B, V, c.eot, live or 0, hstride, m.posd)
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
    for i = 1, n do tokens[b][i] = h[b][P - 1 + i] end
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
