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
--     reusable_bytes    what freeing each temporary after its last use would save (gt.scope)
--     last_call         the call number of the node's last visit
--     shapes            "x 8x256 f32 -> 8x8 f32": a first segment's tensor inputs -> its last tensor made
--     why               why the node exists: "first path", "new branch after [3]",
--                       "new shape 16x256 (sibling [4] has 8x256)", "static W of linear_f32 moved (sibling [0])"
--     cut               where and why its segment ended: "model.lua:31 item", "model.lua:12 gt.cut", "return"
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

-- One word for a node's state: graph, keyed (a graph on a path that keyed
-- calls replay without the body), warmup (no graph yet), eager (skipped or
-- over max_recordings), trimmed (had a graph, dropped by tree:trim).
local function state(n)
  if n.skip then return "eager" end
  if n.recorded then return n.keyed and "keyed" or "graph" end
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

-- Whether a call of the tree raised (its buffers were dropped).
local function raised(tree)
  return tree._t ~= nil and gt._C.gt_tree_failed_gen(tree._t) ~= 0
end
M.raised = raised

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
local STATE_COLOUR = { graph = "green", keyed = "cyan", warmup = "yellow", eager = "red", trimmed = "magenta" }

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

-- Under a node: its shapes, why it exists, and where its segment was cut
-- (unless at the return), so that siblings that differ only by shape differ here.
local function explain_line(n)
  local cut = n.cut and n.cut ~= "return" and ("; cut at " .. n.cut) or ""
  return format("%s; %s%s", n.shapes or "?", n.why or "?", cut)
end

--- report.draw(tree [, {color = bool, explain = bool}]) -> the tree drawn for a
--- terminal (no trailing newline): two header lines, a column header, one line
--- per node, under it a line of its shapes, why it exists and its cut (unless
--- explain = false), and one more under a node that is skipped, with the reason.
function M.draw(tree, opts)
  local s = stats_of(tree, "draw")
  local explain = not (opts and opts.explain == false)
  local color = opts and opts.color
  if color == nil then color = use_color() end
  local paint = painter(color)
  local out = header_lines(s)
  out[1] = paint(out[1], "bold")
  if s.nodes == 0 then
    out[#out + 1] = s.calls == 0 and "(no calls yet)" or (raised(tree) and
      "(no nodes: a call raised an error before its first segment ended; see the error above)" or
      "(no nodes: the calls launched no kernels)")
    return concat(out, "\n")
  end
  out[#out + 1] = paint(column_header(), "dim")
  walk(s, function(n, prefix, last)
    out[#out + 1] = node_line(n, prefix, last, paint)
    local under = prefix .. (last and "   " or "│  ") .. (#n.children > 0 and "│  " or "   ")
    if explain then out[#out + 1] = paint(under, "dim") .. paint(truncate(explain_line(n), WIDTH - width(under)), "cyan") end
    if n.skip then
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

local BORDER = { graph = "#15803d", keyed = "#0e7490", warmup = "#b45309", eager = "#b91c1c", trimmed = "#7e22ce" }

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
    local label = format("[%d] %s\n%s\n%s%s\nvisits %d  replays %d  warmups %d\n%s%s, planned %s", id, n.label,
      n.shapes or "", n.why or "", n.cut and n.cut ~= "return" and ("\ncut at " .. n.cut) or "", n.visits,
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
  "checkpoint_bytes", "reusable_bytes", "last_call", "shapes", "why", "cut", "roots", "node" } do KEY_ORDER[k] = i end

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
    for _, k in ipairs { "skip", "shapes", "why", "cut" } do if c[k] == nil then c[k] = NULL end end
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

-- -- HTML (lua/gt/report/html.lua) ------------------------------------------------------

-- What the HTML page shares with the drawings above.
M._h = { bytes = bytes, micros = micros, truncate = truncate, plural = plural, records = records, state = state,
         node_ids = node_ids, walk = walk, heat = heat, BORDER = BORDER, replay_share = replay_share,
         most_replays = most_replays }

--- report.html(tree_or_list [, path]) -> one self-contained HTML page (inline
--- CSS and SVG, no scripts, no network): per tree the advisor's findings, the
--- tree as SVG, charts per node and over calls, and a table of nodes.
function M.html(x, path)
  local trees = x
  if is_tree(x) then trees = { x }
  elseif type(x) ~= "table" then error("gt.report.html: expected a tree or a list of trees", 2) end
  for _, t in ipairs(trees) do if not is_tree(t) then error("gt.report.html: expected a tree or a list of trees", 2) end end
  local text = require("gt.report.html").page(trees)
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
  require("gt.advise").relaunch = true      -- the script is over: the device may be timed by relaunching graphs
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
