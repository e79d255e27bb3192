-- speculative_spec: examples/speculative.lua's greedy speculative decoding (examples/spec_kernels.lua)
-- in a CI-sized model: every mode emits the target's plain greedy tokens, the device-decided step is
-- one node that makes no host transfer, and the host-decided one reads and writes once a step.
local gt = require "gt"
require "gt.busted"
local S = require "spec.support"
local gpt = dofile("examples/gpt.lua")
local spec = dofile("examples/spec_kernels.lua")

local cfg = gpt.config(gpt.TINY, { layers = 4, ctx = 128 })
local m = gpt.new(cfg, gpt.random_weights(cfg, 1))
spec.scale_upper(m, 2, 0.05)             -- a draft of the first layer agrees most of the time
local P = 4

local function plain(model, prompt, N) return gpt.generate(model, model.step, prompt, N, { all = true }).tokens end

local function assert_same(want, got, what)
  for b = 1, #want do
    assert.are.same(want[b], got[b], what .. ", sequence " .. b)
  end
end

describe("speculative decoding", function()
  it("emits the target's plain greedy tokens in every mode, 64 tokens at batch 1 and 3, eagerly and as trees", function()
    for _, B in ipairs { 1, 3 } do
      local prompt = gpt.random_prompt(cfg, B, P, 1000 + B)
      local want = plain(m, prompt, 64)
      local d = spec.new(gpt, m, { k = 4, draft_layers = 1, batch = B, tokens = 64, prompt = P, every = 4 })
      for _, mode in ipairs { "host", "device", "loop" } do
        local body = spec.body(d, mode)
        if B == 1 then assert_same(want, d:generate(prompt, mode, body).tokens, ("batch %d, %s, eager"):format(B, mode)) end
        local tree = gt.tree(body)
        local r = d:generate(prompt, mode, tree)     -- its calls warm up, record and replay
        assert_same(want, r.tokens, ("batch %d, %s, tree"):format(B, mode))
        assert.truthy(tree:stats().replays >= 2)
        assert.nodes(tree, 1)
        assert.truthy(r.rate > 0.5, "acceptance " .. r.rate)
        print(("speculative batch %d %-6s: acceptance %.2f, %.2f tokens a step"):format(B, mode, r.rate,
          r.emitted / r.steps))
      end
    end
  end)

  it("agrees when the draft rarely does, with one proposal or several, and sequences accept different counts", function()
    local raw = gpt.new(cfg, gpt.random_weights(cfg, 2))      -- unscaled: the draft is a poor guess
    local prompt = gpt.random_prompt(cfg, 2, 3, 77)
    local want = plain(raw, prompt, 24)
    for _, k in ipairs { 1, 3 } do
      local d = spec.new(gpt, raw, { k = k, draft_layers = 2, batch = 2, tokens = 24, prompt = 3, every = 3 })
      local r
      for _, mode in ipairs { "host", "device", "loop" } do
        r = d:generate(prompt, mode, gt.tree(spec.body(d, mode)))
        assert_same(want, r.tokens, ("k %d, %s"):format(k, mode))
      end
      print(("speculative unscaled k %d: acceptance %.2f"):format(k, r.rate))
    end
  end)

  it("ends a sequence at the end token as the plain decoder does (eot after it), in every mode", function()
    local prompt = gpt.random_prompt(cfg, 3, P, 4242)
    local first = plain(m, prompt, 40)
    local c2 = gpt.config(cfg, { eot = first[2][9] })       -- a token sequence 2 emits early
    local m2 = gpt.new(c2, m.w)
    local want = plain(m2, prompt, 40)
    assert.equal(c2.eot, want[2][40])
    local d = spec.new(gpt, m2, { k = 4, draft_layers = 1, batch = 3, tokens = 40, prompt = P, every = 2 })
    for _, mode in ipairs { "host", "device", "loop" } do
      assert_same(want, d:generate(prompt, mode, gt.tree(spec.body(d, mode))).tokens, mode)
    end
  end)

  it("decides on the device with one node per step shape and no host transfer a step; the host mode reads and writes once", function()
    local prompt = gpt.random_prompt(cfg, 3, P, 5)
    local d = spec.new(gpt, m, { k = 4, draft_layers = 1, batch = 3, tokens = 64, prompt = P, every = 4 })
    local step = gt.tree(d.device_step)
    d:generate(prompt, "device", step)               -- warm up and record
    d:prefill(prompt)
    local x0 = gt.transfers()
    for _ = 1, 6 do step() end
    assert.are.same(x0, gt.transfers())              -- six steps: no read, write or sync
    assert.nodes(step, 1)
    local r = d:generate(prompt, "device", step)
    assert.equal(2 * math.ceil(r.calls / 4), r.reads)   -- the tokens so far and the progress flag, every 4 steps
    assert.are.same({ 0, 0 }, { r.writes, r.syncs })
    local loop = gt.tree(d.loop_steps)
    for _ = 1, 2 do r = d:generate(prompt, "loop", loop) end
    assert.equal(2 * r.calls, r.reads)               -- one launch and two reads per 4 steps
    assert.equal(math.ceil(r.rounds / 4), r.calls)
    assert.nodes(loop, 1)
    local host = gt.tree(d.host_step)
    for _ = 1, 2 do r = d:generate(prompt, "host", host) end
    assert.are.same({ r.rounds, r.rounds }, { r.reads, r.writes })
  end)

  it("runs from the command line: tokens agree, the acceptance rate, a token dump", function()
    local out_file = os.tmpname()
    local status, out, err = S.gtlua("examples/speculative.lua --batches 2 --tokens 16 --dump " .. S.shq(out_file))
    assert.equal(0, status, err)
    assert.truthy(out:find("every mode's tokens agree", 1, true), out)
    assert.truthy(out:find("accept %d%.%d%d"), out)
    local f = assert(io.open(out_file, "rb"))
    local data = f:read("*a")
    f:close()
    os.remove(out_file)
    assert.equal("GTTOK001", data:sub(1, 8))
    assert.equal(8 + 8 + 4 * 16 * 2, #data)
  end)
end)

describe("speculative decoding of GPT-2 small on cuda #gpu", function()
  it("emits the plain greedy tokens in every mode at batch 1 and 3 (the verify pass's sums split as plain's)", function()
    local c = gpt.config(gpt.FULL)
    local big = gpt.new(c, gpt.random_weights(c, 1))
    spec.scale_upper(big, 3, 0.05)
    for _, B in ipairs { 1, 3 } do
      local prompt = gpt.random_prompt(c, B, 8, 2000 + B)
      local want = plain(big, prompt, 32)
      local d = spec.new(gpt, big, { k = 4, draft_layers = 2, batch = B, tokens = 32, prompt = 8 })
      for _, mode in ipairs { "host", "device", "loop" } do
        local r = d:generate(prompt, mode, gt.tree(spec.body(d, mode)))
        assert_same(want, r.tokens, ("GPT-2 small, batch %d, %s"):format(B, mode))
        print(("speculative GPT-2 small batch %d %-6s: acceptance %.2f"):format(B, mode, r.rate))
      end
    end
  end)
end)

-- A weight file (gpt.lua's GTGPT001 layout) of model w's weights (matrices
-- written {in, out}) and a prompt; its path.
local function weight_file(c, w, prompt)
  local ffi = require "ffi"
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  local B, Pn = #prompt, #prompt[1]
  f:write(gpt.MAGIC, ffi.string(ffi.new("int32_t[8]", { c.layers, c.hidden, c.heads, c.vocab, c.ctx, c.eot, B, Pn }), 32))
  local ids = {}
  for b = 1, B do for t = 1, Pn do ids[#ids + 1] = prompt[b][t] end end
  f:write(ffi.string(ffi.new("int32_t[?]", #ids, ids), 4 * #ids))
  local function put(t, matrix)
    if matrix then t = t:t() end                   -- kept {out, in}: the file has {in, out}
    local v = gpt.read_f32(t)
    f:write(ffi.string(v, 4 * t.numel))
  end
  put(w.wte) put(w.wpe)
  for l = 1, c.layers do
    local L = w.layers[l]
    for _, e in ipairs { { "ln1_g" }, { "ln1_b" }, { "wqkv", true }, { "bqkv" }, { "wproj", true }, { "bproj" },
                         { "ln2_g" }, { "ln2_b" }, { "wfc", true }, { "bfc" }, { "wout", true }, { "bout" } } do
      put(L[e[1]], e[2])
    end
  end
  put(w.lnf_g) put(w.lnf_b)
  f:close()
  return path
end

describe("examples/speculative.lua --weights", function()
  it("decodes a weight file's prompt with the file's weights, every mode agreeing with plain greedy decoding", function()
    local c = gpt.config(gpt.TINY, { layers = 3 })
    local m3 = gpt.new(c, gpt.random_weights(c, 3))
    spec.scale_upper(m3, 2, 0.1)                     -- (written scaled: the file's weights are the target's)
    local path = weight_file(c, m3.w, gpt.random_prompt(c, 2, 5, 9))
    local status, out, err = S.gtlua("examples/speculative.lua --weights " .. S.shq(path) .. " --tokens 12 --k 3 " ..
      "--draft-layers 1")
    os.remove(path)
    assert.equal(0, status, err)
    assert.truthy(out:find("weights from ", 1, true), out)
    assert.truthy(out:find("batch 2: 5 prompt + 12 generated", 1, true), out)
    assert.truthy(out:find("every mode's tokens agree", 1, true), out)
  end)
end)

describe("the speculative bench scenario", function()
  it("runs quick, every mode agreeing, and tabulates it beside a twin's JSON", function()
    local g, t = os.tmpname(), os.tmpname()
    local status, out, err = S.gtlua("scripts/bench/spec_bench.lua --quick --json " .. S.shq(g))
    assert.equal(0, status, err)
    for _, mode in ipairs { "plain", "host", "device", "loop" } do
      assert.truthy(out:find("| 1 | gtlua | " .. mode .. " |", 1, true), out)
    end
    assert.is_nil(out:find("DIFFER", 1, true), out)
    S.spit(t, [[{"tool": "torch", "compiled": true, "scenarios": [{"batch": 2, "modes": {
      "plain": {"tokens_s": 500.5, "host_us_token": 80.1},
      "host": {"tokens_s": 900.25, "host_us_token": 120, "acceptance": 0.9, "tokens_per_step": 4.5,
               "reads_per_step": 1, "agree": 0.98}}}]}]])
    status, out, err = S.gtlua("scripts/bench/spec_bench.lua --table " .. S.shq(g) .. " " .. S.shq(t))
    os.remove(g)
    os.remove(t)
    assert.equal(0, status, err)
    assert.truthy(out:find("| 2 | PyTorch reduce-overhead | host | 900.3 | 120.00 | 0.90 | 4.50 | 1.00 | - | 98% = plain |",
      1, true), out)
  end)
end)
