-- gt.report.svg: the SVG pictures of the HTML report: the tree (top-down or as rows) and charts per node and over calls.
--
-- Layout rules (spec/browser_spec.lua checks them in Chromium):
--   * nothing drawn is wider than the page's content (CONTENT_W px);
--   * a tree whose top-down drawing fits draws top-down, any wider one as
--     indented rows (depth to the right, one row per node), so every root is
--     in view and a 100-node tree reads at 1280 px;
--   * each node shows its kernels and shapes; its <title> has every number;
--   * charts over calls are stacked columns or areas (no lines that cross);
--   * µs axes are plain numbers; legends list only what is drawn.
local C = require "gt.report.common"
local E = require "gt.report.el"
local units = require "gt.units"

local format, concat = string.format, table.concat
local floor, max, min, log10 = math.floor, math.max, math.min, math.log10
local el = E.el
local bytes, plain_us, plural, state = units.bytes, units.plain_us, C.plural, C.state

local M = { CONTENT_W = 1060 }      -- header, section: max-width 1100 minus padding
local CONTENT_W = M.CONTENT_W

-- -- The tree --------------------------------------------------------------------------

-- The text of a node's hover box: every number, the full label, shapes, why, cut.
local function node_tip(n)
  return format("[%d] %s\nshapes: %s\nwhy: %s\ncut: %s\nstate: %s%s\nvisits %d: %d replays, %d records, %d warmups, %d updates, %d eager\n" ..
    "kernels %d, depth %d, last call %d\nrecord %s, instantiate %s, replay cpu %s (mean), gpu %s (mean)\n" ..
    "planned %s, checkpoint %s, reusable %s, graph %s (%s)", n.id, n.label, n.shapes or "?", n.why or "?", C.cut_sites(n) or n.cut or "?", state(n),
    n.skip and (" (" .. n.skip .. ")") or "", n.visits, n.replays, C.records(n), n.warmups, n.updates, n.eager, n.kernels,
    n.depth, n.last_call or 0, plain_us(n.record_us), plain_us(n.instantiate_us), plain_us(n.replay_cpu_us),
    plain_us(n.gpu_us), bytes(n.planned_bytes), bytes(n.checkpoint_bytes), bytes(n.reusable_bytes), bytes(n.graph_bytes or 0),
    n.graph_measured and "measured" or "estimated")
end

-- Characters of 11 px text that fit w px (a conservative 6.6 px per character).
local function fit(s, w, px) return C.truncate(s or "", max(floor(w / (px or 6.6)), 4)) end

local function short_why(n)
  local w = n.why or ""
  return (w:gsub(" %(sibling %[%d+%]%)$", ""))
end

local LINE_CLASS = { "label", "sub" }

local function node_box(n, x, y, w, h, most, lines)
  local share = n.visits > 0 and n.replays / n.visits or 0
  local texts = {}
  for i, l in ipairs(lines) do texts[i] = el("text", { class = LINE_CLASS[i], x = 8, y = 2 + 14 * i }, l) end
  return el("g", { class = "node", ["data-id"] = n.id, ["data-root"] = not n.parent and "1",
                   transform = format("translate(%d,%d)", x, y) },
    el("title", nil, node_tip(n)),
    el("rect", { width = w, height = h, rx = 6, fill = C.heat(C.replay_share(n, most)), stroke = C.BORDER[state(n)],
                 ["stroke-width"] = 2 }),
    texts,
    el("rect", { x = 8, y = h - 7, width = w - 16, height = 3, fill = "#e5e7eb" }),
    el("rect", { x = 8, y = h - 7, width = (w - 16) * share, height = 3, fill = "#1d4ed8" }))
end

local NW, NH, HGAP, VGAP, MARGIN = 176, 72, 18, 40, 12

