-- paged.lua: examples/gpt.lua's model over a paged KV cache, one serving
-- step per call: the decode rows of the running sequences and a chunk of one
-- prompt, in one batch of rows (kernels/paged.cu).  Loaded with dofile by
-- examples/serve.lua.
--
--   local paged = dofile("examples/paged.lua")
--   local m = paged.new(cfg, { blocks = 64, block = 16, seqs = 32, rows = 96 })
--   -- the host fills m.h.tok/pos/slot/seq for the step's rows and m.h.btab, then:
--   m.upload(rows)
--   local tok = m.step(nd, nc)          -- i32 {Bp [+ 1]}: next token per decode row [, the chunk's]
--
-- The step's rows: [0, Bp) decode rows (the first nd real), [Bp, Bp + Cp)
-- the chunk's rows (the first nc real), where Bp, Cp are the buckets of nd
-- and nc in a tree with count buckets named "decode" and "chunk" (nd and nc
-- themselves when called eagerly).  The KV pool is one tensor {L, 2, NS, D}
-- of NS = blocks * block slots; the block table {seqs, ceil(ctx / block)}
-- and the per-row arrays (token, position, slot, block table row) are
-- persistent device tensors (static) the host writes before each step, so a
-- recorded step replays at every position, slot and table.  The matrix
-- products stage a fixed number of rows per K (rows_linear's mt), and
-- attention runs one block size, so a row's numbers do not depend on which
-- rows share its step: batching changes no token.
local gt = require "gt"
local ffi = require "ffi"
local I = require "gt.internal"
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "examples"
local gpt = dofile(here .. "/gpt.lua")

local M = { gpt = gpt }
local ceil, max, min, sqrt = math.ceil, math.max, math.min, math.sqrt
local CPU = gt.backend() == "cpu"
local LN, BIAS, GELU, RES = gpt.LN, gpt.BIAS, gpt.GELU, gpt.RES

local K
local function kernels()
  if not K then K = gt.load("kernels/paged.cu") end
  return K
end

-- The rows rows_linear stages at a time for K inputs: the most (<= 16) that fit in 96 KiB.
local function fixed_mt(Kd)
  local mt = 16
  while mt > 1 and mt * Kd * 4 > 96 * 1024 do mt = mt / 2 end
  return mt
end

local SMS
local plans = {}      -- ["dt:N:K"][M] -> { f, S, M, N, K, shape }
local function rows_launcher(Mr, N, Kd, dt)          -- (dt: the weights' dtype)
  local key = dt .. ":" .. N .. ":" .. Kd
  plans[key] = plans[key] or {}
  local r = plans[key][Mr]
  if not r then
    SMS = SMS or gt.device().sms
    local p = gpt.rows_plan(Mr, N, Kd, SMS, { mt = fixed_mt(Kd) })
    local name = "rows_linear_m" .. p.mt .. (dt == "f32" and "_f32" or "_h")
    r = { f = gpt.kernel(name, dt):config(p.grid, p.block, p.smem), S = p.S, M = Mr, N = N, K = Kd,
          shape = gt.shape { Mr, N } }
    plans[key][Mr] = r
  end
  return r
end

local function flat(name, n, cache)
  local g = max(1, min(ceil(n / 256), 4096))
  local f = cache[g]
  if not f then f = kernels()[name]:config(g, 256); cache[g] = f end
  return f
end

local function write_i32(t, h, n)
  if n > 0 and I.C.gt_buf_write(I.rt, t._b, t._off, h, 4 * n) ~= 0 then error(I.errmsg(), 2) end
end

--- new(cfg, opts) -> model: { cfg, w, kv, h = {tok, pos, slot, seq, btab}, nbt, slots, upload, step }
--- opts: blocks, block (slots a block), seqs (block table rows), rows (the most rows a step has),
--- weights (gpt.random_weights's by default; cfg.dtype "bf16"/"f16": half matrices and embeddings,
--- f32 activations and KV cache, as gpt.lua's)
function M.new(cfg, opts)
  local c = gpt.config(cfg)
  local w = opts.weights or gpt.random_weights(c, c.seed)
  local D, H, V, T, NL = c.hidden, c.heads, c.vocab, c.ctx, c.layers
  local Dh = D / H
  assert(Dh / 4 <= 32, "paged: hidden / heads at most 128")
  local BS, NBK, S, R = opts.block, opts.blocks, opts.seqs, opts.rows
  local NS, NBT = NBK * BS, ceil(T / BS)
  local m = { cfg = c, w = w, block = BS, blocks = NBK, slots = NS, nbt = NBT, seqs = S, rows = R }
  local dt = c.dtype or "f32"
  -- the embedding reads f32 tables: the half ones' values, widened once (the LM head reads wte as it is)
  local wte, wpe = w.wte, w.wpe
  if wte.dtype ~= "f32" then wte, wpe = w.wte:to("f32"):static(), w.wpe:to("f32"):static() end
  m.kv = gt.zeros({ NL, 2, NS, D }):static()
  m.tok, m.pos = gt.zeros({ R }, "i32"):static(), gt.zeros({ R }, "i32"):static()
  m.slot, m.seq = gt.full({ R }, -1, "i32"):static(), gt.zeros({ R }, "i32"):static()
  m.btab = gt.zeros({ S, NBT }, "i32"):static()
  m.h = { tok = ffi.new("int32_t[?]", R), pos = ffi.new("int32_t[?]", R), slot = ffi.new("int32_t[?]", R),
          seq = ffi.new("int32_t[?]", R), btab = ffi.new("int32_t[?]", S * NBT) }
  m.btab_dirty = true

  --- m.upload(rows): the host's arrays of the step's first rows (and the block table, when changed) to the device
  function m.upload(n)
    local h = m.h
    write_i32(m.tok, h.tok, n); write_i32(m.pos, h.pos, n); write_i32(m.slot, h.slot, n); write_i32(m.seq, h.seq, n)
    if m.btab_dirty then write_i32(m.btab, h.btab, S * NBT); m.btab_dirty = false end
  end

  local KK = kernels()
  local ATB = CPU and 32 or 1024                   -- attention's block size: one for every step
  local scale = 1 / sqrt(Dh)
  local tensor, scope = gt.tensor, gt.scope
  local ecache, kcache, gcache = {}, {}, {}
  local steps = {}
  local function plan(Mr, Rr)
    local P = {
      x = gt.shape { Mr, D }, xs = gt.shape { Rr, D }, tok = gt.shape { Rr },
      qkv = rows_launcher(Mr, 3 * D, D, dt), proj = rows_launcher(Mr, D, D, dt), fc = rows_launcher(Mr, 4 * D, D, dt),
      out = rows_launcher(Mr, D, 4 * D, dt), lm = rows_launcher(Rr, V, D, dt),
      embed = flat("paged_embed_f32", Mr * D, ecache), kvw = flat("paged_kv_write_f32", Mr * D, kcache),
      gather = flat("paged_gather_f32", Rr * D, gcache),
      attn = KK.paged_attn_f32:config(min(Mr * H, 65535), ATB),
      argmax = KK.paged_argmax_f32:config(min(Rr, 65535), CPU and 32 or 1024),
    }
    steps[Mr] = steps[Mr] or {}
    steps[Mr][Rr] = P
    return P
  end

  local function rows(r, mode, x, W, bias, res, g, beta)
    local y = tensor(r.shape)
    r.f(y, x, W, bias, res, g, beta, r.M, r.N, r.K, r.S, mode)
    return y
  end

  -- One transformer block on x {Mr, D}, layer l (0-based in the pool).
  local function block(x, L, l, P, Mr, nd, Bp, nc)
    local qkv = rows(P.qkv, LN + BIAS, x, L.wqkv, L.bqkv, x, L.ln1_g, L.ln1_b)
    P.kvw(m.kv, qkv, m.slot, Mr, D, NS, l, nd, Bp, nc)
    local a = tensor(P.x)
    P.attn(a, m.kv, qkv, m.pos, m.seq, m.btab, Mr, H, Dh, NS, l, BS, NBT, scale, nd, Bp, nc)
    x = rows(P.proj, BIAS + RES, a, L.wproj, L.bproj, x, x, x)
    local h = rows(P.fc, LN + BIAS + GELU, x, L.wfc, L.bfc, x, L.ln2_g, L.ln2_b)
    return rows(P.out, BIAS + RES, h, L.wout, L.bout, x, x, x)
  end

  --- m.step(nd, nc) -> tok i32 {Bp + (1 if a chunk)}: the greedy next token of each decode row, then of the chunk's last row
  function m.step(nd, nc)
    local _, Bp = gt.bucket("decode")
    local _, Cp = gt.bucket("chunk")
    Bp, Cp = Bp or nd, Cp or nc                   -- (eagerly: the counts themselves)
    local Mr = Bp + Cp
    local Rr = Bp + (Cp > 0 and 1 or 0)
    if Mr > R then error(("paged: a step of %d rows over the model's %d"):format(Mr, R), 2) end
    local P = steps[Mr] and steps[Mr][Rr] or plan(Mr, Rr)
    local x = tensor(P.x)
    P.embed(x, m.tok, m.pos, wte, wpe, Mr, D, V, T)
    local layers = w.layers
    for l = 1, NL do x = scope(block, x, layers[l], l - 1, P, Mr, nd, Bp, nc) end
    local xs = tensor(P.xs)
    P.gather(xs, x, Rr, Bp, nc, D)
    local logits = rows(P.lm, LN, xs, w.lm, xs, xs, w.lnf_g, w.lnf_b)
    local tok = tensor(P.tok, "i32")
    P.argmax(tok, logits, Rr, V)
    return tok
  end
  return m
end

--- kernels_per_step(cfg) -> kernels one step launches
function M.kernels_per_step(c) return 6 * c.layers + 4 end

return M
