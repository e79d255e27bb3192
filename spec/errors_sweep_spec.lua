-- errors_sweep_spec.lua - a systematic sweep of the public API with bad arguments (DESIGN 11).
--
-- Every public function (gt.*, gt.ops.*, gt.buckets.*, gt.report.*), every tensor
-- method, every tree method and a kernel's launch and config is called with each
-- of a set of bad values in each argument position (the receiver included: `t.view(s)`
-- for `t:view(s)`), outside a tree call and, for what runs in one, inside a tree call.
-- A call that raises must raise a message at this file's line, not gt's own
-- (no "lua/gt/", "attempt to", "bad argument #"); a call that succeeds must be
-- listed in the entry's `ok` (the odd inputs it takes legitimately).  After each
-- bad call the entry's correct call must still work.
--
-- Run under plain gtlua (`build/gtlua spec/errors_sweep_spec.lua`) it prints every
-- finding instead of asserting: how the holes were found.
local gt = require "gt"

local FILE = "errors_sweep_spec.lua"
local HERE = debug.getinfo(1, "S").short_src
local busted = type(describe) == "function"   -- luacheck: ignore 113
local TRACE = false

-- -- Fixtures --------------------------------------------------------------------

local function t22() return gt.from({ { 1, 2 }, { 3, 4 } }) end
local function i22() return gt.from({ { 1, 2 }, { 3, 4 } }, "i32") end
local function one() return gt.from({ 1 }) end

-- A tensor overwritten by a later call of the tree that returned it.
local stale_tree = gt.tree(function(x) return gt.ops.add(x, 1) end, { name = "sweep_stale" })
local stale = stale_tree(t22())
stale_tree(t22())
assert(stale:is_stale())

local K = gt.compile([[
  __global__ void put(float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 7.0f; }
]], { name = "sweep_put.cu" })

local tree = gt.tree(function(x) return gt.ops.relu(x) end, { name = "sweep_tree" })
tree(t22())
tree(t22())

-- The bad values: a name and a maker (a fresh value each use).
local BAD = {
  { "nil", function() return nil end },
  { "0", function() return 0 end },
  { "-1", function() return -1 end },
  { "1.5", function() return 1.5 end },
  { "2^40", function() return 2 ^ 40 end },
  { "nan", function() return 0 / 0 end },
  { "inf", function() return math.huge end },
  { "string", function() return "/nonexistent-sweep/x" end },
  { "{}", function() return {} end },
  { "{1,2}", function() return { 1, 2 } end },
  { "{'a'}", function() return { "a" } end },
  { "true", function() return true end },
  { "function", function() return function() end end },
  { "stale", function() return stale end },
  { "freed", function() local t = gt.zeros({ 2, 2 }); t:free(); return t end },
  { "i32", i22 },
  { "3-d", function() return gt.zeros({ 2, 3, 4 }) end },
  { "strided", function() return gt.zeros({ 4, 4 }):narrow(2, 1, 2) end },
  { "tree", function() return tree end },
}

-- -- The API -----------------------------------------------------------------------
-- name; f; args() -> the correct call's arguments (n of them); ok: [position] = {bad
-- value names it takes} or "any" (every value); tree: whether to sweep it in a tree
-- call too; self: position 1 is the receiver.

local ALL = "any"
local function set(...) local s = {} for _, v in ipairs { ... } do s[v] = true end return s end
local NUMS = { "0", "-1", "1.5", "2^40", "nan", "inf" }
local function nums(...) return set("0", "-1", "1.5", "2^40", "nan", "inf", ...) end
local TENSORS = { "stale", "freed", "i32", "3-d", "strided" }

