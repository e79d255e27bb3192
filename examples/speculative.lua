-- speculative.lua: greedy speculative decoding with examples/gpt.lua's model
-- (examples/spec_kernels.lua): a draft of the target's first layers proposes
-- k tokens, the target checks them in one forward over k + 1 positions, and
-- the accepted prefix plus the target's next token are emitted; the emitted
-- tokens are the target's plain greedy tokens exactly, which this checks.
--
--   gtlua examples/speculative.lua                  (GPT-2 small shape on cuda, tiny on cpu)
--   gtlua examples/speculative.lua [--tiny|--full] [--mode host|device|loop|all] [--batches 1,3]
--        [--k 4] [--draft-layers N] [--upper A] [--tokens N] [--prompt P] [--every M] [--seed N]
--   gtlua examples/speculative.lua --weights FILE [--dump OUT] [--tokens 32]
--
-- Modes: host (the acceptance on the host: the token table read back and
-- the next state written each step), device (acceptance and positions on
-- the device, the draft loop a gt.loop: one graph launch a step and no host
-- transfer; the progress read every M steps) and loop (the whole generation
-- a gt.loop: one launch per M steps).  Each runs through a tree twice (the
-- first generation warms up and records, the second is timed) beside the
-- plain greedy decoder's tree (gpt.lua's step, batch buckets), and prints
-- tokens/s, host us per token (a token of one sequence), the acceptance
-- rate (accepted proposals / proposals) and whether the tokens agree.
--
-- Random weights: the target's layers past the draft's get their output
-- projections scaled by --upper (0.05), so the draft agrees most of the
-- time; --weights loads decode.lua's weight file (with its prompt; --upper
-- then applies only when given).  --dump writes the tokens of the first
-- mode run to OUT: 8 bytes "GTTOK001", int32 steps, batch, then int32
-- tokens [steps, batch] (scripts/bench/gpt_check.py --spec reads it).
local gt = require "gt"
local here = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$")) or "examples"
local gpt = dofile(here .. "/gpt.lua")
local spec = dofile(here .. "/spec_kernels.lua")

local USAGE = "usage: gtlua examples/speculative.lua [--tiny|--full] [--mode host|device|loop|all] [--batches 1,3] " ..
  "[--k N] [--draft-layers N] [--upper A] [--tokens N] [--prompt N] [--every M] [--seed N] [--weights FILE [--dump OUT]]"

local VALUED = { batches = true, k = true, draft_layers = true, upper = true, tokens = true, prompt = true, every = true,
                 seed = true, weights = true, dump = true, mode = true }

local function parse(argv)
  local o, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    local name = a:match("^%-%-(.+)$")
    name = name and name:gsub("%-", "_")
    if a == "--tiny" or a == "--full" then o.size = a:sub(3)
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    elseif name and VALUED[name] then
      if argv[i + 1] == nil then error(USAGE .. "\n" .. a .. " needs a value", 0) end
      o[name] = argv[i + 1]
      i = i + 1
    else error(USAGE .. "\nunknown argument: " .. tostring(a), 0) end
    i = i + 1
  end
  local modes = { host = true, device = true, loop = true, all = true }
  if o.mode and not modes[o.mode] then error(USAGE .. "\n--mode must be host, device, loop or all", 0) end
  return o
end

-- The target and its prompt (nil: random prompts), and a description.
local function model(o)
  local size = o.size or (gt.backend() == "cpu" and "tiny" or "full")
  local cfg, w, prompt, source
  if o.weights then
    cfg, w, prompt = gpt.load(o.weights, { seed = tonumber(o.seed) })
    source = "weights from " .. o.weights
  else
    cfg = size == "tiny" and gpt.config(gpt.TINY, { layers = 4, ctx = 128 }) or gpt.config(gpt.FULL)
    w = gpt.random_weights(cfg, tonumber(o.seed) or 1)
    source = "random weights"
  end
  local m = gpt.new(cfg, w)
  local Ld = tonumber(o.draft_layers) or (size == "tiny" and 1 or 2)
  local upper = tonumber(o.upper) or (not o.weights and 0.05 or nil)
  if upper then
    spec.scale_upper(m, Ld + 1, upper)
    source = source .. (", layers %d-%d's output projections x %g"):format(Ld + 1, cfg.layers, upper)
  end
  return m, Ld, prompt, source, size
end

local function same_tokens(a, b, B, N)
  for s = 1, B do for i = 1, N do if a[s][i] ~= b[s][i] then return false end end end
  return true
end

