-- serve_spec.lua - examples/serve.lua (continuous batching, chunked prefill, a paged KV cache,
-- one keyed tree with count buckets) run as a subprocess: --check decodes every request alone
-- and must find every token identical, over enough shapes and with preemption; the check
-- can fail; the PyTorch twin's scheduler makes the same steps; warm-up and a recording limit
-- that evicts leave the tokens as they are.
local json = require "gt.json"
local S = require "spec.support"

-- Runs examples/serve.lua --tiny (size: --full) with args: exit status, output, the JSON metrics.
local function serve(args, size)
  local js = os.tmpname()
  local status, out, err = S.sh(('timeout 170 "$GTLUA" examples/serve.lua %s --json %s %s'):format(size or "--tiny",
    S.shq(js), args))
  local m = S.slurp(js)
  os.remove(js)
  return status == 0, out .. err, m and m ~= "" and json.decode(m) or nil
end

describe("examples/serve.lua", function()
  it("--check: 40 requests served on one keyed tree give the tokens each gives alone, over >= 8 shapes, with preemption", function()
    local ok, text, m = serve("--check")
    assert.is_true(ok, text)
    local nreq, ntok = text:match("serve %-%-check: (%d+) requests, (%d+) tokens identical")
    assert.truthy(nreq, text)
    assert.is_true(tonumber(nreq) >= 30, text)
    assert.are.equal(m.output_tokens, tonumber(ntok))
    assert.is_true(m.shapes >= 8, text)
    assert.is_true(m.preemptions >= 1, text)
    assert.is_true(m.tree.keyed_hits > m.steps / 2, text)      -- most steps launch their path without the body
    assert.is_true(m.tree.nodes <= m.shapes, text)              -- a node per bucket pair, whatever the real counts
    for _, k in ipairs { "p50", "p90", "p99" } do
      assert.is_number(m.ttft_s[k]); assert.is_number(m.tpot_s[k])
    end
    assert.is_number(m.step_s.p99)
    assert.is_number(m.tree.pool_high_water)
    assert.matches("steps by %(decode x chunk%) bucket: ", text)
    assert.matches("tree 'serve'", text)                        -- the tree drawn: its paths and their visits
  end)

  it("--check fails, naming the request, when a served token differs", function()
    local ok, text = serve("--check --requests 8 --corrupt 3")
    assert.is_false(ok, text)
    assert.matches("serve %-%-check: tokens differ: request 3 ", text)
  end)

  it("schedules as scripts/bench/serve_twin.py does: the same steps, shapes and preemptions on the same workload", function()
    local ok, text, m = serve("--requests 14 --ignore-eot")
    assert.is_true(ok, text)
    local js = os.tmpname()
    local status, out, err = S.sh(("python3 scripts/bench/serve_twin.py --tiny --dry --requests 14 --json %s"):format(S.shq(js)))
    assert.are.equal(0, status, out .. err)
    local twin = json.decode(S.slurp(js)).modes.dry
    assert.are.equal(m.steps, twin.steps)
    assert.are.equal(m.preemptions, twin.preemptions)
    assert.are.same(m.steps_by_shape, twin.steps_by_shape)
    assert.are.equal(m.output_tokens, twin.output_tokens)
    assert.is_true(math.abs(m.ttft_s.p90 - twin.ttft_s.p90) < 1e-9)   -- (the steps clock: the same virtual times)
  end)

  it("--check with bf16 weights (f32 activations and KV cache): the tokens each request gives alone", function()
    local ok, text, m = serve("--check --requests 12 --dtype bf16")
    assert.is_true(ok, text)
    assert.matches("serve %-%-check: 12 requests, %d+ tokens identical", text)
    assert.are.equal("bf16", m.dtype)
  end)

  it("reads a trace file, one request a line (arrival, prompt length, output length)", function()
    local trace = S.tmpfile("# arrival_s prompt output\n0 5 3\n0.001 17 6\n0.5 2 9\n")
    local ok, text, m = serve("--check --trace " .. S.shq(trace))
    os.remove(trace)
    assert.is_true(ok, text)
    assert.matches("serve %-%-check: 3 requests, 18 tokens identical", text)
    assert.are.equal(3, m.requests)
  end)

  it("warms every bucket pair ahead of time, and with a recording limit evicts and still serves every token right", function()
    local ok, text, m = serve("--requests 10 --warm --mode tree")
    assert.is_true(ok, text)
    assert.matches("serve: warmed 19 paths %(19 settled%)", text)
    assert.are.equal(0, m.new_path_steps.count)                 -- every path was recorded before the first request
    ok, text, m = serve("--check --requests 10 --max-recordings 4")
    assert.is_true(ok, text)
    assert.is_true(m.tree.evictions >= 1, text)
    assert.matches("serve %-%-check: 10 requests", text)
  end)
end)

describe("examples/serve.lua with GPT-2 small on cuda #gpu", function()
  it("--check: 32 requests over 8 decode and 4 chunk buckets give the tokens each gives alone", function()
    local ok, text, m = serve("--check --requests 32 --prompt 16:128 --output 16:64 --clock steps --warm", "--full")
    assert.is_true(ok, text)
    assert.matches("serve %-%-check: 32 requests, %d+ tokens identical", text)
    assert.is_true(m.shapes >= 8, text)
    assert.are.equal(0, m.new_path_steps.count, text)           -- (warmed: no step met a new path)
    print(text:match("serve: 32 requests[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*"))
  end)
end)
