-- gt.report.html: one self-contained HTML page of graph trees: the advisor's findings, the tree, charts, tables.
--
-- The page has no scripts and loads nothing; its content is at most
-- svg.CONTENT_W px wide; tables wrap.  Every element is built with
-- report/el.lua, which escapes; the pictures are report/svg.lua's.
local gt = require "gt"
local C = require "gt.report.common"
local E = require "gt.report.el"
local S = require "gt.report.svg"
local units = require "gt.units"

local format, sort, floor = string.format, table.sort, math.floor
local el, raw = E.el, E.raw
local bytes, plain_us, state = units.bytes, units.plain_us, C.state

local M = {}

local function num(x)
  if x == floor(x) then return format("%d", x) end
  return format("%.1f", x)
end

-- items: { name, fill [, border] }
local function legend(items)
  local spans = {}
  for i, it in ipairs(items) do
    spans[i] = el("span", nil, el("i", { style = format("background:%s;border:1px solid %s", it[2], it[3] or it[2]) }, ""),
      it[1])
  end
  return el("div", { class = "legend" }, spans)
end

local function box(x) return el("div", { class = "box" }, x) end
local function meta(text) return el("p", { class = "meta" }, text) end

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

--- html.findings(tree) -> markup of the advisor's findings for tree
function M.findings(tree)
  local ok, a = pcall(function() return require("gt.advise").tree(tree) end)
  if not ok then return meta("The advisor failed: " .. tostring(a)) end
  local items = {}
  for i, f in ipairs(a.findings) do
    items[i] = el("div", { class = "finding " .. (f.level or "info") }, el("b", { class = "q" }, (f.n or i) .. "."),
      el("b", nil, f.title), el("p", nil, f.text), el("p", { class = "advice" }, "→ " .. f.advice))
  end
  return el("div", { class = "findings" }, items)
end

-- -- Charts per node -------------------------------------------------------------

local function column(s, ids, f)
  local v = {}
  for i, id in ipairs(ids) do v[i] = f(s.node[id]) end
  return v
end

