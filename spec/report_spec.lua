-- report_spec.lua: seeing a tree: the terminal drawing, DOT, JSON, the HTML report, gt.profile, gt.help, --stats/--report.
local gt = require "gt"
require "gt.busted"
local report = require "gt.report"
local json, units = require "dkjson", require "gt.units"

local BIN = os.getenv("GTLUA_BIN")

local K = gt.compile([[
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
__global__ void axpb_b(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] - b;
}
]], { name = "report_spec.cu" })
local E = gt.compile([[
__global__ void host_only(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] + 10;
}
]], { name = "report_eager.cu", graph = false })

local N = 64
local function axpb(x, a, b, k)
  local y = gt.tensor(x.shape)
  ;(k or K.axpb)(2, 32, y, x, x.numel, a, b)
  return y
end
local function seq(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end

-- The known tree: a prefix (node 0) with two host-branch children (1: "a", 2: "b").
local function known_tree()
  local branchy = gt.tree(function(x, route)
    local h = axpb(x, 2, 0)
    gt.cut()
    if route == "a" then return axpb(h, 1, 1) end
    return axpb(h, 1, 1, K.axpb_b)
  end)
  local x = gt.from(seq(N, function(i) return i end))
  for _, r in ipairs { "a", "a", "a", "b", "b", "a", "b", "b" } do branchy(x, r) end
  return branchy
end

-- A tree whose middle segment cannot be graphed (a skip with its reason).
local function eager_tree()
  local mixed = gt.tree(function(x)
    local h = axpb(x, 2, 0)
    gt.cut()
    local e = gt.tensor(x.shape)
    E.host_only(1, 32, e, h, x.numel)
    gt.cut()
    return axpb(e, 1, 1)
  end)
  local x = gt.from{ 1, 2, 3 }
  for _ = 1, 4 do mixed(x) end          -- node 1: a warmup, then 3 eager visits
  return mixed
end

local function count(s, pat) return select(2, s:gsub(pat, "")) end
local function width(s) return count(s, "[^\128-\191]") end

local function lines(s)
  local t = {}
  for l in (s .. "\n"):gmatch("(.-)\n") do t[#t + 1] = l end
  return t
end

local S = require "spec.support"
local slurp, shq, gtlua = S.slurp, S.shq, S.gtlua

-- What print writes (io.stdout swapped for the duration of fn).
local function captured(fn)
  local real, buf = io.stdout, {}
  io.stdout = { write = function(self, ...) for _, v in ipairs { ... } do buf[#buf + 1] = tostring(v) end return self end,
                flush = function() end }
  local ok, a, b = pcall(fn)
  io.stdout = real
  assert(ok, a)
  return table.concat(buf), a, b
end

describe("print(tree)", function()
  local saved
  before_each(function() saved = report.color; report.color = false end)
  after_each(function() report.color = saved end)

  it("draws a known tree exactly: header, columns, a line per node and one of its shapes, why and cut", function()
    local t = known_tree()
    local s = t:stats()
    local expected = table.concat({
      "tree 'branchy' (" .. t.where .. "): 8 calls, 3 nodes, 3 recorded",
      "pool " .. units.bytes(s.pool.reserved) .. " reserved, " .. units.bytes(s.pool.high_water) ..
        " high water; 10 replays, 3 warmups, 0 eager",
      "graph memory " .. units.bytes(s.graph_bytes) .. " (measured)",
      "                                       visits replays warmups   planned",
      "└─ [0] axpb                                 8       6       1     256 B  graph",
      "   │  x 64 f32 -> 64 f32; first path; gt.cut at report_spec.lua:35",
      "   ├─ [1] axpb                              4       2       1     256 B  graph",
      "   │     -> 64 f32; first path",
      "   └─ [2] axpb_b                            4       2       1     256 B  graph",
      "         -> 64 f32; new branch after [0]",
    }, "\n")
    assert.are.equal(expected, tostring(t))
    assert.are.equal(expected, report.draw(t))
    local plain = report.draw(t, { explain = false })
    assert.are.equal(7, #lines(plain))
  end)

  it("marks an eager node with its reason; its child still has a graph", function()
    local t = eager_tree()
    local text = tostring(t)
    local l = lines(text)
    assert.are.equal("eager visits: kernel 'host_only' is not graphable (3)", l[3])
    assert.truthy(l[4]:match("^graph memory "), l[4])
    assert.truthy(l[6]:match("^└─ %[0%] axpb .*  graph$"), l[6])
    assert.truthy(l[8]:match("^   └─ %[1%] host_only .*  eager$"), l[8])
    assert.are.equal("      │  -> 3 f32; first path; gt.cut at report_spec.lua:51", l[9])
    assert.are.equal("      │  eager: kernel 'host_only' is not graphable", l[10])   -- under node 1, over its child
    assert.truthy(l[11]:match("^      └─ %[2%] axpb .*  graph$"), l[11])
  end)

  it("marks a node that has only warmed up, and one whose graph was trimmed", function()
    local t = gt.tree(function(x) return axpb(x, 1, 1) end)
    t(gt.zeros{ N })
    assert.truthy(tostring(t):match("\n└─ %[0%] axpb +1 +0 +1 +0 B  warmup\n"))
    t(gt.zeros{ N })
    assert.truthy(tostring(t):match("  graph\n"))
    t:trim()
    assert.truthy(tostring(t):match("  trimmed\n"))
  end)

  it("stays within 80 columns: long labels are cut with …", function()
    local long = gt.tree(function(x)
      local h = x
      for i = 1, 12 do h = axpb(h, 1, 0, i % 2 == 0 and K.axpb or K.axpb_b) end
      gt.cut()
      return axpb(h, 1, 0)
    end, { name = "a_tree_with_a_rather_long_name" })
    long(gt.zeros{ N })
    local text = tostring(long)
    for _, l in ipairs(lines(text)) do assert.is_true(width(l) <= 80, l) end
    assert.truthy(text:find("…", 1, true))
  end)

  it("draws a 5000-segment chain in linear size: indentation stops at C.CAP levels, a … line says the depth", function()
    local deep = gt.tree(function(x)
      for _ = 1, 5000 do x = axpb(x, 1, 0); gt.cut() end
      return x
    end)
    deep(gt.zeros{ 4 })
    local text = tostring(deep)
    -- (indenting every level drew 75 MB: each line as wide as its depth)
    assert.is_true(#text < 2 * 1024 * 1024, #text)
    local ls = lines(text)
    for _, l in ipairs(ls) do assert.is_true(width(l) <= 80, l) end
    assert.truthy(text:find("└─ [4999] axpb", 1, true))
    local cap = require("gt.report.common").CAP
    -- one marker where the chain passes the cap; below it each node is drawn under its parent
    assert.are.equal(1, count(text, "… depth"))
    assert.truthy(text:find("… depth " .. (cap + 1) .. ", below %[" .. cap .. "%]; deeper ones also in this column"))
    local col = {}
    for _, l in ipairs(ls) do
      local pre, id = l:match("^(.-)└─ %[(%d+)%]")
      if id then col[tonumber(id)] = width(pre) end
    end
    for id = 0, cap do assert.are.equal(3 * id, col[id]) end
    for id = cap + 1, 4999 do assert.are.equal(3 * cap, col[id]) end
    -- the other pictures are as long as the tree is large, no more
    assert.is_true(#deep:dot() < 2 * 1024 * 1024)
    assert.is_true(#deep:json() < 8 * 1024 * 1024)
    local html = deep:report()
    assert.is_true(#html < 16 * 1024 * 1024, #html)
    assert.are.equal(5000, count(html, '<g class="node"'))
  end)

  it("marks where a deep drawing goes back out of the capped levels, and each sibling there", function()
    local cap = require("gt.report.common").CAP
    local t = gt.tree(function(x, k)
      for i = 1, cap + 4 do x = axpb(x, 1, 0, i == k and K.axpb_b or K.axpb); gt.cut() end
      return x
    end)
    local x = gt.zeros{ 4 }
    t(x, 0); t(x, 2); t(x, cap + 3)
    local text = tostring(t)
    for _, l in ipairs(lines(text)) do assert.is_true(width(l) <= 80, l) end
    -- into the capped levels on the first path; a sibling there (the third call's branch) named with
    -- its parent; back out to [0]'s other child (the second call's branch); in again on its path
    assert.truthy(text:find("… depth " .. (cap + 1) .. ", below %[" .. cap .. "%]; deeper ones also in this column"))
    assert.truthy(text:find("… depth " .. (cap + 2) .. ", below %[" .. (cap + 1) .. "%]\n"))
    assert.truthy(text:find("… depth 1, below %[0%]\n"))
    assert.are.equal(4, count(text, "… depth"))
  end)

  it("says so when a tree has no calls yet, or calls without launches", function()
    local idle = gt.tree(function(x) return x end)
    assert.truthy(tostring(idle):match("\n%(no calls yet%)$"))
    idle(gt.zeros{ 2 })
    assert.truthy(tostring(idle):match("\n%(no nodes: the calls launched no kernels%)$"))
  end)

  it("colours only when asked or on a terminal; the text under the colour is the same", function()
    local t = known_tree()
    local plain = report.draw(t, { color = false })
    local coloured = report.draw(t, { color = true })
    assert.is_nil(plain:find("\27", 1, true))
    assert.truthy(coloured:find("\27[32mgraph\27[0m", 1, true))
    assert.are.equal(plain, (coloured:gsub("\27%[[%d;]*m", "")))
  end)

  it("prints no colour when stdout is not a terminal (gtlua as a subprocess)", function()
    if not BIN then return pending("GTLUA_BIN is not set (run inside gtlua)") end
    local code = [[local t = gt.tree(function(x) return gt.ops.relu(x) end); t(gt.zeros{2}); print(t)]]
    local status, out = gtlua("-e " .. shq(code))
    assert.are.equal(0, status)
    assert.truthy(out:find("└─ [0]", 1, true), out)
    assert.is_nil(out:find("\27", 1, true))
  end)
end)

describe("tree:dot", function()
  it("has one node line per node and one edge per parent -> child", function()
    local t = known_tree()
    local path = os.tmpname()
    local dot = t:dot(path)
    assert.are.equal(dot, slurp(path))
    os.remove(path)
    assert.truthy(dot:match("^digraph gtlua_tree {\n"))
    assert.truthy(dot:match("\n}\n$"))
    assert.are.equal(3, count(dot, "\n  n%d+ %[label="))
    assert.are.equal(2, count(dot, "n%d+ %-> n%d+;"))
    assert.truthy(dot:find("n0 -> n1;", 1, true))
    assert.truthy(dot:find("n0 -> n2;", 1, true))
    assert.truthy(dot:find('label="[2] axpb_b\\n-> 64 f32\\nnew branch after [0]\\nvisits 4  replays 2  warmups 1', 1, true))
    assert.truthy(dot:find('label="[0] axpb\\nx 64 f32 -> 64 f32\\nfirst path\\ngt.cut at report_spec.lua:35\\n', 1, true))
    assert.are.equal(count(dot, "{"), count(dot, "}"))
  end)
end)

describe("tree:json", function()
  local function same_number(a, b)
    return a == b or math.abs(a - b) <= 1e-12 * math.max(math.abs(a), math.abs(b))
  end

  local function check_against_stats(t)
    local s = t:stats()
    local text = t:json()
    local j, _, err = json.decode(text)
    assert.is_nil(err)
    assert.are.equal("gtlua.tree/1", j.format)
    assert.truthy(text:match('^{\n  "format":"gtlua.tree/1",\n  "name":'), text:sub(1, 60))
    for _, k in ipairs { "name", "where", "calls", "nodes", "recorded", "warmups", "replays", "eager", "updates",
                         "skipped", "depth" } do
      assert.are.equal(s[k], j[k], k)
    end
    assert.are.same(s.pool, j.pool)
    assert.are.same(s.skips, j.skips)
    assert.are.same(s.roots, j.roots)
    assert.are.equal(s.nodes, #j.node)
    for id = 0, s.nodes - 1 do
      local a, b = s.node[id], j.node[id + 1]
      for k, v in pairs(a) do
        if type(v) == "number" then assert.is_true(same_number(v, b[k]), k .. ": " .. v .. " vs " .. tostring(b[k]))
        else assert.are.same(v, b[k], k) end
      end
      for k in pairs(b) do assert.is_true(a[k] ~= nil, k) end          -- null (parent, skip) reads back as nil
    end
    return j, text
  end

  it("parses back (dkjson) to everything in stats(), node as an array by id", function()
    local t = known_tree()
    local j, text = check_against_stats(t)
    assert.is_nil(j.node[1].parent)
    assert.truthy(text:find('"parent":null', 1, true))
    assert.are.same({ 1, 2 }, j.node[1].children)
    assert.are.same({}, j.node[2].children)
    assert.truthy(text:find('"children":[]', 1, true))
    assert.truthy(text:find('"skips":{', 1, true))
  end)

  it("keeps skip reasons and writes the file when given a path", function()
    local t = eager_tree()
    local path = os.tmpname()
    local j, text = check_against_stats(t)
    assert.are.equal(text, t:json(path))
    assert.are.equal(text, slurp(path))
    os.remove(path)
    assert.are.equal(3, j.skips["kernel 'host_only' is not graphable"])
    assert.are.equal("kernel 'host_only' is not graphable", j.node[2].skip)
  end)

  it("writes keys in a fixed order, empty tables as what they are, and strings escaped", function()
    local t = known_tree()
    local text = t:json()
    local keys = {}
    for k in text:gmatch('\n  "([%w_]+)":') do keys[#keys + 1] = k end
    assert.are.same({ "format", "name", "where", "depth", "calls", "nodes", "recorded", "warmups", "replays", "eager",
                      "updates", "fused", "skipped", "skips", "pool", "graph_bytes", "path_graph_bytes", "graph_measured", "budget_drops",
                      "reinstantiations", "roots", "node" }, keys)
    local first = text:match('"node":%[(%b{})')
    local nkeys = {}
    for k in first:gmatch('\n%s+"([%w_]+)":') do nkeys[#nkeys + 1] = k end
    assert.are.same({ "cut", "shared", "shared_with", "keyed", "records" }, { unpack(nkeys, #nkeys - 4) })   -- unlisted keys: sorted, last
    assert.are.equal(text, t:json())
    assert.are.equal("table", type(json.decode(text).skips))
    assert.truthy(text:find('"skips":{%s*}'), "an empty skips table must be an object")
    local odd = gt.tree(function(x) return axpb(x, 1, 0) end, { name = 'q"uote\\\n' })
    odd(gt.from{ 1 })
    assert.are.equal('q"uote\\\n', json.decode(odd:json()).name)
  end)
end)

describe("gt.report.el, the element builder of the HTML report", function()
  local E = require "gt.report.el"

  it("escapes text and attribute values, and nothing that is markup already", function()
    local m = E.el("text", { class = 'a"b', x = 8, y = 2.5, title = "<i>" }, "x < y & 'z'", E.el("b", nil, "ok"))
    assert.are.equal('<text class="a&quot;b" title="&lt;i&gt;" x="8" y="2.5">x &lt; y &amp; &#39;z&#39;<b>ok</b></text>',
      E.html(m))
    assert.are.equal("<style>a>b{}</style>", E.html(E.el("style", nil, E.raw("a>b{}"))))
  end)

  it("leaves out nil and false attributes and children, closes empty SVG elements, not HTML's void ones", function()
    assert.are.equal('<rect width="3"/>', E.html(E.el("rect", { width = 3, fill = false, stroke = nil })))
    assert.are.equal('<meta charset="utf-8">', E.html(E.el("meta", { charset = "utf-8" })))
    assert.are.equal("<p>ab</p>", E.html(E.el("p", nil, { "a", nil, false and "x" }, { { "b" } })))
    assert.are.equal("<i></i>\n<b></b>", E.html(E.lines { E.el("i", nil, ""), E.el("b", nil, "") }))
  end)

  it("rejects a child that is not text, markup or a list", function()
    assert.has_error(function() E.el("p", nil, print) end,
      "gt.report.el: a child must be text, markup or a list, not a function")
  end)
end)

describe("tree:report", function()
  local function balanced(html, tag)
    local open = count(html, "<" .. tag .. "[%s>]")
    local close = count(html, "</" .. tag .. ">")
    return open == close, open .. " <" .. tag .. "> vs " .. close .. " </" .. tag .. ">"
  end

  local function check_page(html, nodes_per_tree)
    assert.truthy(html:match("^<!DOCTYPE html>\n<html"))
    assert.truthy(html:match("</html>\n$"))
    for _, tag in ipairs { "html", "head", "body", "style", "section", "svg", "g", "table", "thead", "tbody", "tr",
                           "title", "text", "h2", "h3" } do
      assert.is_true(balanced(html, tag))
    end
    assert.is_nil(html:find("http://", 1, true))
    assert.is_nil(html:find("https://", 1, true))
    assert.is_nil(html:lower():find("<script", 1, true))
    assert.is_nil(html:lower():find("<link", 1, true))
    assert.is_nil(html:lower():find("@import", 1, true))
    local total = 0
    for _, n in ipairs(nodes_per_tree) do total = total + n end
    assert.truthy(html:find("<body>", 1, true) and html:find("<head>", 1, true))
    assert.are.equal(total, count(html, '<g class="node"'))
    assert.are.equal(#nodes_per_tree, count(html, '<section class="tree"'))
  end

  it("is one self-contained page: an SVG with one element per node, charts and a table", function()
    local t = known_tree()
    local path = os.tmpname()
    local html = t:report(path)
    assert.are.equal(html, slurp(path))
    os.remove(path)
    check_page(html, { 3 })
    assert.are.equal(1, count(html, '<svg class="tree"'))
    assert.are.equal(6, count(html, '<svg class="chart'))              -- 3 per node, 3 over calls
    assert.truthy(html:find('<div class="findings">', 1, true) < html:find('<svg class="tree"', 1, true))  -- advice first
    assert.are.equal(3, count(html, '<tr><td>%d+</td>'))          -- node table rows
    for id = 0, 2 do assert.truthy(html:find('<g class="node" data-id="' .. id .. '"', 1, true)) end
    assert.truthy(html:find("<title>[1] axpb\nshapes: -&gt; 64 f32\nwhy: first path\ncut: return\nstate: graph\n" ..
      "visits 4: 2 replays, 1 records, 1 warmups", 1, true))
  end)

  it("puts several trees on one page, one section each, and escapes names", function()
    local a, b = known_tree(), eager_tree()
    local html = report.html({ a, b })
    check_page(html, { 3, 3 })
    assert.truthy(html:find("kernel &#39;host_only&#39; is not graphable", 1, true))
    assert.truthy(html:find('<a href="#tree-2">mixed</a>', 1, true))
  end)

  it("draws a tree without calls as a section without nodes", function()
    local html = report.html(gt.tree(function(x) return x end))
    check_page(html, { 0 })
  end)
end)

describe("gt.profile", function()
  it("fills gpu_us for replayed nodes when on (every launch timed), and from sampled launches when off", function()
    local off = known_tree():stats()
    for id = 0, off.nodes - 1 do
      local n = off.node[id]
      if n.replays > 0 then assert.is_true(n.gpu_us > 0, "node " .. id) end
    end
    local before = gt.profile(true)
    local ok, s = pcall(function() return known_tree():stats() end)
    gt.profile(before)
    assert(ok, s)
    for id = 0, s.nodes - 1 do
      local n = s.node[id]
      assert.is_true(n.replays > 0)
      assert.is_true(n.gpu_us > 0, "node " .. id)
    end
  end)
end)

describe("gt.help", function()
  it("prints and returns the doc of a value or a name", function()
    local out, text = captured(function() return gt.help(gt.tree) end)
    assert.truthy(text:match("^gt%.tree%(fn %[, opts%]%)"))
    assert.are.equal(text .. "\n", out)
    for name, first in pairs { ["gt.tensor"] = "gt.tensor(", ["tensor:narrow"] = "t:narrow(", ["t:item"] = "t:item(",
                               ["ops.linear"] = "gt.ops.linear(", ["tree:stats"] = "tree:stats(",
                               ["gt.buckets.pow2"] = "gt.buckets.pow2(", ["profile"] = "gt.profile(" } do
      local _, got = captured(function() return gt.help(name) end)
      assert.are.equal(first, got and got:sub(1, #first), name)
    end
    local _, tensor_doc = captured(function() return gt.help(gt.zeros{ 1 }) end)
    assert.truthy(tensor_doc:match("^tensor:"))
    local _, narrow_doc = captured(function() return gt.help(gt.Tensor.narrow) end)
    assert.truthy(narrow_doc:match("^t:narrow"))
  end)

  it("says when there is no help, with close names", function()
    local out, text, msg = captured(function() return gt.help("lin") end)
    assert.is_nil(text)
    assert.are.equal("no help for 'lin'; try: gt.buckets.linear, gt.ops.linear", msg)
    assert.are.equal(msg .. "\n", out)
  end)
end)

describe("gtlua --stats / --report=FILE", function()
  it("prints every tree at exit and writes the HTML report of examples/branchy.lua", function()
    if not BIN then return pending("GTLUA_BIN is not set (run inside gtlua)") end
    local path = os.tmpname()
    local status, out, err = gtlua("--stats --report=" .. shq(path) .. " examples/branchy.lua")
    assert.are.equal(0, status, err)
    local at = out:find("gtlua --stats: 1 graph tree\n", 1, true)
    assert.truthy(at, out)
    local summary = out:sub(at)
    assert.truthy(summary:find("tree 'step' (examples/branchy.lua:", 1, true))
    assert.truthy(summary:find("\ntime: record ", 1, true))
    assert.is_nil(out:find("\27", 1, true))
    local nodes = count(summary, "\n[ │├└─]*%[%d+%] ")
    assert.is_true(nodes >= 5, summary)
    local html = slurp(path)
    os.remove(path)
    assert.are.equal(nodes, count(html, '<g class="node"'))
    assert.truthy(err:find("gtlua: wrote ", 1, true))
  end)

  it("reports that there are no trees", function()
    if not BIN then return pending("GTLUA_BIN is not set (run inside gtlua)") end
    local status, out = gtlua("--stats -e 'local x = 1'")
    assert.are.equal(0, status)
    assert.are.equal("gtlua --stats: 0 graph trees\n", out)
  end)
end)

describe("tree:history", function()
  it("remembers each call's visits, host time and pool, and the report charts them over calls", function()
    local step = gt.tree(function(x, r)
      local h = axpb(x, 2, 0)
      gt.cut()
      if r == "fail" then error("boom") end
      return r and axpb(h, 1, 1) or axpb(h, 1, 1, K.axpb_b)
    end)
    local x = gt.zeros{ N }
    local routes = { true, true, true, false, false, true }
    for _, r in ipairs(routes) do step(x, r) end
    assert.has_error(function() step(x, "fail") end, "boom")
    local h = step:history()
    assert.are.same(7, #h)
    local want = { { 2, 0, 0 }, { 0, 2, 0 }, { 0, 0, 2 }, { 1, 0, 1 } }
    for i, w in ipairs(want) do
      assert.are.same({ i, w[1], w[2], w[3] }, { h[i].call, h[i].warmups, h[i].records, h[i].replays })
    end
    assert.are.same({ 0, 1, 1 }, { h[5].warmups, h[5].records, h[5].replays })
    assert.are.same(2, h[6].replays)
    assert.are.same({ 7, 1 }, { h[7].call, h[7].replays })        -- the failed call: its first segment ran
    for _, c in ipairs(h) do assert.is_true(c.cpu_us > 0 and c.reserved > 0) end
    local html = step:report()
    assert.truthy(html:find("Visits per call", 1, true))
    -- visits per call: stacked columns; host time: one line; pool: reserved and in use as areas
    assert.truthy(count(html, '<rect class="col"') >= 7)
    assert.are.equal(1, count(html, '<polyline class="series"'))
    assert.are.equal(2, count(html, '<polygon class="area"'))
  end)
end)
