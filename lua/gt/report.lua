-- gt.report: pictures of graph trees: the terminal drawing, Graphviz DOT, JSON and a self-contained HTML report.
--
--   print(tree)                 report.draw(tree): box drawing, 80 columns, colour on a terminal
--   tree:dot([path])            report.dot(tree [, path]) -> Graphviz text
--   tree:json([path])           report.json(tree [, path]) -> JSON text (fields below)
--   tree:report(path)           report.html(tree_or_list [, path]) -> one HTML page, no network
--   gtlua --stats / --report=F  report.at_exit{stats = bool, report = path} (through gt._at_exit)
--
-- Colour: report.color = nil (auto: stdout is a terminal, TERM is not "dumb",
-- NO_COLOR is unset), true or false.
--
-- JSON fields (format "gtlua.tree/1"): everything in tree:stats(), same names.
-- Objects have their keys in a fixed order; absent values are null, not left out.
--   format            "gtlua.tree/1"
--   name, where       the tree's name and "file:line" of its gt.tree call
--   calls             calls of the tree
--   nodes             nodes (segments) in the tree
--   recorded          nodes that hold a graph now
--   warmups, replays, eager, updates   visits of each kind, all nodes together
--   skipped           eager visits (all reasons); skips: { [reason] = visits }
--   depth             levels of the tree: the deepest node's depth + 1 (0: no nodes)
--   pool              { reserved, in_use, high_water }: bytes of the tree's pool
--   roots             ids of the first segments (array)
--   node              array ordered by id, node[i] has id i (0-based, as a
--                     JSON index is); each node:
--     id, parent        parent: null for a first segment
--     depth, children   children: ids (array)
--     label, kernels    label: the segment's kernels, as "k1 k2 x3"; kernels: launches
--     visits            = warmups + records + replays + updates + eager
--     warmups, replays, updates, eager   visits of each kind
--     recorded          true when the node holds a graph now
--     skip              why the node always runs eagerly, or null
--     record_us, instantiate_us          µs spent recording / instantiating (last)
--     replay_cpu_us     mean host µs per replay
--     gpu_us            mean device µs per launch (0 unless gt.profile(true))
--     planned_bytes     pool bytes the planner gave the segment
--     checkpoint_bytes  live pool bytes in the node's checkpoint
--     last_call         the call number of the node's last visit
local gt = require "gt"

local format, rep, concat, sort = string.format, string.rep, table.concat, table.sort
local floor, max, min, log10 = math.floor, math.max, math.min, math.log10
local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber

local M = { color = nil }

-- -- Shared helpers ------------------------------------------------------------

local function bytes(n)
  n = n or 0
  if n >= 2 ^ 30 then return format("%.1f GiB", n / 2 ^ 30) end
  if n >= 2 ^ 20 then return format("%.1f MiB", n / 2 ^ 20) end
  if n >= 1024 then return format("%.1f KiB", n / 1024) end
  return format("%d B", n)
end

local function micros(us)
  us = us or 0
  if us >= 1e6 then return format("%.2f s", us / 1e6) end
  if us >= 1e3 then return format("%.2f ms", us / 1e3) end
  return format("%.1f µs", us)
end

-- Display width of UTF-8 text (one column per code point: enough for the
-- box-drawing characters, "…" and ASCII labels).
local function width(s)
  local _, n = s:gsub("[^\128-\191]", "")
  return n
end

-- s cut to w columns, "…" marking the cut.
local function truncate(s, w)
  if width(s) <= w then return s end
  if w <= 0 then return "" end
  local out, n = {}, 0
  for ch in s:gmatch("[%z\1-\127\192-\253][\128-\191]*") do
    if n == w - 1 then break end
    out[#out + 1] = ch
    n = n + 1
  end
  return concat(out) .. "…"
end

local function plural(k, word) return k .. " " .. word .. (k == 1 and "" or "s") end

local function pad_right(s, w) return s .. rep(" ", w - width(s)) end
local function pad_left(s, w) return rep(" ", w - width(s)) .. s end

-- Visits that recorded the node's graph (the record launch is not a replay).
local function records(n)
  return max(0, n.visits - n.warmups - n.replays - n.eager - n.updates)
end

-- One word for a node's state: graph, warmup (no graph yet), eager (skipped or
-- over max_recordings), trimmed (had a graph, dropped by tree:trim).
local function state(n)
  if n.skip then return "eager" end
  if n.recorded then return "graph" end
  if records(n) + n.replays + n.updates > 0 then return "trimmed" end
  if n.eager > 0 then return "eager" end
  return "warmup"