local VISIT_SERIES = {
  { "replays", "#2563eb", function(n) return n.replays end },
  { "records", "#16a34a", C.records },
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
  return head .. C.truncate(n.label, math.max(38 - #head - #shape - 1, 6)) .. " " .. shape
end

local function memory_chart(s, ids, base)
  local series, items = series_of(s, ids, MEM_SERIES)
  base.series, base.fmt, base.binary, base.axis = series, bytes, true, "bytes"
  base.markers = { { "pool reserved", s.pool.reserved, "#374151" }, { "pool high water", s.pool.high_water, "#dc2626" } }
  local svg, drawn = S.bars(base)
  for _, m in ipairs(drawn) do items[#items + 1] = { m[1] .. " (dashed)", "#fff", m[3] } end
  return { el("h3", nil, "Pool memory per node"), legend(items),
    meta(format("planned: the bytes the planner gave the segment; checkpoint: the pool bytes live after it; " ..
      "reusable: what freeing each temporary after its last use would save (gt.scope). The pool reserved %s " ..
      "(high water %s)%s.", bytes(s.pool.reserved), bytes(s.pool.high_water),
      #drawn < 2 and "; a dashed line far off the bars' scale is not drawn" or "")), "\n", box(svg) }
end

local function node_charts(s)
  local ids = C.node_ids(s)
  local labels = column(s, ids, row_label)
  local tips = column(s, ids, function(n) return format("[%d] %s\n%s\n%s", n.id, n.label, n.shapes or "", n.why or "") end)
  local visits, vitems = series_of(s, ids, VISIT_SERIES)
  local times, titems = series_of(s, ids, TIME_SERIES)
  return E.lines {
    { el("h3", nil, "Visits per node: replay, record, update, warmup, eager"), legend(vitems) },
    box(S.bars { rows = labels, tips = tips, series = visits, stacked = true, integer = true, fmt = num }),
    { el("h3", nil, "Host and device time per node"), legend(titems),
      meta("record and instantiate: once per recording; replay_cpu_us and gpu_us: mean per launch" ..
        " (gpu_us is 0 unless gt.profile(true)). Log scale, in µs.") },
    box(S.bars { rows = labels, tips = tips, series = times, log = true, axis = "µs (log scale)", fmt = plain_us }),
    memory_chart(s, ids, { rows = labels, tips = tips }),
  }
end

-- -- Charts over calls -------------------------------------------------------------

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
  local visits, vitems = series { { "replays", "#2563eb" }, { "records", "#16a34a" }, { "updates", "#0d9488" },
                                  { "warmups", "#f59e0b" }, { "eager", "#dc2626" } }
  local cpu, citems = series { { "cpu_us", "#9333ea" } }
  local tx, tv = {}, {}                                   -- the timed calls (a keyed hit is timed one in 16)
  for k, c in ipairs(h) do if c.cpu_us then tx[#tx + 1], tv[#tv + 1] = x[k], c.cpu_us end end
  cpu[1][3] = tv
  local mem, mitems = series { { "reserved", "#d1d5db" }, { "in_use", "#2563eb" } }
  return E.lines {
    { el("h3", nil, "Visits per call: replay, record, update, warmup, eager"), legend(vitems) },
    box(S.columns { x = x, series = visits, fmt = num }),
    { el("h3", nil, "Host time per call"), legend(citems),
      meta("From the call's start to its end (gt.clock): the Lua body, queueing, and replay or recording. " ..
        "Keyed hits past the first 64 calls are timed one in 16.") },
    box(S.areas { x = tx, series = cpu, fmt = plain_us }),
    { el("h3", nil, "Pool memory over calls"), legend(mitems) },
    box(S.areas { x = x, series = mem, fmt = bytes, binary = true, fill = true }),
  }
end

-- -- Tables and sections -------------------------------------------------------------

-- { field, heading, left aligned (and wrapping) }
local TABLE_COLS = {
  { "id", "id" }, { "parent", "parent" }, { "label", "kernels", true }, { "shapes", "shapes", true },
  { "why", "why", true }, { "cut", "cut", true }, { "state", "state", true }, { "visits", "visits" },
  { "replays", "replays" }, { "records", "rec." }, { "warmups", "warm." }, { "eager", "eager" },
  { "record_us", "record" }, { "replay_cpu_us", "replay" }, { "gpu_us", "gpu" }, { "planned_bytes", "planned" },
  { "reusable_bytes", "reusable" }, { "graph_bytes", "graph" }, { "reinstantiations", "reinst." },
}

local function cell(n, key)
  if key == "state" then return state(n) .. (n.skip and (": " .. n.skip) or "") end
  if key == "records" then return tostring(C.records(n)) end
  if key == "cut" and C.cut_sites(n) then return C.cut_sites(n) end   -- (every site with its visits)
  local v = n[key]
  if v == nil then return "–" end
  if key:match("_us$") then return plain_us(v) end
  if key:match("_bytes$") then return bytes(v) end
  return tostring(v)
end

local function left(c) return c[3] and { class = "l" } or nil end

local function node_table(s)
  local head, body = {}, {}
  for i, c in ipairs(TABLE_COLS) do head[i] = el("th", { class = c[3] and "l", title = c[1] }, c[2]) end
  C.walk(s, function(n)
    local tds = {}
    for i, c in ipairs(TABLE_COLS) do tds[i] = el("td", left(c), cell(n, c[1])) end
    body[#body + 1] = el("tr", nil, tds)
  end)
  return el("table", { class = "nodes" }, el("thead", nil, el("tr", nil, head)), el("tbody", nil, body))
end

local function skips_table(s)
  local reasons = {}
  for r in pairs(s.skips) do reasons[#reasons + 1] = r end
  if #reasons == 0 then return "" end
  sort(reasons)
  local body = {}
  for i, r in ipairs(reasons) do body[i] = el("tr", nil, el("td", { class = "l" }, r), el("td", nil, s.skips[r])) end
  return { el("h3", nil, "Eager visits by reason"), el("table", { class = "skips" },
    el("thead", nil, el("tr", nil, el("th", { class = "l" }, "reason"), el("th", nil, "visits"))), el("tbody", nil, body)) }
end

local function cards(s)
  local items = {
    { "calls", s.calls }, { "nodes", s.nodes }, { "recorded", s.recorded }, { "replays", s.replays },
    { "warmups", s.warmups }, { "eager", s.eager }, { "updates", s.updates }, { "levels", s.depth },
    { "pool reserved", bytes(s.pool.reserved) }, { "high water", bytes(s.pool.high_water) },
    { "in use", bytes(s.pool.in_use) }, { "graph memory", bytes(s.graph_bytes) },
    { "reinstantiated", s.reinstantiations },
  }
  local out = {}
  for i, it in ipairs(items) do out[i] = el("div", { class = "card" }, el("b", nil, it[2]), el("span", nil, it[1])) end
  return el("div", { class = "cards" }, out)
end

local STATE_NAME = { warmup = "warmup only", keyed = "keyed (replayed without the body)" }

local function tree_picture(s)
  local svg, how = S.tree(s)
  local states, seen = {}, {}
  for _, id in ipairs(C.node_ids(s)) do seen[state(s.node[id])] = true end
  for _, k in ipairs { "graph", "keyed", "warmup", "eager", "trimmed" } do
    if seen[k] then states[#states + 1] = { STATE_NAME[k] or k, "#fff", C.BORDER[k] } end
  end
  states[#states + 1] = { "few replays", C.heat(0.1) }
  states[#states + 1] = { "most replays", C.heat(1) }
  return { el("h3", nil, "Tree"), legend(states),
    meta(format("Border: state. Fill: replays (log scale). Bar in a node: replays / visits. Edge width: visits. " ..
      "Each node: its kernels, shapes (inputs of a first segment -> its last tensor) and why it exists%s. " ..
      "Hover a node for all its numbers.", how == "rows" and
      "; too wide to draw top-down, the tree is drawn as rows, depth to the right" or "")) }, box(svg)
end

local function no_nodes(tree, s)
  return "No nodes: " .. (s.calls == 0 and "the tree has no calls yet." or
    (C.raised(tree) and "a call raised an error before its first segment ended." or "the calls launched no kernels."))
end

local function tree_section(tree, i)
  local s = tree:stats()
  local parts = { el("h2", nil, "tree '" .. s.name .. "'", el("small", nil, s.where)) }
  local function add(x) parts[#parts + 1] = x end
  if s.nodes == 0 then
    add(cards(s))
    add(meta(no_nodes(tree, s)))
  else
    local picture, picture_box = tree_picture(s)
    for _, x in ipairs { { el("h3", nil, "Advice"), M.findings(tree) }, cards(s), picture, picture_box, node_charts(s),
                         call_charts(tree:history()), { el("h3", nil, "Nodes"), node_table(s) }, skips_table(s) } do
      add(x)
    end
  end
  return el("section", { class = "tree", id = "tree-" .. i }, "\n", E.lines(parts), "\n")
end

--- html.page(trees) -> the page's text for a list of trees
function M.page(trees)
  local title = #trees == 1 and ("gtlua: tree '" .. trees[1].name .. "'") or format("gtlua: %d graph trees", #trees)
  local links, body = {}, {}
  for i, t in ipairs(trees) do links[i] = el("a", { href = "#tree-" .. i }, t.name) end
  local header = { el("h1", nil, title), "\n",
    meta(format("gtlua %s, backend %s; %d tree%s.", gt.version, gt.backend(), #trees, #trees == 1 and "" or "s")),
    #trees > 1 and { "\n", el("nav", nil, links) } }
  body[1] = el("header", nil, header)
  if #trees == 0 then body[2] = el("section", nil, meta("No graph trees were made.")) end
  for i, t in ipairs(trees) do body[#body + 1] = tree_section(t, i) end
  body[#body + 1] = el("footer", nil, "Made by gtlua's gt.report: tree:report(path) or gtlua --report=FILE script.lua.")
  local head = el("head", nil, E.lines { el("meta", { charset = "utf-8" }),
    el("meta", { name = "viewport", content = "width=device-width, initial-scale=1" }), el("title", nil, title),
    el("style", nil, raw(CSS)) })
  return "<!DOCTYPE html>\n" .. E.html(el("html", { lang = "en" }, head, el("body", nil, E.lines(body)))) .. "\n"
end

return M
