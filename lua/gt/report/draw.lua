-- gt.report.draw: a graph tree drawn for a terminal: box-drawing lines, 80 columns, optional colour.
local C = require "gt.report.common"
local bytes = require("gt.units").bytes

local format, rep, concat, sort = string.format, string.rep, table.concat, table.sort
local max = math.max
local width, truncate, plural, pad_left, pad_right = C.width, C.truncate, C.plural, C.pad_left, C.pad_right

local M = {}

local WIDTH = 80
local COLS = { { "visits", "visits", 8 }, { "replays", "replays", 8 }, { "warmups", "warmups", 8 },
               { "planned", "planned_bytes", 10 } }
local STATE_W = 9                                    -- "  " .. "trimmed"
local LEFT = WIDTH - STATE_W                         -- tree lines and labels: what the columns leave
for _, c in ipairs(COLS) do LEFT = LEFT - c[3] end

local ANSI = { bold = "1", dim = "2", red = "31", green = "32", yellow = "33", magenta = "35", cyan = "36" }
local STATE_COLOUR = { graph = "green", keyed = "cyan", warmup = "yellow", eager = "red", trimmed = "magenta" }

local function painter(on)
  if not on then return function(s) return s end end
  return function(s, c) return "\27[" .. ANSI[c] .. "m" .. s .. "\27[0m" end
end

-- The graphs' device memory: how much of it was measured, what a budget dropped.
local function graph_line(s)
  local est = s.recorded - s.graph_measured
  local how = est == 0 and "measured" or s.graph_measured == 0 and "estimated" or format("%d estimated", est)
  local line = s.recorded == 0 and "graph memory 0 B (no graphs)" or format("graph memory %s (%s)", bytes(s.graph_bytes), how)
  if s.budget_drops > 0 then
    line = line .. format("; %d dropped by a budget, %d instantiated again", s.budget_drops, s.reinstantiations)
  end
  return truncate(line, WIDTH)
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
  lines[#lines + 1] = graph_line(s)
  return lines
end

local function column_header()
  local h = { rep(" ", LEFT) }
  for _, c in ipairs(COLS) do h[#h + 1] = pad_left(c[1], c[3]) end
  return concat(h)
end

-- A node's line: its branch (a node past C.CAP levels: "└─ " in the column
-- of level CAP, under its parent), id, label, counters and state.
local function node_line(n, prefix, last, capped, paint)
  local branch = prefix .. ((last or capped) and "└─ " or "├─ ")
  local head = "[" .. n.id .. "] "
  local label = truncate(n.label, max(LEFT - 1 - width(branch .. head), 4))
  local cells = {}
  for i, c in ipairs(COLS) do
    local v = n[c[2]]
    cells[i] = pad_left(c[2] == "planned_bytes" and bytes(v) or tostring(v), c[3])
  end
  local st = C.state(n)
  local left = pad_right(branch .. head .. label, LEFT)
  return paint(branch, "dim") .. left:sub(#branch + 1) .. concat(cells) .. "  " .. paint(st, STATE_COLOUR[st])
end

-- Under a node: its shapes, why it exists, and where its segment was cut
-- (unless at the return; every site with its visits when more than one), so that siblings that differ only by shape differ here.
local function explain_line(n)
  return format("%s; %s%s", n.shapes or "?", n.why or "?", C.cut_text(n, "; "))
end

local function no_nodes(s, raised)
  if s.calls == 0 then return "(no calls yet)" end
  if raised then return "(no nodes: a call raised an error before its first segment ended; see the error above)" end
  return "(no nodes: the calls launched no kernels)"
end

--- draw.text(s, o) -> the drawing of stats s (no trailing newline); o.color:
--- ANSI colours, o.explain: a line of shapes, why and cut under each node,
--- o.raised: a call of the tree raised (said when it has no nodes).
function M.text(s, o)
  local paint = painter(o.color)
  local out = header_lines(s)
  out[1] = paint(out[1], "bold")
  if s.nodes == 0 then
    out[#out + 1] = no_nodes(s, o.raised)
    return concat(out, "\n")
  end
  out[#out + 1] = paint(column_header(), "dim")
  local prev_level
  C.walk(s, function(n, prefix, last, level, prev)
    local capped = C.capped(level)
    local mark = C.marker(n, level, prev, prev_level)
    prev_level = level
    if mark then out[#out + 1] = paint(truncate(prefix .. mark, WIDTH), "dim") end
    out[#out + 1] = node_line(n, prefix, last, capped, paint)
    -- (the stem under a node leads to its children: none where they are drawn in its own column)
    local stem = #n.children > 0 and level < C.CAP and "│  " or "   "
    local under = prefix .. ((last or capped) and "   " or "│  ") .. stem
    local room = WIDTH - width(under)
    if o.explain then out[#out + 1] = paint(under, "dim") .. paint(truncate(explain_line(n), room), "cyan") end
    if n.skip then out[#out + 1] = paint(under, "dim") .. paint(truncate("eager: " .. n.skip, room), "red") end
  end)
  return concat(out, "\n")
end

return M
