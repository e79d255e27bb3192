-- tp_decode.lua: greedy decoding of examples/gpt.lua's GPT-2 split across
-- ranks, tensor-parallel (Megatron's split), one gt.tree per rank whose
-- recorded step holds the all-reduces and the all-gather.
--
--   gtlua --nproc 2 examples/tp_decode.lua [--tiny|--full] [--batch B] [--prompt N] [--steps N] [--seed N]
--   gtlua --nproc 2 examples/tp_decode.lua --weights FILE --dump OUT [--steps 32]
--
-- Every rank holds the embeddings (replicated) and its share of each layer:
-- heads wq/wk/wv and fc features by rows (column-parallel: no communication),
-- the attention projection and fc2 by their input columns (row-parallel: a
-- partial sum, all-reduced; rank 0 adds the bias and the residual in the
-- kernel before it, so both count once), its heads' KV cache, and a slice
-- of the vocabulary for the LM head, whose logits are all-gathered and put
-- back in vocabulary order for the same argmax kernel as one GPU's.  The
-- tokens equal examples/decode.lua's for the same weights (spec/dist_spec.lua);
-- --dump writes decode.lua's dump format (rank 0).  Loaded with dofile it
-- returns { new_model = fn(cfg, weights, rank, world), gpt = gpt.lua's module }.
local gt = require "gt"
local ffi = require "ffi"
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "examples"
local gpt = dofile(here .. "/gpt.lua")
local dist = gt.dist
local I = require "gt.internal"
local C, rt = I.C, I.rt
local ceil, min, sqrt = math.ceil, math.min, math.sqrt

local USAGE = "usage: gtlua --nproc N examples/tp_decode.lua [--tiny|--full] [--batch B] [--prompt N] [--steps N] " ..
  "[--seed N] [--weights FILE [--dump OUT]]"

local function parse(argv)
  local o, i = {}, 1
  local valued = { ["--batch"] = true, ["--prompt"] = true, ["--steps"] = true, ["--seed"] = true,
                   ["--weights"] = true, ["--dump"] = true }
  while i <= #argv do
    local a = argv[i]
    if a == "--tiny" or a == "--full" then o.size = a:sub(3)
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    elseif valued[a] and argv[i + 1] then o[a:sub(3)] = argv[i + 1]; i = i + 1
    else error(USAGE .. "\nbad argument: " .. tostring(a), 0) end
    i = i + 1
  end
  return o
end

-- -- The split ------------------------------------------------------------------

-- A new tensor {rows, cols} from host floats f(r, c) (0-based).
local function host_tensor(rows, cols, f)
  local buf = ffi.new("float[?]", rows * cols)
  for r = 0, rows - 1 do for c = 0, cols - 1 do buf[r * cols + c] = f(r, c) end end
  local t = gt.tensor({ rows, cols })
  if C.gt_buf_write(rt, t._b, t._off, buf, t._nb) ~= 0 then error(I.errmsg(), 2) end
  return t:static()
end

-- Rank r's share of full weights w (each {out, in}, a feature per row) for world W.
local function split(c, w, r, W)
  local D, V = c.hidden, c.vocab
  local Dl, Vl = D / W, ceil(V / W)
  local function rows_of(t, groups, per)          -- the feature rows [g * per*W + r*per, +per) of each group, in order
    local K = t.numel / (groups * per * W)
    local src = gpt.read_f32(t)
    return host_tensor(groups * per, K, function(i, k)
      local g, j = math.floor(i / per), i % per
      return src[(g * per * W + r * per + j) * K + k]
    end)
  end
  local function cols_of(t, per)                  -- the input columns [r*per, +per) of every row
    local N, K = t:size(1), t:size(2)
    local src = gpt.read_f32(t)
    return host_tensor(N, per, function(n, k) return src[n * K + r * per + k] end)
  end
  local function vec(t, groups, per)
    local v = rows_of(t:view({ t.numel, 1 }), groups, per)
    return v:view({ groups * per })
  end
  local s = { wte = w.wte, wpe = w.wpe, lnf_g = w.lnf_g, lnf_b = w.lnf_b, layers = {} }
  local lm = gpt.read_f32(w.lm)                    -- vocabulary rows [r*Vl, +Vl), zero past V
  s.lm = host_tensor(Vl, D, function(i, k) local v = r * Vl + i; return v < V and lm[v * D + k] or 0 end)
  for l, L in ipairs(w.layers) do
    s.layers[l] = {
      ln1_g = L.ln1_g, ln1_b = L.ln1_b, ln2_g = L.ln2_g, ln2_b = L.ln2_b,
      wqkv = rows_of(L.wqkv, 3, Dl), bqkv = vec(L.bqkv, 3, Dl),
      wproj = cols_of(L.wproj, Dl), bproj = L.bproj,
      wfc = rows_of(L.wfc, 1, 4 * Dl), bfc = vec(L.bfc, 1, 4 * Dl),
      wout = cols_of(L.wout, 4 * Dl), bout = L.bout,
    }
  end
  return s, Vl
end

-- -- The model ------------------------------------------------------------------------

-- logits[b, v] = gathered[v // Vl][b][v % Vl] for v < V: the ranks' slices in vocabulary order.
local PERMUTE = [[
__global__ void vocab_order_f32(float *logits, const float *gathered, int B, int V, int Vl) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)B * V; i += (long long)blockDim.x * gridDim.x) {
    int b = (int)(i / V), v = (int)(i - (long long)b * V);
    logits[i] = gathered[((long long)(v / Vl) * B + b) * Vl + (v % Vl)];
  }
}]]

