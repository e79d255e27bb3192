-- report: turns a bench run's files (gtlua.json, torch.json, launch_floor.txt) into RESULTS.md and steps.svg.
--
--   gtlua scripts/bench/report.lua DIR [--out FILE] [--svg FILE]
--
-- DIR holds what scripts/bench/run.sh wrote: gtlua.json (gtlua_bench.lua),
-- torch.json (torch_twins.py), launch_floor.txt (the anchor program's table)
-- and nvidia-smi.txt; any of them may be missing, and the report says so.
-- Writes DIR/RESULTS.md and DIR/steps.svg unless --out / --svg say otherwise.
-- Pure Lua: loaded with dofile() it returns its functions (spec/bench_spec.lua).
local M = {}
local format, concat, floor, max, min, log = string.format, table.concat, math.floor, math.max, math.min, math.log

-- The targets of shared/anchors/README.md ("What gtlua must show"), and
-- gt.cond's of issue 13.  Ratios that are no longer targets there (a tree
-- replay's CPU over the floor's, reduce-overhead over the tree on every
-- scenario, a plain new path's wall time) are still shown, under "Other
-- ratios".
M.TARGETS = {
  per_op_ns = 100,       -- a replay with the Lua body: host ns an op, about (grow-128 <= 15 us, grow-512 <= 55 us a step)
  grow_cpu_us = { [128] = 15, [512] = 55 },
  vs_reduce = 40,        -- reduce-overhead CPU / gtlua tree CPU on chain, branch and shapes, at least
  vs_reduce_on = { chain = true, branch = true, shapes = true },
  keyed_cpu = 1.25,      -- gtlua keyed CPU / floor CPU, at most
  vs_reduce_keyed = 50,  -- reduce-overhead CPU / gtlua keyed CPU, at least
  step = 1.03,           -- gtlua tree step / floor step (the same graphs launched from C), at most
  record_heap_ms = 3,    -- a new ~128-kernel path recorded and replaying with 100 MB of live Lua heap, at most
  siblings = 1.0,        -- pool high-water of sibling paths / the largest path's own, at most
  decode_host = 10,      -- decode: reduce-overhead host us per token / gtlua tree's, at least
  decode_rate = 1.0,     -- decode: gtlua tree tokens/s / reduce-overhead's, at least
  logits = 1e-3,         -- decode: relative logit error against PyTorch, at most
  cond_step = 1.10,      -- gt.cond tree step / its floor step, at most (issue 13)
  replay_cpu = 1.25,     -- (other ratios) gtlua tree CPU / floor CPU
  record_ms = 5,         -- (other ratios) a plain new ~100-kernel path's call, "a few ms"
}

--- decode(text) -> the value of a JSON text (null is nil; raises "bad JSON ..." on bad input)
M.decode = require("gt.json").decode

-- -- Reading the run's files -----------------------------------------------------------

local function read_file(path)
  local f = path and io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

--- parse_floor(text) -> { device, driver, runtime, rows = {[nodes] = {...}}, pipelined, conditional }
-- from launch_floor.cu's output.
function M.parse_floor(text)
  local r = { rows = {}, sizes = {} }
  for line in text:gmatch("[^\n]+") do
    local dev, drv, rtv = line:match("^device (.-)%s+driver (%d+) runtime (%d+)")
    if dev then r.device, r.driver, r.runtime = dev, tonumber(drv), tonumber(rtv) end
    local nums = {}
    for w in line:gmatch("%S+") do nums[#nums + 1] = tonumber(w) or false end
    if #nums >= 7 and nums[1] and nums[7] then
      local n = nums[1]
      r.rows[n] = { eager_cpu = nums[2], eager_step = nums[3], graph_cpu = nums[4], graph_step = nums[5],
                    inst = nums[6], update = nums[7], mem_kib = nums[8] or nil }
      r.sizes[#r.sizes + 1] = n
    end
    local g, e = line:match("^pipelined 32%-kernel step: graph ([%d.]+) us/step, eager ([%d.]+)")
    if g then r.pipelined = { graph = tonumber(g), eager = tonumber(e) } end
    local cond = line:match("^conditional IF node: (.*)")
    if cond then r.conditional = cond end
  end
  return r
end

-- nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
local function parse_smi(text)
  local name, drv, mem = text:match("^%s*([^,\n]+),%s*([^,\n]+),%s*([^,\n]+)")
  if name then return { name = name, driver = drv, memory = mem } end
end

--- load(dir [, paths]) -> inputs { gtlua, torch, floor, smi, missing = {...} }
function M.load(dir, paths)
  paths = paths or {}
  local function path(key, name) return paths[key] or (dir .. "/" .. name) end
  local inputs, missing = {}, {}
  for key, name in pairs { gtlua = "gtlua.json", torch = "torch.json" } do
    local text = read_file(path(key, name))
    local ok, v = pcall(M.decode, text or "")
    if text and ok then inputs[key] = v
    else missing[#missing + 1] = name .. (text and (": " .. tostring(v)) or " (not found)") end
  end
  -- cond_bench.lua's scenario joins gtlua's (its modes: eager, item, cond, floor)
  local ct = read_file(path("cond", "cond.json"))
  local okc, cv = pcall(M.decode, ct or "")
  if ct and okc and inputs.gtlua and cv.scenarios then
    for _, sc in ipairs(cv.scenarios) do table.insert(inputs.gtlua.scenarios, sc) end
  end
  local gc = read_file(path("gpt_check", "gpt_check.txt"))
  inputs.gpt_check = gc and gc:match("(gpt_check: [PF][AI][SL][SL][^\n]*)")
  local ft = read_file(path("floor", "launch_floor.txt"))
  if ft and ft:find("nodes") then inputs.floor = M.parse_floor(ft) else missing[#missing + 1] = "launch_floor.txt" end
  local lp = read_file(path("probe", "launch_probe.txt"))
  inputs.launch_probe = lp and lp:find("nodes") and lp or nil
  local st = read_file(path("smi", "nvidia-smi.txt"))
  inputs.smi = st and parse_smi(st)
  local cp = read_file(path("cpus", "cpus.txt"))
  inputs.cpus = cp and cp:match("^%s*([%d,%-]+)")
  inputs.main_cpu = cp and cp:match("main%s+(%d+)")
  table.sort(missing)
  inputs.missing = missing
  return inputs
end

-- -- Formatting helpers ------------------------------------------------------------------

local DASH = "—"

--- us(x) -> a µs figure with sensible precision, or a dash
function M.us(x)
  if type(x) ~= "number" or x ~= x then return DASH end
  if x < 10 then return format("%.2f", x) end
  if x < 1000 then return format("%.1f", x) end
  return format("%.0f", x)
end
local us = M.us

local function ratio(a, b)
  if type(a) ~= "number" or type(b) ~= "number" or b <= 0 or a ~= a or b ~= b then return nil end
  return a / b
end

local function x(r) return r and format("%.2fx", r) or DASH end

local function row(cells) return "| " .. concat(cells, " | ") .. " |" end

local function header(cells, align)
  return row(cells) .. "\n" .. row(align)
end

-- scenario by name in a gtlua or torch result
local function by_name(res, name)
  for _, s in ipairs(res and res.scenarios or {}) do if s.name == name then return s end end
end

local function mode(s, m) return s and s.modes and s.modes[m] end

-- Mode m of scenario s over its floor (field "cpu" or "step"): the paired
-- ratio the bench measured (vs_floor_*: the median over rounds of a block of
-- m over the floor's block of the same round), else the ratio of medians.
local function over_floor(s, m, field)
  local a = mode(s, m)
  local paired = a and a["vs_floor_" .. field]
  if type(paired) == "number" and paired == paired then return paired end
  return ratio(a and a[field .. "_us"], (mode(s, "floor") or {})[field .. "_us"])
end

-- -- The report --------------------------------------------------------------------------

local function version_text(v)
  if type(v) ~= "number" or v == 0 then return nil end
  return format("%d.%d", floor(v / 1000), floor(v % 1000 / 10))
end

local function header_lines(inp)
  local g, t, f, smi = inp.gtlua or {}, inp.torch or {}, inp.floor or {}, inp.smi or {}
  local d, td = g.device or {}, t.device or {}
  local mem = d.memory and format("%.0f GiB", d.memory / 2 ^ 30)
  local lines = {
    header({ "run", "" }, { "---", "---" }),
    row { "date", g.date or t.date or DASH },
    row { "device", format("%s%s%s", smi.name or d.name or td.name or f.device or DASH,
      d.cc and d.backend == "cuda" and (", sm " .. d.cc) or "", d.sms and d.backend == "cuda" and
      format(", %d SMs", d.sms) or "") .. (mem and (", " .. mem) or "") },
    row { "driver", (smi.driver or DASH) .. (version_text(d.driver or f.driver) and
      format(" (CUDA driver API %s)", version_text(d.driver or f.driver)) or "") },
    row { "CUDA runtime (launch_floor)", version_text(f.runtime) or DASH },
    row { "NVRTC", version_text(d.nvrtc) or DASH },
    row { "PyTorch", td.torch and format("%s (CUDA %s)", td.torch, td.cuda or "?") or DASH },
    row { "gtlua", g.version and format("%s, backend %s, %s%s", g.version, g.backend or "?", g.luajit or "LuaJIT",
      g.quick and ", **quick run** (CI sizes)" or "") or DASH },
  }
  if inp.cpus then
    lines[#lines + 1] = row { "host cpus", inp.cpus ..
      " (every measured process pinned there: the quickest of a calibration)" ..
      (inp.main_cpu and format("; each one's main thread on cpu %s alone, the quickest", inp.main_cpu) or "") }
  end
  return concat(lines, "\n")
end

-- One target row: { what, scenario, value text, target text, met? }
local function target_row(rows, what, where, value, target, ok)
  rows[#rows + 1] = { what, where, value, target, ok == nil and "not measured" or (ok and "**met**" or "**missed**") }
end

-- The grow scenario nearest 100 kernels (log scale).
local function near_100(res)
  local best, bd
  for _, s in ipairs(res and res.scenarios or {}) do
    if s.grow then
      local dist = math.abs(log(s.grow / 100))
      if not bd or dist < bd then best, bd = s, dist end
    end
  end
  return best
end

--- targets(inputs) -> list of rows (what, scenario, value, target, verdict)
-- The scenarios with a tree mode (the cond scenario has its own modes).
local function tree_scenarios(inp)
  local r = {}
  for _, s in ipairs(inp.gtlua and inp.gtlua.scenarios or {}) do if mode(s, "tree") or s.error then r[#r + 1] = s end end
  return r
end

function M.targets(inp)
  local T, rows = M.TARGETS, {}
  local scen = inp.gtlua and inp.gtlua.scenarios or {}
  -- a replay with the Lua body: ~100 ns an op, as the grow steps' host time,
  -- and the host ns each op past 128 adds (grow-512 over grow-128)
  local g128, g512 = by_name(inp.gtlua, "grow-128"), by_name(inp.gtlua, "grow-512")
  for _, s in ipairs { g128, g512 } do
    local t = mode(s, "tree")
    local lim = T.grow_cpu_us[s.grow or 0]
    if lim then
      target_row(rows, "tree replay CPU a step (~" .. T.per_op_ns .. " ns an op)", s.name,
        t and us(t.cpu_us) .. " µs" or DASH, "≤ " .. lim .. " µs", t and t.cpu_us and t.cpu_us <= lim)
    end
  end
  local t128, t512 = mode(g128, "tree"), mode(g512, "tree")
  if t128 and t512 and t128.cpu_us and t512.cpu_us then
    local per = (t512.cpu_us - t128.cpu_us) * 1000 / (512 - 128)
    target_row(rows, "tree replay CPU an op (grow-512 over grow-128)", "grow", format("%.0f ns", per),
      "≤ " .. T.per_op_ns .. " ns", per <= T.per_op_ns)
  end
  for _, s in ipairs(tree_scenarios(inp)) do
    if T.vs_reduce_on[s.name] then
      local ro = mode(by_name(inp.torch, s.name), "reduce_overhead")
      local r = ratio(ro and ro.cpu_us, (mode(s, "tree") or {}).cpu_us)
      target_row(rows, "reduce-overhead CPU / tree CPU", s.name, x(r), "≥ " .. T.vs_reduce .. "x", r and r >= T.vs_reduce)
    end
  end
  for _, s in ipairs(scen) do
    local k = mode(s, "keyed")
    if k then
      local r = over_floor(s, "keyed", "cpu")
      target_row(rows, "keyed CPU / floor CPU", s.name, x(r), "≤ " .. T.keyed_cpu .. "x", r and r <= T.keyed_cpu)
      local ro = mode(by_name(inp.torch, s.name), "reduce_overhead")
      local r2 = ratio(ro and ro.cpu_us, k.cpu_us)
      target_row(rows, "reduce-overhead CPU / keyed CPU", s.name, x(r2), "≥ " .. T.vs_reduce_keyed .. "x",
        r2 and r2 >= T.vs_reduce_keyed)
    end
  end
  for _, s in ipairs(tree_scenarios(inp)) do
    local r = over_floor(s, "tree", "step")
    target_row(rows, "tree step / floor step", s.name, x(r), "≤ " .. T.step .. "x", r and r <= T.step)
  end
  for _, s in ipairs(scen) do
    local c = mode(s, "cond")
    if c then
      local r = over_floor(s, "cond", "step")
      target_row(rows, "gt.cond tree step / floor step (issue 13)", s.name, x(r), "≤ " .. T.cond_step .. "x",
        r and r <= T.cond_step)
    end
  end
  for _, s in ipairs(scen) do
    local h = s.record_heap
    if h then
      target_row(rows, format("record a new path with %.0f MB of live Lua heap (call wall time)", h.heap_mb),
        format("%s (%d kernels)", s.name, h.kernels or 0), format("%.2f ms", h.call_us / 1000),
        "≤ " .. T.record_heap_ms .. " ms", h.call_us / 1000 <= T.record_heap_ms)
    end
  end
  for _, s in ipairs(scen) do
    local sib = s.siblings
    if sib and sib.largest and sib.largest > 0 and s.stats and s.stats.pool_high_water then
      local r = s.stats.pool_high_water / sib.largest
      target_row(rows, "pool high-water of sibling paths / the largest path's alone", s.name,
        format("%.2fx (%s / %s)", r, require("gt.units").bytes(s.stats.pool_high_water),
          require("gt.units").bytes(sib.largest)), "≤ " .. format("%.2f", T.siblings) .. "x (not the sum)",
        r <= T.siblings + 1e-9)
    end
  end
  for _, s in ipairs(scen) do
    local b = s.batch
    if b then
      local ro, t = mode(by_name(inp.torch, s.name), "reduce_overhead"), mode(s, "tree")
      local r = ratio(ro and ro.cpu_us, t and t.cpu_us)
      target_row(rows, "decode: reduce-overhead host µs a token / tree's", s.name, x(r), "≥ " .. T.decode_host .. "x",
        r and r >= T.decode_host)
      local q = ratio(ro and ro.pipe_us, t and t.pipe_us)     -- (tokens/s: batch / pipelined µs a step)
      target_row(rows, "decode: tree tokens/s / reduce-overhead's", s.name, x(q), "≥ " .. format("%.2f", T.decode_rate) .. "x",
        q and q >= T.decode_rate)
    end
  end
  if inp.gpt_check or by_name(inp.gtlua, "decode-1") then
    local e = inp.gpt_check and tonumber(inp.gpt_check:match("max relative logit error ([%d%.e%-+]+)"))
    local pass = inp.gpt_check and inp.gpt_check:match("^gpt_check: PASS")
    target_row(rows, "decode: logits against PyTorch's (relative error)", "gpt_check", e and format("%.2g", e) or DASH,
      "≤ " .. format("%g", T.logits), e and pass and e <= T.logits)
  end
  return rows
end

--- other_ratios(inputs) -> rows as targets' that are no longer anchors' targets, shown for comparison
function M.other_ratios(inp)
  local T, rows = M.TARGETS, {}
  for _, s in ipairs(tree_scenarios(inp)) do
    local r = over_floor(s, "tree", "cpu")
    target_row(rows, "tree replay CPU / floor CPU", s.name, x(r), "(≤ " .. T.replay_cpu .. "x)", r and r <= T.replay_cpu)
  end
  for _, s in ipairs(tree_scenarios(inp)) do
    local ro = mode(by_name(inp.torch, s.name), "reduce_overhead")
    if not T.vs_reduce_on[s.name] and ro then
      local r = ratio(ro.cpu_us, (mode(s, "tree") or {}).cpu_us)
      target_row(rows, "reduce-overhead CPU / tree CPU", s.name, x(r), "(≥ " .. T.vs_reduce .. "x)", r and r >= T.vs_reduce)
    end
  end
  local g = near_100(inp.gtlua)
  local e = g and g.record
  if e then
    target_row(rows, "record a new path (call wall time)", format("%s (%d kernels)", g.name, e.kernels or 0),
      format("%.2f ms", e.call_us / 1000), "(≤ " .. T.record_ms .. " ms, \"a few ms\")", e.call_us / 1000 <= T.record_ms)
  end
  return rows
end

local function rows_table(rows, count)
  local met, total = 0, 0
  local out = { header({ "ratio", "scenario", "value", "target", "" }, { "---", "---", "---:", "---", "---" }) }
  for _, r in ipairs(rows) do
    out[#out + 1] = row(r)
    if r[5] ~= "not measured" then total = total + 1 end
    if r[5] == "**met**" then met = met + 1 end
  end
  if count then table.insert(out, 1, format("%d of %d measured targets met.\n", met, total)) end
  return concat(out, "\n")
end

local function targets_section(inp)
  local out = rows_table(M.targets(inp), true)
  local other = M.other_ratios(inp)
  if #other > 0 then
    out = out .. "\n\n### Other ratios\n\nRatios that earlier versions of this report held to targets no longer on the " ..
      "anchors' list (a replay with its Lua body is held to its host ns an op, above); in brackets what they " ..
      "asked.\n\n" ..
      rows_table(other, false)
  end
  return out
end

-- The modes of one scenario as table rows.
local MODES = {
  { "gtlua eager", "gtlua", "eager" }, { "gtlua tree (replay)", "gtlua", "tree" },
  { "gtlua keyed (no body)", "gtlua", "keyed" }, { "gtlua item() + host branch (tree)", "gtlua", "item" },
  { "gtlua gt.cond (tree)", "gtlua", "cond" }, { "gtlua floor", "gtlua", "floor" },
  { "PyTorch eager", "torch", "eager" }, { "PyTorch reduce-overhead", "torch", "reduce_overhead" },
  { "PyTorch CUDAGraph (hand-captured)", "torch", "cudagraph" },
}

-- A median with its spread over the processes that measured it: "12.3 (11.9–13.0)".
local function spread_us(m, field)
  local sp = m.spread and m.spread[field]
  if not sp or not sp[1] or sp[1] == sp[2] then return us(m[field]) end
  return format("%s (%s–%s)", us(m[field]), us(sp[1]), us(sp[2]))
end

local function mode_cells(m)
  if not m then return { DASH, DASH, DASH } end
  if m.skipped then return { "skipped: " .. m.skipped, DASH, DASH } end
  return { spread_us(m, "cpu_us"), spread_us(m, "step_us"), us(m.pipe_us) }
end

local function plural(n, word) return format("%d %s%s", n, word, n == 1 and "" or "s") end

local function scenario_notes(gs, ts)
  local notes = {}
  if gs and gs.error then notes[#notes + 1] = "**gtlua failed**: `" .. gs.error:match("[^\n]*") .. "`" end
  local e = gs and gs.record
  if e then
    notes[#notes + 1] = format("gtlua new path: the call that recorded %d kernels (%s) took %s µs " ..
      "(record %s µs, instantiate %s µs).", e.kernels, plural(e.nodes, "node"), us(e.call_us),
      us(e.record_us), us(e.instantiate_us))
  end
  if gs and gs.stats then
    local s = gs.stats
    notes[#notes + 1] = format("gtlua tree: %s, %s, %d recorded, %s, %s, %d eager; pool high-water %s.",
      plural(s.calls, "call"), plural(s.nodes, "node"), s.recorded, plural(s.replays, "replay"), plural(s.warmups, "warmup"),
      s.eager, require("gt.units").bytes(s.pool_high_water))
  end
  local tr_mode = gs and gs.modes and gs.modes.tree
  if tr_mode and tr_mode.gc_share then
    notes[#notes + 1] = format("gtlua tree: Lua's collector takes %.0f%% of a replayed step's host time " ..
      "(cpu µs with the collector running vs stopped)%s.", 100 * tr_mode.gc_share,
      tr_mode.lua_bytes and format("; a step allocates %.0f bytes of Lua memory", tr_mode.lua_bytes) or "")
  end
  if gs and gs.nodes and gs.nodes.cond then
    notes[#notes + 1] = format("gt.cond: %s per step (item() + host branch: %s); conditional nodes: %s; " ..
      "item vs cond outputs max |diff| %.3g.", plural(gs.nodes.cond, "node"), plural(gs.nodes.item, "node"),
      gs.cond_nodes and "yes" or "no (host branches)", gs.max_abs_diff or 0 / 0)
  end
  if gs and gs.agree then
    notes[#notes + 1] = format("eager and tree outputs: max |diff| %.3g over %d values (max |value| %.3g).",
      gs.agree.max_abs_diff or 0 / 0, gs.agree.values or 0, gs.agree.max_abs or 0)
  end
  local tr = ts and ts.record
  if tr and tr.reduce_overhead_first_s then
    notes[#notes + 1] = format("PyTorch reduce-overhead: first calls (compile + warmup + record) %.2f s.",
      tr.reduce_overhead_first_s)
  end
  if tr and tr.cudagraph_capture_us then
    notes[#notes + 1] = format("PyTorch CUDAGraph: capture + instantiate %s µs.", us(tr.cudagraph_capture_us))
  end
  for _, n in ipairs(ts and ts.notes or {}) do notes[#notes + 1] = "PyTorch: " .. n end
  if #notes == 0 then return "" end
  return "\n\n- " .. concat(notes, "\n- ")
end

local function scenario_section(inp, gs, name)
  local ts = by_name(inp.torch, name)
  local src = { gtlua = gs, torch = ts }
  local label = gs and gs.label or ts and ts.label
  local out = { format("### %s%s\n", name, label and label ~= "" and (" — " .. label) or ""),
                header({ "mode", "cpu µs", "step µs", "pipe µs" }, { "---", "---:", "---:", "---:" }) }
  for _, m in ipairs(MODES) do
    -- gtlua's rows: the modes the scenario ran (the cond scenario has its own), all of them if it failed
    if mode(src[m[2]], m[3]) or (m[2] == "gtlua" and (not gs or gs.error)) or (m[2] == "torch" and src.torch) then
      local cells = mode_cells(mode(src[m[2]], m[3]))
      out[#out + 1] = row { m[1], cells[1], cells[2], cells[3] }
    end
  end
  return concat(out, "\n") .. scenario_notes(gs, ts)
end

-- Every scenario name in gtlua's order, then any torch has alone.
local function scenario_names(inp)
  local names, seen = {}, {}
  for _, res in ipairs { inp.gtlua, inp.torch } do
    for _, s in ipairs(res and res.scenarios or {}) do
      if not seen[s.name] then seen[s.name] = true; names[#names + 1] = s.name end
    end
  end
  return names
end

-- grow: µs per step against kernels, one column per mode (raw launch floor included).
local function grow_series(inp)
  local series = {}
  local function add(label, res, m, field)
    local pts = {}
    for _, s in ipairs(res and res.scenarios or {}) do
      local v = s.grow and mode(s, m)
      if v and type(v[field]) == "number" then pts[#pts + 1] = { s.grow, v[field] } end
    end
    if #pts > 0 then series[#series + 1] = { label = label, points = pts } end
  end
  for _, m in ipairs(MODES) do add(m[1], inp[m[2]], m[3], "step_us") end
  local f = inp.floor
  if f then
    for _, spec in ipairs { { "raw CUDA eager (launch_floor)", "eager_step" }, { "raw CUDA graph (launch_floor)", "graph_step" } } do
      local pts = {}
      for _, n in ipairs(f.sizes) do
        if by_name(inp.gtlua, "grow-" .. n) then pts[#pts + 1] = { n, f.rows[n][spec[2]] } end
      end
      if #pts > 0 then series[#series + 1] = { label = spec[1], points = pts } end
    end
  end
  return series
end
M.grow_series = grow_series

local function grow_table(inp, field, title)
  local sizes, seen = {}, {}
  for _, res in ipairs { inp.gtlua, inp.torch } do
    for _, s in ipairs(res and res.scenarios or {}) do
      if s.grow and not seen[s.grow] then seen[s.grow] = true; sizes[#sizes + 1] = s.grow end
    end
  end
  table.sort(sizes)
  if #sizes == 0 then return nil end
  local head, align = { "mode \\ kernels" }, { "---" }
  for _, n in ipairs(sizes) do head[#head + 1] = tostring(n); align[#align + 1] = "---:" end
  local out = { "**" .. title .. "**\n", header(head, align) }
  for _, m in ipairs(MODES) do
    local cells, any = { m[1] }, false
    for _, n in ipairs(sizes) do
      local v = mode(by_name(inp[m[2]], "grow-" .. n), m[3])
      any = any or v ~= nil
      cells[#cells + 1] = v and v.skipped and "skipped" or us(v and v[field])
    end
    if any then out[#out + 1] = row(cells) end
  end
  local f = inp.floor
  local raw = { cpu_us = { "eager_cpu", "graph_cpu" }, step_us = { "eager_step", "graph_step" } }
  if f and raw[field] then
    for i, label in ipairs { "raw CUDA eager (launch_floor)", "raw CUDA graph (launch_floor)" } do
      local cells = { label }
      for _, n in ipairs(sizes) do cells[#cells + 1] = us(f.rows[n] and f.rows[n][raw[field][i]]) end
      out[#out + 1] = row(cells)
    end
  end
  return concat(out, "\n")
end

-- decode-B scenarios: tokens/s (B per pipelined step) and host µs per token
-- (cpu µs to issue a step / B), one column pair per batch size.
local function decode_batches(inp)
  local sizes, seen = {}, {}
  for _, res in ipairs { inp.gtlua, inp.torch } do
    for _, s in ipairs(res and res.scenarios or {}) do
      local b = s.batch or tonumber(s.name:match("^decode%-(%d+)$") or "")
      if b and s.name:match("^decode%-") and not seen[b] then seen[b] = true; sizes[#sizes + 1] = b end
    end
  end
  table.sort(sizes)
  return sizes
end

--- decode_section(inputs) -> the decode table's markdown, or nil without decode scenarios
function M.decode_section(inp)
  local sizes = decode_batches(inp)
  if #sizes == 0 then return nil end
  local head, align = { "mode" }, { "---" }
  for _, b in ipairs(sizes) do
    head[#head + 1] = format("batch %d tokens/s", b)
    head[#head + 1] = format("batch %d host µs/token", b)
    align[#align + 1] = "---:"
    align[#align + 1] = "---:"
  end
  local out = { "### decode — tokens/s and host µs per token\n",
    "Tokens/s = batch / pipelined µs per step; host µs per token = cpu µs to issue one step / batch " ..
    "(every sequence gets one token per step).\n", header(head, align) }
  for _, m in ipairs(MODES) do
    if inp[m[2]] then
      local cells, any = { m[1] }, false
      for _, b in ipairs(sizes) do
        local v = mode(by_name(inp[m[2]], "decode-" .. b), m[3])
        if v and v.skipped then
          cells[#cells + 1] = "skipped"
          cells[#cells + 1] = DASH
        elseif v and type(v.pipe_us) == "number" and v.pipe_us > 0 then
          any = true
          cells[#cells + 1] = format("%.0f", b * 1e6 / v.pipe_us)
          cells[#cells + 1] = us(type(v.cpu_us) == "number" and v.cpu_us / b or nil)
        else
          cells[#cells + 1] = DASH
          cells[#cells + 1] = DASH
        end
      end
      if any then out[#out + 1] = row(cells) end
    end
  end
  if inp.gpt_check then
    out[#out + 1] = "\nAgreement with PyTorch (`scripts/bench/gpt_check.py`, same weights and prompt, 32 greedy steps):\n\n    " ..
      inp.gpt_check
  end
  return concat(out, "\n")
end

local function floor_section(f)
  if not f then return "Not measured: `.anchors/launch_floor` was not there (see README)." end
  local out = { format("`launch_floor.cu` (the anchor program, a chain of tiny axpb kernels), device %s.\n", f.device or DASH),
    header({ "nodes", "eager cpu", "eager step", "graph cpu", "graph step", "inst", "update" },
           { "---:", "---:", "---:", "---:", "---:", "---:", "---:" }) }
  for _, n in ipairs(f.sizes) do
    local r = f.rows[n]
    out[#out + 1] = row { tostring(n), us(r.eager_cpu), us(r.eager_step), us(r.graph_cpu), us(r.graph_step), us(r.inst),
                          us(r.update) }
  end
  if f.pipelined then
    out[#out + 1] = format("\nPipelined 32-kernel step: graph %s µs, eager %s µs.", us(f.pipelined.graph), us(f.pipelined.eager))
  end
  if f.conditional then out[#out + 1] = "Conditional IF node: " .. f.conditional .. "." end
  return concat(out, "\n")
end

--- markdown(inputs [, svg_name]) -> the text of RESULTS.md
function M.markdown(inp, svg_name)
  local parts = {
    "# gtlua benchmark results",
    "Written by `scripts/bench/report.lua` from one run of `make bench` (`sh scripts/bench/run.sh`); " ..
    "what the scenarios and columns mean: [README.md](README.md). Medians in µs: **cpu** = host time to issue " ..
    "one step (no sync), **step** = issue + `sync`, **pipe** = many steps, one sync, per step." ..
    (inp.gtlua and inp.gtlua.runs and format(" gtlua's figures are medians over %d processes (LuaJIT's traces " ..
      "form differently in each), with the lowest and highest in brackets.", inp.gtlua.runs) or "") ..
    " The targets' ratios to gtlua's floor are paired where the run measured them so: a block of steps over " ..
    "the floor's block of the same round, the median over rounds (and processes).",
    header_lines(inp),
    "## Targets (shared/anchors/README.md)",
    targets_section(inp),
    "## Scenarios",
  }
  for _, name in ipairs(scenario_names(inp)) do
    if not name:match("^grow%-") then
      parts[#parts + 1] = scenario_section(inp, by_name(inp.gtlua, name), name)
    end
  end
  parts[#parts + 1] = M.decode_section(inp)
  parts[#parts + 1] = "### grow — chains of linear+relu kernels\n"
  for _, spec in ipairs { { "step_us", "µs per step (synced)" }, { "cpu_us", "CPU µs to issue a step" },
                          { "pipe_us", "µs per step, pipelined" } } do
    parts[#parts + 1] = grow_table(inp, spec[1], spec[2]) or "No grow scenario in this run."
  end
  if svg_name then parts[#parts + 1] = format("![µs per step against kernel count](%s)", svg_name) end
  for _, name in ipairs(scenario_names(inp)) do
    if name:match("^grow%-") then
      local notes = scenario_notes(by_name(inp.gtlua, name), by_name(inp.torch, name))
      if notes ~= "" then parts[#parts + 1] = "**" .. name .. "**" .. notes end
    end
  end
  parts[#parts + 1] = "## Raw launch floor"
  parts[#parts + 1] = floor_section(inp.floor)
  if inp.launch_probe then
    parts[#parts + 1] = "## A graph launch against its kernels' length\n\n" ..
      "`launch_probe.c`: a chain of kernel nodes spinning a number of clock cycles each, launched onto an idle " ..
      "stream from the host, and from the device (a one-node graph whose kernel tail-launches it); median host " ..
      "µs of the launch, and of the launch and its sync.\n\n    " .. inp.launch_probe:gsub("%s+$", ""):gsub("\n", "\n    ")
  end
  local notes = {}
  for _, n in ipairs(inp.torch and inp.torch.notes or {}) do notes[#notes + 1] = "- PyTorch: " .. n end
  for _, m in ipairs(inp.missing or {}) do notes[#notes + 1] = "- missing input: " .. m end
  if #notes > 0 then parts[#parts + 1] = "## Notes\n\n" .. concat(notes, "\n") end
  return concat(parts, "\n\n") .. "\n"
end

-- -- The plot ------------------------------------------------------------------------------

-- One colour per mode, whichever modes a run has.
local COLORS = { ["gtlua eager"] = "#1f77b4", ["gtlua tree (replay)"] = "#2ca02c", ["gtlua floor"] = "#17becf",
  ["PyTorch eager"] = "#d62728", ["PyTorch reduce-overhead"] = "#ff7f0e", ["PyTorch CUDAGraph (hand-captured)"] = "#9467bd",
  ["raw CUDA eager (launch_floor)"] = "#8c564b", ["raw CUDA graph (launch_floor)"] = "#7f7f7f" }

local esc = require("gt.report.el").esc      -- the report's one escaper

local function log10(v) return log(v) / log(10) end

--- svg(series) -> a log-log SVG plot of µs per step against kernels; series = { {label, points = {{n, us}}} }
function M.svg(series)
  local W, H, L, R, T, B = 800, 440, 70, 270, 40, 50
  local xmin, xmax, ymin, ymax = math.huge, 0, math.huge, 0
  for _, s in ipairs(series) do
    for _, p in ipairs(s.points) do
      xmin, xmax = min(xmin, p[1]), max(xmax, p[1])
      if p[2] > 0 then ymin, ymax = min(ymin, p[2]), max(ymax, p[2]) end
    end
  end
  if xmax == 0 then xmin, xmax, ymin, ymax = 1, 2, 1, 10 end
  if xmax == xmin then xmax = xmin * 2 end
  local y0, y1 = floor(log10(ymin)), math.ceil(log10(ymax))
  if y1 == y0 then y1 = y0 + 1 end
  local function px(n) return L + (log(n) - log(xmin)) / (log(xmax) - log(xmin)) * (W - L - R) end
  local function py(v) return H - B - (log10(v) - y0) / (y1 - y0) * (H - T - B) end
  local o = { format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
    'font-family="sans-serif" font-size="12">', W, H, W, H),
    format('<rect width="%d" height="%d" fill="white"/>', W, H),
    format('<text x="%d" y="22" font-size="15">µs per step (synced) against kernels per step — grow scenario</text>', L) }
  for e = y0, y1 do
    local y = py(10 ^ e)
    o[#o + 1] = format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>', L, y, W - R, y)
    o[#o + 1] = format('<text x="%d" y="%.1f" text-anchor="end">%s</text>', L - 6, y + 4, esc(format("%g", 10 ^ e)))
  end
  local ticks = {}
  for _, s in ipairs(series) do for _, p in ipairs(s.points) do ticks[p[1]] = true end end
  for n in pairs(ticks) do
    local xx = px(n)
    o[#o + 1] = format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>', xx, T, xx, H - B)
    o[#o + 1] = format('<text x="%.1f" y="%d" text-anchor="middle">%d</text>', xx, H - B + 16, n)
  end
  o[#o + 1] = format('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>', L, T, W - L - R, H - T - B)
  o[#o + 1] = format('<text x="%d" y="%d" text-anchor="middle">kernels per step (log)</text>', (L + W - R) / 2, H - 12)
  o[#o + 1] = format('<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">µs per step (log)</text>', (T + H - B) / 2)
  for i, s in ipairs(series) do
    local c, pts = COLORS[s.label] or "#000", {}
    local dash = s.label:find("raw") and ' stroke-dasharray="5 4"' or ""
    for _, p in ipairs(s.points) do
      if p[2] > 0 then pts[#pts + 1] = format("%.1f,%.1f", px(p[1]), py(p[2])) end
    end
    o[#o + 1] = format('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>', concat(pts, " "), c, dash)
    for _, p in ipairs(s.points) do
      if p[2] > 0 then o[#o + 1] = format('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>', px(p[1]), py(p[2]), c) end
    end
    local ly = T + 10 + (i - 1) * 20
    o[#o + 1] = format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>', W - R + 14, ly, W - R + 38,
                       ly, c, dash)
    o[#o + 1] = format('<text x="%d" y="%d">%s</text>', W - R + 44, ly + 4, esc(s.label))
  end
  o[#o + 1] = "</svg>"
  return concat(o, "\n") .. "\n"
end

-- -- Running ---------------------------------------------------------------------------------

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  assert(f:write(text))
  assert(f:close())
end

--- write(dir [, out [, svg [, paths]]]) -> inputs: reads dir's files, writes RESULTS.md and steps.svg
function M.write(dir, out, svg, paths)
  local inp = M.load(dir, paths)
  out, svg = out or (dir .. "/RESULTS.md"), svg or (dir .. "/steps.svg")
  local svg_name = svg:match("[^/]+$")
  write_file(svg, M.svg(grow_series(inp)))
  write_file(out, M.markdown(inp, svg_name))
  return inp, out, svg
end

local USAGE = "usage: gtlua scripts/bench/report.lua DIR [--out FILE] [--svg FILE]"

function M.main(argv)
  local dir, o, i = nil, {}, 1
  while i <= #argv do
    local a = argv[i]
    if a == "--out" or a == "--svg" then o[a:sub(3)] = argv[i + 1]; i = i + 1
    elseif a == "-h" or a == "--help" then print(USAGE) return
    elseif not dir then dir = a
    else error(USAGE, 0) end
    i = i + 1
  end
  if not dir then error(USAGE, 0) end
  local inp, out, svg = M.write(dir, o.out, o.svg)
  for _, m in ipairs(inp.missing) do io.stderr:write("report: missing ", m, "\n") end
  print("wrote " .. out .. " and " .. svg)
end

if arg and arg[0] and arg[0]:match("report%.lua$") then
  M.main({ ... })
end

return M
