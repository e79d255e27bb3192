-- gt.report: pictures of graph trees: the terminal drawing, Graphviz DOT, JSON and a self-contained HTML report.
-- One file per output: report/draw.lua, report/dot.lua, report/html.lua (with
-- report/svg.lua for the tree and charts, report/el.lua, the element builder
-- that escapes); JSON through gt.json (dkjson, Debian lua-dkjson).
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
-- Objects have their keys in a fixed order; absent values are null, not left out;
-- numbers have 14 significant digits (gt.json, through dkjson).
--   format            "gtlua.tree/1"
--   name, where       the tree's name and "file:line" of its gt.tree call
--   calls             calls of the tree
--   nodes             nodes (segments) in the tree
--   recorded          nodes that hold a graph now
--   warmups, replays, eager, updates   visits of each kind, all nodes together
--   fused             calls whose replayed path of several segments was launched as one graph
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
--     shapes            "x 8x256 f32 -> 8x256 f32": a first segment's tensor inputs -> the node's outputs (the
--                       tensors the call returns, for a segment ended by the return; the last tensor made, at a cut)
--     why               why the node exists: "first path", "new branch after [3]",
--                       "new shape 16x256 (sibling [4] has 8x256)", "static W of linear_f32 moved (sibling [0])"
--     cut               where and why its segment ended (first): "model.lua:31 item", "gt.cut at model.lua:12", "return"
--     cuts              every distinct site it ended at, in order: { site = "model.lua:31", reason = "item",
--                       cut = "model.lua:31 item", count = visits } (past 8 sites: one "other sites" entry)
--     shared, shared_with   a new branch: its leading launches that sibling shared_with begins with too
--                       (a host branch without gt.cut() where the paths part); 0 and null: none
local gt = require "gt"
local I = require "gt.internal"
local C = require "gt.report.common"
local units = require "gt.units"

local format, concat, sort = string.format, table.concat, table.sort
local max = math.max

local M = { color = nil }

function M.raised(tree)
  if not C.is_tree(tree) then I.error("gt.report.raised(tree): expected a tree (from gt.tree), got " .. I.show(tree)) end
  return C.raised(tree)
end

-- -- Terminal drawing ----------------------------------------------------------

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

--- report.draw(tree [, {color = bool, explain = bool}]) -> the tree drawn for a
--- terminal (no trailing newline): two header lines, a column header, one line
--- per node, under it a line of its shapes, why it exists and its cut (unless
--- explain = false), and one more under a node that is skipped, with the reason.
function M.draw(tree, opts)
  if opts ~= nil then I.opts(opts, "gt.report.draw(tree [, {color = bool, explain = bool}])") end
  local s = C.stats_of(tree, "draw")
  local color = opts and opts.color
  if color == nil then color = use_color() end
  return require("gt.report.draw").text(s, { color = color, explain = not (opts and opts.explain == false),
                                             raised = C.raised(tree) })
end

-- -- DOT -----------------------------------------------------------------------------

--- report.dot(tree [, path]) -> Graphviz text: one node "n<id>" per tree node
--- (label and counts), an edge per parent -> child; written to path if given.
function M.dot(tree, path, what)   -- (what: the call named in errors; tree:dot passes its own)
  what = what or "gt.report.dot(tree [, path])"
  C.check_path(path, what)
  local text = require("gt.report.dot").text(C.stats_of(tree, "dot"))
  if path then C.write_file(path, text, what) end
  return text
end

-- -- JSON ----------------------------------------------------------------------------

local KEY_ORDER = { "format", "id", "name", "where", "parent", "depth", "children", "label", "kernels", "calls",
  "nodes", "recorded", "visits", "warmups", "replays", "eager", "updates", "fused", "skip", "skipped", "skips", "pool",
  "reserved", "in_use", "high_water", "record_us", "instantiate_us", "replay_cpu_us", "gpu_us", "planned_bytes",
  "checkpoint_bytes", "reusable_bytes", "graph_bytes", "path_graph_bytes", "graph_measured", "budget_drops", "reinstantiations", "width",
  "last_call", "cuts", "site", "reason", "count", "shapes", "why", "cut",
  "shared", "shared_with", "roots", "node" }

-- The stats table reshaped for JSON: node as an array by id, nulls kept.
local function json_shape(s, json)
  local r = {}
  for k, v in pairs(s) do r[k] = v end
  r.format = "gtlua.tree/1"
  r.roots = json.array({ unpack(s.roots) })
  local nodes = {}
  for _, id in ipairs(C.node_ids(s)) do
    local n, c = s.node[id], {}
    for k, v in pairs(n) do c[k] = v end
    c.children = json.array({ unpack(n.children) })
    if n.cuts then c.cuts = json.array({ unpack(n.cuts) }) end
    for _, k in ipairs { "parent", "skip", "shapes", "why", "cut", "shared_with" } do if c[k] == nil then c[k] = json.null end end
    nodes[#nodes + 1] = c
  end
  r.node = json.array(nodes)
  return r
end

--- report.json(tree [, path]) -> JSON text of tree:stats() (fields at the top
--- of this file); written to path if given.
function M.json(tree, path, what)
  what = what or "gt.report.json(tree [, path])"
  C.check_path(path, what)
  local json = require "gt.json"
  local text = json.encode(json_shape(C.stats_of(tree, "json"), json), KEY_ORDER) .. "\n"
  if path then C.write_file(path, text, what) end
  return text
end

-- -- HTML (lua/gt/report/html.lua) ------------------------------------------------------

--- report.html(tree_or_list [, path]) -> one self-contained HTML page (inline
--- CSS and SVG, no scripts, no network): per tree the advisor's findings, the
--- tree as SVG, charts per node and over calls, and a table of nodes.
function M.html(x, path, what)
  what = what or "gt.report.html(tree_or_list [, path])"
  C.check_path(path, what)
  local trees = x
  if C.is_tree(x) then trees = { x }
  elseif type(x) ~= "table" then I.error("gt.report.html: expected a tree or a list of trees, got " .. I.show(x)) end
  for _, t in ipairs(trees) do if not C.is_tree(t) then I.error("gt.report.html: expected a tree or a list of trees") end end
  local text = require("gt.report.html").page(trees)
  if path then C.write_file(path, text, what) end
  return text
end

-- -- At exit ------------------------------------------------------------------------------

--- report.trees() -> the live trees (I.trees, a weak table), in creation order
function M.trees()
  local keys, out = {}, {}
  for k in pairs(I.trees or {}) do keys[#keys + 1] = k end
  sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = I.trees[k] end
  return out
end

-- One line of times for --stats: totals of recording, replay means weighted by replays.
local function costs_line(s)
  local rec, inst, rsum, gsum, reps, gn = 0, 0, 0, 0, 0, 0
  for _, id in ipairs(C.node_ids(s)) do
    local n = s.node[id]
    rec, inst = rec + n.record_us, inst + n.instantiate_us
    rsum, reps = rsum + n.replay_cpu_us * n.replays, reps + n.replays
    if n.gpu_us > 0 then gsum, gn = gsum + n.gpu_us * max(n.replays, 1), gn + max(n.replays, 1) end
  end
  local line = format("time: record %s, instantiate %s (all nodes); replay %s host per replay",
    units.micros(rec), units.micros(inst), reps > 0 and units.micros(rsum / reps) or "-")
  if gn > 0 then line = line .. format(", %s device", units.micros(gsum / gn)) end
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

return M