local function new_model(c, w, r, W)
  local s, Vl = split(c, w, r, W)
  local D, H, V, T, NL = c.hidden, c.heads, c.vocab, c.ctx, c.layers
  local Hl, Dh = H / W, D / H
  local Dl = Hl * Dh
  local Bmax = c.buckets[#c.buckets]
  local K = gt.load("kernels/gpt.cu")
  local P = gt.compile(PERMUTE)
  local CPU = gt.backend() == "cpu"
  local m = { cfg = c, kc = {}, vc = {}, bmax = Bmax }
  for l = 1, NL do
    m.kc[l] = gt.zeros({ Bmax, T, Dl }):static()
    m.vc[l] = gt.zeros({ Bmax, T, Dl }):static()
  end
  m.done = gt.zeros({ Bmax }, "i32"):static()
  m.hist = gt.zeros({ Bmax, T }, "i32"):static()
  m.posd = gt.zeros({ 1 }, "i32"):static()
  local LN, BIAS, GELU, RES = gpt.LN, gpt.BIAS, gpt.GELU, gpt.RES
  local lin = gpt.rows_linear
  local lead = r == 0                             -- the rank that adds the row-parallel biases and residuals
  local scale = 1 / sqrt(Dh)

  local function block(x, L, kc, vc, B)
    local qkv = lin(LN + BIAS, x, L.wqkv, L.bqkv, x, L.ln1_g, L.ln1_b)
    local a = gt.tensor({ B, Dl })
    K.attn_decode_f32:config(min(B * Hl, 65535), CPU and 32 or 512)(a, kc, vc, qkv, B, Hl, Dh, T, m.posd, scale)
    x = dist.all_reduce(lead and lin(BIAS + RES, a, L.wproj, L.bproj, x, x, x) or lin(0, a, L.wproj))
    local h = lin(LN + BIAS + GELU, x, L.wfc, L.bfc, x, L.ln2_g, L.ln2_b)
    return dist.all_reduce(lead and lin(BIAS + RES, h, L.wout, L.bout, x, x, x) or lin(0, h, L.wout))
  end

  function m.step(ids, pos, live)
    local B = ids:size(1)
    local x = gt.tensor({ B, D })
    K.embed_pos_f32:config(math.max(1, min(ceil(B * D / 256), 4096)), 256)(x, m.posd, ids, s.wte, s.wpe, B, D, V, pos)
    for l = 1, NL do x = gt.scope(block, x, s.layers[l], m.kc[l], m.vc[l], B) end
    local part = lin(LN, x, s.lm, x, x, s.lnf_g, s.lnf_b)                 -- {B, Vl}
    local gathered = dist.all_gather(gt.tensor({ W, B, Vl }), part)
    local logits = gt.tensor({ B, V })
    P.vocab_order_f32:config(math.max(1, min(ceil(B * V / 256), 4096)), 256)(logits, gathered, B, V, Vl)
    local tok = gt.tensor({ B }, "i32")
    K.argmax_finish_f32:config(min(B, 65535), CPU and 32 or 1024)(tok, m.done, m.hist, logits, B, V, c.eot, live or 0,
                                                                  m.hist:size(2), m.posd)
    return tok, logits
  end
  return m
end

-- -- Main ---------------------------------------------------------------------------------

local function write_dump(path, B, V)
  local f = assert(io.open(path, "wb"))
  local n = 0
  f:write("GTLOG001", ffi.string(ffi.new("int32_t[3]", { 0, B, V }), 12))
  return function(_, tok, logits)
    f:write(ffi.string(ffi.new("int32_t[?]", B, tok:tolist()), 4 * B))
    f:write(ffi.string(gpt.read_f32(logits), 4 * B * V))
    n = n + 1
  end, function()
    f:seek("set", 8)
    f:write(ffi.string(ffi.new("int32_t[1]", { n }), 4))
    f:close()
    return n
  end
end

local function main(argv)
  io.stdout:setvbuf("line")
  local o = parse(argv)
  local r, W = dist.init()
  local size = o.size or (gt.backend() == "cpu" and "tiny" or "full")
  local cfg, w, prompt
  if o.weights then
    cfg, w, prompt = gpt.load(o.weights)
  else
    cfg = gpt.config(size == "tiny" and gpt.TINY or gpt.FULL, { seed = tonumber(o.seed) })
    w = gpt.random_weights(cfg, cfg.seed)            -- (the same on every rank: seeded on the device)
  end
  if cfg.heads % W ~= 0 or ((cfg.hidden / W) % 4) ~= 0 then
    error(("tp_decode: %d heads of hidden %d do not split over %d ranks"):format(cfg.heads, cfg.hidden, W), 0)
  end
  local m = new_model(cfg, w, r, W)
  local buckets = { dim = 1, sizes = cfg.buckets, narrow = { 1, 2 } }
  local step = gt.tree(m.step, { name = "tp_decode", buckets = buckets, warn_shapes = false })
  local steps = tonumber(o.steps) or (o.dump and 32 or 12)
  prompt = prompt and #prompt > 0 and prompt or gpt.random_prompt(cfg, tonumber(o.batch) or 1, tonumber(o.prompt) or 4, 1001)
  if r == 0 then
    print(("tp decode: backend %s, %d ranks, %d layers, hidden %d, %d heads (%d a rank), vocab %d (%d a rank)")
      :format(gt.backend(), W, cfg.layers, cfg.hidden, cfg.heads, cfg.heads / W, cfg.vocab, ceil(cfg.vocab / W)))
  end
  gpt.generate(m, step, prompt, steps, { all = true })          -- warm up and record
  local on_step, close
  if o.dump and r == 0 then on_step, close = write_dump(o.dump, #prompt, cfg.vocab) end
  local res = gpt.generate(m, step, prompt, steps, { all = true, on_step = on_step })
  local t = gpt.generate(m, step, prompt, steps, { all = true })
  if r == 0 then
    if close then print(("wrote %d steps of tokens and logits to %s"):format(close(), o.dump)) end
    for b = 1, #res.tokens do print(("  sequence %d: %s"):format(b, table.concat(res.tokens[b], " "))) end
    print(("%.1f host us/step, %.1f ms a generation of %d steps (synced)"):format(t.host_us, t.seconds * 1e3, t.steps))
    print(step)
  end
end

-- Run as the script: main; loaded with dofile (scripts/bench/tp_bench.lua): the model's functions.
if arg and arg[0] and arg[0]:match("tp_decode%.lua$") then main({ ... }) end
return { new_model = new_model, gpt = gpt }
