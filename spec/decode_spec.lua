-- decode_spec: examples/decode.lua's GPT-shaped decoder in the tiny config: one tree node per batch
-- bucket (not per position), tree = eager token by token and logit by logit, eot flags, the weight file.
local gt = require "gt"
require "gt.busted"
local ffi = require "ffi"
local gpt = dofile("examples/gpt.lua")

local function sh(cmd)
  local r = os.execute(cmd)
  return r == 0 or r == true
end

-- Generates with run, keeping a copy of every step's tokens and logits.
local function trace(m, run, prompt, steps, opts)
  local logits = {}
  opts = opts or {}
  opts.on_step = function(i, _, l) logits[i] = l:tolist() end
  local r = gpt.generate(m, run, prompt, steps, opts)
  r.logits = logits
  return r
end

local function max_diff(a, b)
  local d, mag = 0, 0
  for i = 1, #a do
    for j = 1, #a[i] do
      d, mag = math.max(d, math.abs(a[i][j] - b[i][j])), math.max(mag, math.abs(a[i][j]))
    end
  end
  return d, mag
end

-- -- A plain Lua reference (doubles) -------------------------------------------

local function layernorm(x, g, b)
  local n, mean, var = #x, 0, 0
  for i = 1, n do mean = mean + x[i] end
  mean = mean / n
  for i = 1, n do var = var + (x[i] - mean) ^ 2 end
  local r, y = 1 / math.sqrt(var / n + 1e-5), {}
  for i = 1, n do y[i] = (x[i] - mean) * r * g[i] + b[i] end
  return y
end

-- y[n] = x . W[n] (+ bias[n]); W a list of rows (a feature per row).
local function matvec(W, x, bias)
  local y = {}
  for n = 1, #W do
    local s, row = bias and bias[n] or 0, W[n]
    for k = 1, #x do s = s + row[k] * x[k] end
    y[n] = s
  end
  return y
end

local function gelu(v) return 0.5 * v * (1 + math.tanh(0.7978845608028654 * (v + 0.044715 * v ^ 3))) end

-- The model's weights as Lua tables (matrices {out, in}, as gpt.lua keeps them).
local function host_weights(m)
  local w, r = m.w, { layers = {} }
  for _, k in ipairs { "wte", "wpe", "lnf_g", "lnf_b" } do r[k] = w[k]:tolist() end
  for l, L in ipairs(w.layers) do
    local t = {}
    for k, v in pairs(L) do t[k] = v:tolist() end
    r.layers[l] = t
  end
  return r
end

-- A reference decoder over one sequence: step(id, pos) -> logits (a Lua table).
local function reference(cfg, hw)
  local D, H = cfg.hidden, cfg.heads
  local Dh = D / H
  local kc, vc = {}, {}
  for l = 1, cfg.layers do kc[l], vc[l] = {}, {} end
  return function(id, pos)
    local x = {}
    for d = 1, D do x[d] = hw.wte[id + 1][d] + hw.wpe[pos + 1][d] end
    for l, L in ipairs(hw.layers) do
      local qkv = matvec(L.wqkv, layernorm(x, L.ln1_g, L.ln1_b), L.bqkv)
      local k, v = {}, {}
      for d = 1, D do k[d], v[d] = qkv[D + d], qkv[2 * D + d] end
      kc[l][pos + 1], vc[l][pos + 1] = k, v
      local a = {}
      for h = 0, H - 1 do
        local sc, mx = {}, -math.huge
        for t = 1, pos + 1 do
          local s = 0
          for d = 1, Dh do s = s + qkv[h * Dh + d] * kc[l][t][h * Dh + d] end
          sc[t] = s / math.sqrt(Dh)
          mx = math.max(mx, sc[t])
        end
        local sum = 0
        for t = 1, pos + 1 do sc[t] = math.exp(sc[t] - mx); sum = sum + sc[t] end
        for d = 1, Dh do
          local s = 0
          for t = 1, pos + 1 do s = s + sc[t] * vc[l][t][h * Dh + d] end
          a[h * Dh + d] = s / sum
        end
      end
      local p = matvec(L.wproj, a, L.bproj)
      for d = 1, D do x[d] = x[d] + p[d] end
      local f = matvec(L.wfc, layernorm(x, L.ln2_g, L.ln2_b), L.bfc)
      for i = 1, #f do f[i] = gelu(f[i]) end
      local o = matvec(L.wout, f, L.bout)
      for d = 1, D do x[d] = x[d] + o[d] end
    end
    return matvec(hw.wte, layernorm(x, hw.lnf_g, hw.lnf_b))
  end
