-- gt.report.common: what the drawing, DOT and HTML share: node states, the walk, text width, colours.
local gt = require "gt"
local I = require "gt.internal"

local format, concat, rep = string.format, table.concat, string.rep
local floor, max, min = math.floor, math.max, math.min

local M = {}

-- Display width of UTF-8 text (one column per code point: enough for the
-- box-drawing characters, "…" and ASCII labels).
function M.width(s)
  local _, n = s:gsub("[^\128-\191]", "")
  return n
end
local width = M.width

--- truncate(s, w) -> s cut to w columns, "…" marking the cut
function M.truncate(s, w)
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

function M.plural(k, word) return k .. " " .. word .. (k == 1 and "" or "s") end
function M.pad_right(s, w) return s .. rep(" ", w - width(s)) end
function M.pad_left(s, w) return rep(" ", w - width(s)) .. s end

--- records(n) -> visits that recorded the node's graph (the record launch is not a replay)
function M.records(n)
  return max(0, n.visits - n.warmups - n.replays - n.eager - n.updates)
end

--- state(n) -> one word for a node's state: graph, keyed (a graph on a path
--- that keyed calls replay without the body), warmup (no graph yet), eager
--- (skipped or over max_recordings), trimmed (had a graph, dropped by tree:trim).
function M.state(n)
  if n.skip then return "eager" end
  if n.recorded then return n.keyed and "keyed" or "graph" end
  if M.records(n) + n.replays + n.updates > 0 then return "trimmed" end
  if n.eager > 0 then return "eager" end
  return "warmup"
end

--- node_ids(s) -> the ids of s.node in order
function M.node_ids(s)
  local ids = {}
  for id = 0, s.nodes - 1 do if s.node[id] then ids[#ids + 1] = id end end
  return ids
end

--- CAP: the levels of indentation drawn.  A node deeper than CAP levels is
--- drawn at the column of level CAP, so a deep tree's lines stay as wide as
--- a shallow one's (a 5000-segment chain is 5000 lines, not 5000 indents).
M.CAP = 6

--- walk(s, visit): calls visit(node, prefix, last, level, prev) in drawing
--- order (depth first from the roots); prefix: the tree lines left of the
--- node's branch (at most CAP levels of them); last: the node is its
--- parent's last child; level: its depth in the tree; prev: the node visited
--- before it (nil for the first).  No recursion (a tree 10^5 deep walks) and
--- no prefix longer than CAP levels (the walk is linear in the nodes).
function M.walk(s, visit)
  local CAP = M.CAP
  local stack, n = {}, 0
  for i = #s.roots, 1, -1 do
    n = n + 1
    stack[n] = { s.roots[i], "", i == #s.roots, 0 }
  end
  local prev
  while n > 0 do
    local e = stack[n]
    stack[n] = nil
    n = n - 1
    local node = s.node[e[1]]
    local prefix, last, level = e[2], e[3], e[4]
    visit(node, prefix, last, level, prev)
    prev = node
    local kids = node.children
    local sub = level < CAP and prefix .. (last and "   " or "│  ") or prefix
    for i = #kids, 1, -1 do
      n = n + 1
      stack[n] = { kids[i], sub, i == #kids, level + 1 }
    end
  end
end

--- capped(level) -> whether a node at that level is drawn at level CAP's column
function M.capped(level) return level ~= nil and level > M.CAP end

--- marker(node, level, prev, prev_level) -> the "… depth N, below [P]" line a
--- drawing puts before a node where the drawing goes into, within or out of
--- the levels past CAP other than from a node to its child, or nil.
function M.marker(node, level, prev, prev_level)
  local here, before = M.capped(level), M.capped(prev_level)
  if not here and not before then return nil end
  if before and prev and prev.id == node.parent then return nil end
  local where = node.parent and format("… depth %d, below [%d]", level, node.parent) or format("… depth %d", level)
  if here and not before then where = where .. "; deeper ones also in this column" end
  return where
end

--- check_path(path, what): path must be a file name (a string) or nil (no file:
--- the text only); raises at the user's line naming what (e.g. "tree:dot(path)").
function M.check_path(path, what)
  if path ~= nil and type(path) ~= "string" then
    I.error(what .. ": path must be a file name (a string), or nil for the text only, got " .. I.show(path))
  end
end

--- write_file(path, text, what): writes text to path; a failure raises at the
--- user's line (the tree:dot(path) line), naming what, the path and the reason.
function M.write_file(path, text, what)
  local f, err = io.open(path, "wb")
  if not f then I.error(what .. ": cannot write " .. tostring(err)) end
  local ok, werr = f:write(text)
  local cok, cerr = f:close()
  if not ok or not cok then I.error(what .. ": cannot write " .. path .. ": " .. tostring(werr or cerr)) end
end

function M.is_tree(x) return type(x) == "table" and getmetatable(x) == gt.Tree end

--- stats_of(tree, fn) -> tree:stats(); raises at the user's line for a non-tree
function M.stats_of(tree, fn)
  if not M.is_tree(tree) then I.error("gt.report." .. fn .. ": expected a tree (from gt.tree), got " .. I.show(tree)) end
  return tree:stats()
end

--- raised(tree) -> whether a call of the tree raised (its buffers were dropped)
function M.raised(tree)
  return tree._t ~= nil and I.C.gt_tree_failed_gen(tree._t) ~= 0
end

-- -- Colours shared by DOT and HTML ---------------------------------------------

--- heat(f) -> a fill from pale grey (f = 0) to blue (f = 1), light enough for black text
function M.heat(f)
  f = min(max(f or 0, 0), 1)
  local a, b = { 0xf3, 0xf4, 0xf6 }, { 0x60, 0xa5, 0xfa }
  local c = {}
  for i = 1, 3 do c[i] = floor(a[i] + (b[i] - a[i]) * f + 0.5) end
  return format("#%02x%02x%02x", c[1], c[2], c[3])
end

M.BORDER = { graph = "#15803d", keyed = "#0e7490", warmup = "#b45309", eager = "#b91c1c", trimmed = "#7e22ce" }

--- replay_share(n, most) -> replays relative to the busiest node, on a log
--- scale (1 replay is visible next to 10^5)
function M.replay_share(n, most)
  if most <= 0 then return 0 end
  return math.log(1 + n.replays) / math.log(1 + most)
end

function M.most_replays(s)
  local m = 0
  for _, id in ipairs(M.node_ids(s)) do m = max(m, s.node[id].replays) end
  return m
end

--- cut_sites(n) -> where a node's segment ended when that was more than one
--- site: every site with its visits, "a.lua:5 item (6), a.lua:6 tolist (3)"
--- (node.cuts); nil for one site or none (node.cut says it)
function M.cut_sites(n)
  local cuts = n.cuts
  if not cuts or #cuts < 2 then return nil end
  local parts = {}
  for i, c in ipairs(cuts) do parts[i] = format("%s (%d)", c.cut, c.count) end
  return concat(parts, ", ")
end

--- cut_text(n, sep) -> sep and where the segment ended, "" at a plain return:
--- "cut at a.lua:5 item", "gt.cut at a.lua:12", "cuts: a.lua:5 item (6), ..."
function M.cut_text(n, sep)
  local many = M.cut_sites(n)
  if many then return sep .. "cuts: " .. many end
  if not n.cut or n.cut == "return" then return "" end
  return sep .. (n.cut:match("^gt%.cut at") and n.cut or "cut at " .. n.cut)
end

return M