end

local function node_ids(s)
  local ids = {}
  for id = 0, s.nodes - 1 do if s.node[id] then ids[#ids + 1] = id end end
  return ids
end

-- Calls visit(node, prefix, last) in drawing order (depth first from the
-- roots); prefix: the tree lines left of the node's branch.
local function walk(s, visit)
  local function go(id, prefix, last)
    local n = s.node[id]
    visit(n, prefix, last)
    for i, c in ipairs(n.children) do go(c, prefix .. (last and "   " or "│  "), i == #n.children) end
  end
  for i, r in ipairs(s.roots) do go(r, "", i == #s.roots) end
end

-- Raises at the caller's caller (the user's tree:dot(path) line) on failure.
local function write_file(path, text)
  local f, err = io.open(path, "wb")
  if not f then error("gt.report: cannot write " .. tostring(err), 3) end
  f:write(text)
  f:close()
end

local function is_tree(x) return type(x) == "table" and getmetatable(x) == gt.Tree end

local function stats_of(tree, fn)
  if not is_tree(tree) then error("gt.report." .. fn .. ": expected a tree (from gt.tree)", 3) end
  return tree:stats()
end

-- -- Terminal drawing ----------------------------------------------------------

local WIDTH = 80
local COLS = { { "visits", "visits", 8 }, { "replays", "replays", 8 }, { "warmups", "warmups", 8 },
               { "planned", "planned_bytes", 10 } }
local STATE_W = 9                                    -- "  " .. "trimmed"
local LEFT = WIDTH - STATE_W                         -- tree lines and labels: what the columns leave
for _, c in ipairs(COLS) do LEFT = LEFT - c[3] end

local ANSI = { bold = "1", dim = "2", red = "31", green = "32", yellow = "33", magenta = "35", cyan = "36" }
local STATE_COLOUR = { graph = "green", warmup = "yellow", eager = "red", trimmed = "magenta" }

local tty   -- nil: not asked yet

local function stdout_is_tty()
  if tty == nil then
    local r = os.execute("test -t 1")
    tty = r == 0 or r == true
  end
  return tty
end

local function use_color()
  if M.color ~= nil then return M.color end
  local nc, term = os.getenv("NO_COLOR"), os.getenv("TERM")
  if (nc and nc ~= "") or not term or term == "dumb" then return false end
  return stdout_is_tty()
end

local function painter(on)
  if not on then return function(s) return s end end
  return function(s, c) return "\27[" .. ANSI[c] .. "m" .. s .. "\27[0m" end
end

local function header_lines(s)
  local skips = {}
  for reason, count in pairs(s.skips) do skips[#skips + 1] = format("%s (%d)", reason, count) end
  sort(skips)
  local counts = format("%s, %s, %d recorded", plural(s.calls, "call"), plural(s.nodes, "node"), s.recorded)
  local head = format("tree '%s' (%s): %s", s.name, s.where, counts)
  if width(head) > WIDTH then
    local rest = "): " .. counts
    local room = WIDTH - width("tree '" .. s.name .. "' (" .. rest)
    head = format("tree '%s' (%s%s", s.name, "…" .. s.where:sub(-max(room - 1, 8)), rest)
  end
  local lines = { head, truncate(format("pool %s reserved, %s high water; %d replays, %d warmups, %d eager",
    bytes(s.pool.reserved), bytes(s.pool.high_water), s.replays, s.warmups, s.eager), WIDTH) }
  if #skips > 0 then lines[#lines + 1] = truncate("eager visits: " .. concat(skips, ", "), WIDTH) end
  return lines
end

local function column_header()
  local h = { rep(" ", LEFT) }
  for _, c in ipairs(COLS) do h[#h + 1] = pad_left(c[1], c[3]) end
  return concat(h)
end

local function node_line(n, prefix, last, paint)
  local branch = prefix .. (last and "└─ " or "├─ ")
  local head = "[" .. n.id .. "] "
  local label = truncate(n.label, max(LEFT - 1 - width(branch .. head), 4))
  local cells = {}
  for i, c in ipairs(COLS) do
    local v = n[c[2]]
    cells[i] = pad_left(c[2] == "planned_bytes" and bytes(v) or tostring(v), c[3])
  end
  local st = state(n)
  local left = pad_right(branch .. head .. label, LEFT)
  return paint(branch, "dim") .. left:sub(#branch + 1) .. concat(cells) .. "  " .. paint(st, STATE_COLOUR[st])
end

--- report.draw(tree [, {color = bool}]) -> the tree drawn for a terminal (no
--- trailing newline): two header lines, a column header, one line per node
--- (and one more under a node that is skipped, with the reason).
function M.draw(tree, opts)
  local s = stats_of(tree, "draw")
  local color = opts and opts.color
  if color == nil then color = use_color() end
  local paint = painter(color)
  local out = header_lines(s)
  out[1] = paint(out[1], "bold")
  if s.nodes == 0 then
    out[#out + 1] = s.calls == 0 and "(no calls yet)" or "(no nodes: the calls launched no kernels)"
    return concat(out, "\n")
  end
  out[#out + 1] = paint(column_header(), "dim")
  walk(s, function(n, prefix, last)
    out[#out + 1] = node_line(n, prefix, last, paint)
    if n.skip then
      local under = prefix .. (last and "   " or "│  ") .. (#n.children > 0 and "│  " or "   ")
      out[#out + 1] = paint(under, "dim") .. paint(truncate("eager: " .. n.skip, WIDTH - width(under)), "red")
    end
  end)
  return concat(out, "\n")
end

-- -- Colours shared by DOT and HTML ------------------------------------------------

-- A fill from pale grey (f = 0) to blue (f = 1), light enough for black text.
local function heat(f)
  f = min(max(f or 0, 0), 1)
  local a, b = { 0xf3, 0xf4, 0xf6 }, { 0x60, 0xa5, 0xfa }
  local c = {}
  for i = 1, 3 do c[i] = floor(a[i] + (b[i] - a[i]) * f + 0.5) end
  return format("#%02x%02x%02x", c[1], c[2], c[3])
end

local BORDER = { graph = "#15803d", warmup = "#b45309", eager = "#b91c1c", trimmed = "#7e22ce" }

-- Replays relative to the busiest node, on a log scale (1 replay is visible next to 10^5).
local function replay_share(n, most)
  if most <= 0 then return 0 end
  return math.log(1 + n.replays) / math.log(1 + most)
end

local function most_replays(s)
  local m = 0
  for _, id in ipairs(node_ids(s)) do m = max(m, s.node[id].replays) end
  return m
end

-- -- DOT -----------------------------------------------------------------------------

local function dot_str(s)
  return '"' .. s:gsub('\\', '\\\\'):gsub('"', '\\"'):gsub("\n", "\\n") .. '"'
end

--- report.dot(tree [, path]) -> Graphviz text: one node "n<id>" per tree node
--- (label and counts), an edge per parent -> child; written to path if given.
function M.dot(tree, path)
  local s = stats_of(tree, "dot")
  local most = most_replays(s)
  local out = {
    "digraph gtlua_tree {",
    "  graph [label=" .. dot_str(format("tree '%s' (%s): %d calls, %d nodes, %d recorded, pool %s",
      s.name, s.where, s.calls, s.nodes, s.recorded, bytes(s.pool.reserved))) ..
      ", labelloc=t, fontname=\"Helvetica\", fontsize=12];",
    "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, penwidth=2];",
    "  edge [color=\"#6b7280\"];",
  }
  local edges = {}
  for _, id in ipairs(node_ids(s)) do
    local n = s.node[id]
    local st = state(n)
    local label = format("[%d] %s\nvisits %d  replays %d  warmups %d\n%s%s, planned %s", id, n.label, n.visits,
      n.replays, n.warmups, st, n.skip and (": " .. n.skip) or "", bytes(n.planned_bytes))
    out[#out + 1] = format("  n%d [label=%s, fillcolor=\"%s\", color=\"%s\"];", id, dot_str(label),
      heat(replay_share(n, most)), BORDER[st])
    if n.parent then edges[#edges + 1] = format("  n%d -> n%d;", n.parent, id) end
  end
  for _, e in ipairs(edges) do out[#out + 1] = e end
  out[#out + 1] = "}"
  local text = concat(out, "\n") .. "\n"
  if path then write_file(path, text) end
  return text
end

-- -- JSON ----------------------------------------------------------------------------

local ARRAY = {}     -- metatable marking a (possibly empty) table as a JSON array
local NULL = {}      -- a JSON null that keeps its key in an object

local KEY_ORDER = {}
for i, k in ipairs { "format", "id", "name", "where", "parent", "depth", "children", "label", "kernels", "calls",
  "nodes", "recorded", "visits", "warmups", "replays", "eager", "updates", "skip", "skipped", "skips", "pool",
  "reserved", "in_use", "high_water", "record_us", "instantiate_us", "replay_cpu_us", "gpu_us", "planned_bytes",
  "checkpoint_bytes", "last_call", "roots", "node" } do KEY_ORDER[k] = i end

local function key_less(a, b)
  local ra, rb = KEY_ORDER[a] or 1e9, KEY_ORDER[b] or 1e9
  if ra ~= rb then return ra < rb end
  return tostring(a) < tostring(b)
end

local ESC = { ['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t' }

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return ESC[c] or format("\\u%04x", c:byte()) end) .. '"'
end

local function json_number(x)
  if x ~= x or x == math.huge or x == -math.huge then return "null" end
  if x == floor(x) and x > -2 ^ 53 and x < 2 ^ 53 then return format("%d", x) end
  local s = format("%.14g", x)
  if tonumber(s) ~= x then s = format("%.17g", x) end
  return s
end

local encode

-- A non-empty table with exactly the keys 1..#t (an empty one is an object
-- unless marked with ARRAY).
local function is_sequence(t)
  local n = #t
  if n == 0 then return false end
  local k = 0
  for _ in pairs(t) do k = k + 1 end
  return k == n
end

local function encode_array(t, indent)
  local scalar, parts = true, {}
  for i = 1, #t do
    if type(t[i]) == "table" and t[i] ~= NULL then scalar = false end
    parts[i] = encode(t[i], indent .. "  ")
  end
  if #parts == 0 then return "[]" end
  if scalar then return "[" .. concat(parts, ", ") .. "]" end
  return "[\n" .. indent .. "  " .. concat(parts, ",\n" .. indent .. "  ") .. "\n" .. indent .. "]"
end

local function encode_object(t, indent)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys, key_less)
  if #keys == 0 then return "{}" end
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = json_string(tostring(k)) .. ": " .. encode(t[k], indent .. "  ") end
  return "{\n" .. indent .. "  " .. concat(parts, ",\n" .. indent .. "  ") .. "\n" .. indent .. "}"
end

function encode(v, indent)
  local tv = type(v)
  if v == nil or v == NULL then return "null" end
  if tv == "boolean" then return tostring(v) end
  if tv == "number" then return json_number(v) end
  if tv == "string" then return json_string(v) end
  if tv == "table" then
    if getmetatable(v) == ARRAY or is_sequence(v) then return encode_array(v, indent) end
    return encode_object(v, indent)
  end
  return json_string(tostring(v))
end

local function array(t) return setmetatable(t, ARRAY) end

-- The stats table reshaped for JSON: node as an array by id, nulls kept.
local function json_shape(s)
  local r = {}
  for k, v in pairs(s) do r[k] = v end
  r.format = "gtlua.tree/1"
  r.roots = array({ unpack(s.roots) })
  local nodes = {}
  for _, id in ipairs(node_ids(s)) do
    local n, c = s.node[id], {}
    for k, v in pairs(n) do c[k] = v end
    c.children = array({ unpack(n.children) })
    if c.parent == nil then c.parent = NULL end
    if c.skip == nil then c.skip = NULL end
    nodes[#nodes + 1] = c
  end
  r.node = array(nodes)
  return r
end

--- report.json(tree [, path]) -> JSON text of tree:stats() (fields at the top
--- of this file); written to path if given.
function M.json(tree, path)
  local text = encode(json_shape(stats_of(tree, "json")), "") .. "\n"
  if path then write_file(path, text) end
  return text
end

-- -- HTML: helpers -----------------------------------------------------------------------

local function esc(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }))
end

local function num(x)
  if x == floor(x) then return format("%d", x) end
  return format("%.1f", x)
end

-- A round axis maximum, at least v: 1, 2 or 5 times a power of ten, or
-- for bytes a power of two (quarters of it are round too).
local function nice_max(v, binary)
  if v <= 0 then return 1 end
  if binary then return 2 ^ math.ceil(math.log(v) / math.log(2)) end
  local p = 10 ^ floor(log10(v))
  for _, m in ipairs { 1, 2, 5, 10 } do if m * p >= v then return m * p end end
  return 10 * p
end

local CSS = [[
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
.scroll{overflow:auto;background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px}
svg text{font-family:inherit}
svg .node text{font-size:11px;fill:#111827}
svg .node text.label{font-weight:600;font-size:12px}
svg .edge{fill:none;stroke:#9ca3af}
table{border-collapse:collapse;font-size:12px;background:#fff}
th,td{border:1px solid #e5e7eb;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f3f4f6}
td.l,th.l{text-align:left}
.legend{font-size:12px;color:#374151;margin:4px 0}
.legend i{display:inline-block;width:11px;height:11px;border-radius:2px;margin:0 4px 0 10px;vertical-align:-1px}
footer{color:#9ca3af;font-size:12px;padding:24px 20px}
]]

local function legend(items)
  local out = { '<div class="legend">' }
  for _, it in ipairs(items) do
    out[#out + 1] = format('<i style="background:%s;border:1px solid %s"></i>%s', it[2], it[3] or it[2], esc(it[1]))
  end
  out[#out + 1] = "</div>"
  return concat(out)
end

-- -- HTML: the tree as SVG ---------------------------------------------------------------

local NW, NH, HGAP, VGAP, MARGIN = 176, 58, 18, 44, 14

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

local function node_tip(n)
  return format("[%d] %s\nstate: %s%s\nvisits %d: %d replays, %d records, %d warmups, %d updates, %d eager\n" ..
    "kernels %d, depth %d, last call %d\nrecord %s, instantiate %s, replay cpu %s (mean), gpu %s (mean)\n" ..
    "planned %s, checkpoint %s", n.id, n.label, state(n), n.skip and (" (" .. n.skip .. ")") or "", n.visits,
    n.replays, records(n), n.warmups, n.updates, n.eager, n.kernels, n.depth, n.last_call or 0, micros(n.record_us),
    micros(n.instantiate_us), micros(n.replay_cpu_us), micros(n.gpu_us), bytes(n.planned_bytes),
    bytes(n.checkpoint_bytes))
end

local function svg_node(n, x, y, most)
  local st = state(n)
  local share = n.visits > 0 and n.replays / n.visits or 0
  return concat {
    format('<g class="node" data-id="%d" transform="translate(%d,%d)">', n.id, x, y),
    "<title>", esc(node_tip(n)), "</title>",
    format('<rect width="%d" height="%d" rx="7" fill="%s" stroke="%s" stroke-width="2"/>', NW, NH,
      heat(replay_share(n, most)), BORDER[st]),
    format('<text class="label" x="8" y="16">%s</text>', esc(truncate(format("[%d] %s", n.id, n.label), 24))),
    format('<text x="8" y="31">%s · %s</text>', plural(n.visits, "visit"), plural(n.replays, "replay")),
    format('<text x="8" y="45">%s · %s</text>', esc(st), esc(bytes(n.planned_bytes))),
    format('<rect x="8" y="50" width="%d" height="3" fill="#e5e7eb"/>', NW - 16),
    format('<rect x="8" y="50" width="%.1f" height="3" fill="#1d4ed8"/>', (NW - 16) * share),
    "</g>",
  }
end

local function tree_svg(s)
  local pos, slots = layout(s)
  local most, most_visits = most_replays(s), 1
  for _, id in ipairs(node_ids(s)) do most_visits = max(most_visits, s.node[id].visits) end
  local function xy(id)
    return MARGIN + pos[id] * (NW + HGAP), MARGIN + s.node[id].depth * (NH + VGAP)
  end
  local deepest = 0
  for _, id in ipairs(node_ids(s)) do deepest = max(deepest, s.node[id].depth) end
  local w = MARGIN * 2 + max(slots, 1) * (NW + HGAP) - HGAP
  local h = MARGIN * 2 + (deepest + 1) * (NH + VGAP) - VGAP
  local edges, nodes = {}, {}
  for _, id in ipairs(node_ids(s)) do
    local n = s.node[id]
    local x, y = xy(id)
    if n.parent then
      local px, py = xy(n.parent)
      local x1, y1, x2, y2 = px + NW / 2, py + NH, x + NW / 2, y
      local ym = (y1 + y2) / 2
      edges[#edges + 1] = format('<path class="edge" stroke-width="%.1f" d="M%d %d C%d %d,%d %d,%d %d"><title>%s</title></path>',
        1 + 4 * n.visits / most_visits, x1, y1, x1, ym, x2, ym, x2, y2,
        esc(format("[%d] -> [%d]: %d visits", n.parent, id, n.visits)))
    end
    nodes[#nodes + 1] = svg_node(n, x, y, most)
  end
  return format('<svg class="tree" width="%d" height="%d" viewBox="0 0 %d %d">',
    w, h, w, h) .. concat(edges) .. concat(nodes) .. "</svg>"
end

-- -- HTML: bar charts ---------------------------------------------------------------------

-- Horizontal bars, one row per node.  o: rows (labels), series ({name, colour,
-- values}), stacked, log (a log10 axis), fmt (value -> text), markers
-- ({name, value, colour}: vertical lines, e.g. the pool's reserved bytes).
local function bar_chart(o)
  local LW, PW, BH = 190, 560, 13
  local per_row = o.stacked and 1 or #o.series
  local RH = per_row * BH + 8
  local top, nrows = 8, #o.rows
  local h = top + nrows * RH + 30
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
    if m[2] <= 2 * hi or hi == 0 then markers[#markers + 1] = m; hi = max(hi, m[2]) end
  end
  local lo = 0.1
  local scale
  if o.log then
    hi = 10 ^ math.ceil(log10(max(hi, 1)))
    scale = function(v) return v <= lo and 0 or PW * (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) end
  else
    hi = nice_max(hi, o.binary)
    scale = function(v) return PW * v / hi end
  end
  local out = { format('<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d">',
    LW + PW + 90, h, LW + PW + 90, h) }
  -- grid and axis
  local ticks = {}
  if o.log then
    local d = lo
    while d <= hi * 1.0001 do ticks[#ticks + 1] = d; d = d * 10 end
  else
    for i = 0, 4 do ticks[#ticks + 1] = hi * i / 4 end
  end
  local ybot = top + nrows * RH
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
    local y = top + (r - 1) * RH + 4
    out[#out + 1] = format('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>', LW - 8,
      y + per_row * BH / 2 + 4, esc(truncate(label, 30)))
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
  return concat(out)
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
local MEM_SERIES = { { "planned_bytes", "#2563eb" }, { "checkpoint_bytes", "#93c5fd" } }

local function series_of(s, ids, spec)
  local out, items = {}, {}
  for i, sp in ipairs(spec) do
    local f = sp[3] or function(n) return n[sp[1]] or 0 end
    out[i] = { sp[1], sp[2], column(s, ids, f) }
    items[i] = { sp[1], sp[2] }
  end
  return out, items
end

local function charts(s)
  local ids = node_ids(s)
  local rows = column(s, ids, function(n) return format("[%d] %s", n.id, n.label) end)
  local out = {}
  local series, items = series_of(s, ids, VISIT_SERIES)
  out[#out + 1] = "<h3>Visits per node: replay, record, update, warmup, eager</h3>" .. legend(items)
  out[#out + 1] = bar_chart { rows = rows, series = series, stacked = true, fmt = num, axis = "visits" }
  series, items = series_of(s, ids, TIME_SERIES)
  out[#out + 1] = "<h3>Host and device time per node</h3>" .. legend(items) ..
    '<p class="meta">record and instantiate: once per recording; replay_cpu_us and gpu_us: mean per launch' ..
    ' (gpu_us is 0 unless gt.profile(true)). Log scale.</p>'
  out[#out + 1] = bar_chart { rows = rows, series = series, log = true, axis = "µs (log scale)",
    fmt = function(v) return v >= 1000 and format("%.3g ms", v / 1000) or format("%.3g", v) end }
  series, items = series_of(s, ids, MEM_SERIES)
  items[#items + 1] = { "pool reserved", "#f3f4f6", "#374151" }
  items[#items + 1] = { "pool high water", "#fee2e2", "#dc2626" }
  out[#out + 1] = "<h3>Pool memory per node</h3>" .. legend(items) ..
    format('<p class="meta">planned: the bytes the planner gave the segment; checkpoint: the pool bytes live after it. ' ..
      'The pool reserved %s (high water %s); a line far off the bars\' scale is left out.</p>',
      bytes(s.pool.reserved), bytes(s.pool.high_water))
  out[#out + 1] = bar_chart { rows = rows, series = series, fmt = bytes, binary = true, axis = "bytes",
    markers = { { "pool reserved", s.pool.reserved, "#374151" }, { "pool high water", s.pool.high_water, "#dc2626" } } }
  return concat(out, "\n")
end

-- Lines over calls: x = call number, one polyline per series ({name, colour,
-- values}); o.fmt formats the y axis.  Every point has a <title>.
local function line_chart(o)
  local W, H, L, B, T = 760, 170, 70, 24, 10
  local n, hi = #o.x, 0
  for _, se in ipairs(o.series) do for i = 1, n do hi = max(hi, se[3][i] or 0) end end
  hi = o.integer and max(4, math.ceil(hi / 4) * 4) or nice_max(hi, o.binary)   -- counts: whole ticks
  local x0, x1 = o.x[1] or 0, o.x[n] or 1
  if x1 == x0 then x1 = x0 + 1 end
  local function px(v) return L + (W - L - 10) * (v - x0) / (x1 - x0) end
  local function py(v) return T + (H - T - B) * (1 - (hi > 0 and v / hi or 0)) end
  local out = { format('<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d">', W, H, W, H) }
  for i = 0, 4 do
    local v = hi * i / 4
    out[#out + 1] = format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e7eb"/>' ..
      '<text x="%d" y="%.1f" font-size="10" fill="#6b7280" text-anchor="end">%s</text>',
      L, py(v), W - 10, py(v), L - 4, py(v) + 3, esc(o.fmt(v)))
  end
  out[#out + 1] = format('<text x="%d" y="%d" font-size="10" fill="#6b7280" text-anchor="end">call %d .. %d</text>',
    W - 10, H - 6, x0, o.x[n] or x0)
  for _, se in ipairs(o.series) do
    local pts = {}
    for i = 1, n do pts[i] = format("%.1f,%.1f", px(o.x[i]), py(se[3][i] or 0)) end
    out[#out + 1] = format('<polyline class="series" fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s</title></polyline>',
      se[2], concat(pts, " "), esc(se[1]))
  end
  out[#out + 1] = "</svg>"
  return concat(out)
end

-- Charts over the remembered calls (tree:history()): visits, host time, pool.
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
  local s, items = series { { "replays", "#2563eb" }, { "records", "#16a34a" }, { "warmups", "#f59e0b" }, { "eager", "#dc2626" },
                            { "updates", "#0d9488" } }
  out[#out + 1] = "<h3>Visits per call: replay, record, warmup, eager, update</h3>" .. legend(items)
  out[#out + 1] = line_chart { x = x, series = s, fmt = num, integer = true }
  s, items = series { { "cpu_us", "#9333ea" } }
  out[#out + 1] = "<h3>Host time per call</h3>" .. legend(items) ..
    '<p class="meta">From the call\'s start to its end: the Lua body, queueing, and replay or recording.</p>'
  out[#out + 1] = line_chart { x = x, series = s, fmt = function(v) return format("%.3g µs", v) end }
  s, items = series { { "in_use", "#2563eb" }, { "reserved", "#374151" } }
  out[#out + 1] = "<h3>Pool memory over calls</h3>" .. legend(items)
  out[#out + 1] = line_chart { x = x, series = s, fmt = bytes, binary = true }
  return concat(out, "\n")
end

-- -- HTML: tables and sections --------------------------------------------------------

-- { field, heading, left aligned }
local TABLE_COLS = {
  { "id", "id" }, { "parent", "parent" }, { "depth", "depth" }, { "label", "label", true },
  { "kernels", "kernels" }, { "state", "state", true }, { "visits", "visits" }, { "replays", "replays" },
  { "records", "records" }, { "updates", "updates" }, { "warmups", "warmups" }, { "eager", "eager" },
  { "record_us", "record µs" }, { "instantiate_us", "instantiate µs" }, { "replay_cpu_us", "replay µs" },
  { "gpu_us", "gpu µs" }, { "planned_bytes", "planned" }, { "checkpoint_bytes", "checkpoint" },
  { "last_call", "last call" },
}

local function cell(n, key)
  if key == "state" then return state(n) .. (n.skip and (": " .. n.skip) or "") end
  if key == "records" then return tostring(records(n)) end
  local v = n[key]
  if v == nil then return "–" end
  if key:match("_us$") then return format("%.1f", v) end
  if key:match("_bytes$") then return bytes(v) end
  return tostring(v)
end

local function node_table(s)
  local out = { '<div class="scroll"><table class="nodes"><thead><tr>' }
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
  out[#out + 1] = "</tbody></table></div>"
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
    cards(s),
  }
  if s.nodes == 0 then
    out[#out + 1] = '<p class="meta">No nodes: ' .. (s.calls == 0 and "the tree has no calls yet." or
      "the calls launched no kernels.") .. '</p></section>'
    return concat(out, "\n")
  end
  out[#out + 1] = "<h3>Tree</h3>" .. legend {
    { "graph", "#fff", BORDER.graph }, { "warmup only", "#fff", BORDER.warmup }, { "eager", "#fff", BORDER.eager },
    { "trimmed", "#fff", BORDER.trimmed }, { "few replays", heat(0.1) }, { "most replays", heat(1) } } ..
    '<p class="meta">Border: state. Fill: replays (log scale). Bar in a node: replays / visits. ' ..
    'Edge width: visits. Hover a node for all its numbers.</p>'
  out[#out + 1] = '<div class="scroll">' .. tree_svg(s) .. "</div>"
  out[#out + 1] = charts(s)
  out[#out + 1] = call_charts(tree:history())
  out[#out + 1] = "<h3>Nodes</h3>" .. node_table(s)
  out[#out + 1] = skips_table(s)
  out[#out + 1] = "</section>"
  return concat(out, "\n")
end

local function page(trees)
  local names = {}
  for i, t in ipairs(trees) do names[i] = t.name end
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

--- report.html(tree_or_list [, path]) -> one self-contained HTML page (inline
--- CSS and SVG, no scripts, no network): per tree the tree as SVG, charts of
--- visits, time and pool memory per node, and a table of nodes.
function M.html(x, path)
  local trees = x
  if is_tree(x) then trees = { x }
  elseif type(x) ~= "table" then error("gt.report.html: expected a tree or a list of trees", 2) end
  for _, t in ipairs(trees) do if not is_tree(t) then error("gt.report.html: expected a tree or a list of trees", 2) end end
  local text = page(trees)
  if path then write_file(path, text) end
  return text
end

-- -- At exit ------------------------------------------------------------------------------

--- report.trees() -> the live trees (gt._trees, a weak table), in creation order
function M.trees()
  local keys, out = {}, {}
  for k in pairs(gt._trees or {}) do keys[#keys + 1] = k end
  sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = gt._trees[k] end
  return out
end

-- One line of times for --stats: totals of recording, replay means weighted by replays.
local function costs_line(s)
  local rec, inst, rsum, gsum, reps, gn = 0, 0, 0, 0, 0, 0
  for _, id in ipairs(node_ids(s)) do
    local n = s.node[id]
    rec, inst = rec + n.record_us, inst + n.instantiate_us
    rsum, reps = rsum + n.replay_cpu_us * n.replays, reps + n.replays
    if n.gpu_us > 0 then gsum, gn = gsum + n.gpu_us * max(n.replays, 1), gn + max(n.replays, 1) end
  end
  local line = format("time: record %s, instantiate %s (all nodes); replay %s host per replay",
    micros(rec), micros(inst), reps > 0 and micros(rsum / reps) or "-")
  if gn > 0 then line = line .. format(", %s device", micros(gsum / gn)) end
  return line
end

--- report.at_exit{stats = bool, report = path|nil}: what the host runs for
--- gtlua --stats (a drawing and a time line per live tree on stdout) and
--- --report=FILE (one HTML page of all live trees).
function M.at_exit(o)
  o = o or {}
  -- the script's locals are gone: no collection until the trees are read
  collectgarbage("stop")
  local ok, err = pcall(function()
    local trees = M.trees()
    if o.stats then
      local out = { format("gtlua --stats: %d graph tree%s", #trees, #trees == 1 and "" or "s") }
      for _, t in ipairs(trees) do
        out[#out + 1] = ""
        out[#out + 1] = M.draw(t)
        out[#out + 1] = costs_line(t:stats())
      end
      io.stdout:write(concat(out, "\n"), "\n")
      io.stdout:flush()
    end
    if o.advise then
      io.stdout:write(require("gt.advise").text(trees), "\n")
      io.stdout:flush()
    end
    if o.report then
      M.html(trees, o.report)
      io.stderr:write(format("gtlua: wrote %s (%d tree%s)\n", o.report, #trees, #trees == 1 and "" or "s"))
    end
  end)
  collectgarbage("restart")
  if not ok then error(err, 0) end
end

M._encode = function(v) return encode(v, "") end   -- the JSON encoder and its array mark, for specs
M._ARRAY = ARRAY
M._bytes = bytes

return M