local API = {}
local function api(e) API[#API + 1] = e; return e end

-- gt.*: creation
local shape_ok = set("0", "{}", "{1,2}")   -- a size, a scalar shape, a shape
api { name = "gt.tensor", f = gt.tensor, n = 2, args = function() return { { 2, 2 }, "f32" } end, tree = true,
      ok = { shape_ok, set("nil") } }
api { name = "gt.zeros", f = gt.zeros, n = 2, args = function() return { { 2, 2 } } end, tree = true,
      ok = { shape_ok, set("nil") } }
api { name = "gt.ones", f = gt.ones, n = 2, args = function() return { { 2, 2 } } end, tree = true,
      ok = { shape_ok, set("nil") } }
api { name = "gt.full", f = gt.full, n = 3, args = function() return { { 2 }, 3 } end, tree = true,
      ok = { shape_ok, nums(), set("nil") } }
api { name = "gt.shape", f = gt.shape, n = 1, args = function() return { { 2, 3 } } end, ok = { set("0", "{}", "{1,2}", "2^40") } }  -- a shape only: no memory
api { name = "gt.from", f = gt.from, n = 2, args = function() return { { 1, 2 } } end, tree = true,
      ok = { set("0", "-1", "1.5", "2^40", "nan", "inf", "{}", "{1,2}"), set("nil") } }
api { name = "gt.randn", f = gt.randn, n = 2, args = function() return { { 4 }, { seed = 1 } } end, tree = true,
      ok = { shape_ok, set("nil", "{}", "{1,2}", "{'a'}") } }
api { name = "gt.scope", f = gt.scope, n = 2, args = function() return { function(x) return x end, 1 } end,
      tree = true, ok = { set("function"), ALL } }
api { name = "gt.is_tensor", f = gt.is_tensor, n = 1, args = function() return { t22() } end, ok = { ALL } }

-- gt.*: kernels, trees, control
api { name = "gt.compile", f = gt.compile, n = 2,
      args = function() return { "__global__ void k(float *y) { y[0] = 1.0f; }", { name = "sweep_k.cu" } } end,
      ok = { set("string"), set("nil", "{}", "{1,2}", "{'a'}") } }
api { name = "gt.load", f = gt.load, n = 2, args = function() return { "kernels/elementwise.cu" } end,
      ok = { {}, set("nil", "{}", "{1,2}", "{'a'}") } }
api { name = "gt.tree", f = gt.tree, n = 2, args = function() return { function() end } end,
      ok = { set("function"), set("nil", "{}") } }
api { name = "gt.cond", f = gt.cond, n = 3, args = function() return { one(), function() end } end, tree = true,
      ok = { {}, set("function"), set("nil", "function") } }
api { name = "gt.loop", f = gt.loop, n = 3, args = function() return { gt.zeros({ 1 }), function() end, { max = 1 } } end,
      tree = true, ok = { {}, set("function"), set("nil", "{}", "{1,2}", "{'a'}", "tree") } }  -- opts: a table, max unset
api { name = "gt.sync", f = gt.sync, n = 1, args = function() return {} end, tree = true, ok = { ALL } }
api { name = "gt.cut", f = gt.cut, n = 1, args = function() return {} end, tree = true, ok = { ALL } }
api { name = "gt.bucket", f = gt.bucket, n = 1, args = function() return { 1 } end, tree = true,
      ok = { set("nil", "string") } }   -- (a string is a spec's name: nil outside a bucketed call)
api { name = "gt.profile", f = gt.profile, n = 1, args = function() return { false } end, ok = { ALL } }
-- (gt.help writes its text to io.stdout: the sweep's calls write into a sink)
local SINK = { write = function(self) return self end, flush = function() end }
api { name = "gt.help", f = function(x) local out = io.stdout; io.stdout = SINK
        local ok, e = pcall(gt.help, x); io.stdout = out; if not ok then error(e, 0) end end, n = 1,
      args = function() return { gt.zeros } end, ok = { ALL } }
for _, name in ipairs { "backend", "clock", "compile_counts", "cond_nodes", "device", "home", "memory", "transfers" } do
  api { name = "gt." .. name, f = gt[name], n = 1, args = function() return {} end, ok = { ALL } }
end

-- gt.ops.*
local ops = gt.ops
local function unary(name) return { name = "gt.ops." .. name, f = ops[name], n = 1, args = function() return { t22() } end,
                                    tree = true, ok = { set("3-d") } } end
for _, name in ipairs { "relu", "gelu", "tanh", "sigmoid", "softmax", "sum", "max", "argmax" } do api(unary(name)) end
api { name = "gt.ops.add", f = ops.add, n = 2, args = function() return { t22(), t22() } end, tree = true,
      ok = { set("3-d", unpack(NUMS)), nums() } }   -- a number on either side
api { name = "gt.ops.mul", f = ops.mul, n = 2, args = function() return { t22(), t22() } end, tree = true,
      ok = { set("3-d", unpack(NUMS)), nums() } }
api { name = "gt.ops.axpby", f = ops.axpby, n = 4, args = function() return { 1, t22(), 2, t22() } end, tree = true,
      ok = { nums(), {}, nums(), {} } }
api { name = "gt.ops.copy", f = ops.copy, n = 2, args = function() return { t22(), t22() } end, tree = true, ok = {} }
api { name = "gt.ops.matmul", f = ops.matmul, n = 2, args = function() return { t22(), t22() } end, tree = true, ok = {} }
api { name = "gt.ops.transpose", f = ops.transpose, n = 1, args = function() return { t22() } end, tree = true, ok = {} }
api { name = "gt.ops.linear", f = ops.linear, n = 4, args = function() return { t22(), t22(), gt.zeros({ 2 }) } end,
      tree = true, ok = { set("3-d"), {}, set("nil"), set("nil") } }
api { name = "gt.ops.layernorm", f = ops.layernorm, n = 4,
      args = function() return { t22(), gt.ones({ 2 }), gt.zeros({ 2 }) } end, tree = true,
      ok = { {}, {}, {}, nums("nil") } }
api { name = "gt.ops.rmsnorm", f = ops.rmsnorm, n = 3, args = function() return { t22(), gt.ones({ 2 }) } end,
      tree = true, ok = { {}, {}, nums("nil") } }
api { name = "gt.ops.embedding", f = ops.embedding, n = 2, args = function() return { gt.from({ 0, 1 }, "i32"), t22() } end,
      tree = true, ok = { set("i32"), {} } }   -- ids of any shape

-- gt.buckets.*
api { name = "gt.buckets.pow2", f = gt.buckets.pow2, n = 1, args = function() return { 64 } end,
      ok = { set("1.5", "2^40") } }   -- sizes up to the next power of two
api { name = "gt.buckets.linear", f = gt.buckets.linear, n = 2, args = function() return { 8, 32 } end, ok = { set("1.5") } }
api { name = "gt.buckets.fit", f = gt.buckets.fit, n = 2, args = function() return { { 1, 2, 4 }, 3 } end,
      ok = { set("{}", "{1,2}"), set("0", "-1", "1.5", "2^40", "inf") } }   -- (any number: its bucket, or nil)

-- gt.report.*
local report = gt.report
api { name = "gt.report.draw", f = report.draw, n = 2, args = function() return { tree } end,
      ok = { set("tree"), set("nil", "{}", "{1,2}", "{'a'}", "tree") } }
api { name = "gt.report.dot", f = report.dot, n = 2, args = function() return { tree } end, ok = { set("tree"), set("nil") } }
api { name = "gt.report.json", f = report.json, n = 2, args = function() return { tree } end, ok = { set("tree"), set("nil") } }
api { name = "gt.report.html", f = report.html, n = 2, args = function() return { tree } end,
      ok = { set("{}", "tree"), set("nil") } }
api { name = "gt.report.trees", f = report.trees, n = 1, args = function() return {} end, ok = { ALL } }
api { name = "gt.report.raised", f = report.raised, n = 1, args = function() return { tree } end, ok = { set("tree") } }

-- tensor methods (position 1: the receiver)
local T = gt.Tensor
local function method(name, n, args, ok, in_tree)
  return api { name = "t:" .. name, f = T[name], n = n, args = args, ok = ok, self = true, tree = in_tree ~= false }
end
local recv_any = set("3-d", "i32", "strided")   -- any live tensor is a receiver
-- what a tensor knows without its memory: a freed or stale one answers too
local meta = set("3-d", "i32", "strided", "stale", "freed")
method("clone", 1, function() return { t22() } end, { recv_any })
method("t", 1, function() return { t22() } end, { {} })
method("contiguous", 1, function() return { t22() } end, { meta })   -- (itself, or a copy of a strided one)
method("is_contiguous", 1, function() return { t22() } end, { meta })
method("is_stale", 1, function() return { t22() } end, { meta })
method("dim", 1, function() return { t22() } end, { meta })
method("size", 2, function() return { t22(), 1 } end, { meta, set("nil") })
method("item", 1, function() return { one() } end, { {} })
method("tolist", 1, function() return { t22() } end, { recv_any })
method("static", 1, function() return { t22() } end, { recv_any })
method("to", 2, function() return { t22(), "bf16" } end, { set("3-d"), {} })   -- (casts between f32, f16, bf16)
method("free", 1, function() return { t22() } end, { recv_any })
method("copy", 2, function() return { t22(), { { 5, 6 }, { 7, 8 } } } end, { set("3-d", "i32"), set("strided") })
method("fill", 2, function() return { t22(), 2 } end, { set("3-d", "i32"), nums() })
method("view", 2, function() return { t22(), { 4 } } end, { set("i32"), {} })
method("narrow", 4, function() return { t22(), 1, 1, 1 } end, { set("3-d", "i32", "strided"), {}, {}, set("0") })
method("__tostring", 1, function() return { t22() } end, { meta }, false)

-- tree methods (position 1: the receiver) and the tree's call
local Tree = getmetatable(tree)
local function tmethod(name, n, args, ok) ok[1] = set("tree"); return api { name = "tree:" .. name, f = Tree[name], n = n, args = args, ok = ok, self = true } end
tmethod("stats", 1, function() return { tree } end, { {} })
tmethod("history", 1, function() return { tree } end, { {} })
tmethod("trim", 2, function() return { tree, 8 } end, { {}, set("nil", "0", "2^40") })
tmethod("floor", 5, function()   -- (a tree of its own: the sweep of trim drops the shared tree's graphs)
  local tr = gt.tree(function(x) return gt.ops.relu(x) end, { name = "sweep_floor" }); tr(t22()); tr(t22())
  return { tr, 2 }
end, { {}, set("nil"), set("nil", "true"), set("nil", "true"), set("nil") })
tmethod("counts", 1, function() return { tree } end, { {} })
tmethod("warm", 2, function() return { tree, { { t22() } } } end, { {}, {} })
tmethod("dot", 2, function() return { tree } end, { {}, set("nil") })
tmethod("json", 2, function() return { tree } end, { {}, set("nil") })
tmethod("report", 2, function() return { tree } end, { {}, set("nil") })
tmethod("advise", 2, function() return { tree } end, { {}, set("nil", "{}") })
tmethod("__tostring", 1, function() return { tree } end, { {} })
api { name = "tree(...)", f = function(x) return tree(x) end, n = 1, args = function() return { t22() } end,
      ok = { set("3-d") } }

-- a kernel's launch and bound launcher
local put = K.put
api { name = "K.put(grid, block, y, n)", f = function(...) return put(...) end, n = 4,
      args = function() return { 1, 4, gt.zeros({ 4 }), 4 } end, tree = true,
      ok = { set("{}", "{1,2}", "tree"), set("{}", "{1,2}", "tree"), set("3-d", "i32"), set("0", "-1") } }
api { name = "K.put:config", f = put.config, n = 4, self = true, args = function() return { put, 1, 4 } end,
      ok = { {}, set("{}", "{1,2}", "tree"), set("{}", "{1,2}", "tree"), set("nil", "0") } }
local launch = put:config(1, 4)
api { name = "K.put:config(...)(y, n)", f = function(...) return launch(...) end, n = 2,
      args = function() return { gt.zeros({ 4 }), 4 } end, tree = true, ok = { set("3-d", "i32"), set("0", "-1") } }

-- -- The sweep -------------------------------------------------------------------------

-- The body of the tree the in-tree cases run in: calls CUR.
local CUR
local inside = gt.tree(function() CUR() end, { name = "sweep_inside", max_recordings = math.huge })

local function bad_message(err)
  local s = tostring(err)
  if type(err) ~= "string" then return "a non-string error: " .. s end
  if s:find("lua/gt/", 1, true) then return "names gt's own file" end
  if s:find("attempt to", 1, true) then return "an internal error (attempt to ...)" end
  if s:find("bad argument #", 1, true) then return "an internal error (bad argument #)" end
  if s:find("table: 0x", 1, true) or s:find("function: 0x", 1, true) then return "an address in the message" end
  if not s:find(FILE .. ":", 1, true) then return "does not name the caller's line (" .. FILE .. ")" end
  return nil
end

-- Calls f with a, n positions; in a tree call when in_tree.
local function call(e, a, in_tree)
  if in_tree then
    CUR = function() e.f(unpack(a, 1, e.n)) end
    return pcall(inside)
  end
  return pcall(function() e.f(unpack(a, 1, e.n)) end)
end

local function accepts(e, pos, vname)
  local ok = e.ok and e.ok[pos]
  return ok == ALL or (type(ok) == "table" and ok[vname] == true)
end

-- Sweeps entry e: a list of findings (strings), empty when all is well.
local function sweep(e, in_tree)
  local found = {}
  local function note(fmt, ...) found[#found + 1] = e.name .. (in_tree and " [in a tree]" or "") .. ": " .. fmt:format(...) end
  local ok0, err0 = call(e, e.args(), in_tree)
  if not ok0 then note("the correct call fails: %s", tostring(err0)); return found end
  for pos = 1, e.n do
    for _, b in ipairs(BAD) do
      local a = e.args()
      a[pos] = b[2]()
      if TRACE then io.stderr:write(e.name, " ", pos, " ", b[1], in_tree and " tree" or "", "\n") end
      local ok, err = call(e, a, in_tree)
      if ok then
        if not accepts(e, pos, b[1]) then note("argument %d = %s is accepted", pos, b[1]) end
      else
        local why = bad_message(err)
        if why then note("argument %d = %s: %s: %s", pos, b[1], why, tostring(err)) end
      end
      local ok2, err2 = call(e, e.args(), in_tree)
      if not ok2 then note("after argument %d = %s the correct call fails: %s", pos, b[1], tostring(err2)) end
    end
  end
  return found
end

if not busted then
  local n = 0
  local only = os.getenv("SWEEP_ONLY")
  TRACE = os.getenv("SWEEP_TRACE") == "1"
  for _, e in ipairs(API) do if not only or e.name:find(only, 1, true) then
    for _, in_tree in ipairs { false, true } do
      if not in_tree or e.tree then
        for _, line in ipairs(sweep(e, in_tree)) do print(line); n = n + 1 end
      end
    end
  end end
  print(("%d findings (%s)"):format(n, HERE))
  return
end

describe("sweep of the public API with bad arguments #sweep", function()
  it("covers every public function and method", function()
    local named = {}
    for _, e in ipairs(API) do named[e.name] = true end
    local missing = {}
    local function need(tbl, prefix, sep)
      for k, v in pairs(tbl) do
        if type(v) == "function" and type(k) == "string" and k:sub(1, 1) ~= "_" and not named[prefix .. sep .. k] then
          missing[#missing + 1] = prefix .. sep .. k
        end
      end
    end
    need(gt, "gt", ".")
    need(gt.ops, "gt.ops", ".")
    need(gt.buckets, "gt.buckets", ".")
    need(report, "gt.report", ".")
    need(T, "t", ":")
    need(Tree, "tree", ":")
    table.sort(missing)
    -- not swept: gt.on_warning (any message is a warning; a function becomes the handler),
    -- gt.report.at_exit (the host's)
    assert.same({ "gt.on_warning", "gt.report.at_exit" }, missing)
  end)

  for _, e in ipairs(API) do
    it(e.name .. ": bad arguments raise at the caller's line and leave the runtime usable", function()
      local found = sweep(e, false)
      assert.same({}, found)
    end)
    if e.tree then
      it(e.name .. ": the same in a tree call", function()
        local found = sweep(e, true)
        assert.same({}, found)
      end)
    end
  end

  it("a message names this file, not gt's (a check of the check)", function()
    local ok, err = pcall(function() gt.zeros("x") end)
    assert.is_false(ok)
    assert.is_nil(bad_message(err), err)
    assert.truthy(tostring(err):find(FILE .. ":%d+: "), err)
    assert.truthy(bad_message("lua/gt/tensor.lua:3: attempt to index a nil value"))
  end)
end)
