-- decode.lua: greedy autoregressive decoding with a GPT-2-shaped model
-- (examples/gpt.lua), eagerly and through one gt.tree with batch buckets
-- {1, 2, 4, 8, 16}: tokens/s, host µs per step, and the tree (one node per
-- bucket, whatever the position).  Each batch also runs through a keyed tree
-- with the same buckets (key = function() return 0 end, patch = {pos, live}:
-- a known step replays without running the Lua body).
--
--   gtlua examples/decode.lua                       (full GPT-2 small on cuda, tiny on cpu)
--   gtlua examples/decode.lua --tiny|--full [--batches 1,3,8] [--prompt 8] [--steps 64]
--        [--vocab N] [--ctx N] [--eot N] [--check-every 8] [--seed N]
--   gtlua examples/decode.lua --weights FILE --dump OUT [--steps 32]
--   gtlua examples/decode.lua --model model.safetensors [--dtype bf16|f16|f32] [--heads N]
--        [--prompt-ids 1,2,3;4,5,6] [--dump OUT]
--
-- --weights loads weights and the prompt from a file (scripts/bench/gpt_check.py
-- writes one); --dump then writes the tree's tokens and logits of every
-- generated step to OUT (see write_dump) for the check against PyTorch.
-- --model loads a Hugging Face GPT-2 checkpoint (gpt.load_hf: any layer count,
-- hidden size and vocabulary; the heads from config.json beside it or --heads),
-- its matrices and embeddings in --dtype (f32 by default); --prompt-ids gives
-- the prompt (rows separated by ';').
-- Each batch size runs eagerly, then through the tree twice (the first
-- generation warms up and records; the second is timed), and the same for
-- the keyed tree; the tokens of every run must be identical.
local gt = require "gt"
local here = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$")) or "examples"
local gpt = dofile(here .. "/gpt.lua")

local USAGE = "usage: gtlua examples/decode.lua [--tiny|--full] [--batches 1,3,8] [--prompt N] [--steps N] " ..
  "[--vocab N] [--ctx N] [--eot N] [--check-every K] [--seed N] [--weights FILE [--dump OUT]] " ..
  "[--model FILE.safetensors] [--dtype bf16|f16|f32] [--heads N] [--prompt-ids 1,2;3,4]"

local function parse(argv)
  local o, i = {}, 1
  local valued = { ["--batches"] = true, ["--prompt"] = true, ["--steps"] = true, ["--vocab"] = true, ["--ctx"] = true,
                   ["--eot"] = true, ["--check-every"] = true, ["--seed"] = true, ["--weights"] = true,
                   ["--dump"] = true, ["--model"] = true, ["--dtype"] = true, ["--heads"] = true,
                   ["--prompt-ids"] = true }
  while i <= #argv do
    local a = argv[i]
    if a == "--tiny" or a == "--full" then o.size = a:sub(3)
    elseif a == "-h" or a == "--help" then print(USAGE) os.exit(0)
    elseif valued[a] then
      if argv[i + 1] == nil then error(USAGE .. "\n" .. a .. " needs a value", 0) end
      o[a:sub(3):gsub("%-", "_")] = argv[i + 1]
      i = i + 1
    else error(USAGE .. "\nunknown argument: " .. tostring(a), 0) end
    i = i + 1
  end
  return o
end