-- A tidy layered layout: leaves take consecutive slots left to right, a
-- parent sits centred over its first and last child; y is the depth.  (No
-- recursion: a chain 10^5 segments deep lays out.)
local function layout(s)
  local pos, slot = {}, 0
  local stack, n = {}, 0
  for i = #s.roots, 1, -1 do n = n + 1; stack[n] = { s.roots[i], false } end
  while n > 0 do
    local e = stack[n]
    local id, kids = e[1], s.node[e[1]].children
    if #kids == 0 then
      pos[id], slot = slot, slot + 1
      stack[n], n = nil, n - 1
    elseif e[2] then                        -- (its children are placed)
      pos[id] = (pos[kids[1]] + pos[kids[#kids]]) / 2
      stack[n], n = nil, n - 1
    else
      e[2] = true
      for i = #kids, 1, -1 do n = n + 1; stack[n] = { kids[i], false } end
    end
  end
  return pos, slot
end

local function edge(n, most_visits, d)
  return el("path", { class = "edge", ["stroke-width"] = 1 + 3 * n.visits / most_visits, d = d },
    el("title", nil, format("[%d] -> [%d]: %d visits", n.parent, n.id, n.visits)))
end

local function tree_el(layout_name, w, h, edges, nodes)
  return el("svg", { class = "tree", ["data-layout"] = layout_name, width = w, height = h,
                     viewBox = format("0 0 %d %d", w, h) }, edges, nodes)
end

local function top_down(s, pos, slots, most, most_visits)
  local deepest = 0
  for _, id in ipairs(C.node_ids(s)) do deepest = max(deepest, s.node[id].depth) end
  local w = MARGIN * 2 + max(slots, 1) * (NW + HGAP) - HGAP
  local h = MARGIN * 2 + (deepest + 1) * (NH + VGAP) - VGAP
  local function xy(id) return MARGIN + pos[id] * (NW + HGAP), MARGIN + s.node[id].depth * (NH + VGAP) end
  local edges, nodes = {}, {}
  for _, id in ipairs(C.node_ids(s)) do
    local n = s.node[id]
    local x, y = xy(id)
    if n.parent then
      local px, py = xy(n.parent)
      local x1, y1, x2, y2 = px + NW / 2, py + NH, x + NW / 2, y
      local ym = (y1 + y2) / 2
      edges[#edges + 1] = edge(n, most_visits, format("M%d %d C%d %d,%d %d,%d %d", x1, y1, x1, ym, x2, ym, x2, y2))
    end
    nodes[#nodes + 1] = node_box(n, x, y, NW, NH, most, {
      fit(format("[%d] %s", id, n.label), NW - 16, 7.2),
      fit(n.shapes, NW - 16),
      fit(short_why(n), NW - 16),
      format("%s · %s · %s", plural(n.visits, "visit"), plural(n.replays, "replay"), state(n)),
    })
  end
  return tree_el("top-down", w, h, edges, nodes)
end

-- Indented rows: depth to the right, one node per row in drawing order.
-- At least 420 px of every row are the node's box: past the depth that
-- leaves (a deep chain), rows stay in that column, the box saying its depth.
local RH, RGAP, BOX_MIN = 44, 8, 420
local function rows(s, most, most_visits)
  local order, level, deepest = {}, {}, 0
  C.walk(s, function(n, _, _, lv) order[#order + 1] = n.id; level[n.id] = lv; deepest = max(deepest, lv) end)
  local width = CONTENT_W - 14                        -- the .box padding and border
  local room = width - 2 * MARGIN - BOX_MIN
  local indent = max(deepest > 0 and min(24, floor(room / deepest)) or 24, 6)
  local cap = floor(room / indent)                    -- the deepest level drawn indented
  local row, edges, nodes = {}, {}, {}
  for i, id in ipairs(order) do row[id] = i - 1 end
  local function y_of(id) return MARGIN + row[id] * (RH + RGAP) end
  local function x_of(id) return MARGIN + min(level[id], cap) * indent end
  for _, id in ipairs(order) do
    local n = s.node[id]
    local x, y = x_of(id), y_of(id)
    local w = width - MARGIN - x
    if n.parent then
      local px, py = x_of(n.parent) + 6, y_of(n.parent) + RH
      edges[#edges + 1] = edge(n, most_visits, format("M%d %d V%d H%d", px, py, y + RH / 2, x))
    end
    local many = C.cut_sites(n)
    local cut = many and (" · cuts: " .. many) or n.cut and n.cut ~= "return" and (" · cut: " .. n.cut) or ""
    local depth = level[id] > cap and format("depth %d · ", level[id]) or ""
    nodes[#nodes + 1] = node_box(n, x, y, w, RH, most, {
      fit(format("[%d] %s%s  ·  %s", id, depth, n.label, n.shapes or ""), w - 16, 7.2),
      fit(format("%s%s · %s, %s · %s · planned %s", n.why or "", cut, plural(n.visits, "visit"), plural(n.replays, "replay"),
        state(n), bytes(n.planned_bytes)), w - 16),
    })
  end
  return tree_el("rows", width, MARGIN * 2 + #order * (RH + RGAP) - RGAP, edges, nodes)
end

--- svg.tree(s) -> markup of the tree of stats s, and how it was laid out ("top-down" or "rows")
function M.tree(s)
  local pos, slots = layout(s)
  local most, most_visits = C.most_replays(s), 1
  for _, id in ipairs(C.node_ids(s)) do most_visits = max(most_visits, s.node[id].visits) end
  if MARGIN * 2 + slots * (NW + HGAP) - HGAP <= CONTENT_W - 14 then return top_down(s, pos, slots, most, most_visits), "top-down" end
  return rows(s, most, most_visits), "rows"
end

-- -- Axes ----------------------------------------------------------------------------

-- A round axis maximum, at least v: 1, 2 or 5 times a power of ten, or for
-- bytes a power of two.
local function nice_max(v, binary)
  if v <= 0 then return 1 end
  if binary then return 2 ^ math.ceil(math.log(v) / math.log(2)) end
  local p = 10 ^ floor(log10(v))
  for _, m in ipairs { 1, 2, 5, 10 } do if m * p >= v then return m * p end end
  return 10 * p
end

local function small_text(x, y, text, anchor, fill)
  return el("text", { x = x, y = y, ["font-size"] = 10, fill = fill or "#6b7280", ["text-anchor"] = anchor }, text)
end

local function grid_line(x1, y1, x2, y2)
  return el("line", { x1 = x1, y1 = y1, x2 = x2, y2 = y2, stroke = "#e5e7eb" })
end

local function chart_el(class, w, h, ...)
  return el("svg", { class = class, width = w, height = h, viewBox = format("0 0 %d %d", w, h) }, ...)
end

-- -- Bar charts per node -----------------------------------------------------------

local LW, PW, BH = 250, 600, 13

-- The largest value a bar reaches (a stacked row's sum), and the markers
-- that fit its scale (one far off it would squash the bars).
local function bar_extent(o)
  local hi = 0
  for r = 1, #o.rows do
    local sum = 0
    for _, se in ipairs(o.series) do
      local v = se[3][r] or 0
      sum = sum + v
      hi = max(hi, v)
    end
    if o.stacked then hi = max(hi, sum) end
  end
  local markers = {}
  for _, m in ipairs(o.markers or {}) do
    if m[2] > 0 and (m[2] <= 2 * hi or hi == 0) then markers[#markers + 1] = m; hi = max(hi, m[2]) end
  end
  return hi, markers
end

-- The axis: scale(v) -> px from the left of the plot, and its ticks.
local function bar_scale(o, hi)
  local lo, ticks = 0.1, {}
  if o.log then
    hi = 10 ^ math.ceil(log10(max(hi, 1)))
    local d = lo
    while d <= hi * 1.0001 do ticks[#ticks + 1] = d; d = d * 10 end
    return function(v) return v <= lo and 0 or PW * (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) end, ticks
  end
  if o.integer then hi = max(4, math.ceil(hi / 4) * 4)          -- counts: whole ticks
  else hi = nice_max(hi, o.binary) end
  for i = 0, 4 do ticks[#ticks + 1] = hi * i / 4 end
  return function(v) return PW * v / hi end, ticks
end

-- The bars of row r (label) with their values; y: the row's top.
local function bar_row(o, r, label, y, scale, per_row)
  local out, x = { el("text", { x = LW - 8, y = y + per_row * BH / 2 + 4, ["font-size"] = 11, ["text-anchor"] = "end" },
    label, el("title", nil, o.tips and o.tips[r] or label)) }, LW
  for i, se in ipairs(o.series) do
    local v = se[3][r] or 0
    local bw = scale(v)
    local by = o.stacked and y or y + (i - 1) * BH
    if bw > 0 then
      out[#out + 1] = el("rect", { class = "bar", x = o.stacked and x or LW, y = by, width = max(bw, 1), height = BH - 2,
        fill = se[2] }, el("title", nil, format("%s: %s = %s", label, se[1], o.fmt(v))))
    end
    if o.stacked then x = x + bw
    elseif v ~= 0 then out[#out + 1] = small_text(LW + bw + 4, by + BH - 3, o.fmt(v), nil, "#374151") end
  end
  if o.stacked then
    local total = 0
    for _, se in ipairs(o.series) do total = total + (se[3][r] or 0) end
    out[#out + 1] = small_text(x + 4, y + BH - 3, o.fmt(total), nil, "#374151")
  end
  return out
end

--- svg.bars(o) -> markup of horizontal bars, one row per node, and the
--- markers drawn.  o: rows (labels), tips (full labels), series ({name,
--- colour, values}), stacked, log, integer, binary, fmt, axis (its name),
--- markers ({name, value, colour}: dashed vertical lines).
function M.bars(o)
  local per_row = o.stacked and 1 or #o.series
  local RHB, top = per_row * BH + 8, 8
  local h, ybot = top + #o.rows * RHB + 30, top + #o.rows * RHB
  local hi, markers = bar_extent(o)
  local scale, ticks = bar_scale(o, hi)
  local out = {}
  for _, t in ipairs(ticks) do
    local x = (o.log and t <= 0.1) and LW or LW + scale(t)
    out[#out + 1] = { grid_line(x, top, x, ybot), small_text(x, ybot + 13, o.fmt(t), "middle") }
  end
  if o.axis then out[#out + 1] = small_text(LW + PW, ybot + 26, o.axis, "end") end
  for r, label in ipairs(o.rows) do out[#out + 1] = bar_row(o, r, label, top + (r - 1) * RHB + 4, scale, per_row) end
  for _, m in ipairs(markers) do
    local x = LW + scale(m[2])
    out[#out + 1] = el("line", { x1 = x, y1 = top - 4, x2 = x, y2 = ybot, stroke = m[3], ["stroke-width"] = 2,
      ["stroke-dasharray"] = "4 3" }, el("title", nil, m[1] .. ": " .. o.fmt(m[2])))
  end
  return chart_el("chart", LW + PW + 70, h, out), markers
end

-- -- Charts over calls -------------------------------------------------------------

local CW, CH, CL, CB, CT = 1000, 170, 80, 24, 10

local function y_axis(hi, fmt, py)
  local out = {}
  for i = 0, 4 do
    local v = hi * i / 4
    out[#out + 1] = { grid_line(CL, py(v), CW - 10, py(v)), small_text(CL - 4, py(v) + 3, fmt(v), "end") }
  end
  return out
end

-- Sums of each series over bins of `per` calls: sums[b][i], and the largest column.
local function binned(o, per, bins)
  local n, sums, hi = #o.x, {}, 0
  for b = 1, bins do
    local col, tot = {}, 0
    for i, se in ipairs(o.series) do
      local v = 0
      for k = (b - 1) * per + 1, min(b * per, n) do v = v + (se[3][k] or 0) end
      col[i] = v
      tot = tot + v
    end
    sums[b] = col
    hi = max(hi, tot)
  end
  return sums, hi
end

--- svg.columns(o) -> markup of stacked columns over calls (binned to at most
--- 200 columns): o.x call numbers, o.series {name, colour, values}, o.fmt.
function M.columns(o)
  local n = #o.x
  local per = math.ceil(n / 200)
  local bins = math.ceil(n / per)
  local sums, hi = binned(o, per, bins)
  hi = max(4, math.ceil(hi / 4) * 4)
  local bw = (CW - CL - 10) / bins
  local function py(v) return CT + (CH - CT - CB) * (1 - v / hi) end
  local out = { y_axis(hi, o.fmt, py) }
  for b = 1, bins do
    local x, base = CL + (b - 1) * bw, 0
    local c0, c1 = o.x[(b - 1) * per + 1], o.x[min(b * per, n)]
    for i, se in ipairs(o.series) do
      local v = sums[b][i]
      if v > 0 then
        out[#out + 1] = el("rect", { class = "col", x = x, y = py(base + v), width = max(bw - (bw >= 4 and 1 or 0), 0.5),
          height = py(base) - py(base + v), fill = se[2] }, el("title", nil, format("call%s %s: %s %d",
          c0 == c1 and "" or "s", c0 == c1 and c0 or (c0 .. ".." .. c1), se[1], v)))
        base = base + v
      end
    end
  end
  out[#out + 1] = small_text(CW - 10, CH - 6, format("call %d .. %d%s", o.x[1] or 0, o.x[n] or 0,
    per > 1 and format(" (%d calls per column)", per) or ""), "end")
  return chart_el("chart calls", CW, CH, out)
end

--- svg.areas(o) -> markup of filled areas over calls, drawn in order (each
--- series at most the one before, e.g. reserved then in use: nothing
--- crosses); without o.fill, lines.  o: x, series, fmt, binary, fill.
function M.areas(o)
  local n, hi = #o.x, 0
  for _, se in ipairs(o.series) do for i = 1, n do hi = max(hi, se[3][i] or 0) end end
  hi = nice_max(hi, o.binary)
  local x0, x1 = o.x[1] or 0, o.x[n] or 1
  if x1 == x0 then x1 = x0 + 1 end
  local function px(v) return CL + (CW - CL - 10) * (v - x0) / (x1 - x0) end
  local function py(v) return CT + (CH - CT - CB) * (1 - (hi > 0 and v / hi or 0)) end
  local out = { y_axis(hi, o.fmt, py), small_text(CW - 10, CH - 6, format("call %d .. %d", x0, o.x[n] or x0), "end") }
  for _, se in ipairs(o.series) do
    local pts = {}
    for i = 1, n do pts[i] = format("%.1f,%.1f", px(o.x[i]), py(se[3][i] or 0)) end
    if o.fill then
      out[#out + 1] = el("polygon", { class = "area", fill = se[2], ["fill-opacity"] = 0.8, stroke = se[2],
        points = format("%.1f,%.1f %s %.1f,%.1f", px(x0), py(0), concat(pts, " "), px(o.x[n] or x0), py(0)) },
        el("title", nil, se[1]))
    else
      out[#out + 1] = el("polyline", { class = "series", fill = "none", stroke = se[2], ["stroke-width"] = 1.5,
        points = concat(pts, " ") }, el("title", nil, se[1]))
    end
  end
  return chart_el("chart calls", CW, CH, out)
end

return M
