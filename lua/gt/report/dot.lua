-- gt.report.dot: a graph tree as Graphviz DOT text.
local C = require "gt.report.common"
local bytes = require("gt.units").bytes

local format, concat = string.format, table.concat

local M = {}

-- A DOT string literal: the one place DOT text is escaped.
local function quoted(s)
  return '"' .. s:gsub('\\', '\\\\'):gsub('"', '\\"'):gsub("\n", "\\n") .. '"'
end

local function node_label(n)
  local cut = C.cut_text(n, "\n")
  return format("[%d] %s\n%s\n%s%s\nvisits %d  replays %d  warmups %d\n%s%s, planned %s, graph %s", n.id, n.label,
    n.shapes or "", n.why or "", cut, n.visits, n.replays, n.warmups, C.state(n), n.skip and (": " .. n.skip) or "",
    bytes(n.planned_bytes), bytes(n.graph_bytes))
end

--- dot.text(s) -> Graphviz text of stats s: one node "n<id>" per tree node
--- (label and counts), an edge per parent -> child.
function M.text(s)
  local most = C.most_replays(s)
  local out = {
    "digraph gtlua_tree {",
    "  graph [label=" .. quoted(format("tree '%s' (%s): %d calls, %d nodes, %d recorded, pool %s, graphs %s",
      s.name, s.where, s.calls, s.nodes, s.recorded, bytes(s.pool.reserved), bytes(s.graph_bytes))) ..
      ", labelloc=t, fontname=\"Helvetica\", fontsize=12];",
    "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, penwidth=2];",
    "  edge [color=\"#6b7280\"];",
  }
  local edges = {}
  for _, id in ipairs(C.node_ids(s)) do
    local n = s.node[id]
    out[#out + 1] = format("  n%d [label=%s, fillcolor=\"%s\", color=\"%s\"];", id, quoted(node_label(n)),
      C.heat(C.replay_share(n, most)), C.BORDER[C.state(n)])
    if n.parent then edges[#edges + 1] = format("  n%d -> n%d;", n.parent, id) end
  end
  for _, e in ipairs(edges) do out[#out + 1] = e end
  out[#out + 1] = "}"
  return concat(out, "\n") .. "\n"
end

return M
