-- bench variants: gtlua .probe/benchvar.lua ROUNDS SETTLE [SCEN]
local B = dofile("scripts/bench/gtlua_bench.lua")
local cfg = {}
for k, v in pairs(B.FULL) do cfg[k] = v end
cfg.rounds = tonumber(arg[1]) or 6
B.SETTLE = tonumber(arg[2]) or 2
cfg.heap_grow = -1
if gt.backend() == "cpu" then cfg.hidden = 16 end
B.pin_main()
local m = B.model(cfg)
if cfg.prime then B.prime(cfg, m, cfg.prime) end
for _, sc in ipairs(B.scenarios(cfg, m)) do
  if sc.name == (arg[3] or "grow-512") then
    local r, tree = B.run_scenario(cfg, sc)
    local md = r.modes
    local after = B.steps_block(function(i) return tree(sc.args(i)) end, 0)(300)
    print(("rounds=%d settle=%d %-10s tree %.2f  keyed %s  floor %.2f  | 300 in a row after: %.2f"):format(cfg.rounds, B.SETTLE,
      r.name, md.tree.cpu_us, md.keyed and ("%.2f"):format(md.keyed.cpu_us) or "-", md.floor.cpu_us, after))
  end
end