-- The dump: 8 bytes "GTLOG001"; int32 steps, batch, vocab; then per step
-- int32 tokens [batch] and f32 logits [batch, vocab].
local function write_dump(path, B, V)
  local ffi = require "ffi"
  local f = assert(io.open(path, "wb"))
  local n = 0
  f:write("GTLOG001", ffi.string(ffi.new("int32_t[3]", { 0, B, V }), 12))
  return function(_, tok, logits)
    local ids = tok:tolist()
    f:write(ffi.string(ffi.new("int32_t[?]", B, ids), 4 * B))
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
  local size = o.size or (gt.backend() == "cpu" and "tiny" or "full")
  local over = { vocab = tonumber(o.vocab), ctx = tonumber(o.ctx), eot = tonumber(o.eot), seed = tonumber(o.seed) }
  local cfg, w, file_prompt, source
  if o.model then
    cfg, w = gpt.load_hf(o.model, { dtype = o.dtype, heads = tonumber(o.heads) }, over)
    source = cfg.dtype .. " weights from " .. o.model
  elseif o.weights then
    cfg, w, file_prompt = gpt.load(o.weights, over)
    source = "weights from " .. o.weights
  else
    over.dtype = o.dtype
    cfg = gpt.config(size == "tiny" and gpt.TINY or gpt.FULL, over)
    source = "random " .. cfg.dtype .. " weights"
  end
  if o.prompt_ids then
    file_prompt = {}
    for row in o.prompt_ids:gmatch("[^;]+") do
      local r = {}
      for id in row:gmatch("[^,%s]+") do r[#r + 1] = assert(tonumber(id), "--prompt-ids: " .. id .. " is not a number") end
      file_prompt[#file_prompt + 1] = r
    end
  end
  local m = gpt.new(cfg, w)
  local buckets = { dim = 1, sizes = cfg.buckets, narrow = { 1, 2 } }      -- tok and logits: one row a sequence
  local step = gt.tree(m.step, { name = "decode", buckets = buckets, warn_shapes = false })
  local keyed = gt.tree(m.step, { name = "decode-keyed", buckets = buckets, warn_shapes = false,
                                  key = function() return 0 end, patch = { 2, 3 } })
  print(("gpt decode: backend %s, %s config: %d layers, hidden %d, %d heads, vocab %d, context %d, eot %d; %s; %d kernels a step")
    :format(gt.backend(), (o.weights or o.model) and "file" or size, cfg.layers, cfg.hidden, cfg.heads, cfg.vocab, cfg.ctx,
            cfg.eot, source, m.kernels))

  if o.dump then
    assert(file_prompt and #file_prompt > 0, "--dump needs --weights with a prompt")
    local steps = tonumber(o.steps) or 32
    local on_step, close = write_dump(o.dump, #file_prompt, cfg.vocab)
    gpt.generate(m, step, file_prompt, steps, { all = true })          -- warm up and record
    local r = gpt.generate(m, step, file_prompt, steps, { all = true, on_step = on_step })
    print(("wrote %d steps of tokens and logits (batch %d, prompt %d) to %s"):format(close(), #file_prompt,
      #file_prompt[1], o.dump))
    for b = 1, #r.tokens do print(("  sequence %d: %s"):format(b, table.concat(r.tokens[b], " "))) end
    print(step)
    return
  end

  local batches = {}
  for v in (o.batches or (size == "tiny" and "1,3" or "1,3,8")):gmatch("[^,]+") do batches[#batches + 1] = tonumber(v) end
  local P = tonumber(o.prompt) or (size == "tiny" and 4 or 8)
  local steps = tonumber(o.steps) or (size == "tiny" and 12 or 64)
  local k = tonumber(o.check_every) or 8
  local ok = true
  for _, B in ipairs(batches) do
    local prompt = file_prompt or gpt.random_prompt(cfg, B, P, 1000 + B)
    B = #prompt
    local e = gpt.generate(m, m.step, prompt, steps, { check_every = k })
    gpt.generate(m, step, prompt, steps, { check_every = k })   -- warm up, record
    local t = gpt.generate(m, step, prompt, steps, { check_every = k })
    local bucket = B
    for _, sz in ipairs(cfg.buckets) do if sz >= B then bucket = sz break end end
    gpt.generate(m, keyed, prompt, steps, { check_every = k })   -- warm up, record, replay once
    gpt.generate(m, keyed, prompt, steps, { check_every = k })
    local kd = gpt.generate(m, keyed, prompt, steps, { check_every = k })
    local function agree(r)
      local same = e.steps == r.steps
      for b = 1, B do for i = 1, e.steps do same = same and e.tokens[b][i] == r.tokens[b][i] end end
      ok = ok and same
      return same
    end
    local same = agree(t) and agree(kd)
    local function rate(r) return B * r.steps / r.seconds end
    print(("batch %2d (bucket %2d): %d prompt + %d generated tokens per sequence%s"):format(B, bucket, #prompt[1], t.steps, t.steps < steps and " (all sequences ended with eot)" or ""))
    print(("  eager %10.1f tokens/s  %8.1f host us/step   tree %10.1f tokens/s  %8.1f host us/step  (%.1fx)  tokens %s")
      :format(rate(e), e.host_us, rate(t), t.host_us, rate(t) / rate(e), same and "agree" or "DIFFER"))
    print(("  keyed %10.1f tokens/s  %8.1f host us/step"):format(rate(kd), kd.host_us))
    print("  sequence 1: " .. table.concat(t.tokens[1], " "))
  end
  if gt.backend() == "cpu" then
    print("cpu backend: kernels run on the host as they are launched, so eager, tree and keyed steps run the same")
    print("  kernels and their rates differ by host bookkeeping and this machine's noise; what the tree saves a GPU")
    print("  (one graph launch a step instead of a launch per kernel) shows there: README.md, A real model")
  end
  print(step)
  local s, ks = step:stats(), keyed:stats()
  local kk = ks.keyed or {}
  print(("%d calls, %d nodes (one per batch bucket), %d replays; keyed tree: %d calls, %d keyed hits, %d verified; " ..
    "eager and tree tokens %s")
    :format(s.calls, s.nodes, s.replays, ks.calls, kk.hits or 0, kk.verified or 0, ok and "agree" or "DIFFER"))
  if not ok then os.exit(1) end
end

main({ ... })
