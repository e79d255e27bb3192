-- bench_spec: the benchmark suite in CI size (scripts/bench): every figure measured, trees replay, eager = tree, the report.
local gt = require "gt"
require "gt.busted"
local bench = dofile("scripts/bench/gtlua_bench.lua")
local report = dofile("scripts/bench/report.lua")

local S = require "spec.support"
local spit = S.spit
local function slurp(path) return S.slurp(path, true) end

-- Runs a shell command; true when it exited 0 (Lua 5.1 and 5.2+ os.execute alike).
local function sh(cmd)
  local r = os.execute(cmd)
  return r == 0 or r == true
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(sh("mkdir -p '" .. d .. "'"))
  return d
end

local function is_positive(v, what)
  assert(type(v) == "number" and v == v and v > 0 and v < math.huge, what .. " is " .. tostring(v))
end

local FIGURES = { "cpu_us", "step_us", "pipe_us" }

describe("the bench in --quick form", function()
  local res
  lazy_setup(function() res = bench.run(bench.QUICK) end)

  it("measures every scenario in eager, tree and floor mode: every figure a positive number", function()
    local names = {}
    for _, r in ipairs(res.scenarios) do
      names[#names + 1] = r.name
      for _, mode in ipairs { "eager", "tree", "floor" } do
        for _, f in ipairs(FIGURES) do is_positive(r.modes[mode][f], r.name .. " " .. mode .. " " .. f) end
      end
      is_positive(r.record.call_us, r.name .. " record call_us")
      is_positive(r.record.record_us, r.name .. " record_us")
      is_positive(r.record.instantiate_us, r.name .. " instantiate_us")
      is_positive(r.record.kernels, r.name .. " recorded kernels")
    end
    assert.are.same({ "chain", "branch", "shapes", "shapes+buckets", "grow-2", "grow-4", "grow-8",
                      "decode-1", "decode-2" }, names)
    assert.are.equal(gt.backend(), res.device.backend)
  end)

  it("replays in tree mode: every node recorded once, no eager visits", function()
    local cfg = bench.QUICK
    -- decode-B: one node, whatever the position (a scalar patched on replay)
    local want_nodes = { chain = 1, branch = 3, shapes = #cfg.batches, ["shapes+buckets"] = #cfg.batches }
    for _, r in ipairs(res.scenarios) do
      local s = r.stats
      assert.are.equal(want_nodes[r.name] or 1, s.nodes, r.name .. " nodes")
      assert.are.equal(s.nodes, s.recorded, r.name .. " recorded")
      assert.are.equal(0, s.eager, r.name .. " eager visits")
      assert.is_true(s.replays >= s.calls - 2 * s.nodes, r.name .. ": " .. s.replays .. " replays of " .. s.calls)
    end
  end)

  it("gives the same values in eager and tree mode (every variant of every scenario)", function()
    for _, r in ipairs(res.scenarios) do
      assert.is_true(r.agree.values > 0, r.name)
      assert.is_true(r.agree.max_abs > 0, r.name .. ": outputs are all zero")
      assert.is_true(r.agree.max_abs_diff <= 1e-5 * r.agree.max_abs, r.name .. ": max |diff| " .. r.agree.max_abs_diff)
    end
  end)

  it("computes the chain the tree replays: eager and replayed outputs match value by value", function()
    local cfg = bench.QUICK
    local m = bench.model(cfg)
    local x = gt.randn({ cfg.batch, cfg.hidden }, { seed = 3 })
    local want = m.chain(x):tolist()
    local step = gt.tree(function(v) return m.chain(v) end, { name = "bench_chain" })
    for _ = 1, 3 do step(x) end
    assert.replayed(step, 1)
    assert.tensor_near(want, step(x), 1e-5)
  end)

  it("writes JSON that decodes back to the same figures", function()
    local back = report.decode(bench.encode(res))
    assert.are.equal(#res.scenarios, #back.scenarios)
    local a, b = res.scenarios[1], back.scenarios[1]
    assert.are.equal(a.name, b.name)
    assert.is_true(math.abs(a.modes.tree.cpu_us - b.modes.tree.cpu_us) <= 1e-6 * a.modes.tree.cpu_us)
    assert.are.equal(res.device.name, back.device.name)
  end)
end)

describe("the bench's rounds (M.interleave)", function()
  it("pairs each mode's block with the floor's block of the same round (vs_floor_*), beside the medians", function()
    -- three rounds; the host slows down 4x in round 2 for everyone
    local seq = { tree = { { 2, 10 }, { 8, 44 }, { 3, 11 } }, floor = { { 1, 10 }, { 4, 40 }, { 1, 10 } } }
    local calls = {}
    local blocks = {}
    for name, vals in pairs(seq) do
      local i = 0
      blocks[name] = function(n)
        calls[#calls + 1] = name .. n
        i = i + 1
        local v = vals[(i - 1) % #vals + 1]
        return v[1], v[2]
      end
    end
    local out = bench.interleave(blocks, { "tree", "floor" }, 30, 3, "floor")
    assert.are.same({ "tree10", "floor10", "floor10", "tree10", "tree10", "floor10" }, calls)   -- the order turns
    assert.are.equal(3, out.tree.cpu_us)              -- medians of the blocks: 3 over 1, a ratio of 3
    assert.are.equal(1, out.floor.cpu_us)
    assert.are.equal(2, out.tree.vs_floor_cpu)        -- paired: 2, 2, 3
    assert.are.equal(1.1, out.tree.vs_floor_step)     -- paired: 1, 1.1, 1.1
    assert.is_nil(out.floor.vs_floor_cpu)
    local plain = bench.interleave(blocks, { "tree" }, 1, 1)
    assert.is_nil(plain.tree.vs_floor_cpu)
  end)
end)

describe("the bench's main thread (M.pin_main)", function()
  local ffi = require "ffi"
  local function allowed()
    local f = io.open("/proc/self/status")
    if not f then return nil end
    local text = f:read("*a")
    f:close()
    return text:match("Cpus_allowed_list:%s*(%S+)")
  end
  it("puts the calling thread on BENCH_MAIN_CPU's core alone, and pins nothing without one", function()
    assert.is_nil(bench.pin_main("none"))
    assert.is_nil(bench.pin_main(-1))
    local before = allowed()
    if ffi.os ~= "Linux" or not before then return pending("no /proc/self/status here") end
    local first = tonumber(before:match("^(%d+)"))
    pcall(ffi.cdef, "int sched_getaffinity(int pid, size_t cpusetsize, void *mask);")
    local saved = ffi.new("uint64_t[16]")
    assert.are.equal(0, ffi.C.sched_getaffinity(0, ffi.sizeof(saved), saved))
    local got = bench.pin_main(tostring(first))
    local now = allowed()
    ffi.C.sched_setaffinity(0, ffi.sizeof(saved), saved)    -- (declared by pin_main) the cores back
    assert.are.equal(first, got)
    assert.are.equal(tostring(first), now)
    assert.are.equal(before, allowed())
  end)
end)

describe("gtlua_bench.lua as a script", function()
  it("runs --quick --only chain --json FILE and prints the table", function()
    local bin = assert(os.getenv("GTLUA_BIN"), "run the specs inside gtlua")
    local json, out = os.tmpname(), os.tmpname()
    local ok = sh(string.format("timeout 60 '%s' scripts/bench/gtlua_bench.lua --quick --only chain --json '%s' > '%s' 2>&1",
      bin, json, out))
    local text = slurp(out)
    os.remove(out)
    assert.is_true(ok, text)
    assert.matches("chain%s+%d+ eager", text)
    local res = report.decode(slurp(json))
    os.remove(json)
    assert.are.equal(1, #res.scenarios)
    assert.are.equal("chain", res.scenarios[1].name)
    is_positive(res.scenarios[1].modes.floor.step_us, "floor step_us")
  end)

  it("runs --each: each selected scenario in a process of its own, joined in order; =NAME selects one", function()
    local bin = assert(os.getenv("GTLUA_BIN"), "run the specs inside gtlua")
    local json, out = os.tmpname(), os.tmpname()
    local ok = sh(string.format("timeout 120 '%s' scripts/bench/gtlua_bench.lua --quick --each " ..
      "--only =shapes,grow-2,chain --json '%s' > '%s' 2>&1", bin, json, out))
    local text = slurp(out)
    os.remove(out)
    assert.is_true(ok, text)
    local res = report.decode(slurp(json))
    os.remove(json)
    local names = {}
    for i, sc in ipairs(res.scenarios) do
      names[i] = sc.name
      is_positive(sc.modes.tree.cpu_us, sc.name .. " tree cpu_us")
    end
    assert.are.same({ "chain", "shapes", "grow-2" }, names)   -- the scenarios' order, not the option's
    assert.is_nil(res.failed)
    assert.are.same({ "shapes", "shapes+buckets" }, bench.names(bench.QUICK, "shapes"))
    assert.are.same({ "shapes" }, bench.names(bench.QUICK, "=shapes"))
  end)

  it("rejects an unknown option with its usage", function()
    assert.has_error(function() bench.parse_args { "--fast" } end,
      "usage: gtlua scripts/bench/gtlua_bench.lua [--quick] [--each] [--json FILE] [--only NAME,...]\n" ..
      "       gtlua scripts/bench/gtlua_bench.lua --merge FILE... --json FILE\nunknown argument: --fast")
    assert.are.same({ quick = true, json = "x.json" }, bench.parse_args { "--quick", "--json", "x.json" })
  end)
end)

describe("torch_twins.py without a GPU", function()
  it("fails soft: a note, status 0, and a JSON file with what it has", function()
    if not sh("command -v python3 >/dev/null 2>&1") then return pending("no python3 here") end
    local json, out = os.tmpname(), os.tmpname()
    local ok = sh(string.format("CUDA_VISIBLE_DEVICES= timeout 120 python3 scripts/bench/torch_twins.py --quick --json '%s' > '%s' 2>&1",
      json, out))
    local text = slurp(out)
    os.remove(out)
    assert.is_true(ok, text)
    assert.matches("note: ", text)
    local res = report.decode(slurp(json))
    os.remove(json)
    assert.are.equal("torch", res.tool)
    assert.is_true(#res.notes >= 1)
    assert.are.same({}, res.scenarios)
  end)
end)

-- A small synthetic run: two scenarios and one grow size for each tool.
local function synthetic(dir)
  local function m(c, s, p) return { cpu_us = c, step_us = s, pipe_us = p } end
  local function g(name, kernels, tree_cpu, grow)
    return { name = name, label = name .. " label", kernels = kernels, grow = grow,
             modes = { eager = m(100, 140, 110), tree = m(tree_cpu, 80, 60), floor = m(2, 78, 59) },
             record = { call = 2, call_us = 1500, nodes = 1, kernels = kernels, record_us = 800, instantiate_us = 300 },
             records = bench.array {},
             stats = { calls = 20, nodes = 1, recorded = 1, replays = 18, warmups = 1, eager = 0, updates = 0,
                       skipped = 0, pool_reserved = 65536, pool_high_water = 16384 },
             agree = { max_abs_diff = 0, max_abs = 0.5, values = 64 } }
  end
  local function siblings(sc)   -- each path's pool alone (M.siblings): the largest is the whole tree's
    sc.siblings = { each = bench.array { 16384, 8192 }, largest = 16384 }
    return sc
  end
  local function paired(sc)     -- paired ratios over the floor (M.interleave): the targets take these
    sc.modes.tree.vs_floor_cpu, sc.modes.tree.vs_floor_step = 1.18, 1.01
    return sc
  end
  spit(dir .. "/gtlua.json", bench.encode {
    tool = "gtlua", version = "0.1.0", backend = "cuda", date = "2026-11-29T12:00:00Z", luajit = "LuaJIT 2.1", quick = false,
    device = { backend = "cuda", name = "NVIDIA H200", cc = "9.0", sms = 132, memory = 150 * 2 ^ 30, driver = 13000, nvrtc = 13000 },
    scenarios = { g("chain", 32, 2.2), siblings(g("branch", 16, 30)), paired(g("grow-128", 128, 40, 128)) } })
  local function t(name, ro, grow)
    return { name = name, kernels = 32, grow = grow, notes = {}, record = { reduce_overhead_first_s = 12.5 },
             modes = { eager = m(851, 861, 889), cudagraph = m(2.9, 238, 231), reduce_overhead = ro } }
  end
  spit(dir .. "/torch.json", bench.encode {
    tool = "torch", device = { torch = "2.11.0", cuda = "12.8", name = "NVIDIA H200" },
    notes = { "grow-128 reduce_overhead skipped: compile predicted to take 150 s" },
    scenarios = { t("chain", m(121, 295, 193)), t("branch", m(188, 226, 209)),
                  t("grow-128", { skipped = "compile predicted to take 150 s" }, 128) } })
  spit(dir .. "/launch_floor.txt", table.concat({
    "device NVIDIA H200  driver 13000 runtime 13000  SMs 132",
    " nodes   eager_cpu_us  eager_step_us   graph_cpu_us  graph_step_us      inst_us    update_us mem_KiB/node",
    "    32          98.50         104.10           1.15          35.90        113.0          8.2         2.00",
    "   128         387.00         393.00           1.20         126.70        485.0         28.0         2.00",
    "pipelined 32-kernel step: graph 31.50 us/step, eager 97.80 us/step",
    "conditional IF node: supported", "" }, "\n"))
  spit(dir .. "/nvidia-smi.txt", "NVIDIA H200, 580.159, 143771 MiB\n")
  spit(dir .. "/cpus.txt", "2,8,10,12 main 8\n")
end

describe("report.lua", function()
  it("turns a small synthetic run into RESULTS.md with the expected tables, ratios and an SVG", function()
    local dir = tmpdir()
    synthetic(dir)
    local inp = report.write(dir)
    assert.are.same({}, inp.missing)
    local md, svg = slurp(dir .. "/RESULTS.md"), slurp(dir .. "/steps.svg")
    os.execute("rm -rf '" .. dir .. "'")
    for _, want in ipairs { "# gtlua benchmark results", "| driver | 580.159 (CUDA driver API 13.0) |",
                            "| PyTorch | 2.11.0 (CUDA 12.8) |", "### chain — chain label", "### branch — branch label",
                            "| gtlua tree (replay) | 2.20 | 80.0 | 60.0 |", "| PyTorch reduce-overhead | 121.0 | 295.0 | 193.0 |",
                            "| PyTorch CUDAGraph (hand-captured) | 2.90 | 238.0 | 231.0 |",
                            "| tree replay CPU a step (~100 ns an op) | grow-128 | 40.0 µs | ≤ 15 µs | **missed** |",
                            "| reduce-overhead CPU / tree CPU | chain | 55.00x | ≥ 40x | **met** |",
                            "| reduce-overhead CPU / tree CPU | branch | 6.27x | ≥ 40x | **missed** |",
                            "| tree step / floor step | chain | 1.03x | ≤ 1.03x | **met** |",
                            "| tree step / floor step | grow-128 | 1.01x | ≤ 1.03x | **met** |",
                            "| pool high-water of sibling paths / the largest path's alone | branch | 1.00x (16.0 KiB / 16.0 KiB) |",
                            "5 of 7 measured targets met.", "### Other ratios",
                            "| tree replay CPU / floor CPU | chain | 1.10x | (≤ 1.25x) | **met** |",
                            "| tree replay CPU / floor CPU | branch | 15.00x | (≤ 1.25x) | **missed** |",
                            "| tree replay CPU / floor CPU | grow-128 | 1.18x | (≤ 1.25x) | **met** |",
                            "| reduce-overhead CPU / tree CPU | grow-128 | — | (≥ 40x) | not measured |",
                            "| record a new path (call wall time) | grow-128 (128 kernels) | 1.50 ms | (≤ 5 ms, \"a few ms\") |",
                            "| mode \\ kernels | 128 |", "| raw CUDA graph (launch_floor) | 126.7 |",
                            "| 32 | 98.5 | 104.1 | 1.15 | 35.9 | 113.0 | 8.20 |", "![µs per step against kernel count](steps.svg)",
                            "compile predicted to take 150 s",
                            "| host cpus | 2,8,10,12 (every measured process pinned there: the quickest of a calibration); " ..
                            "each one's main thread on cpu 8 alone, the quickest |" } do
      assert.is_truthy(md:find(want, 1, true), "RESULTS.md lacks: " .. want .. "\n" .. md)
    end
    assert.matches("^<svg", svg)
    assert.matches("</svg>\n$", svg)
    assert.is_truthy(svg:find("gtlua tree (replay)", 1, true))
    assert.is_truthy(svg:find("<polyline", 1, true))
  end)

  it("writes a report that names what is missing when only gtlua ran", function()
    local dir = tmpdir()
    synthetic(dir)
    os.remove(dir .. "/torch.json")
    os.remove(dir .. "/launch_floor.txt")
    local inp = report.write(dir)
    local md = slurp(dir .. "/RESULTS.md")
    os.execute("rm -rf '" .. dir .. "'")
    assert.are.same({ "launch_floor.txt", "torch.json (not found)" }, inp.missing)
    assert.is_truthy(md:find("- missing input: torch.json (not found)", 1, true))
    assert.is_falsy(md:find("PyTorch eager", 1, true))
  end)

  it("decodes JSON: escapes, nesting, numbers, null", function()
    local v = report.decode('{"a": [1, -2.5e3, true, null, "x\\"\\u00e9\\n"], "b": {}}')
    assert.are.same({ a = { 1, -2500, true, nil, 'x"é\n' }, b = {} }, v)
    assert.has_error(function() report.decode('{"a": }') end, "bad JSON: no valid JSON value at line 1, column 7")
  end)
end)

describe("report.lua's decode table", function()
  it("gives tokens/s and host µs per token for each batch size and mode", function()
    local function m(c, p) return { cpu_us = c, step_us = p, pipe_us = p } end
    local inp = {
      gtlua = { scenarios = { { name = "decode-1", batch = 1, modes = { eager = m(500, 1000), tree = m(60, 800), floor = m(5, 790) } },
                              { name = "decode-8", batch = 8, modes = { tree = m(64, 1000) } } } },
      torch = { scenarios = { { name = "decode-8", modes = { reduce_overhead = m(400, 2000), eager = { skipped = "x" } } } } } }
    local md = report.decode_section(inp)
    for _, want in ipairs { "| mode | batch 1 tokens/s | batch 1 host µs/token | batch 8 tokens/s | batch 8 host µs/token |",
                            "| gtlua eager | 1000 | 500.0 | — | — |",
                            "| gtlua tree (replay) | 1250 | 60.0 | 8000 | 8.00 |",
                            "| PyTorch reduce-overhead | — | — | 4000 | 50.0 |" } do
      assert.is_truthy(md:find(want, 1, true), "the decode table lacks: " .. want .. "\n" .. md)
    end
    assert.is_falsy(md:find("PyTorch eager", 1, true))
    assert.is_nil(report.decode_section { gtlua = { scenarios = {} } })
  end)
end)
