-- explain_spec.lua: why each node exists, where its segment was cut, its shapes (DESIGN 9), in stats and pictures.
local gt = require "gt"
require "gt.busted"
local report = require "gt.report"
local json = require "dkjson"

local K = gt.compile([[
__global__ void scale_add(float *y, const float *x, const float *w, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] * w[i % 4] + 1;
}
__global__ void neg(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = -x[i];
}
]], { name = "explain_spec.cu" })

local function scale_add(x, w)
  local y = gt.tensor(x.shape)
  K.scale_add(2, 32, y, x, w, x.numel)
  return y
end
local function neg(x)
  local y = gt.tensor(x.shape)
  K.neg(2, 32, y, x, x.numel)
  return y
end

local W = gt.ones({ 4 }):static()
local function here() return debug.getinfo(2, "l").currentline end

describe("node.why, node.cut and node.shapes", function()
  it("say 'first path' and 'return' for a call's only segment, with its input and output shapes", function()
    local t = gt.tree(function(x) return scale_add(x, W) end)
    t(gt.zeros({ 4, 8 }))
    local n = t:stats().node[0]
    assert.are.same({ "first path", "return", "x 4x8 f32 -> 4x8 f32" }, { n.why, n.cut, n.shapes })
  end)

  it("name a branch that differs by kernels 'new branch after [n]', and its first child 'continues'", function()
    local t = gt.tree(function(x, route)
      local h = scale_add(x, W)
      gt.cut()
      if route then return neg(h) end
      h = scale_add(h, W)
      gt.cut()
      return neg(h)
    end)
    local x = gt.zeros({ 8 })
    t(x, true)
    t(x, false)
    local s = t:stats()
    assert.are.same({ "first path", "first path", "new branch after [0]", "continues [2]" },
                    { s.node[0].why, s.node[1].why, s.node[2].why, s.node[3].why })
    assert.truthy(s.node[0].cut:match("^gt%.cut at explain_spec%.lua:%d+$"), s.node[0].cut)
    assert.are.equal("-> 8 f32", s.node[2].shapes)
  end)

  it("name a sibling that differs only by shape 'new shape', with the sibling's shape", function()
    local t = gt.tree(function(x) return scale_add(x, W) end)
    t(gt.zeros({ 8, 16 }))
    t(gt.zeros({ 16, 16 }))
    local s = t:stats()
    assert.are.equal(s.node[0].label, s.node[1].label)
    assert.are.equal("new shape 16x16 (sibling [0] has 8x16)", s.node[1].why)
    assert.are.equal("x 16x16 f32 -> 16x16 f32", s.node[1].shapes)
  end)

  it("name the line and the API that cut a segment: item, tolist, gt.sync, a host copy", function()
    local lines = {}
    local t = gt.tree(function(x, k)
      local h = scale_add(x, W)
      if k == 1 then lines[1] = here(); h:item()
      elseif k == 2 then lines[2] = here(); h:tolist()
      elseif k == 3 then lines[3] = here(); gt.sync()
      else lines[4] = here(); h:copy({ 1 }) end
      return neg(h)
    end, { warmup = 0 })
    local x = gt.zeros({ 1 })
    for k = 1, 4 do t(x, k) end
    local s, cuts = t:stats(), {}
    for id = 0, s.nodes - 1 do if not s.node[id].parent then cuts[#cuts + 1] = s.node[id].cut end end
    -- the four first segments have the same launches: one node, cut where it was first cut
    assert.are.same({ "explain_spec.lua:" .. lines[1] .. " item" }, cuts)
    local u = gt.tree(function(x, k)
      if k == 2 then lines[5] = here(); local v = scale_add(x, W):tolist(); return v end   -- not a tail call: its line stays on the stack
      if k == 3 then local h = neg(x); lines[6] = here(); gt.sync(); return h end
      local h = scale_add(neg(x), W); lines[7] = here(); h:copy({ 2 }); return h
    end)
    for k = 2, 4 do u(x, k) end
    s = u:stats()
    assert.are.same({ "explain_spec.lua:" .. lines[5] .. " tolist", "explain_spec.lua:" .. lines[6] .. " gt.sync",
                      "explain_spec.lua:" .. lines[7] .. " host copy (copy)" }, { s.node[0].cut, s.node[1].cut, s.node[2].cut })
  end)

  it("name in shapes the outputs the call returns (in order, one level into a table), not the last tensor made", function()
    local t = gt.tree(function(a, b)
      local y = gt.ops.add(a, b)
      gt.ops.sum(y)                           -- made after y, not returned
      return y
    end)
    t(gt.ones { 2, 3 }, gt.ones { 2, 3 })
    assert.are.equal("a 2x3 f32, b 2x3 f32 -> 2x3 f32", t:stats().node[0].shapes)
    local two = gt.tree(function(a) return gt.ops.relu(a), gt.ops.sum(a), 7 end)
    two(gt.ones { 2, 3 })
    assert.are.equal("a 2x3 f32 -> 2x3 f32, 2 f32", two:stats().node[0].shapes)
    local tab = gt.tree(function(a) return { gt.ops.sum(a), logits = gt.ops.relu(a), n = 3 } end)
    tab(gt.ones { 2, 3 })
    assert.are.equal("a 2x3 f32 -> 2 f32, logits 2x3 f32", tab:stats().node[0].shapes)
    local none = gt.tree(function(a) gt.ops.relu(a) end)
    none(gt.ones { 2 })
    assert.are.equal("a 2 f32 -> (no tensors returned)", none:stats().node[0].shapes)
    -- a segment ended by a cut names the last tensor it made; the next segment's outputs are the call's results
    local cut = gt.tree(function(x)
      local h = scale_add(x, W)
      local s = gt.ops.sum(h)
      s:item()
      return neg(h), s
    end)
    for _ = 1, 3 do cut(gt.zeros { 1, 4 }) end
    local s = cut:stats()
    assert.are.same({ "x 1x4 f32 -> 1 f32", "-> 1x4 f32, 1 f32" }, { s.node[0].shapes, s.node[1].shapes })
  end)

  it("list in node.cuts every site a segment ended at, with its visits, also after the same launches", function()
    local l = {}
    local t = gt.tree(function(x, k)
      local h = scale_add(x, W)
      if k == 1 then l[1] = here(); h:item()
      elseif k == 2 then l[2] = here(); h:tolist()
      elseif k == 3 then l[3] = here(); gt.cut()
      else l[4] = here(); h:item() end          -- a second item line: the same API as the first
      return neg(h)
    end)
    local x = gt.zeros { 1 }
    -- (the second item line is told apart from the first once both were seen while the node still
    -- warmed up or recorded: a replay knows its API, not its line; docs/DESIGN.md section 9)
    local ks = { 1, 4, 2, 1, 3, 1, 2, 4, 1, 1, 2, 4, 3, 1, 1 }
    for _, k in ipairs(ks) do t(x, k) end
    local s = t:stats()
    local n = s.node[0]
    assert.are.equal(2, s.nodes)              -- one node before the cut, one after: the sites do not split nodes
    assert.are.equal("explain_spec.lua:" .. l[1] .. " item", n.cut)   -- (node.cut: the first site, as before)
    local f = "explain_spec.lua:"
    assert.are.same({
      { site = f .. l[1], reason = "item", cut = f .. l[1] .. " item", count = 7 },
      { site = f .. l[4], reason = "item", cut = f .. l[4] .. " item", count = 3 },
      { site = f .. l[2], reason = "tolist", cut = f .. l[2] .. " tolist", count = 3 },
      { site = f .. l[3], reason = "gt.cut", cut = "gt.cut at " .. f .. l[3], count = 2 },
    }, n.cuts)
    assert.is_true(n.replays > 0)
    assert.are.same({ { site = "return", reason = "return", cut = "return", count = #ks } }, s.node[1].cuts)
    -- the pictures show every site with its count
    report.color = false
    local text = tostring(t)
    assert.truthy(text:find("cuts: " .. f .. l[1] .. " item (7), ", 1, true), text)   -- (the line is cut to the terminal's width)
    assert.truthy(t:dot():find("cuts: " .. f .. l[1] .. " item (7), " .. f .. l[4] .. " item (3)", 1, true))
    assert.truthy(t:dot():find(f .. l[2] .. " tolist (3), gt.cut at " .. f .. l[3] .. " (2)", 1, true))
    assert.are.equal(4, #json.decode(t:json()).node[1].cuts)
    assert.truthy(t:report():find(f .. l[2] .. " tolist (3)", 1, true))
  end)

  it("count a replay's cut site without reading the stack (no debug.getinfo once the node replays)", function()
    local t = gt.tree(function(x) local h = scale_add(x, W); h:item(); return neg(h) end)
    local x = gt.zeros { 1 }
    for _ = 1, 5 do t(x) end
    local calls = 0
    local getinfo = debug.getinfo
    debug.getinfo = function(...) calls = calls + 1; return getinfo(...) end
    for _ = 1, 20 do t(x) end
    debug.getinfo = getinfo
    assert.are.equal(0, calls)
    assert.are.equal(25, t:stats().node[0].cuts[1].count)
  end)

  it("name a node made because a static weight moved 'static <param> moved (<kernel>, ...)'", function()
    local w = gt.ones({ 4 }):static()
    local t = gt.tree(function(x) return scale_add(x, w) end)
    local x = gt.zeros({ 8 })
    t(x)                                    -- a warmup: node 0 holds no graph yet, so no update in place
    w = gt.ones({ 4 }):static()
    t(x)
    local s = t:stats()
    assert.are.equal(2, s.nodes)
    assert.are.equal("static w moved (scale_add, sibling [0])", s.node[1].why)
    assert.are.equal(s.node[0].shapes, s.node[1].shapes)
  end)
end)

describe("the pictures explain nodes", function()
  local saved
  before_each(function() saved = report.color; report.color = false end)
  after_each(function() report.color = saved end)

  local function shape_siblings()
    local t = gt.tree(function(x) return scale_add(x, W) end, { name = "siblings" })
    for _, n in ipairs { 8, 16, 32 } do t(gt.zeros({ n, 4 })) end
    return t
  end

  it("tell siblings that differ only by shape apart in print(tree), DOT, JSON and HTML", function()
    local t = shape_siblings()
    local text = tostring(t)
    assert.truthy(text:find("x 8x4 f32 -> 8x4 f32; first path", 1, true), text)
    assert.truthy(text:find("x 16x4 f32 -> 16x4 f32; new shape 16x4 (sibling [0] has 8x4)", 1, true), text)
    assert.truthy(text:find("x 32x4 f32 -> 32x4 f32; new shape 32x4 (sibling [0] has 8x4)", 1, true), text)
    local dot = t:dot()
    assert.truthy(dot:find("[1] scale_add\\nx 16x4 f32 -> 16x4 f32\\nnew shape 16x4", 1, true), dot)
    local j = json.decode(t:json())
    assert.are.same({ "x 32x4 f32 -> 32x4 f32", "new shape 32x4 (sibling [0] has 8x4)", "return" },
                    { j.node[3].shapes, j.node[3].why, j.node[3].cut })
    local html = t:report()
    local boxes = {}
    for g in html:gmatch('<g class="node".-</g>') do boxes[#boxes + 1] = g:gsub("<title>.-</title>", "") end
    assert.are.equal(3, #boxes)
    assert.truthy(boxes[1]:find("x 8x4 f32", 1, true) and boxes[2]:find("x 16x4 f32", 1, true) and
                  boxes[3]:find("x 32x4 f32", 1, true))
    assert.are_not.equal(boxes[1]:gsub('data%-id="%d+"', ""), boxes[2]:gsub('data%-id="%d+"', ""))
  end)

  it("draws a tree too wide for the page as rows, every root at the left edge", function()
    local t = gt.tree(function(x) return scale_add(x, W) end, { warn_shapes = false })
    for n = 1, 12 do t(gt.zeros({ n })) end
    local html = t:report()
    assert.truthy(html:find('data-layout="rows"', 1, true))
    local w = tonumber(html:match('<svg class="tree" data%-layout="rows" width="(%d+)"'))
    assert.is_true(w <= 1060, w)
    for x in html:gmatch('data%-root="1" transform="translate%((%d+),') do assert.are.equal("12", x) end
    assert.are.equal(12, select(2, html:gsub('data%-root="1"', "")))
  end)

  it("note a node's shapes again when an update gives it others", function()
    local K = gt.compile([[__global__ void cp(float *y, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }]], { name = "explain_update.cu" })
    local g = 1
    local t = gt.tree(function(x) local y = gt.tensor(x.shape); K.cp(g, 32, y, x, x.numel); return y end, { warmup = 0 })
    t(gt.randn { 2, 8 }); t(gt.randn { 2, 8 })
    assert.are.equal("x 2x8 f32 -> 2x8 f32", t:stats().node[0].shapes)
    g = 2
    t(gt.randn { 4, 4 })                        -- the same bytes, another grid: the node is updated
    local s = t:stats()
    assert.are.same({ 1, 1 }, { s.nodes, s.updates })
    assert.are.equal("x 4x4 f32 -> 4x4 f32", s.node[0].shapes)
  end)
end)
