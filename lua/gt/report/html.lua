-- gt.report.html: one self-contained HTML page of graph trees: the advisor's findings, the tree, charts, tables.
--
-- Layout rules (spec/browser_spec.lua checks them in Chromium):
--   * the page's content is at most 1060 px wide; nothing drawn is wider;
--   * a tree whose top-down drawing fits draws top-down, any wider one as
--     indented rows (depth to the right, one row per node), so every root is
--     in view and a 100-node tree reads at 1280 px;
--   * each node shows its kernels and shapes; its <title> has every number;
--   * charts over calls are stacked columns or areas (no lines that cross);
--   * µs axes are plain numbers; tables wrap; legends list only what is drawn.
local gt = require "gt"
local R = require "gt.report"
local H = R._h

local format, concat, sort = string.format, table.concat, table.sort
local floor, max, min, log10 = math.floor, math.max, math.min, math.log10
local bytes, truncate, plural, records, state = H.bytes, H.truncate, H.plural, H.records, H.state
local node_ids, walk, heat, BORDER = H.node_ids, H.walk, H.heat, H.BORDER

local M = {}

local CONTENT_W = 1060          -- header, section: max-width 1100 minus padding

-- -- Helpers ---------------------------------------------------------------------

local function esc(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }))
end

local function num(x)
  if x == floor(x) then return format("%d", x) end
  return format("%.1f", x)
end

-- Time in plain numbers, never an exponent: "850 µs", "12.5 ms", "3 s".
local function plain_us(v)
  v = v or 0
  if v >= 1e6 then return format("%s s", (format("%.3f", v / 1e6):gsub("%.?0+$", ""))) end
  if v >= 1e3 then return format("%s ms", (format("%.2f", v / 1e3):gsub("%.?0+$", ""))) end
  if v >= 10 or v == floor(v) then return format("%d µs", floor(v + 0.5)) end
  return format("%s µs", (format("%.2f", v):gsub("%.?0+$", "")))
end
M._plain_us = plain_us

-- A round axis maximum, at least v: 1, 2 or 5 times a power of ten, or for
-- bytes a power of two.
local function nice_max(v, binary)
  if v <= 0 then return 1 end
  if binary then return 2 ^ math.ceil(math.log(v) / math.log(2)) end
  local p = 10 ^ floor(log10(v))
  for _, m in ipairs { 1, 2, 5, 10 } do if m * p >= v then return m * p end end
  return 10 * p
end

