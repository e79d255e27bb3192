-- tools_design_spec.lua: a conformance audit of DESIGN.md sections 8-12 (device-side
-- branches, statistics and pictures, the advisor, host and REPL, errors, pitfalls),
-- for statements no other spec pins down.  Each `it` starts with its section.
local gt = require "gt"
require "gt.busted"
local S = require "spec.support"
local json = require "dkjson"

local K = gt.compile([[
__global__ void setf(float *p, float v) { if (blockIdx.x == 0 && threadIdx.x == 0) p[0] = v; }
__global__ void seti(int *p, int v) { if (blockIdx.x == 0 && threadIdx.x == 0) p[0] = v; }
__global__ void addc(float *y, float c) { if (blockIdx.x == 0 && threadIdx.x == 0) y[0] += c; }
__global__ void dec(int *p, float *acc) { if (blockIdx.x == 0 && threadIdx.x == 0) { p[0] -= 1; acc[0] += 1; } }
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
__global__ void neg(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = -x[i];
}
__global__ void rowsum(float *y, const float *x, int cols) {   // one block per row
  if (threadIdx.x == 0) { float s = 0; for (int j = 0; j < cols; j++) s += x[blockIdx.x * cols + j]; y[blockIdx.x] = s; }
}
__global__ void reverse(float *y, const float *x, int n) {
  extern __shared__ float buf[];
  int t = threadIdx.x;
  if (t < n) buf[t] = x[t];
  __syncthreads();
  if (t < n) y[t] = buf[n - 1 - t];
}
]], { name = "design_b.cu" })
local E = gt.compile([[
__global__ void host_only(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] + 10;
}
]], { name = "design_b_eager.cu", graph = false })

