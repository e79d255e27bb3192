-- cond_bench: the cond scenario: the branch scenario with its branch decided on the device, three ways.
--
--   gtlua scripts/bench/cond_bench.lua [--quick] [--json FILE]
--
-- The step: prefix layers, then a one-element device tensor sel (alternating
-- 0, 1 from call to call) picks suffix a or b (as gtlua_bench.lua's branch).
--   item   sel:item() + a Lua if, in a tree: a sync and a cut, two graphs per step
--   cond   gt.cond(sel, a, b) in a tree: one graph, the device decides
--   floor  the cond tree's graph launched from C (tree:floor), no tree logic
--   eager  the cond step outside any tree (sel read on the host)
-- PyTorch's twin (.item() under reduce-overhead: a graph break) is the cond
-- scenario of torch_twins.py.  Figures are medians in µs as in gtlua_bench.lua
-- (cpu_us: host time to issue a step; step_us: issue + gt.sync(); pipe_us: many
-- steps, one sync, per step); the last line is cond's step_us over the floor's.
-- Loaded with dofile() the file returns its functions.
local gt = require "gt"

local B = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "gtlua_bench.lua")
local M = {}
local format = string.format

-- The three steps over gtlua_bench's model (its weights and layer stacks).
function M.steps(cfg, m)
  local linear, P, S = gt.ops.linear, cfg.prefix, cfg.suffix
  local function stack(x, first, count, act, bias)
    for k = first, first + count - 1 do x = linear(x, m.W[k], bias[k], act) end
    return x
  end
  local function suffix(h, b)
    if b then return stack(h, P + S + 1, S, "tanh", m.NB) end
    return stack(h, P + 1, S, "relu", m.B)
  end
  local st = {}
  -- The flag is computed on the device inside the step (p = sel * 1, as a
  -- model computes its own), so the graph's condition reads the step's own
  -- memory; sel, an input, is patched like any kernel argument.
  function st.item(x, sel)
    local h = stack(x, 1, P, "relu", m.B)
    return suffix(h, gt.ops.mul(sel, 1):item() ~= 0)
  end
  function st.cond(x, sel)
    local h = stack(x, 1, P, "relu", m.B)
    local p = gt.ops.mul(sel, 1)
    local out = gt.tensor({ x.shape[1], cfg.hidden })
    gt.cond(p, function() out:copy(suffix(h, true)) end, function() out:copy(suffix(h, false)) end)
    return out
  end
  return st
end

local function agree(a, b)
  local d = 0
  local x, y = a:tolist(), b:tolist()
  for i = 1, #x do for j = 1, #x[i] do d = math.max(d, math.abs(x[i][j] - y[i][j])) end end
  return d
end

function M.run(cfg)
  B.pin_main()                                   -- (run.sh's BENCH_MAIN_CPU, as gtlua_bench.lua)
  local m = B.model(cfg)
  local st = M.steps(cfg, m)
  local x = gt.randn({ cfg.batch, cfg.hidden }, { seed = 7 })
  local sels = { gt.from({ 0 }), gt.from({ 1 }) }
  local function args(i) return x, sels[(i - 1) % 2 + 1] end
  local kernels = cfg.prefix + cfg.suffix
  local reps, pipe = math.max(cfg.min_reps, cfg.reps), math.max(cfg.min_pipe, cfg.pipe)
  local r = { name = "cond", kernels = kernels, modes = {}, nodes = {},
              label = format("%d-layer prefix, a device flag picks one of two %d-layer suffixes, alternating",
                             cfg.prefix, cfg.suffix) }
  r.modes.eager = B.measure(function(i) return st.cond(args(i)) end, cfg.warm, reps, pipe)
  local ti = gt.tree(st.item, { name = "cond-item" })
  r.modes.item = B.measure(function(i) return ti(args(i)) end, cfg.warm, reps, pipe)
  -- cond and its floor in turn (gtlua_bench.lua's M.in_turn: paired ratios, vs_floor_*)
  local tc = gt.tree(st.cond, { name = "cond-cond" })
  local calls = B.floor_calls({ variants = 2, args = args })
  local mm = B.in_turn({ cond = function(i) return tc(args(i)) end }, { "cond" },
    function(n, sync) return tc:floor(n, sync, nil, calls) end, cfg.warm, reps, pipe, cfg.rounds or 6)
  r.modes.cond, r.modes.floor = mm.cond, mm.floor
  r.nodes.item, r.nodes.cond = ti:stats().nodes, tc:stats().nodes
  r.max_abs_diff = math.max(agree(ti(args(1)), tc(args(1))), agree(ti(args(2)), tc(args(2))))
  r.cond_nodes = gt.cond_nodes()
  return { tool = "gtlua", version = gt.version, backend = gt.backend(), device = gt.device(),
           date = os.date("!%Y-%m-%dT%H:%M:%SZ"), quick = cfg.quick or false, scenarios = B.array { r } }
end

local function fmt(x) return x and format("%10.1f", x) or format("%10s", "-") end

--- table_text(results) -> the readable table (gtlua_bench.lua's columns)
function M.table_text(res)
  local r = res.scenarios[1]
  local out = { format("gtlua %s on %s (%s)%s", res.version, res.device.name, res.backend, res.quick and ", quick" or ""),
                format("%-16s %7s %-6s %10s %10s %10s", "scenario", "kernels", "mode", "cpu_us", "step_us", "pipe_us") }
  for j, mode in ipairs { "eager", "item", "cond", "floor" } do
    local m = r.modes[mode] or {}
    out[#out + 1] = format("%-16s %7s %-6s %s %s %s", j == 1 and r.name or "", j == 1 and r.kernels or "", mode,
      fmt(m.cpu_us), fmt(m.step_us), fmt(m.pipe_us))
  end
  local c, f = r.modes.cond, r.modes.floor
  out[#out + 1] = ""
  out[#out + 1] = format("cond: %d node(s) (item: %d); step_us cond/floor %.2fx, cpu_us cond/floor %.2fx; " ..
    "item vs cond max |diff| %.2g; conditional nodes: %s", r.nodes.cond, r.nodes.item,
    c.vs_floor_step or c.step_us / f.step_us, c.vs_floor_cpu or c.cpu_us / f.cpu_us, r.max_abs_diff, r.cond_nodes and "yes" or "no (host branches)")
  return table.concat(out, "\n")
end

function M.main(argv)
  io.stdout:setvbuf("line")
  local o = B.parse_args(argv)
  if o.help then print("usage: gtlua scripts/bench/cond_bench.lua [--quick] [--json FILE]") return end
  local res = M.run(o.quick and B.QUICK or B.FULL)
  print(M.table_text(res))
  if o.json then
    local f = assert(io.open(o.json, "w"))
    f:write(B.encode(res), "\n")
    f:close()
    print("wrote " .. o.json)
  end
end

if arg and arg[0] and arg[0]:match("cond_bench%.lua$") then M.main({ ... }) end
return M