local function legend(items)
  local out = { '<div class="legend">' }
  for _, it in ipairs(items) do
    out[#out + 1] = format('<span><i style="background:%s;border:1px solid %s"></i>%s</span>', it[2], it[3] or it[2], esc(it[1]))
  end
  out[#out + 1] = "</div>"
  return concat(out)
end

local CSS = [[
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#111827;background:#f9fafb}
header,section,footer{max-width:1100px;margin:0 auto;padding:0 20px}
header{padding-top:18px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:19px;margin:28px 0 6px;border-bottom:2px solid #e5e7eb;padding-bottom:4px}
h2 small{font-weight:normal;color:#6b7280;font-size:13px;margin-left:8px}
h3{font-size:15px;margin:20px 0 6px;color:#374151}
p.meta{color:#6b7280;margin:0 0 8px;font-size:13px}
nav a{margin-right:12px;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:8px}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px 10px;min-width:78px}
.card b{display:block;font-size:17px}
.card span{font-size:11px;color:#6b7280;text-transform:uppercase;letter-spacing:.04em}
.box{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px;max-width:100%;overflow:hidden}
svg{max-width:100%;height:auto}
svg text{font-family:inherit}
svg .node text{font-size:11px;fill:#111827}
svg .node text.label{font-weight:600;font-size:12px}
svg .node text.sub{fill:#1f2937}
svg .edge{fill:none;stroke:#9ca3af}
table{border-collapse:collapse;font-size:12px;background:#fff;width:100%;max-width:100%}
th,td{border:1px solid #e5e7eb;padding:3px 5px;text-align:right;vertical-align:top}
td{white-space:nowrap}
td.l{text-align:left;white-space:normal;overflow-wrap:break-word}
table.nodes th{font-size:11px}
th{background:#f3f4f6;font-weight:600}
th.l{text-align:left}
.legend{font-size:12px;color:#374151;margin:4px 0}
.legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.findings{display:grid;gap:6px;margin:8px 0 12px}
.finding{background:#fff;border:1px solid #e5e7eb;border-left:5px solid #9ca3af;border-radius:6px;padding:6px 10px;font-size:13px}
.finding.warn{border-left-color:#dc2626}
.finding.ok{border-left-color:#16a34a}
.finding.info{border-left-color:#2563eb}
.finding b.q{color:#6b7280;margin-right:6px}
.finding p{margin:3px 0}
.finding p.advice{font-weight:600}
footer{color:#9ca3af;font-size:12px;padding:24px 20px}
]]

-- -- The advisor's findings --------------------------------------------------------

local function findings_html(tree)
  local ok, a = pcall(function() return require("gt.advise").tree(tree) end)
  if not ok then return format('<p class="meta">The advisor failed: %s</p>', esc(a)) end
  local out = { '<div class="findings">' }
  for _, f in ipairs(a.findings) do
    out[#out + 1] = format('<div class="finding %s"><b class="q">Q%d</b><b>%s</b><p>%s</p><p class="advice">→ %s</p></div>',
      esc(f.level or "info"), f.q, esc(f.title), esc(f.text), esc(f.advice))
  end
  out[#out + 1] = "</div>"
  return concat(out)
end
M.findings_html = findings_html

-- -- The tree --------------------------------------------------------------------------

-- The text of a node's hover box: every number, the full label, shapes, why, cut.
local function node_tip(n)
  return format("[%d] %s\nshapes: %s\nwhy: %s\ncut: %s\nstate: %s%s\nvisits %d: %d replays, %d records, %d warmups, %d updates, %d eager\n" ..
    "kernels %d, depth %d, last call %d\nrecord %s, instantiate %s, replay cpu %s (mean), gpu %s (mean)\n" ..
    "planned %s, checkpoint %s, reusable %s", n.id, n.label, n.shapes or "?", n.why or "?", n.cut or "?", state(n),
    n.skip and (" (" .. n.skip .. ")") or "", n.visits, n.replays, records(n), n.warmups, n.updates, n.eager, n.kernels,
    n.depth, n.last_call or 0, plain_us(n.record_us), plain_us(n.instantiate_us), plain_us(n.replay_cpu_us),
    plain_us(n.gpu_us), bytes(n.planned_bytes), bytes(n.checkpoint_bytes), bytes(n.reusable_bytes))
end

-- Characters of 11 px text that fit w px (a conservative 6.6 px per character).
local function fit(s, w, px) return truncate(s or "", max(floor(w / (px or 6.6)), 4)) end

local function short_why(n)
  local w = n.why or ""
  return (w:gsub(" %(sibling %[%d+%]%)$", ""))
end

local function node_box(n, x, y, w, h, most, lines)
  local st = state(n)
  local share = n.visits > 0 and n.replays / n.visits or 0
  local out = {
    format('<g class="node" data-id="%d"%s transform="translate(%d,%d)">', n.id, n.parent and "" or ' data-root="1"', x, y),
    "<title>", esc(node_tip(n)), "</title>",
    format('<rect width="%d" height="%d" rx="6" fill="%s" stroke="%s" stroke-width="2"/>', w, h,
      heat(H.replay_share(n, most)), BORDER[st]),
  }
  for i, l in ipairs(lines) do
    out[#out + 1] = format('<text%s x="8" y="%d">%s</text>', i == 1 and ' class="label"' or (i == 2 and ' class="sub"' or ""),
      2 + 14 * i, esc(l))
  end
  out[#out + 1] = format('<rect x="8" y="%d" width="%d" height="3" fill="#e5e7eb"/>', h - 7, w - 16)
  out[#out + 1] = format('<rect x="8" y="%d" width="%.1f" height="3" fill="#1d4ed8"/>', h - 7, (w - 16) * share)
  out[#out + 1] = "</g>"
  return concat(out)
end

local NW, NH, HGAP, VGAP, MARGIN = 176, 72, 18, 40, 12

-- A tidy layered layout: leaves take consecutive slots left to right, a
-- parent sits centred over its first and last child; y is the depth.
local function layout(s)
  local pos, slot = {}, 0
  local function place(id)
    local n = s.node[id]
    if #n.children == 0 then
      pos[id] = slot
      slot = slot + 1
    else
      for _, c in ipairs(n.children) do place(c) end
      pos[id] = (pos[n.children[1]] + pos[n.children[#n.children]]) / 2
    end
  end
  for _, r in ipairs(s.roots) do place(r) end
  return pos, slot
end

local function edge(n, x1, y1, x2, y2, most_visits, d)
  return format('<path class="edge" stroke-width="%.1f" d="%s"><title>%s</title></path>', 1 + 3 * n.visits / most_visits, d,
    esc(format("[%d] -> [%d]: %d visits", n.parent, n.id, n.visits)))
end

local function top_down(s, pos, slots, most, most_visits)
  local deepest = 0
  for _, id in ipairs(node_ids(s)) do deepest = max(deepest, s.node[id].depth) end
  local w = MARGIN * 2 + max(slots, 1) * (NW + HGAP) - HGAP
  local h = MARGIN * 2 + (deepest + 1) * (NH + VGAP) - VGAP
  local function xy(id) return MARGIN + pos[id] * (NW + HGAP), MARGIN + s.node[id].depth * (NH + VGAP) end
  local edges, nodes = {}, {}
  for _, id in ipairs(node_ids(s)) do
    local n = s.node[id]
    local x, y = xy(id)
    if n.parent then
      local px, py = xy(n.parent)
      local x1, y1, x2, y2 = px + NW / 2, py + NH, x + NW / 2, y
      local ym = (y1 + y2) / 2
      edges[#edges + 1] = edge(n, x1, y1, x2, y2, most_visits, format("M%d %d C%d %d,%d %d,%d %d", x1, y1, x1, ym, x2, ym, x2, y2))
    end
    nodes[#nodes + 1] = node_box(n, x, y, NW, NH, most, {
      fit(format("[%d] %s", id, n.label), NW - 16, 7.2),
      fit(n.shapes, NW - 16),
      fit(short_why(n), NW - 16),
      format("%s · %s · %s", plural(n.visits, "visit"), plural(n.replays, "replay"), state(n)),
    })
  end
  return format('<svg class="tree" data-layout="top-down" width="%d" height="%d" viewBox="0 0 %d %d">', w, h, w, h) ..
    concat(edges) .. concat(nodes) .. "</svg>"
end

-- Indented rows: depth to the right, one node per row in drawing order.
local RH, RGAP = 44, 8
local function rows(s, most, most_visits)
  local order, deepest = {}, 0
  walk(s, function(n) order[#order + 1] = n.id; deepest = max(deepest, n.depth) end)
  local width = CONTENT_W - 14                        -- the .box padding and border
  local indent = deepest > 0 and min(24, floor((width - 2 * MARGIN - 420) / deepest)) or 24
  indent = max(indent, 6)
  local row, edges, nodes = {}, {}, {}
  for i, id in ipairs(order) do row[id] = i - 1 end
  local function y_of(id) return MARGIN + row[id] * (RH + RGAP) end
  local function x_of(id) return MARGIN + s.node[id].depth * indent end
  for _, id in ipairs(order) do
    local n = s.node[id]
    local x, y = x_of(id), y_of(id)
    local w = width - MARGIN - x
    if n.parent then
      local px, py = x_of(n.parent) + 6, y_of(n.parent) + RH
      edges[#edges + 1] = edge(n, px, py, x, y + RH / 2, most_visits, format("M%d %d V%d H%d", px, py, y + RH / 2, x))
    end
    local cut = n.cut and n.cut ~= "return" and (" · cut: " .. n.cut) or ""
    nodes[#nodes + 1] = node_box(n, x, y, w, RH, most, {
      fit(format("[%d] %s  ·  %s", id, n.label, n.shapes or ""), w - 16, 7.2),
      fit(format("%s%s · %s, %s · %s · planned %s", n.why or "", cut, plural(n.visits, "visit"), plural(n.replays, "replay"),
        state(n), bytes(n.planned_bytes)), w - 16),
    })
  end
  local h = MARGIN * 2 + #order * (RH + RGAP) - RGAP
  return format('<svg class="tree" data-layout="rows" width="%d" height="%d" viewBox="0 0 %d %d">', width, h, width, h) ..
    concat(edges) .. concat(nodes) .. "</svg>"
end

local function tree_svg(s)
  local pos, slots = layout(s)
  local most, most_visits = H.most_replays(s), 1
  for _, id in ipairs(node_ids(s)) do most_visits = max(most_visits, s.node[id].visits) end
  if MARGIN * 2 + slots * (NW + HGAP) - HGAP <= CONTENT_W - 14 then return top_down(s, pos, slots, most, most_visits), "top-down" end
  return rows(s, most, most_visits), "rows"
end

-- -- Bar charts per node -----------------------------------------------------------

-- Horizontal bars, one row per node.  o: rows (labels), tips (full labels),
-- series ({name, colour, values}), stacked, log, fmt, markers ({name, value,
-- colour}: dashed vertical lines).  Returns the SVG and the markers drawn.
local function bar_chart(o)
  local LW, PW, BH = 250, 600, 13
  local per_row = o.stacked and 1 or #o.series
  local RHB = per_row * BH + 8
  local top, nrows = 8, #o.rows
  local h = top + nrows * RHB + 30
  local hi = 0
  for r = 1, nrows do
    local sum = 0
    for _, se in ipairs(o.series) do
      local v = se[3][r] or 0
      sum = sum + v
      hi = max(hi, v)
    end
    if o.stacked then hi = max(hi, sum) end
  end
  local markers = {}
  for _, m in ipairs(o.markers or {}) do   -- a marker far off the bars' scale would squash them
    if m[2] > 0 and (m[2] <= 2 * hi or hi == 0) then markers[#markers + 1] = m; hi = max(hi, m[2]) end
  end
  local lo = 0.1
  local scale
  if o.log then
    hi = 10 ^ math.ceil(log10(max(hi, 1)))
    scale = function(v) return v <= lo and 0 or PW * (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) end
  elseif o.integer then                               -- counts: whole ticks
    hi = max(4, math.ceil(hi / 4) * 4)
    scale = function(v) return PW * v / hi end
  else
    hi = nice_max(hi, o.binary)
    scale = function(v) return PW * v / hi end
  end
  local W = LW + PW + 70
  local out = { format('<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d">', W, h, W, h) }
  local ticks = {}
  if o.log then
    local d = lo
    while d <= hi * 1.0001 do ticks[#ticks + 1] = d; d = d * 10 end
  else
    for i = 0, 4 do ticks[#ticks + 1] = hi * i / 4 end
  end
  local ybot = top + nrows * RHB
  for _, t in ipairs(ticks) do
    local x = LW + scale(t)
    if o.log and t <= lo then x = LW end
    out[#out + 1] = format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e7eb"/>', x, top, x, ybot)
    out[#out + 1] = format('<text x="%.1f" y="%d" font-size="10" fill="#6b7280" text-anchor="middle">%s</text>',
      x, ybot + 13, esc(o.fmt(t)))
  end
  if o.axis then
    out[#out + 1] = format('<text x="%d" y="%d" font-size="10" fill="#6b7280" text-anchor="end">%s</text>',
      LW + PW, ybot + 26, esc(o.axis))
  end
  for r, label in ipairs(o.rows) do
    local y = top + (r - 1) * RHB + 4
    out[#out + 1] = format('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s<title>%s</title></text>', LW - 8,
      y + per_row * BH / 2 + 4, esc(label), esc(o.tips and o.tips[r] or label))
    local x = LW
    for i, se in ipairs(o.series) do
      local v = se[3][r] or 0
      local bw = scale(v)
      local by = o.stacked and y or y + (i - 1) * BH
      if bw > 0 then
        out[#out + 1] = format('<rect class="bar" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>',
          o.stacked and x or LW, by, max(bw, 1), BH - 2, se[2], esc(format("%s: %s = %s", label, se[1], o.fmt(v))))
      end
      if o.stacked then x = x + bw
      elseif v ~= 0 then
        out[#out + 1] = format('<text x="%.1f" y="%d" font-size="10" fill="#374151">%s</text>', LW + bw + 4,
          by + BH - 3, esc(o.fmt(v)))
      end
    end
    if o.stacked then
      local total = 0
      for _, se in ipairs(o.series) do total = total + (se[3][r] or 0) end
      out[#out + 1] = format('<text x="%.1f" y="%d" font-size="10" fill="#374151">%s</text>', x + 4, y + BH - 3,
        esc(o.fmt(total)))
    end
  end
  for _, m in ipairs(markers) do
    local x = LW + scale(m[2])
    out[#out + 1] = format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="4 3">' ..
      '<title>%s</title></line>', x, top - 4, x, ybot, m[3], esc(m[1] .. ": " .. o.fmt(m[2])))
  end
  out[#out + 1] = "</svg>"
  return concat(out), markers
end

local function column(s, ids, f)
  local v = {}
  for i, id in ipairs(ids) do v[i] = f(s.node[id]) end
  return v
end

local VISIT_SERIES = {
  { "replays", "#2563eb", function(n) return n.replays end },
  { "records", "#16a34a", records },
  { "updates", "#0d9488", function(n) return n.updates end },
  { "warmups", "#f59e0b", function(n) return n.warmups end },
  { "eager", "#dc2626", function(n) return n.eager end },
}
local TIME_SERIES = {
  { "record_us", "#16a34a" }, { "instantiate_us", "#0d9488" }, { "replay_cpu_us", "#2563eb" }, { "gpu_us", "#9333ea" },
}
local MEM_SERIES = { { "planned_bytes", "#2563eb" }, { "checkpoint_bytes", "#93c5fd" }, { "reusable_bytes", "#f59e0b" } }

-- The series with a nonzero value (a legend lists only what is drawn).
local function series_of(s, ids, spec)
  local out, items = {}, {}
  for _, sp in ipairs(spec) do
    local f = sp[3] or function(n) return n[sp[1]] or 0 end
    local v, any = column(s, ids, f), false
    for _, x in ipairs(v) do if x ~= 0 then any = true break end end
    if any then
      out[#out + 1] = { sp[1], sp[2], v }
      items[#items + 1] = { sp[1], sp[2] }
    end
  end
  return out, items
end

-- The row label of a node, at most 38 columns: its kernels (cut first) and
-- its shape: a first segment's first input, else its output.
local function row_label(n)
  local sh = n.shapes or ""
  local shape = sh:match("^(%S+ %S+)") or sh:match("%-> (%S+)") or ""
  if not n.parent and sh:sub(1, 2) ~= "->" then shape = sh:match("^(%S+ %S+)") or shape
  else shape = "→ " .. (sh:match("%-> (%S+)") or "?") end
  local head = format("[%d] ", n.id)
  return head .. truncate(n.label, max(38 - #head - #shape - 1, 6)) .. " " .. shape
end

local function node_charts(s)
  local ids = node_ids(s)
  local rows_ = column(s, ids, row_label)
  local tips = column(s, ids, function(n) return format("[%d] %s\n%s\n%s", n.id, n.label, n.shapes or "", n.why or "") end)
  local out = {}
  local series, items = series_of(s, ids, VISIT_SERIES)
  out[#out + 1] = "<h3>Visits per node: replay, record, update, warmup, eager</h3>" .. legend(items)
  out[#out + 1] = '<div class="box">' .. bar_chart { rows = rows_, tips = tips, series = series, stacked = true, integer = true, fmt = num } .. "</div>"
  series, items = series_of(s, ids, TIME_SERIES)
  out[#out + 1] = "<h3>Host and device time per node</h3>" .. legend(items) ..
    '<p class="meta">record and instantiate: once per recording; replay_cpu_us and gpu_us: mean per launch' ..
    ' (gpu_us is 0 unless gt.profile(true)). Log scale, in µs.</p>'
  out[#out + 1] = '<div class="box">' .. bar_chart { rows = rows_, tips = tips, series = series, log = true, axis = "µs (log scale)",
    fmt = plain_us } .. "</div>"
  series, items = series_of(s, ids, MEM_SERIES)
  local svg, drawn = bar_chart { rows = rows_, tips = tips, series = series, fmt = bytes, binary = true, axis = "bytes",
    markers = { { "pool reserved", s.pool.reserved, "#374151" }, { "pool high water", s.pool.high_water, "#dc2626" } } }
  for _, m in ipairs(drawn) do items[#items + 1] = { m[1] .. " (dashed)", "#fff", m[3] } end
  out[#out + 1] = "<h3>Pool memory per node</h3>" .. legend(items) ..
    format('<p class="meta">planned: the bytes the planner gave the segment; checkpoint: the pool bytes live after it; ' ..
      'reusable: what freeing each temporary after its last use would save (gt.scope). The pool reserved %s ' ..
      '(high water %s)%s.</p>', bytes(s.pool.reserved), bytes(s.pool.high_water),
      #drawn < 2 and "; a dashed line far off the bars' scale is not drawn" or "")
  out[#out + 1] = '<div class="box">' .. svg .. "</div>"
  return concat(out, "\n")
end

-- -- Charts over calls -------------------------------------------------------------

local CW, CH, CL, CB, CT = 1000, 170, 80, 24, 10

local function y_axis(out, hi, fmt, py)
  for i = 0, 4 do
    local v = hi * i / 4
    out[#out + 1] = format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e7eb"/>' ..
      '<text x="%d" y="%.1f" font-size="10" fill="#6b7280" text-anchor="end">%s</text>',
      CL, py(v), CW - 10, py(v), CL - 4, py(v) + 3, esc(fmt(v)))
  end
end

-- Stacked columns over calls (binned to at most 200 columns): o.x call
-- numbers, o.series {name, colour, values}.
local function column_chart(o)
  local n = #o.x
  local per = math.ceil(n / 200)
  local bins = math.ceil(n / per)
  local sums, hi = {}, 0
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
  hi = max(4, math.ceil(hi / 4) * 4)
  local pw = CW - CL - 10
  local bw = pw / bins
  local function py(v) return CT + (CH - CT - CB) * (1 - v / hi) end
  local out = { format('<svg class="chart calls" width="%d" height="%d" viewBox="0 0 %d %d">', CW, CH, CW, CH) }
  y_axis(out, hi, num, py)
  for b = 1, bins do
    local x, base = CL + (b - 1) * bw, 0
    local c0, c1 = o.x[(b - 1) * per + 1], o.x[min(b * per, n)]
    for i, se in ipairs(o.series) do
      local v = sums[b][i]
      if v > 0 then
        out[#out + 1] = format('<rect class="col" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>',
          x, py(base + v), max(bw - (bw >= 4 and 1 or 0), 0.5), py(base) - py(base + v), se[2],
          esc(format("call%s %s: %s %d", c0 == c1 and "" or "s", c0 == c1 and c0 or (c0 .. ".." .. c1), se[1], v)))
        base = base + v
      end
    end
  end
  out[#out + 1] = format('<text x="%d" y="%d" font-size="10" fill="#6b7280" text-anchor="end">call %d .. %d%s</text>',
    CW - 10, CH - 6, o.x[1] or 0, o.x[n] or 0, per > 1 and format(" (%d calls per column)", per) or "")
  out[#out + 1] = "</svg>"
  return concat(out)
end

-- Filled areas over calls, drawn in order (each series at most the one before,
-- e.g. reserved then in use): nothing crosses.  A single series is a line.
local function area_chart(o)
  local n, hi = #o.x, 0
  for _, se in ipairs(o.series) do for i = 1, n do hi = max(hi, se[3][i] or 0) end end
  hi = nice_max(hi, o.binary)
  local x0, x1 = o.x[1] or 0, o.x[n] or 1
  if x1 == x0 then x1 = x0 + 1 end
  local function px(v) return CL + (CW - CL - 10) * (v - x0) / (x1 - x0) end
  local function py(v) return CT + (CH - CT - CB) * (1 - (hi > 0 and v / hi or 0)) end
  local out = { format('<svg class="chart calls" width="%d" height="%d" viewBox="0 0 %d %d">', CW, CH, CW, CH) }
  y_axis(out, hi, o.fmt, py)
  out[#out + 1] = format('<text x="%d" y="%d" font-size="10" fill="#6b7280" text-anchor="end">call %d .. %d</text>',
    CW - 10, CH - 6, x0, o.x[n] or x0)
  for _, se in ipairs(o.series) do
    local pts = {}
    for i = 1, n do pts[i] = format("%.1f,%.1f", px(o.x[i]), py(se[3][i] or 0)) end
    if o.fill then
      out[#out + 1] = format('<polygon class="area" fill="%s" fill-opacity="0.8" stroke="%s" points="%.1f,%.1f %s %.1f,%.1f"><title>%s</title></polygon>',
        se[2], se[2], px(x0), py(0), concat(pts, " "), px(o.x[n] or x0), py(0), esc(se[1]))
    else
      out[#out + 1] = format('<polyline class="series" fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s</title></polyline>',
        se[2], concat(pts, " "), esc(se[1]))
    end
  end
  out[#out + 1] = "</svg>"
  return concat(out)
end

local function call_charts(h)
  if #h == 0 then return "" end
  local x = {}
  for i, c in ipairs(h) do x[i] = c.call end
  local function series(spec)
    local out, items = {}, {}
    for i, sp in ipairs(spec) do
      local v = {}
      for k, c in ipairs(h) do v[k] = c[sp[1]] end
      out[i], items[i] = { sp[1], sp[2], v }, { sp[1], sp[2] }
    end
    return out, items
  end
  local out = {}
  local s, items = series { { "replays", "#2563eb" }, { "records", "#16a34a" }, { "updates", "#0d9488" },
                            { "warmups", "#f59e0b" }, { "eager", "#dc2626" } }
  out[#out + 1] = "<h3>Visits per call: replay, record, update, warmup, eager</h3>" .. legend(items)
  out[#out + 1] = '<div class="box">' .. column_chart { x = x, series = s } .. "</div>"
  s, items = series { { "cpu_us", "#9333ea" } }
  out[#out + 1] = "<h3>Host time per call</h3>" .. legend(items) ..
    '<p class="meta">From the call\'s start to its end (gt.clock): the Lua body, queueing, and replay or recording.</p>'
  out[#out + 1] = '<div class="box">' .. area_chart { x = x, series = s, fmt = plain_us } .. "</div>"
  s, items = series { { "reserved", "#d1d5db" }, { "in_use", "#2563eb" } }
  out[#out + 1] = "<h3>Pool memory over calls</h3>" .. legend(items)
  out[#out + 1] = '<div class="box">' .. area_chart { x = x, series = s, fmt = bytes, binary = true, fill = true } .. "</div>"
  return concat(out, "\n")
end

-- -- Tables and sections -------------------------------------------------------------

-- { field, heading, left aligned (and wrapping) }
local TABLE_COLS = {
  { "id", "id" }, { "parent", "parent" }, { "label", "kernels", true }, { "shapes", "shapes", true },
  { "why", "why", true }, { "cut", "cut", true }, { "state", "state", true }, { "visits", "visits" },
  { "replays", "replays" }, { "records", "rec." }, { "warmups", "warm." }, { "eager", "eager" },
  { "record_us", "record" }, { "replay_cpu_us", "replay" }, { "gpu_us", "gpu" }, { "planned_bytes", "planned" },
  { "reusable_bytes", "reusable" },
}

local function cell(n, key)
  if key == "state" then return state(n) .. (n.skip and (": " .. n.skip) or "") end
  if key == "records" then return tostring(records(n)) end
  local v = n[key]
  if v == nil then return "–" end
  if key:match("_us$") then return plain_us(v) end
  if key:match("_bytes$") then return bytes(v) end
  return tostring(v)
end

local function node_table(s)
  local out = { '<table class="nodes"><thead><tr>' }
  for _, c in ipairs(TABLE_COLS) do
    out[#out + 1] = format('<th%s title="%s">%s</th>', c[3] and ' class="l"' or "", esc(c[1]), esc(c[2]))
  end
  out[#out + 1] = "</tr></thead><tbody>"
  walk(s, function(n)
    out[#out + 1] = "<tr>"
    for _, c in ipairs(TABLE_COLS) do
      out[#out + 1] = format('<td%s>%s</td>', c[3] and ' class="l"' or "", esc(cell(n, c[1])))
    end
    out[#out + 1] = "</tr>"
  end)
  out[#out + 1] = "</tbody></table>"
  return concat(out)
end

local function skips_table(s)
  local reasons = {}
  for r in pairs(s.skips) do reasons[#reasons + 1] = r end
  if #reasons == 0 then return "" end
  sort(reasons)
  local out = { '<h3>Eager visits by reason</h3><table class="skips"><thead><tr><th class="l">reason</th><th>visits</th></tr></thead><tbody>' }
  for _, r in ipairs(reasons) do out[#out + 1] = format('<tr><td class="l">%s</td><td>%d</td></tr>', esc(r), s.skips[r]) end
  out[#out + 1] = "</tbody></table>"
  return concat(out)
end

local function cards(s)
  local items = {
    { "calls", s.calls }, { "nodes", s.nodes }, { "recorded", s.recorded }, { "replays", s.replays },
    { "warmups", s.warmups }, { "eager", s.eager }, { "updates", s.updates }, { "levels", s.depth },
    { "pool reserved", bytes(s.pool.reserved) }, { "high water", bytes(s.pool.high_water) },
    { "in use", bytes(s.pool.in_use) },
  }
  local out = { '<div class="cards">' }
  for _, it in ipairs(items) do out[#out + 1] = format('<div class="card"><b>%s</b><span>%s</span></div>', esc(it[2]), esc(it[1])) end
  out[#out + 1] = "</div>"
  return concat(out)
end

local function tree_section(tree, i)
  local s = tree:stats()
  local out = {
    format('<section class="tree" id="tree-%d">', i),
    format("<h2>tree '%s'<small>%s</small></h2>", esc(s.name), esc(s.where)),
  }
  if s.nodes == 0 then
    out[#out + 1] = cards(s)
    out[#out + 1] = '<p class="meta">No nodes: ' .. (s.calls == 0 and "the tree has no calls yet." or
      (R.raised(tree) and "a call raised an error before its first segment ended." or
      "the calls launched no kernels.")) .. '</p></section>'
    return concat(out, "\n")
  end
  out[#out + 1] = "<h3>Advice</h3>" .. findings_html(tree)
  out[#out + 1] = cards(s)
  local svg, how = tree_svg(s)
  local states, seen = {}, {}
  for _, id in ipairs(node_ids(s)) do seen[state(s.node[id])] = true end
  for _, k in ipairs { "graph", "keyed", "warmup", "eager", "trimmed" } do
    if seen[k] then states[#states + 1] = { k == "warmup" and "warmup only" or k == "keyed" and "keyed (replayed without the body)" or k, "#fff", BORDER[k] } end
  end
  states[#states + 1] = { "few replays", heat(0.1) }
  states[#states + 1] = { "most replays", heat(1) }
  out[#out + 1] = "<h3>Tree</h3>" .. legend(states) ..
    format('<p class="meta">Border: state. Fill: replays (log scale). Bar in a node: replays / visits. Edge width: visits. ' ..
      'Each node: its kernels, shapes (inputs of a first segment -> its last tensor) and why it exists%s. ' ..
      'Hover a node for all its numbers.</p>', how == "rows" and "; too wide to draw top-down, the tree is drawn as rows, depth to the right" or "")
  out[#out + 1] = '<div class="box">' .. svg .. "</div>"
  out[#out + 1] = node_charts(s)
  out[#out + 1] = call_charts(tree:history())
  out[#out + 1] = "<h3>Nodes</h3>" .. node_table(s)
  out[#out + 1] = skips_table(s)
  out[#out + 1] = "</section>"
  return concat(out, "\n")
end

function M.page(trees)
  local title = #trees == 1 and ("gtlua: tree '" .. trees[1].name .. "'") or format("gtlua: %d graph trees", #trees)
  local out = {
    "<!DOCTYPE html>",
    '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    "<title>" .. esc(title) .. "</title>",
    "<style>" .. CSS .. "</style>",
    "</head><body>",
    "<header><h1>" .. esc(title) .. "</h1>",
    format('<p class="meta">gtlua %s, backend %s; %d tree%s.</p>', esc(gt.version), esc(gt.backend()), #trees,
      #trees == 1 and "" or "s"),
  }
  if #trees > 1 then
    local links = {}
    for i, t in ipairs(trees) do links[i] = format('<a href="#tree-%d">%s</a>', i, esc(t.name)) end
    out[#out + 1] = "<nav>" .. concat(links) .. "</nav>"
  end
  out[#out + 1] = "</header>"
  if #trees == 0 then out[#out + 1] = '<section><p class="meta">No graph trees were made.</p></section>' end
  for i, t in ipairs(trees) do out[#out + 1] = tree_section(t, i) end
  out[#out + 1] = '<footer>Made by gtlua\'s gt.report: tree:report(path) or gtlua --report=FILE script.lua.</footer>'
  out[#out + 1] = "</body></html>"
  return concat(out, "\n") .. "\n"
end

return M