end

describe("the GPT decoder (tiny config)", function()
  local m, step
  setup(function()
    m = gpt.new(gpt.TINY)
    step = gt.tree(m.step, { name = "decode", buckets = { dim = 1, sizes = m.cfg.buckets }, warn_shapes = false })
  end)

  it("records one node per batch bucket, replayed at every position", function()
    local calls = 0
    for _, B in ipairs { 1, 3, 4, 2 } do            -- buckets 1, 4, 4, 2
      local r = gpt.generate(m, step, gpt.random_prompt(m.cfg, B, 3, B), 10, { all = true })
      assert.are.equal(10, r.steps)
      calls = calls + r.calls
    end
    local s = step:stats()
    assert.are.equal(calls, s.calls)
    assert.nodes(step, 3)
    assert.recorded(step, 3)
    assert.are.equal(0, s.eager)
    assert.is_true(s.replays >= calls - 2 * 3, s.replays .. " replays of " .. calls .. " calls")
  end)

  it("gives the eager run's tokens and logits at every step (batch 3, padded to 4)", function()
    local prompt = gpt.random_prompt(m.cfg, 3, 5, 77)
    local e = trace(m, m.step, prompt, 12, { all = true })
    trace(m, step, prompt, 12, { all = true })
    local t = trace(m, step, prompt, 12, { all = true })
    assert.are.same(e.tokens, t.tokens)
    assert.are.equal(12, #t.logits)
    for i = 1, 12 do
      assert.are.equal(3, #t.logits[i])
      assert.are.equal(m.cfg.vocab, #t.logits[i][1])
      local d, mag = max_diff(e.logits[i], t.logits[i])
      assert.is_true(mag > 0, "logits are all zero")
      assert.is_true(d <= 1e-5 * mag, "step " .. i .. ": max |diff| " .. d)
    end
    -- the tokens are the greedy picks of the logits
    for b = 1, 3 do
      local best, arg = -math.huge, nil
      for v, x in ipairs(t.logits[5][b]) do if x > best then best, arg = x, v - 1 end end
      assert.are.equal(arg, t.tokens[b][5])
    end
  end)

  it("matches a plain Lua decoder logit by logit, eager (batch 3) and through the tree (padded to 4)", function()
    local prompt = gpt.random_prompt(m.cfg, 3, 4, 31)
    local hw = host_weights(m)
    for _, run in ipairs { m.step, step } do
      if run == step then trace(m, run, prompt, 10, { all = true }) end   -- warm up and record
      local r = trace(m, run, prompt, 10, { all = true })
      for b = 1, 3 do
        local ref = reference(m.cfg, hw)
        for pos = 0, #prompt[b] - 2 do ref(prompt[b][pos + 1], pos) end
        local id = prompt[b][#prompt[b]]
        for i = 1, 10 do
          local want, got = ref(id, #prompt[b] - 2 + i), r.logits[i][b]
          local d, mag = max_diff({ want }, { got })
          assert.is_true(mag > 0.1, "reference logits near zero")
          assert.is_true(d <= 1e-4 * mag, ("sequence %d step %d: max |diff| %g of %g"):format(b, i, d, mag))
          local best = 1
          for v = 2, #want do if want[v] > want[best] then best = v end end
          assert.are.equal(best - 1, r.tokens[b][i])
          id = r.tokens[b][i]
        end
      end
    end
  end)

  -- generate(run, prompt, steps, opts) with the end token set to eot
  local function with_eot(eot, run, prompt, steps, opts)
    local old = m.cfg.eot
    m.cfg.eot = eot
    local r = gpt.generate(m, run, prompt, steps, opts)
    m.cfg.eot = old
    return r
  end

  it("stops on the end token: a device flag per sequence, read every k steps", function()
    local prompt = gpt.random_prompt(m.cfg, 2, 3, 5)
    local free = gpt.generate(m, m.step, prompt, 24, { all = true })
    -- make sequence 1's 3rd token the end token
    local eot = free.tokens[1][3]
    local r = with_eot(eot, step, prompt, 24, { check_every = 4 })
    -- sequence 1 repeats eot after it; the run stops at a check once every sequence is done
    for i = 3, r.steps do assert.are.equal(eot, r.tokens[1][i]) end
    local ended2
    for i = 1, r.steps do if r.tokens[2][i] == eot then ended2 = ended2 or i end end
    if ended2 then
      assert.is_true(r.steps % 4 == 0 or r.steps == 24)
      for i = ended2, r.steps do assert.are.equal(eot, r.tokens[2][i]) end
    else
      assert.are.equal(24, r.steps)
    end
    local d = m.done:tolist()
    assert.are.equal(1, d[1])
  end)

  it("stops early when every sequence has ended", function()
    local prompt = gpt.random_prompt(m.cfg, 1, 3, 9)
    local free = gpt.generate(m, m.step, prompt, 20, { all = true })
    local r = with_eot(free.tokens[1][2], step, prompt, 20, { check_every = 4 })
    assert.are.equal(4, r.steps)
    assert.are.same({ free.tokens[1][1], free.tokens[1][2], free.tokens[1][2], free.tokens[1][2] }, r.tokens[1])
  end)

  it("keeps one node per bucket across other step counts, end tokens and positions", function()
    assert.nodes(step, 3)                            -- buckets 1, 2, 4 from the cases above
    assert.recorded(step, 3)
  end)
end)

describe("kernels/gpt.cu", function()
  local function rand(shape, seed) return gt.randn(shape, { seed = seed, scale = 0.5 }) end

  -- rows_linear against matvec/layernorm/gelu above, for one plan.
  local function check_rows(Mr, N, Kd, mode, force)
    local x, W, bias, res = rand({ Mr, Kd }, 1), rand({ N, Kd }, 2), rand({ N }, 3), rand({ Mr, N }, 4)
    local g, beta = rand({ Kd }, 5), rand({ Kd }, 6)
    local y = gpt.rows_linear(mode, x, W, bias, res, g, beta, force):tolist()
    local X, Wl, bl, rl, gl, betal = x:tolist(), W:tolist(), bias:tolist(), res:tolist(), g:tolist(), beta:tolist()
    local bit = require "bit"
    local has = function(b) return bit.band(mode, b) ~= 0 end
    local worst = 0
    for i = 1, Mr do
      local xin = has(gpt.LN) and layernorm(X[i], gl, betal) or X[i]
      local want = matvec(Wl, xin, has(gpt.BIAS) and bl or nil)
      for n = 1, N do
        local v = want[n]
        if has(gpt.GELU) then v = gelu(v) end
        if has(gpt.RES) then v = v + rl[i][n] end
        worst = math.max(worst, math.abs(v - y[i][n]) / (1 + math.abs(v)))
      end
    end
    assert.is_true(worst < 2e-5, ("M %d N %d K %d mode %d: worst relative error %g"):format(Mr, N, Kd, mode, worst))
  end

  it("rows_linear: layernorm, bias, gelu and residual, any M (rows staged mt at a time), K split over warps", function()
    local all = gpt.LN + gpt.BIAS + gpt.GELU + gpt.RES
    check_rows(1, 37, 64, all)                                      -- the decode plan
    check_rows(3, 50, 96, gpt.LN + gpt.BIAS)                         -- M between buckets: zero rows staged
    check_rows(5, 21, 512, all, { mt = 2, S = 2, nw = 2 })          -- 3 row blocks (the last partial), 2 slices
    check_rows(16, 9, 264, gpt.BIAS + gpt.RES, { S = 4, nw = 4 })    -- slices that end mid-pass, 16 rows
    check_rows(20, 33, 32, gpt.LN, { nw = 3 })                      -- more rows than mt, 3 warps a block
    check_rows(8, 70, 128, gpt.GELU, { S = 2, nw = 3 })              -- nw not a multiple of S: a warp idles
    check_rows(2, 40, 768, all, { S = 4, nw = 8 })                  -- the GPU's block: slices of 1.5 passes
    check_rows(1, 300, 256, gpt.LN, { nw = 8 })                      -- many features a warp: the next one prefetched
    check_rows(3, 20, 1280, all)                                    -- rows longer than the 8 passes loaded ahead
  end)

  it("rows_linear refuses a K that float4 rows cannot read, naming the fix", function()
    local x, W = gt.zeros { 2, 6 }, gt.zeros { 4, 6 }
    assert.has_error(function() gpt.rows_linear(0, x, W) end,
      "gpt.rows_linear: K must be a multiple of 4 and x, W 16-byte aligned (float4 loads)")
    assert.has_error(function() gpt.rows_linear(0, gt.zeros { 2, 8 }, W) end)
  end)

  it("attn_decode stores K and V at pos and attends over positions 0..pos (Dh 8, 12, 64; long contexts)", function()
    local K = gt.load("kernels/gpt.cu")
    for _, c in ipairs { { H = 3, Dh = 8, T = 48, pos = 40, B = 2, block = 32 },
                         { H = 2, Dh = 64, T = 80, pos = 70, B = 1, block = 64 },
                         { H = 2, Dh = 12, T = 40, pos = 0, B = 2, block = 32 },     -- 10 groups, one position
                         { H = 1, Dh = 64, T = 300, pos = 299, B = 1, block = 128 } } do
      local D = c.H * c.Dh
      local kc, vc = rand({ c.B, c.T, D }, 7), rand({ c.B, c.T, D }, 8)
      local qkv = rand({ c.B, 3 * D }, 9)
      local y = gt.zeros { c.B, D }
      local scale = 1 / math.sqrt(c.Dh)
      local K0, V0, Q = kc:tolist(), vc:tolist(), qkv:tolist()
      local posd = gt.from({ c.pos }, "i32")
      K.attn_decode_f32(math.max(1, c.B * c.H - 1), c.block, y, kc, vc, qkv, c.B, c.H, c.Dh, c.T, posd, scale)  -- blocks stride
      local Y, K1 = y:tolist(), kc:tolist()
      for b = 1, c.B do
        for d = 1, D do K0[b][c.pos + 1][d], V0[b][c.pos + 1][d] = Q[b][D + d], Q[b][2 * D + d] end
        assert.are.same(K0[b][c.pos + 1], K1[b][c.pos + 1])
        assert.are.same(K0[b][c.pos + 2], K1[b][c.pos + 2])        -- later positions untouched
        for h = 0, c.H - 1 do
          local sc, mx, sum = {}, -math.huge, 0
          for t = 1, c.pos + 1 do
            local s = 0
            for d = 1, c.Dh do s = s + Q[b][h * c.Dh + d] * K0[b][t][h * c.Dh + d] end
            sc[t] = s * scale
            mx = math.max(mx, sc[t])
          end
          for t = 1, c.pos + 1 do sc[t] = math.exp(sc[t] - mx); sum = sum + sc[t] end
          for d = 1, c.Dh do
            local s = 0
            for t = 1, c.pos + 1 do s = s + sc[t] * V0[b][t][h * c.Dh + d] end
            assert.is_true(math.abs(s / sum - Y[b][h * c.Dh + d]) < 1e-5, "attention differs")
          end
        end
      end
    end
  end)
end)

describe("the weight file", function()
  it("loads weights and the prompt written in the documented layout", function()
    local c = gpt.config(gpt.TINY, { layers = 1, hidden = 8, heads = 2, vocab = 11, ctx = 16, eot = 10 })
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(gpt.MAGIC, ffi.string(ffi.new("int32_t[8]", { c.layers, c.hidden, c.heads, c.vocab, c.ctx, c.eot, 2, 3 }), 32))
    f:write(ffi.string(ffi.new("int32_t[6]", { 1, 2, 3, 4, 5, 6 }), 24))
    local D, V = c.hidden, c.vocab
    local sizes = { V * D, c.ctx * D, D, D, D * 3 * D, 3 * D, D * D, D, D, D, D * 4 * D, 4 * D, 4 * D * D, D, D, D }
    local k = 0
    for _, n in ipairs(sizes) do
      local a = ffi.new("float[?]", n)
      for i = 0, n - 1 do k = k + 1; a[i] = (k % 7) * 0.01 end
      f:write(ffi.string(a, 4 * n))
    end
    f:close()
    local cfg, w, prompt = gpt.load(path)
    os.remove(path)
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, prompt)
    assert.are.equal(11, cfg.vocab)
    assert.are.equal(10, cfg.eot)
    assert.are.same({ V, D }, w.wte.shape)
    -- wte's first values; the tied head is wte itself; matrices are kept {out, in}
    local wte = w.wte:tolist()
    assert.is_true(math.abs(wte[1][1] - 0.01) < 1e-7 and math.abs(wte[1][2] - 0.02) < 1e-7)
    assert.are.equal(w.wte, w.lm)
    local qkv = w.layers[1].wqkv
    assert.are.same({ 3 * D, D }, qkv.shape)
    local first = V * D + c.ctx * D + 2 * D          -- file index of wqkv[0][0]
    local function file_value(i) return ((first + i + 1) % 7) * 0.01 end
    local q = qkv:tolist()
    for _, e in ipairs { { 0, 0 }, { 2, 5 }, { 7, 23 } } do      -- wqkv[in = e[1]][out = e[2]] in the file
      assert.is_true(math.abs(q[e[2] + 1][e[1] + 1] - file_value(e[1] * 3 * D + e[2])) < 1e-7)
    end
    assert.is_true(math.abs(w.lnf_b:tolist()[D] - ((k % 7) * 0.01)) < 1e-7)
    local m = gpt.new(cfg, w)
    local r = gpt.generate(m, m.step, prompt, 4, { all = true })
    assert.are.equal(4, r.steps)
  end)
end)

describe("examples/decode.lua", function()
  local function run(env)
    local bin = assert(os.getenv("GTLUA_BIN"), "run the specs inside gtlua")
    local out = os.tmpname()
    local cmd = "%s timeout 120 '%s' examples/decode.lua --tiny --batches 1,3,2 > '%s' 2>&1"
    local ok = sh(string.format(cmd, env, bin, out))
    local f = io.open(out)
    local text = f:read("*a")
    f:close()
    os.remove(out)
    assert.is_true(ok, text)
    return text
  end

  it("runs the tiny config: tokens/s, eager and tree agree, one node per bucket, keyed hits", function()
    local text = run("")
    assert.matches("tokens/s", text)
    assert.matches("3 nodes %(one per batch bucket%)", text)
    assert.matches("eager and tree tokens agree", text)
    assert.not_matches("DIFFER", text)
    assert.is_true(tonumber(text:match("(%d+) keyed hits")) > 0, text)
    -- on the cpu backend the rates are said to be the same kernels' (no launch saving to show there)
    local note = text:find("cpu backend: kernels run on the host as they are launched, so eager, tree and keyed", 1, true)
    assert.are.equal(gt.backend() == "cpu", note ~= nil, text)
  end)

  it("runs with GTLUA_VERIFY_KEYS=1: every keyed call runs its body, checked against the memoized path", function()
    local text = run("env GTLUA_VERIFY_KEYS=1")
    assert.matches("eager and tree tokens agree", text)
    assert.not_matches("DIFFER", text)
    assert.are.equal("0", text:match("(%d+) keyed hits"), text)
    assert.is_true(tonumber(text:match("(%d+) verified")) > 0, text)
  end)
end)
