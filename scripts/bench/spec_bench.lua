-- spec_bench: the speculative scenario: greedy decoding of a GPT-2-small target, plain and speculative.
--
--   gtlua scripts/bench/spec_bench.lua [--quick] [--json FILE]
--   gtlua scripts/bench/spec_bench.lua --table GTLUA.json [TORCH.json ...] [--out FILE]
--
-- The target is examples/gpt.lua's GPT-2-small-shaped model (random weights,
-- f32) whose layers past the draft's have their output projections scaled by
-- `upper`, so that the draft (its first draft_layers layers with its head)
-- agrees most of the time; each batch generates `tokens` tokens per
-- sequence after a prompt of `prompt`, with k proposals a step
-- (examples/spec_kernels.lua):
--   plain   gpt.lua's step in a tree with batch buckets (decode.lua's), one token a call
--   host    speculative, the acceptance on the host: a tree call a step that reads the
--           token table back (a sync) and writes the next state
--   device  speculative, acceptance and positions on the device, the draft loop a
--           gt.loop: one graph launch a step, the host reads the progress every `every` steps
--   loop    the whole generation a gt.loop, `every` steps a tree call (one launch)
-- Each mode generates once (warm-up, recording), then `runs` times timed;
-- the figures are medians over those: tokens/s (batch x tokens over the
-- generation's synced wall time) and host µs per token (the host's time in
-- the calls over batch x tokens: what the host pays a token).  Every mode's
-- tokens must equal plain's (`agree`).  PyTorch's twin is spec_twin.py;
-- --table prints both side by side as markdown (spec.sh writes it).
-- Loaded with dofile() the file returns its functions.
local gt = require "gt"

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local Bn = dofile(here .. "gtlua_bench.lua")
local gpt = dofile(here .. "../../examples/gpt.lua")
local spec = dofile(here .. "../../examples/spec_kernels.lua")
local json = require "gt.json"

local M = {}
local format, max = string.format, math.max

M.FULL = { layers = 12, draft_layers = 2, k = 4, upper = 0.05, tokens = 128, prompt = 8, every = 8,
           batches = { 1, 8 }, runs = 5 }
M.QUICK = { layers = 4, ctx = 128, tiny = true, draft_layers = 1, k = 4, upper = 0.05, tokens = 24, prompt = 4,
            every = 4, batches = { 1, 2 }, runs = 2, quick = true }
M.MODES = { "plain", "host", "device", "loop" }

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

local function same_tokens(a, b)
  for s = 1, #a do for i = 1, #a[s] do if a[s][i] ~= b[s][i] then return false end end end
  return true
end

-- generate() runs times after one untimed: the medians, the last result.
local function timed(runs, B, N, generate)
  generate()
  local rates, hosts, r = {}, {}, nil
  for i = 1, runs do
    r = generate()
    rates[i] = B * N / r.seconds
    hosts[i] = r.host_total * 1e6 / (B * N)
  end
  return { tokens_s = median(rates), host_us_token = median(hosts), calls = r.calls }, r
end

-- One batch: plain and the three speculative modes.
local function batch(cfg, m, B)
  local N, P = cfg.tokens, cfg.prompt
  local prompt = gpt.random_prompt(m.cfg, B, P, 1000 + B)
  local s = { name = "spec-" .. B, batch = B, modes = {} }
  local step = gt.tree(m.step, { name = "plain", buckets = { dim = 1, sizes = m.cfg.buckets, narrow = { 1, 2 } },
                                 warn_shapes = false })
  local ref
  s.modes.plain, ref = timed(cfg.runs, B, N, function()
    local r = gpt.generate(m, step, prompt, N, { all = true })
    r.host_total = r.host_us * r.calls * 1e-6
    return r
  end)
  s.modes.plain.nodes = step:stats().nodes
  local d = spec.new(gpt, m, { k = cfg.k, draft_layers = cfg.draft_layers, batch = B, tokens = N, prompt = P,
                               every = cfg.every })
  for _, mode in ipairs { "host", "device", "loop" } do
    local tree = gt.tree(spec.body(d, mode), { name = "spec-" .. mode })
    local row, r = timed(cfg.runs, B, N, function()
      local r = d:generate(prompt, mode, tree)
      r.host_total = r.host_us * r.calls * 1e-6
      return r
    end)
    local rounds = max(r.rounds, 1)
    row.agree = same_tokens(ref.tokens, r.tokens)
    row.acceptance, row.tokens_per_step = r.rate, r.emitted / max(r.steps, 1)
    row.steps, row.reads_per_step, row.writes_per_step = r.rounds, r.reads / rounds, r.writes / rounds
    row.nodes = tree:stats().nodes
    s.modes[mode] = row
    s.acceptance = r.rate
  end
  return s
end