local function axpb(x, a, b) local y = gt.tensor(x.shape); K.axpb(2, 32, y, x, x.numel, a, b); return y end
local function neg(x) local y = gt.tensor(x.shape); K.neg(2, 32, y, x, x.numel); return y end
local function here() return debug.getinfo(2, "l").currentline end
local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end
local function has(s, part) return s:find(part, 1, true) ~= nil end
local function seq(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end

-- A tree with a shared prefix, three branches (one of them not graphable) and
-- a second input shape past max_recordings: warmups, records, replays, eager and skips.
local function busy_tree()
  local step = gt.tree(function(x, r)
    local h = axpb(x, 2, 0)
    gt.cut()
    if r == 1 then h = neg(h)
    elseif r == 2 then h = axpb(h, 1, 1)
    else local e = gt.tensor(h.shape); E.host_only(1, 32, e, h, h.numel); h = e end
    gt.cut()
    return neg(h)
  end, { max_recordings = 4, name = "busy" })
  local old = gt.on_warning
  gt.on_warning = function() end
  local ok, err = pcall(function()
    local x = gt.ones { 8 }
    for i = 1, 20 do step(x, i % 3 + 1) end
    for _ = 1, 3 do step(gt.ones { 16 }, 1) end
  end)
  gt.on_warning = old
  assert(ok, err)
  return step
end

-- ---------------------------------------------------------------------------
describe("DESIGN 8: gt.cond and gt.loop #design", function()
  local function pick(v)                 -- y = 1 when p (f32) is nonzero, else 2
    local p = gt.tensor({ 1 })
    K.setf(1, 1, p, v)
    local y = gt.zeros({ 1 })
    gt.cond(p, function() K.addc(1, 1, y, 1) end, function() K.addc(1, 1, y, 2) end)
    return y
  end

  it("8 cond: an f32 p is true when nonzero (0.5, -2, 1e-3) and false at 0 and -0.0, outside a tree and in every tree call", function()
    local step = gt.tree(pick)
    local values = { 0.5, 0, -2, -0.0, 1e-3, 0.5, -0.0, 0, -2, 1e-3, 0, 0.5 }
    for round = 1, 2 do
      for i, v in ipairs(values) do
        local want = v ~= 0 and 1 or 2
        assert.are.equal(want, pick(v):item(), "eager " .. tostring(v))
        assert.are.equal(want, step(v):item(), ("tree call %d.%d with p = %s"):format(round, i, tostring(v)))
      end
    end
    if gt.cond_nodes() then assert.nodes(step, 1) end
  end)

  it("8 cond: an external p whose value the host changes between calls (same address) decides every replay", function()
    local flag = gt.from({ 1 }, "i32")
    local step = gt.tree(function(x, p)
      local y = gt.tensor(x.shape)
      gt.cond(p, function() y:copy(gt.ops.mul(x, 2)) end, function() y:copy(gt.ops.mul(x, 3)) end)
      return y
    end)
    local x = gt.from { 1, 2 }
    for i, v in ipairs { 1, 0, 0, 1, 1, 0, 1, 0, 0, 1 } do
      flag:fill(v)
      assert.tensor_near(v == 1 and { 2, 4 } or { 3, 6 }, step(x, flag), 0, "call " .. i)
    end
    if gt.cond_nodes() then
      assert.nodes(step, 1)
      assert.replayed(step, 8)
    end
  end)

  it("8 loop: a countdown p the body decrements runs exactly p passes (0: none), as eager code, and the caller's p ends at 0", function()
    local function body(p)
      local acc = gt.zeros({ 1 })
      gt.loop(p, function() K.dec(1, 1, p, acc) end)
      return acc
    end
    local step = gt.tree(body)
    for i, k in ipairs { 3, 0, 5, 1, 0, 4, 2, 7, 3, 0 } do
      local pe, pt = gt.from({ k }, "i32"), gt.from({ k }, "i32")
      assert.are.equal(k, body(pe):item(), "eager, k = " .. k)
      assert.are.equal(k, step(pt):item(), "tree call " .. i .. ", k = " .. k)
      assert.are.same({ 0 }, pe:tolist())
      assert.are.same({ 0 }, pt:tolist(), "tree call " .. i)
    end
    if gt.cond_nodes() then
      assert.nodes(step, 1)
      assert.replayed(step, 8)
    end
  end)

  it("8 loop: a loop nested in a loop body (its p made in the body) runs k*m passes as eager code, one node", function()
    local function body(k, m)
      local p = gt.tensor({ 1 }, "i32")
      K.seti(1, 1, p, k)
      local outer, acc = gt.zeros({ 1 }), gt.zeros({ 1 })
      gt.loop(p, function()
        local q = gt.tensor({ 1 }, "i32")
        K.seti(1, 1, q, m)
        gt.loop(q, function() K.dec(1, 1, q, acc) end)
        K.dec(1, 1, p, outer)
      end)
      return acc, outer
    end
    local step = gt.tree(body)
    for i, km in ipairs { { 2, 3 }, { 3, 1 }, { 0, 4 }, { 4, 0 }, { 2, 3 }, { 1, 5 }, { 3, 3 } } do
      local k, m = km[1], km[2]
      local ea, eo = body(k, m)
      assert.are.same({ k * m, k }, { ea:item(), eo:item() }, "eager " .. i)
      local ta, to = step(k, m)
      assert.are.same({ k * m, k }, { ta:item(), to:item() }, "tree call " .. i)
    end
    if gt.cond_nodes() then assert.nodes(step, 1) end
  end)

  it("8 cond: a node holding a cond is not cut there: one segment that ends at return, counted like any node", function()
    if not gt.cond_nodes() then return end      -- the documented fallback is a child per way (cond_spec)
    local step = gt.tree(pick)
    for i = 1, 7 do step(i % 2 == 0 and 1 or 0) end
    local s = step:stats()
    local n = s.node[0]
    assert.are.same({ 1, 7, 1, 5, 0, 0 }, { s.nodes, n.visits, n.warmups, n.replays, n.eager, n.updates })
    assert.is_true(n.recorded)
    assert.are.equal("return", n.cut)
    assert.are.equal("first path", n.why)
    assert.are.same({}, n.children)
  end)

  it("8 cond/loop: a stale p (a tree's output from an earlier call) raises the stale message at the user's line", function()
    local t = gt.tree(function(v)
      local p = gt.tensor({ 1 }, "i32")
      K.seti(1, 1, p, v)
      return p
    end, { name = "flags" })
    local p = t(1)
    t(1)
    local line, err = here(), err_of(function() gt.cond(p, function() end) end)
    assert.truthy(err:find("tools_design_spec.lua:" .. line .. ":", 1, true), err)
    assert.truthy(has(err, "returned by tree 'flags'") and has(err, "was overwritten by a later call; :clone() it to keep it"), err)
    line, err = here(), err_of(function() gt.loop(p, function() end, { max = 1 }) end)
    assert.truthy(err:find("tools_design_spec.lua:" .. line .. ":", 1, true), err)
    assert.truthy(has(err, "was overwritten by a later call"), err)
    assert.are.equal(1, t(1):item())
  end)

  it("8 fallback (GTLUA_NO_COND=1): gt.loop in a tree gives the eager passes and says so once", function()
    local script = os.tmpname() .. ".lua"
    S.spit(script, [[
local K = gt.compile("__global__ void seti(int *p, int v) { if (threadIdx.x == 0) p[0] = v; }\n" ..
  "__global__ void dec(int *p, float *acc) { if (threadIdx.x == 0) { p[0] -= 1; acc[0] += 1; } }")
local function f(k)
  local p = gt.tensor({1}, "i32"); K.seti(1, 1, p, k)
  local acc = gt.zeros({1})
  gt.loop(p, function() K.dec(1, 1, p, acc) end)
  return acc
end
local step = gt.tree(f)
local a, b = {}, {}
for _, k in ipairs { 2, 0, 3, 2, 0, 3, 1, 2 } do a[#a + 1] = f(k):item(); b[#b + 1] = step(k):item() end
print(table.concat(a, " ") .. "|" .. table.concat(b, " "), gt.cond_nodes())
]])
    local status, out, err = S.gtlua(S.shq(script), { env = "GTLUA_NO_COND=1" })
    os.remove(script)
    assert.are.equal(0, status, err)
    assert.truthy(has(out, "2 0 3 2 0 3 1 2|2 0 3 2 0 3 1 2\tfalse"), out)
    local _, nwarn = err:gsub("branch on the host", "")
    assert.are.equal(1, nwarn, err)
  end)
end)

-- ---------------------------------------------------------------------------
describe("DESIGN 9: tree:stats() #design", function()
  it("9 stats: has every field DESIGN lists, with its type, for the tree, its pool and each node", function()
    local t = busy_tree()
    local s = t:stats()
    assert.are.equal("busy", s.name)
    for _, k in ipairs { "calls", "nodes", "recorded", "warmups", "replays", "eager", "updates" } do
      assert.is_number(s[k], k)
    end
    assert.is_table(s.skips)
    for reason, count in pairs(s.skips) do assert.is_string(reason); assert.is_number(count) end
    for _, k in ipairs { "reserved", "in_use", "high_water" } do assert.is_number(s.pool[k], "pool." .. k) end
    assert.is_table(s.node)
    local skipped = 0
    for id = 0, s.nodes - 1 do
      local n = s.node[id]
      assert.is_table(n, "node " .. id)
      assert.are.equal(id, n.id)
      assert.is_true(n.parent == nil or type(n.parent) == "number", "parent")
      for _, k in ipairs { "depth", "kernels", "visits", "warmups", "replays", "updates", "eager", "record_us",
                           "instantiate_us", "replay_cpu_us", "gpu_us", "planned_bytes", "checkpoint_bytes",
                           "reusable_bytes" } do
        assert.is_number(n[k], ("node %d: %s"):format(id, k))
        assert.is_true(n[k] >= 0, ("node %d: %s"):format(id, k))
      end
      assert.is_table(n.children)
      assert.is_string(n.label)
      assert.is_boolean(n.recorded)
      assert.is_true(n.skip == nil or type(n.skip) == "string")
      if n.skip then skipped = skipped + 1 end
      for _, k in ipairs { "shapes", "cut", "why" } do assert.is_string(n[k], ("node %d: %s"):format(id, k)) end
    end
    assert.is_true(skipped > 0)
    assert.is_nil(s.node[s.nodes])
  end)

  it("9 stats: the counters add up: every visit is one of warmup/record/replay/eager, totals are node sums, calls = root visits", function()
    local s = busy_tree():stats()
    local sum = { warmups = 0, replays = 0, eager = 0, updates = 0 }
    local recorded, roots = 0, 0
    for id = 0, s.nodes - 1 do
      local n = s.node[id]
      for k in pairs(sum) do sum[k] = sum[k] + n[k] end
      if n.recorded then recorded = recorded + 1 end
      if n.parent == nil then roots = roots + n.visits end
      if n.updates == 0 then    -- one record visit for a node holding a graph (none here was trimmed)
        assert.are.equal(n.visits, n.warmups + n.replays + n.eager + (n.recorded and 1 or 0), "node " .. id)
      end
    end
    assert.are.same({ sum.warmups, sum.replays, sum.eager, sum.updates },
                    { s.warmups, s.replays, s.eager, s.updates })
    assert.are.equal(recorded, s.recorded)
    assert.are.equal(4, s.recorded)                  -- max_recordings = 4
    assert.are.equal(s.calls, roots)
    assert.are.equal(23, s.calls)
    local skips = 0
    for _, c in pairs(s.skips) do skips = skips + c end
    assert.are.equal(s.eager, skips)                 -- every eager visit has its reason counted
  end)

  it("9 stats: parent, children and depth agree; parent is nil exactly for first segments (depth 0)", function()
    local s = busy_tree():stats()
    local firsts = 0
    for id = 0, s.nodes - 1 do
      local n = s.node[id]
      if n.parent == nil then
        firsts = firsts + 1
        assert.are.equal(0, n.depth, "node " .. id)
      else
        local p = s.node[n.parent]
        assert.are.equal(p.depth + 1, n.depth, "node " .. id)
        local found = false
        for _, c in ipairs(p.children) do found = found or c == id end
        assert.is_true(found, "node " .. id .. " among its parent's children")
      end
      for _, c in ipairs(n.children) do assert.are.equal(id, s.node[c].parent) end
    end
    assert.are.equal(2, firsts)                       -- two input shapes: two first segments
  end)

  it("9 stats: returns a plain table, a snapshot that later calls leave as it was", function()
    local t = gt.tree(function(x) return axpb(x, 1, 1) end)
    local x = gt.ones { 4 }
    for _ = 1, 3 do t(x) end
    local s = t:stats()
    assert.is_nil(getmetatable(s))
    assert.is_nil(getmetatable(s.node))
    assert.is_nil(getmetatable(s.node[0]))
    assert.is_nil(getmetatable(s.pool))
    for _ = 1, 4 do t(x) end
    assert.are.same({ 3, 1, 3, 1 }, { s.calls, s.replays, s.node[0].visits, s.node[0].replays })
    assert.are.same({ 7, 5 }, { t:stats().calls, t:stats().node[0].replays })
  end)

  it("9 stats: pool bytes: in_use <= high_water <= reserved, and a path holding three 4 KiB tensors plans and uses that much", function()
    local t = gt.tree(function(x)
      local a = axpb(x, 1, 1)
      local b = axpb(a, 2, 0)
      local c = axpb(b, 3, 0)
      return a, b, c
    end)
    local x = gt.ones { 1024 }
    for _ = 1, 4 do t(x) end
    local s = t:stats()
    local p = s.pool
    assert.is_true(p.in_use <= p.high_water and p.high_water <= p.reserved, json.encode(p))
    assert.is_true(p.high_water >= 3 * 4096, json.encode(p))
    assert.is_true(p.in_use >= 3 * 4096, "the call's three outputs live in the pool until the next call: " .. json.encode(p))
    assert.is_true(s.node[0].planned_bytes >= 3 * 4096, s.node[0].planned_bytes)
    assert.are.equal(3, s.node[0].kernels)
  end)

  it("9 stats: a tree not called yet has every tree field, zeroed, an empty node table and a pool of numbers", function()
    local s = gt.tree(function(x) return axpb(x, 1, 1) end, { name = "idle" }):stats()
    assert.are.same({ "idle", 0, 0, 0, 0, 0, 0, 0 },
                    { s.name, s.calls, s.nodes, s.recorded, s.warmups, s.replays, s.eager, s.updates })
    assert.are.same({}, s.skips)
    assert.are.same({}, s.node)
    for _, k in ipairs { "reserved", "in_use", "high_water" } do assert.is_number(s.pool[k], k) end
  end)

  it("9 shapes: names every input by its parameter, and the outputs the call returns", function()
    local t = gt.tree(function(a, b)
      local y = gt.ops.add(a, b)
      local total = gt.ops.sum(y)        -- a temporary made after y, not returned
      return y
    end)
    t(gt.ones { 2, 3 }, gt.ones { 2, 3 })
    local shapes = t:stats().node[0].shapes
    local ins, outs = shapes:match("^(.-)%s*%->%s*(.*)$")
    assert.truthy(ins, shapes)
    assert.truthy(has(ins, "a 2x3 f32") and has(ins, "b 2x3 f32"), shapes)
    assert.truthy(has(outs, "2x3 f32"), "the returned y is 2x3: " .. shapes)
    local two = gt.tree(function(a) return gt.ops.relu(a), gt.ops.sum(a) end)
    two(gt.ones { 2, 3 })
    shapes = two:stats().node[0].shapes
    outs = shapes:match("%->%s*(.*)$")
    assert.truthy(outs and has(outs, "2x3 f32") and has(outs, "2 f32"), "both outputs: " .. shapes)
  end)

  it("9 pictures: print(tree), DOT, JSON and the HTML report name every node's kernels and shapes, skipped ones too", function()
    local report = require "gt.report"
    local saved = report.color
    report.color = false
    local t = busy_tree()
    local text, dot, j, html = tostring(t), t:dot(), json.decode(t:json()), t:report()
    report.color = saved
    local s = t:stats()
    for id = 0, s.nodes - 1 do
      local n = s.node[id]
      assert.truthy(has(text, "[" .. id .. "] " .. n.label) and has(text, n.shapes), "print, node " .. id)
      assert.truthy(has(dot, "[" .. id .. "] " .. n.label .. "\\n" .. n.shapes), "dot, node " .. id)
      assert.are.same({ n.label, n.shapes, n.why, n.cut }, { j.node[id + 1].label, j.node[id + 1].shapes,
                                                           j.node[id + 1].why, j.node[id + 1].cut })
    end
    assert.truthy(has(html, "host_only") and has(html, "x 16 f32 -&gt; 16 f32"), "html")
    assert.are.equal(s.nodes, select(2, html:gsub('<g class="node"', "")))
  end)
end)

-- ---------------------------------------------------------------------------
describe("DESIGN 9 and 11: exports and the advisor refuse bad arguments with messages a user can act on #design", function()
  local function user_error(f)
    local err = err_of(f)
    assert.truthy(err:find("^spec/tools_design_spec%.lua:%d+: ") or err:find("tools_design_spec%.lua:%d+: "), "names the user's line: " .. err)
    assert.falsy(err:find("lua/gt/", 1, true), "points into gt's own files: " .. err)
    assert.falsy(err:find("attempt to ", 1, true), "a Lua internals error: " .. err)
    assert.falsy(err:find("bad argument #", 1, true), "a Lua internals error: " .. err)
    return err
  end

  it("11 every failure: tree:dot, tree:json and tree:report with a path that is not a string", function()
    local t = gt.tree(function(x) return axpb(x, 1, 1) end)
    t(gt.ones { 2 })
    user_error(function() return t:dot({}) end)
    user_error(function() return t:json(true) end)
    user_error(function() return t:report({}) end)
    assert.truthy(t:dot():find("^digraph"))
  end)

  it("11 every failure: tree:dot, tree:json and tree:report to a path that cannot be written name it and the user's line", function()
    local t = gt.tree(function(x) return axpb(x, 1, 1) end)
    t(gt.ones { 2 })
    for _, m in ipairs { "dot", "json", "report" } do
      local path = "/nonexistent_dir_design_b/x." .. m
      local err = user_error(function() return t[m](t, path) end)
      assert.truthy(has(err, path), err)
    end
  end)

  it("11 every failure: tree:advise with options that are not a table", function()
    local t = gt.tree(function(x) return axpb(x, 1, 1) end)
    for _ = 1, 3 do t(gt.ones { 2 }) end
    user_error(function() return t:advise(5) end)
    assert.is_table(t:advise().findings)
  end)

  it("11 every failure: gt.compile and gt.randn with options that are not a table", function()
    user_error(function() return gt.compile("__global__ void k(float *y) { y[0] = 1; }", 5) end)
    user_error(function() return gt.randn({ 2 }, 5) end)
  end)
end)

-- ---------------------------------------------------------------------------
describe("DESIGN 9a: the advisor #design", function()
  local function findings_text(a)
    local parts = {}
    for _, f in ipairs(a.findings) do parts[#parts + 1] = f.title .. "\n" .. f.text .. "\n" .. f.advice end
    return table.concat(parts, "\n")
  end

  it("9a advise: lists every cut site with its file:line, reason and count, also two sites after the same launches", function()
    local l1, l2
    local t = gt.tree(function(x, k)
      local h = axpb(x, 2, 0)
      if k == 1 then l1 = here(); h:item()
      else l2 = here(); h:tolist() end
      return axpb(h, 1, 1)
    end)
    local x = gt.ones { 1 }
    for i = 1, 9 do t(x, i % 3 == 0 and 2 or 1) end      -- 6 item, 3 tolist
    local all = findings_text(t:advise())
    local site1, site2 = "tools_design_spec.lua:" .. l1 .. " item", "tools_design_spec.lua:" .. l2 .. " tolist"
    assert.truthy(has(all, site1), all)
    assert.truthy(has(all, site2), "the tolist site is a cut site too:\n" .. all)
    assert.truthy(all:find(site1:gsub("%p", "%%%0") .. "[^\n]-6 visits"), "6 visits cut at the item:\n" .. all)
    assert.truthy(all:find(site2:gsub("%p", "%%%0") .. "[^\n]-3 visits"), "3 visits cut at the tolist:\n" .. all)
  end)

  it("9a advise: names a non-graphable kernel with the eager visits it cost, and recommends one thing", function()
    local t = busy_tree()
    local s = t:stats()
    local id
    for i = 0, s.nodes - 1 do if s.node[i].skip and s.node[i].skip:find("host_only", 1, true) then id = i end end
    assert.truthy(id)
    local a = t:advise()
    local f
    for _, g in ipairs(a.findings) do if (g.title .. g.text):find("host_only", 1, true) then f = g end end
    assert.truthy(f, findings_text(a))
    assert.are.equal(3, f.q)
    assert.truthy(f.text:find(s.node[id].eager .. " eager visits", 1, true), f.text)
    assert.truthy(has(f.text, "[" .. id .. "]"), f.text)
    assert.is_string(f.advice)
    assert.is_true(#f.advice > 0)
    -- max_recordings is what else ran eagerly here: it has its finding too
    assert.truthy(has(findings_text(a), "max_recordings"), findings_text(a))
  end)

  it("9a advise: chooses a bucket set (dim and sizes) that covers every observed size", function()
    local t = gt.tree(function(x) return axpb(x, 1, 0) end, { warn_shapes = false })
    local sizes = { 3, 5, 9, 12, 17, 30, 31, 3, 5, 9 }
    for _, n in ipairs(sizes) do t(gt.zeros { n, 2 }) end
    local f = t:advise().findings[2]
    assert.are.equal(2, f.q)
    local dim, list = f.advice:match("buckets = { dim = (%d+), sizes = { ([%d, ]+) } }")
    assert.truthy(dim, f.advice)
    assert.are.equal("1", dim)
    local b = {}
    for v in list:gmatch("%d+") do b[#b + 1] = tonumber(v) end
    assert.is_true(#b < 7, list)                         -- fewer recordings than the 7 distinct sizes
    for i = 2, #b do assert.is_true(b[i] > b[i - 1], list) end
    assert.is_true(b[#b] >= 31, "the largest size fits: " .. list)
  end)

  it("9a report: the HTML report carries the advisor's findings: each title and the recommendations of Q2 and Q3", function()
    local E = require "gt.report.el"
    local t = busy_tree()
    local a = t:advise()
    local html = t:report()
    for _, f in ipairs(a.findings) do
      assert.truthy(has(html, E.esc(f.title)), f.title)
      if f.q ~= 1 then assert.truthy(has(html, E.esc(f.advice)), f.advice) end   -- (Q1's numbers are measured again)
    end
  end)
end)

-- ---------------------------------------------------------------------------
describe("DESIGN 10: host, REPL and busted #design", function()
  it("10 cli: -e and -l run in the order given, before the script", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. S.shq(dir))
    S.spit(dir .. "/mod_b.lua", "return { v = (x or 0) + 1 }\n")
    S.spit(dir .. "/main.lua", "print(x, mod_b.v, ...)\n")
    local status, out, err = S.gtlua("-e 'x = 41' -l mod_b -e 'x = 7' main.lua a b", { cd = dir })
    os.execute("rm -rf " .. S.shq(dir))
    assert.are.equal(0, status, err)
    assert.are.equal("7\t42\ta\tb\n", out)
  end)

  it("10 REPL: an expression's tree is drawn and a tensor printed with its values and [gt.f32 2x2 <backend>]", function()
    local input = "t = gt.tree(function(x) return gt.ops.relu(x) end, {name = 'rr'})\n" ..
      "for i = 1, 3 do t(gt.ones{2, 2}) end\nt\ngt.from{{1, 2}, {3, 4}}\n"
    local status, out, err = S.gtlua("-i", { stdin = input })
    assert.are.equal(0, status, err)
    assert.truthy(has(out, "tree 'rr' (stdin:1): 3 calls, 1 node, 1 recorded"), out)
    assert.truthy(has(out, "└─ [0] relu"), out)
    assert.truthy(has(out, "[[1, 2],\n [3, 4]]\n[gt.f32 2x2 " .. gt.backend() .. "]"), out)
  end)

  it("10 busted: assert.recorded, replayed, nodes and stale fail when the tree or tensor says otherwise", function()
    local t = gt.tree(function(x) return axpb(x, 1, 1) end)
    local x = gt.ones { 4 }
    local y = t(x)
    for _ = 1, 3 do t(x) end                             -- warmup, record, 2 replays
    assert.recorded(t, 1); assert.replayed(t, 2); assert.nodes(t, 1); assert.stale(y)
    assert.has_error(function() assert.recorded(t, 2) end)
    assert.has_error(function() assert.replayed(t, 3) end)
    assert.has_error(function() assert.nodes(t, 2) end)
    local live = t(x)
    assert.has_error(function() assert.stale(live) end)
    assert.has_error(function() assert.stale(gt.ones { 2 }) end)
    local ok, err = pcall(function() assert.replayed(t, 99) end)
    assert.is_false(ok)
    assert.truthy(has(tostring(err), "99") and has(tostring(err), "3"), tostring(err))
  end)
end)

-- ---------------------------------------------------------------------------
describe("DESIGN 11: errors #design", function()
  it("11 compile: gt.load of a broken .cu names the file, the line and the compiler's message; later compiles work", function()
    local path = os.tmpname() .. "_design_b_broken.cu"
    S.spit(path, "__global__ void broken(float *y) {\n  y[0] = undefined_thing_77;\n}\n")
    local err = err_of(gt.load, path)
    os.remove(path)
    assert.truthy(has(err, "undefined_thing_77"), err)
    assert.truthy(err:find("_design_b_broken%.cu:2") or err:find("_design_b_broken%.cu%(2%)"), err)
    local ok = gt.compile("__global__ void fine(float *y) { y[0] = 5; }", { name = "fine.cu" })
    local y = gt.zeros { 1 }
    ok.fine(1, 1, y)
    assert.are.same({ 5 }, y:tolist())
  end)

  it("11 compile: a kernel that will not compile inside a tree call raises with the log; the tree goes on", function()
    local bad = false
    local step = gt.tree(function(x)
      local h = axpb(x, 2, 0)
      if bad then gt.compile("__global__ void k(float *y) { y[0] = not_declared_88; }", { name = "in_tree.cu" }) end
      return neg(h)
    end)
    local x = gt.from { 1, 2 }
    for _ = 1, 3 do assert.tensor_near({ -2, -4 }, step(x)) end
    local before = step:stats()
    bad = true
    local err = err_of(step, x)
    assert.truthy(has(err, "not_declared_88") and has(err, "in_tree.cu"), err)
    bad = false
    for _ = 1, 3 do assert.tensor_near({ -2, -4 }, step(x)) end
    local after = step:stats()
    assert.are.equal(before.nodes, after.nodes)
    assert.are.equal(before.replays + 3, after.replays)
  end)

  it("11 arguments: a bad launch mid tree call names kernel, parameter and the user's line; no node is half made", function()
    local bad = false
    local line
    local step = gt.tree(function(x)
      local h = axpb(x, 2, 0)
      gt.cut()
      local y = gt.tensor(x.shape)
      if bad then line = here(); K.axpb(2, 32, y, h, "n", 1, 0) end
      K.neg(2, 32, y, h, h.numel)
      return y
    end)
    local x = gt.from { 1, 2, 3 }
    for _ = 1, 3 do assert.tensor_near({ -2, -4, -6 }, step(x)) end
    local before = step:stats()
    bad = true
    local err = err_of(step, x)
    assert.truthy(err:find("tools_design_spec.lua:" .. line .. ":", 1, true), err)
    assert.truthy(has(err, "kernel 'axpb'") and has(err, "'n'"), err)
    bad = false
    for _ = 1, 3 do assert.tensor_near({ -2, -4, -6 }, step(x)) end
    local after = step:stats()
    assert.are.equal(before.nodes, after.nodes)
    for id = 0, after.nodes - 1 do assert.is_true(after.node[id].visits > 0, "node " .. id) end
    assert.are.equal(before.replays + 1 + 6, after.replays)   -- the failed call's first segment replayed
  end)

  it("11 stale: a tree's old output used inside its next call raises at the user's line; the tree goes on", function()
    local keep
    local line
    local step = gt.tree(function(x, use_old)
      local y = axpb(x, 1, 1)
      if use_old then line = here(); K.axpb(2, 32, y, keep, keep.numel, 1, 1) end
      return y
    end, { name = "stale_in_call" })
    local x = gt.from { 1, 2 }
    keep = step(x, false)
    local err = err_of(step, x, true)
    assert.truthy(err:find("tools_design_spec.lua:" .. line .. ":", 1, true), err)
    assert.truthy(has(err, "returned by tree 'stale_in_call'") and has(err, "was overwritten by a later call"), err)
    for _ = 1, 4 do assert.tensor_near({ 2, 3 }, step(x, false)) end
    assert.recorded(step, 1)
    assert.is_true(step:stats().replays >= 2)
  end)

  it("11 out of memory in a tree call names the request, the pool and its largest free block; the tree then records and replays", function()
    local huge = 2 ^ 40                                    -- 4 TiB of f32
    local at
    local step = gt.tree(function(x, big)
      local h = gt.ops.relu(x)
      if big then at = here(); local t = gt.tensor({ huge }); t:fill(1) end
      return h
    end)
    local x = gt.from { -1, 2 }
    for _ = 1, 2 do
      local line, err = here(), err_of(function() return (step(x, true)) end)
      assert.truthy(err:find("tools_design_spec.lua:" .. line .. ":", 1, true) or
                    err:find("tools_design_spec.lua:" .. at .. ":", 1, true), "the call's or the allocation's line: " .. err)
      assert.truthy(has(err, "out of memory"), err)
      assert.truthy(has(err, "request of 4.0 TiB"), "the request, in units: " .. err)
      assert.truthy(has(err, "pool"), err)
      assert.truthy(err:find("largest free block [%d.]+ [KMGT]?i?B"), err)
    end
    for _ = 1, 4 do assert.are.same({ 0, 2 }, step(x, false):tolist()) end
    local s = step:stats()
    assert.are.same({ 1, 1 }, { s.nodes, s.recorded })
    assert.is_true(s.replays >= 2)
  end)

  it("11 a Lua error in the warmup call's and in the record call's second segment leaves no half node; later calls record and replay", function()
    local fail = false
    local step = gt.tree(function(x)
      local h = axpb(x, 2, 0)
      gt.cut()
      local y = neg(h)
      if fail then error("model failed") end
      return y
    end)
    local x = gt.from { 1, 2 }
    fail = true
    assert.has_error(function() step(x) end)          -- first call: node 0 warms up, node 1's queue is dropped
    fail = false
    assert.tensor_near({ -2, -4 }, step(x))
    fail = true
    assert.has_error(function() step(x) end)          -- would record node 1
    fail = false
    for _ = 1, 4 do assert.tensor_near({ -2, -4 }, step(x)) end
    local s = step:stats()
    assert.are.equal(2, s.nodes)
    assert.are.equal(2, s.recorded)
    for id = 0, 1 do
      local n = s.node[id]
      assert.is_true(n.visits > 0)
      assert.is_true(n.replays >= 2, "node " .. id .. " replays " .. n.replays)
    end
  end)
end)

-- ---------------------------------------------------------------------------
describe("DESIGN 12: pitfalls kept out #design", function()
  it("12 key: one buffer seen with other shapes under the same pointer never replays the old graph", function()
    local function body(x)
      local y = gt.tensor({ x.shape[1] })
      K.rowsum(x.shape[1], 1, y, x, x.shape[2])
      return y
    end
    local step = gt.tree(body)
    local buf = gt.from(seq(16, function(i) return i end))
    local shapes = { { 2, 8 }, { 4, 4 }, { 8, 2 }, { 2, 8 }, { 4, 4 }, { 8, 2 }, { 4, 4 }, { 2, 8 }, { 2, 8 }, { 8, 2 } }
    for i, sh in ipairs(shapes) do
      local v = buf:view(sh)
      local want = body(v):tolist()
      local got = step(v)
      assert.are.same({ sh[1] }, got.shape, "call " .. i)
      assert.are.same(want, got:tolist(), "call " .. i)
    end
  end)

  it("12 key: non-contiguous views (other offsets of one shape, other widths at one pointer) replay as eager code computes", function()
    local function body(a) local c = a:clone(); return gt.ops.mul(c, 2) end
    local step = gt.tree(body)
    local buf = gt.from { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } }
    local cols = { { 1, 2 }, { 3, 2 }, { 2, 2 }, { 1, 2 }, { 1, 3 }, { 1, 2 }, { 1, 3 }, { 3, 2 }, { 2, 3 }, { 1, 2 } }
    for i, c in ipairs(cols) do
      local v = buf:narrow(2, c[1], c[2])
      local want = body(v):tolist()
      local got = step(v)
      assert.are.same({ 3, c[2] }, got.shape, "call " .. i)
      assert.are.same(want, got:tolist(), "call " .. i)
    end
  end)

  it("12 dynamic shared memory: a tree alternating two shared sizes replays each as eager code computes it", function()
    local function body(x, n)
      local y = gt.zeros(x.shape)
      K.reverse:config(1, 128, n * 4)(y, x, n)
      return y
    end
    local step = gt.tree(body)
    local x = gt.from(seq(128, function(i) return i end))
    for i = 1, 10 do
      local n = i % 2 == 0 and 128 or 32
      local want = body(x, n):tolist()
      assert.are.same(want, step(x, n):tolist(), "call " .. i .. ", n = " .. n)
    end
    assert.is_true(step:stats().replays >= 4)
  end)

  it("12 working set: replays and repeated paths do not grow the pool or ordinary memory", function()
    local step = gt.tree(function(x, r)
      local h = axpb(x, 2, 0)
      gt.cut()
      if r then return neg(h) end
      return axpb(h, 1, 1)
    end)
    local x = gt.ones { 256 }
    for i = 1, 6 do step(x, i % 2 == 0) end
    collectgarbage(); collectgarbage()   -- (handles of earlier eager calls' tensors, unreachable, hold ordinary memory until collected)
    local s0, m0 = step:stats().pool, select(2, gt.memory()).ordinary   -- (graph memory: a path fuses into one graph on repeats)
    for i = 1, 200 do step(x, i % 2 == 0) end
    collectgarbage(); collectgarbage()
    local s1, m1 = step:stats().pool, select(2, gt.memory()).ordinary
    assert.are.same(s0, s1)
    assert.are.equal(m0, m1)
    assert.are.equal(3, step:stats().nodes)
  end)

  it("12 same answer in every mode: a stale output raises on call 2 as on call 20, in a branchy tree with a cond", function()
    local step = gt.tree(function(x, v)
      local p = gt.tensor({ 1 }, "i32")
      K.seti(1, 1, p, v)
      local y = gt.zeros(x.shape)
      gt.cond(p, function() y:copy(gt.ops.mul(x, 2)) end)
      gt.cut()
      if v == 1 then return neg(y) end
      return axpb(y, 1, 1)
    end, { name = "modes" })
    local x = gt.from { 1, 2 }
    local prev
    for i = 1, 20 do
      local v = i % 3 == 0 and 0 or 1
      local y = step(x, v)
      assert.tensor_near(v == 1 and { -2, -4 } or { 1, 1 }, y, 0, "call " .. i)
      if prev then
        local err = err_of(prev.tolist, prev)
        assert.truthy(has(err, "returned by tree 'modes'") and has(err, "was overwritten by a later call"), "call " .. i)
      end
      prev = y
    end
  end)
end)