-- The tokens file (GTTOK001) of result r.
local function write_tokens(path, r, B, N)
  local ffi = require "ffi"
  local f = assert(io.open(path, "wb"))
  f:write("GTTOK001", ffi.string(ffi.new("int32_t[2]", { N, B }), 8))
  local row = ffi.new("int32_t[?]", B)
  for i = 1, N do
    for b = 1, B do row[b - 1] = r.tokens[b][i] end
    f:write(ffi.string(row, 4 * B))
  end
  f:close()
end

-- One line of the table: a mode's rates.
local function report(name, r, B, N, ok, extra)
  local toks = B * N
  print(("  %-7s %10.1f tokens/s  %8.2f host us/token  %5d calls%s  tokens %s"):format(name, toks / r.seconds,
    r.host_total * 1e6 / toks, r.calls, extra or "", ok == nil and "(reference)" or ok and "agree" or "DIFFER"))
end

-- The plain greedy decoder (gpt.lua's step through a tree with batch buckets): the reference.
local function plain(m, prompt, N)
  local step = gt.tree(m.step, { name = "plain", buckets = { dim = 1, sizes = m.cfg.buckets, narrow = { 1, 2 } },
                                 warn_shapes = false })
  gpt.generate(m, step, prompt, N, { all = true })
  local r = gpt.generate(m, step, prompt, N, { all = true })
  r.host_total = r.host_us * r.calls * 1e-6
  return r, step
end

-- One mode at batch B: a tree generating twice, the second timed.
local function run_mode(d, mode, prompt)
  local tree = gt.tree(spec.body(d, mode), { name = "spec-" .. mode })
  d:generate(prompt, mode, tree)
  local r = d:generate(prompt, mode, tree)
  r.host_total = r.host_us * r.calls * 1e-6
  return r, tree
end

local function main(argv)
  io.stdout:setvbuf("line")
  local o = parse(argv)
  local m, Ld, file_prompt, source, size = model(o)
  local cfg = m.cfg
  local k, N = tonumber(o.k) or 4, tonumber(o.tokens) or 64
  local P = file_prompt and #file_prompt[1] or tonumber(o.prompt) or (size == "tiny" and 4 or 8)
  local every = tonumber(o.every) or 8
  local modes = (not o.mode or o.mode == "all") and { "host", "device", "loop" } or { o.mode }
  print(("speculative: backend %s, target %d layers (hidden %d, %d heads, vocab %d, context %d), draft its first %d " ..
    "with its head; %s; k %d, %d tokens, every %d"):format(gt.backend(), cfg.layers, cfg.hidden, cfg.heads, cfg.vocab,
    cfg.ctx, Ld, source, k, N, every))
  local batches = {}
  for v in (o.batches or (size == "tiny" and "1,3" or "1,3,8")):gmatch("[^,]+") do batches[#batches + 1] = tonumber(v) end
  if file_prompt then batches = { #file_prompt } end
  local all_ok, trees, dumped = true, {}, false
  for _, B in ipairs(batches) do
    local prompt = file_prompt or gpt.random_prompt(cfg, B, P, 1000 + B)
    local ref = plain(m, prompt, N)
    print(("batch %d: %d prompt + %d generated tokens per sequence"):format(B, P, N))
    report("plain", ref, B, N, nil)
    local d = spec.new(gpt, m, { k = k, draft_layers = Ld, batch = B, tokens = N, prompt = P, every = every })
    for _, mode in ipairs(modes) do
      local r, tree = run_mode(d, mode, prompt)
      local ok = same_tokens(ref.tokens, r.tokens, B, N)
      all_ok = all_ok and ok
      local steps = math.max(r.rounds, 1)
      report(mode, r, B, N, ok, ("  accept %4.2f (%.2f tokens a step)  %.2f reads %.2f writes a step"):format(
        r.rate, r.emitted / math.max(r.steps, 1), r.reads / steps, r.writes / steps))
      if not ok then
        print("    plain:       " .. table.concat(ref.tokens[1], " "))
        print("    speculative: " .. table.concat(r.tokens[1], " "))
      end
      if o.dump and not dumped then write_tokens(o.dump, r, B, N); dumped = true end
      trees[#trees + 1] = tree
    end
  end
  if o.dump then print("wrote the tokens to " .. o.dump) end
  for _, t in ipairs(trees) do
    local s = t:stats()
    print(("%s: %d calls, %d nodes, %d replays"):format(t.name, s.calls, s.nodes, s.replays))
  end
  print(trees[#trees])
  print("every mode's tokens " .. (all_ok and "agree" or "DIFFER") .. " with the plain greedy decoder's")
  if gt.backend() == "cpu" then
    print("cpu backend: kernels run on the host as launched; the rates show host bookkeeping, not a GPU's launches")
  end
  if not all_ok then os.exit(1) end
end

main({ ... })