--- run(cfg) -> results (every batch, with device info)
function M.run(cfg)
  Bn.pin_main()                                  -- (run.sh's BENCH_MAIN_CPU, as gtlua_bench.lua)
  local c = cfg.tiny and gpt.config(gpt.TINY, { layers = cfg.layers, ctx = cfg.ctx }) or gpt.config(gpt.FULL)
  local m = gpt.new(c, gpt.random_weights(c, 1))
  spec.scale_upper(m, cfg.draft_layers + 1, cfg.upper)
  local res = { tool = "gtlua", version = gt.version, backend = gt.backend(), device = gt.device(),
                date = os.date("!%Y-%m-%dT%H:%M:%SZ"), quick = cfg.quick or false, scenarios = json.array {},
                config = { layers = c.layers, hidden = c.hidden, heads = c.heads, vocab = c.vocab, ctx = c.ctx,
                           draft_layers = cfg.draft_layers, k = cfg.k, upper = cfg.upper, tokens = cfg.tokens,
                           prompt = cfg.prompt, every = cfg.every, runs = cfg.runs } }
  for _, B in ipairs(cfg.batches) do
    local s = batch(cfg, m, B)
    res.scenarios[#res.scenarios + 1] = s
    io.stdout:write(M.table_text({ res = res, only = s }), "\n")
  end
  return res
end

local function num(x, f) return x and format(f or "%.1f", x) or "-" end

--- table_text{res = gtlua results [, torch = spec_twin.py's results] [, only = scenario]}
--- -> a markdown table: tokens/s and host µs a token of every mode, gtlua's and PyTorch's
function M.table_text(o)
  local res, torch = o.res, o.torch
  local c = res.config
  local out = {}
  if not o.only then
    out[#out + 1] = format("Speculative decoding, %s (%s)%s: target %d layers (hidden %d, vocab %d), draft its " ..
      "first %d with its head (upper layers' output projections x %g), k %d, %d tokens after a prompt of %d, " ..
      "medians of %d generations", res.device and res.device.name or "?", res.backend, res.quick and ", quick" or "",
      c.layers, c.hidden, c.vocab, c.draft_layers, c.upper, c.k, c.tokens, c.prompt, c.runs)
    out[#out + 1] = ""
  end
  out[#out + 1] = "| batch | tool | mode | tokens/s | host µs/token | acceptance | tokens/step | host reads/step | " ..
    "nodes | tokens |"
  out[#out + 1] = "|---:|---|---|---:|---:|---:|---:|---:|---:|---|"
  local tsc = {}
  for _, s in ipairs(torch and torch.scenarios or {}) do tsc[s.batch] = s end
  for _, s in ipairs(o.only and { o.only } or res.scenarios) do
    for _, mode in ipairs(M.MODES) do
      local r = s.modes[mode]
      if r then
        out[#out + 1] = format("| %d | gtlua | %s | %s | %s | %s | %s | %s | %s | %s |", s.batch, mode, num(r.tokens_s),
          num(r.host_us_token, "%.2f"), num(r.acceptance, "%.2f"), num(r.tokens_per_step, "%.2f"),
          num(r.reads_per_step, "%.2f"), r.nodes or "-",
          r.agree == nil and "reference" or r.agree and "= plain" or "DIFFER")
      end
    end
    local t = tsc[s.batch]
    local tool = t and (t.compiled and "PyTorch reduce-overhead" or "PyTorch eager")
    for _, mode in ipairs(t and { "plain", "host" } or {}) do
      local r = t.modes[mode]
      if r and not r.skipped then
        out[#out + 1] = format("| %d | %s | %s | %s | %s | %s | %s | %s | - | %s |", s.batch, tool, mode,
          num(r.tokens_s), num(r.host_us_token, "%.2f"), num(r.acceptance, "%.2f"), num(r.tokens_per_step, "%.2f"),
          num(r.reads_per_step, "%.2f"), r.agree == nil and "reference" or format("%.0f%% = plain", 100 * r.agree))
      elseif r then
        out[#out + 1] = format("| %d | %s | %s | skipped: %s |", s.batch, tool, mode, r.skipped)
      end
    end
  end
  if torch and not o.only then
    out[#out + 1] = ""
    out[#out + 1] = "PyTorch's twin (spec_twin.py) has random weights of its own (torch's generator), scaled the same " ..
      "way, so its acceptance is its own; its speculative mode decides on the host (one read a step), as " ..
      "serving systems do; `tokens` compares each tool's speculative tokens with its own plain greedy tokens."
  end
  return table.concat(out, "\n")
end

local USAGE = "usage: gtlua scripts/bench/spec_bench.lua [--quick] [--json FILE] | --table GTLUA.json [TORCH.json ...] [--out FILE]"

local function read_json(path)
  local f = assert(io.open(path, "r"))
  local v = json.decode(f:read("*a"))
  f:close()
  return v
end

function M.main(argv)
  io.stdout:setvbuf("line")
  local o, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    if a == "--quick" then o.quick = true
    elseif a == "--json" or a == "--out" then o[a:sub(3)] = argv[i + 1]; i = i + 1
    elseif a == "--table" then
      o.table = {}
      while argv[i + 1] and argv[i + 1]:sub(1, 2) ~= "--" do i = i + 1; o.table[#o.table + 1] = argv[i] end
    elseif a == "-h" or a == "--help" then print(USAGE) return
    else error(USAGE .. "\nunknown argument: " .. tostring(a), 0) end
    i = i + 1
  end
  if o.table then
    local torch                                  -- spec_twin.py's files (a batch each, from spec.sh), merged
    for j = 2, #o.table do
      local t = read_json(o.table[j])
      torch = torch or { scenarios = {} }
      for _, sc in ipairs(t.scenarios or {}) do
        sc.compiled = t.compiled ~= false
        torch.scenarios[#torch.scenarios + 1] = sc
      end
    end
    local text = M.table_text { res = read_json(o.table[1]), torch = torch }
    print(text)
    if o.out then local f = assert(io.open(o.out, "w")); f:write(text, "\n"); f:close() end
    return
  end
  local res = M.run(o.quick and M.QUICK or M.FULL)
  print(M.table_text { res = res })
  local bad = false
  for _, s in ipairs(res.scenarios) do
    for _, mode in ipairs { "host", "device", "loop" } do bad = bad or not s.modes[mode].agree end
  end
  if o.json then
    local f = assert(io.open(o.json, "w"))
    f:write(json.encode(res), "\n")
    f:close()
    print("wrote " .. o.json)
  end
  if bad then print("spec_bench: a speculative mode's tokens DIFFER from plain greedy decoding") os.exit(1) end
end

if arg and arg[0] and arg[0]:match("spec_bench%.lua$") then M.main({ ... }) end
return M
