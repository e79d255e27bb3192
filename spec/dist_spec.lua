-- dist_spec.lua - gt.dist and `gtlua --nproc`: the fixtures spec/fixtures/dist_*.lua
-- run as jobs of 1, 2 and 4 ranks.  Several ranks run on the cpu backend (its
-- shared-memory group: one GPU cannot hold two NCCL ranks); one rank runs on
-- the backend of the run (over NCCL on cuda).
local S = require "spec.support"
local gtlua = S.gtlua

-- `gtlua --nproc n fixture args` on the cpu backend (or the run's, cpu = false) -> status, stdout, stderr, seconds
local function job(n, fixture, args, cpu)
  local t0 = os.time()
  local st, out, err = gtlua(string.format("--nproc %d %s spec/fixtures/%s.lua %s", n, cpu == false and "" or "--backend=cpu",
                                           fixture, args or ""), { env = "GTLUA_DIST_TIMEOUT=10" })
  return st, out, err, os.time() - t0
end

-- The lines of text that rank r printed (its "[r] " prefix taken off).
local function rank_lines(text, r)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local rest = line:match("^%[" .. r .. "%] (.*)$")
    if rest then out[#out + 1] = rest end
  end
  return out
end

describe("gtlua --nproc #dist", function()
  it("sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and prefixes lines", function()
    local f = S.tmpfile([[print(os.getenv("RANK"), os.getenv("LOCAL_RANK"), os.getenv("WORLD_SIZE"),
      os.getenv("LOCAL_WORLD_SIZE"), os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT") ~= nil)]])
    local st, out = gtlua("--nproc 3 " .. S.shq(f))
    os.remove(f)
    assert.equal(0, st)
    for r = 0, 2 do
      assert.same({ string.format("%d\t%d\t3\t3\t127.0.0.1\ttrue", r, r) }, rank_lines(out, r))
    end
  end)

  it("exits with the first failure's status and stops the other ranks within seconds", function()
    local f = S.tmpfile([[if os.getenv("RANK") == "1" then os.exit(7) end
      local t = os.time() while os.time() - t < 30 do end]])
    local t0 = os.time()
    local st, _, err = gtlua("--nproc 2 " .. S.shq(f))
    os.remove(f)
    assert.equal(7, st)
    assert.matches("rank 1 exited with status 7: stopping the other ranks", err)
    assert.is_true(os.time() - t0 <= 6, "the job took " .. os.time() - t0 .. " s")
  end)

  it("refuses --nproc without a number", function()
    local st, _, err = gtlua("--nproc x -e 1")
    assert.equal(1, st)
    assert.matches("'%-%-nproc' needs a number of processes", err)
  end)
end)

describe("gt.dist #dist", function()
  for _, n in ipairs({ 2, 4 }) do
    it("gives every collective's values on " .. n .. " ranks: eager, warmup, record, replay, keyed", function()
      local st, out, err = job(n, "dist_values")
      assert.equal(0, st, err)
      for r = 0, n - 1 do
        local lines = rank_lines(out, r)
        assert.matches("^ok " .. r .. " replays=%d+ keyed_hits=%d+$", lines[#lines] or "", err)
      end
    end)
  end

  it("runs with one rank on the run's backend (NCCL on cuda)", function()
    local st, out, err = job(1, "dist_values", nil, false)
    assert.equal(0, st, err)
    assert.matches("%[0%] ok 0 ", out)
  end)

  local cases = {
    diverge = "tree 'divergent' %(spec/fixtures/dist_errors.lua:%d+%): segment 1 takes different paths across ranks: " ..
              "rank 0 queued one list of collectives, rank 1 another",
    shape = "collective #1 differs across ranks: rank 0 runs all_reduce %(sum%) of 4 f32, rank 1 runs all_reduce %(sum%) of 5 f32",
    cond = "gt.dist.all_reduce inside a gt.cond/gt.loop body of tree 'cond_coll'",
  }
  for case, want in pairs(cases) do
    it("raises on every rank, which go on: " .. case, function()
      local st, out, err = job(2, "dist_errors", case)
      assert.equal(0, st, err)
      for r = 0, 1 do
        local lines = rank_lines(out, r)
        assert.matches("^caught " .. r .. ": spec/fixtures/dist_errors.lua:%d+: gt.dist", lines[1] or "", out .. err)
        assert.matches(want, lines[1])
        assert.equal("after " .. r, lines[2])
      end
    end)
  end

  it("ends the job with a clear message when a rank errors, is killed or leaves", function()
    -- the launcher's word on rank 1, or rank 0's, whichever sees it first
    local waiting = "gt.dist: rank 1 [%a ()]+ while rank 0 waits in collective #%d+ %(all_reduce"
    local want = {
      error = "rank 1 exited with status 1: stopping the other ranks",
      kill = "rank 1 was killed by signal 9",
      leave = waiting,
    }
    for case, msg in pairs(want) do
      local st, out, err, secs = job(2, "dist_dead", case)
      assert.is_true(st ~= 0, case)
      assert.is_true(err:find(msg) ~= nil or err:find(waiting) ~= nil, case .. ": " .. err)
      assert.is_nil(out:find("not reached"), case)
      assert.is_true(secs <= 6, case .. " took " .. secs .. " s")
    end
  end)

  it("errors without a launcher or before init", function()
    local st, _, err = gtlua("-e 'gt.dist.init()'", { env = "-u RANK -u WORLD_SIZE" })
    assert.equal(1, st)
    assert.matches("%(command line%):1: gt.dist.init: RANK and WORLD_SIZE are not set: start the script with `gtlua %-%-nproc N", err)
    st, _, err = gtlua("-e 'gt.dist.all_reduce(gt.ones({2}))'")
    assert.equal(1, st)
    assert.matches("%(command line%):1: gt.dist.all_reduce: gt.dist.init%(%) has not been called", err)
    st, _, err = gtlua("-e 'print(gt.dist.rank())'")
    assert.matches("gt.dist.rank: gt.dist.init%(%) has not been called", err)
  end)
end)

-- A GTGPT001 weight file (examples/gpt.lua's load) of the CI-sized model with
-- seeded values, and a prompt of B rows of P tokens.
local function write_weights(path, c, B, P)
  local ffi = require "ffi"
  local f = assert(io.open(path, "wb"))
  f:write("GTGPT001", ffi.string(ffi.new("int32_t[8]", { c.layers, c.hidden, c.heads, c.vocab, c.ctx, c.eot, B, P }), 32))
  local ids = {}
  for i = 1, B * P do ids[i] = (i * 37 + 11) % (c.vocab - 1) end
  f:write(ffi.string(ffi.new("int32_t[?]", B * P, ids), 4 * B * P))
  local seed = 12345
  local function put(n, scale, shift)
    local buf = ffi.new("float[?]", n)
    for i = 0, n - 1 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      buf[i] = shift + scale * (seed / 2147483648 - 0.5) * 3.4
    end
    f:write(ffi.string(buf, 4 * n))
  end
  local D, V = c.hidden, c.vocab
  put(V * D, 0.02, 0); put(c.ctx * D, 0.01, 0)
  for _ = 1, c.layers do
    put(D, 0.1, 1); put(D, 0.1, 0); put(D * 3 * D, 1 / math.sqrt(D), 0); put(3 * D, 0.1, 0)
    put(D * D, 0.1, 0); put(D, 0.1, 0); put(D, 0.1, 1); put(D, 0.1, 0)
    put(D * 4 * D, 1 / math.sqrt(D), 0); put(4 * D, 0.1, 0); put(4 * D * D, 0.05, 0); put(D, 0.1, 0)
  end
  put(D, 0.1, 1); put(D, 0.1, 0)
  f:close()
end

-- A dump (GTLOG001): steps, batch, vocab, and per step tokens and logits.
local function read_dump(path)
  local ffi = require "ffi"
  local s = S.slurp(path)
  assert(s:sub(1, 8) == "GTLOG001", path .. " is not a dump")
  local h = ffi.cast("const int32_t *", s:sub(9, 20))
  local n, B, V = h[0], h[1], h[2]
  local toks, logits, at = {}, {}, 21
  for _ = 1, n do
    local t = ffi.cast("const int32_t *", s:sub(at, at + 4 * B - 1))
    for b = 0, B - 1 do toks[#toks + 1] = t[b] end
    at = at + 4 * B
    local l = ffi.cast("const float *", s:sub(at, at + 4 * B * V - 1))
    for i = 0, B * V - 1 do logits[#logits + 1] = l[i] end
    at = at + 4 * B * V
  end
  return toks, logits
end

describe("examples/tp_decode.lua #dist", function()
  for _, n in ipairs({ 2, 4 }) do
    it("on " .. n .. " ranks gives decode.lua's tokens, and its logits within 1e-5, for the same weights", function()
      local wfile, d1, d2 = os.tmpname(), os.tmpname(), os.tmpname()
      write_weights(wfile, { layers = 2, hidden = 32, heads = 4, vocab = 97, ctx = 64, eot = 96 }, 3, 4)
      local st, out, err = gtlua(string.format("--backend=cpu examples/decode.lua --weights %s --dump %s --steps 10", wfile, d1))
      assert.equal(0, st, err)
      st, out, err = job(n, "../../examples/tp_decode", string.format("--weights %s --dump %s --steps 10", wfile, d2))
      assert.equal(0, st, out .. err)
      local t1, l1 = read_dump(d1)
      local t2, l2 = read_dump(d2)
      os.remove(wfile); os.remove(d1); os.remove(d2)
      assert.equal(30, #t1)
      assert.same(t1, t2)
      assert.equal(#l1, #l2)
      local worst = 0
      for i = 1, #l1 do worst = math.max(worst, math.abs(l1[i] - l2[i]) / math.max(1, math.abs(l1[i]))) end
      assert.is_true(worst < 1e-5, "largest relative logit difference " .. worst)
      assert.matches("%[0%] tree 'tp_decode'", out)
    end)
  end
end)
