-- gt.tree: graph trees from Lua functions; calls, staging, statistics and the terminal drawing.
local ffi = require "ffi"
local bit = require "bit"

local gt = require "gt"
local I = require "gt.internal"
local C, rt, is_tensor = I.C, I.rt, gt.is_tensor
local DISCARDED = require("gt.trace").DISCARDED
local policy = require "gt.host_policy"
local tonumber = policy.original.tonumber
local STAGING, RELEASED = C.GT_BUF_STAGING, C.GT_BUF_RELEASED
local select, getmetatable, type, pairs = select, getmetatable, type, pairs
local huge = math.huge

local Tree = {}
Tree.__index = Tree
gt.Tree = Tree

local function abort()
  C.gt_tree_abort(rt)
  I.active = nil
end

-- Ends the segment: its node warms up, records, replays or runs eagerly.
-- Which memory a graph may reuse comes from explicit releases alone
-- (gt.scope, t:free()), never from what Lua's collector has seen.
-- reason: "return" at the end of a call; nil at a sync point (gt.explain reads the stack).
-- cut: what ended the segment (gt.h's GT_CUT_*; nil: another sync point): a
-- node counts its visits per cut site, and a replay knows its site by it.
local function flush(level, reason, cut)
  local r = C.gt_tree_flush(rt, cut or 0)
  if r ~= 0 then
    local msg = I.errmsg()
    abort()
    I.error(msg)                  -- (the user's line, past gt's frames: a cut, a host read, a tail call)
  end
  local want = C.gt_tree_explain_wanted(rt)       -- a node's first visit: its cut and shapes
  if want ~= 0 then I.explain(want, level + 1, reason) end
  local a = I.active
  if a then a._seg0 = C.gt_tree_nbufs(a._t) end   -- the next segment's tensors come after these
end
I.flush = flush

require("gt.explain")

-- gt.on_warning(msg): gtlua's warnings (assign your own: gt.on_warning =
-- function(msg) ... end).  Called with a function, the default handler
-- takes it as the new one (gt.on_warning(fn) sets it, as a setter would).
local function default_warning(msg)
  if type(msg) == "function" then gt.on_warning = msg; return end
  io.stderr:write("gtlua: warning: ", tostring(msg), "\n")
end
gt.on_warning = default_warning

-- A host read or write in a keyed tree's call: its path cannot be keyed.
-- The first one of the call is kept as "what at file:line" (the user's line).
function I.note_sync(what, level)
  local tree = I.active
  if not tree or not tree._keyed or tree._sync then return end
  local lv, info = level + 1
  repeat
    info = debug.getinfo(lv, "Sl")
    lv = lv + 1
  until not info or (info.what ~= "C" and not info.short_src:match("gt[/\\][%w_]+%.lua$"))
  tree._sync = what .. (info and (" at " .. info.short_src:match("[^/\\]*$") .. ":" .. (info.currentline or 0)) or "")   -- (the file's name, as node.cut: "item at model.lua:18")
end

-- The variable a tree is assigned to, read from its source line.
local function guess_name(info)
  local f = info.source:sub(1, 1) == "@" and io.open(info.source:sub(2))
  if not f then return nil end
  local line
  for _ = 1, info.currentline do line = f:read("*l") end
  f:close()
  return line and (line:match("([%w_]+)%s*=%s*gt%.tree") or line:match("function%s+([%w_.:]+)"))
end

local check_opts = require "gt.treeopts"
local ntrees = 0
-- A tensor a call returns keeps its tree's memory valid for as long as the
-- tensor lives, whether the tree is dropped or not.  Only the latest call's
-- outputs need it: at a tree's next call every tensor of its pool from
-- before goes stale (a stale tensor needs no memory).  While the tree lives
-- there is nothing to hold: a call only notes its outputs in the tree's
-- weak-valued list `held` (array stores; an entry per output in a weak-keyed
-- table cost a hash insert per call, and a rehash every few).  When the
-- tree's C handle is collected, its finalizer anchors the noted outputs
-- still alive (output -> handle, weak-keyed: the handle, not the Lua tree,
-- as LuaJIT's weak keys are not ephemerons) and waits: it runs again once
-- they are gone, and frees the tree then.
local WEAK_VALUES = { __mode = "v" }
local anchors = setmetatable({}, { __mode = "k" })
local function finalizer(held)
  local fin
  fin = function(tc)
    local live = false
    if not gt._closing then                      -- (at exit everything goes)
      for i = 1, held.n do
        local y = held[i]
        if y ~= nil then anchors[y] = tc; live = true end
        held[i] = nil
      end
      held.n = 0
    end
    held.tc = live and tc or nil                 -- (a view made of an anchored output from now on: _anchor_view)
    if live then ffi.gc(tc, fin) else C.gt_tree_free(tc) end
  end
  return fin
end
local plain_note = I.plain_note
local function anchor_one(self, x, gen)
  plain_note(x)                                          -- (a scope around the call releases it: tensor.lua)
  local held = self._held
  local n = held.n + 1
  if gen ~= self._ang then self._ang = gen; n = 1 end   -- a newer call's first output
  held[n], held.n = x, n
end

-- Each tree's held list by its C handle's address: a view made outside the
-- tree's calls of one of its latest outputs is noted there too (tensor.lua's
-- user_view), so that it keeps the memory valid as the output does, however
-- the collector runs (out:narrow(...) kept, out dropped).
local held_of = setmetatable({}, WEAK_VALUES)
local function held_key(t) return tonumber(ffi.cast("intptr_t", t)) end
function I.anchor_view(y, b)
  local held = held_of[held_key(b.tree)]
  if not held or y._gen ~= b.gen_now[0] then return end   -- (a live tensor: of the tree's latest call)
  if held.tc then anchors[y] = held.tc                   -- the tree was collected: its outputs are anchored
  elseif held.n > 0 then
    local n = held.n + 1
    held[n], held.n = y, n
  end
end

-- every tree made, for --stats/--report (weakly, unless the host asks to keep them)
I.trees = os.getenv("GTLUA_KEEP_TREES") == "1" and {} or setmetatable({}, WEAK_VALUES)
--- gt.tree(fn [, opts]) -> a callable tree.  opts: name, warmup (1),
--- max_recordings (64), on_limit ("eager"|"error"), copy_inputs (false),
--- buckets ({dim=, sizes=} or a list of them), warn_shapes (8), key, patch, verify;
--- checked by gt.treeopts (a bad or unknown option raises naming it)
function gt.tree(fn, opts)
  if type(fn) ~= "function" then I.error("gt.tree expects a function (the step) as its first argument, got " .. (fn == nil and "nil" or "a " .. type(fn))) end
  opts = check_opts(opts, I.error)
  local info = debug.getinfo(2, "Sl")
  local where = info.short_src .. ":" .. (info.currentline or 0)
  ntrees = ntrees + 1
  local name = opts.name or guess_name(info) or ("tree" .. ntrees)
  local on_limit = opts.on_limit or "eager"
  local o = ffi.new("gt_tree_opts")
  o.name, o.where = name, where
  o.warmup = opts.warmup or 1
  o.max_recordings = opts.max_recordings or 64
  o.on_limit_error = on_limit == "error" and 1 or 0
  local t = C.gt_tree_new(rt, o)
  if t == nil then error(I.errmsg(), 2) end
  local held = setmetatable({ n = 0 }, WEAK_VALUES)
  held_of[held_key(t)] = held
  local self = setmetatable({ fn = fn, name = name, where = where, _t = ffi.gc(t, finalizer(held)), _held = held,
                              _copy = opts.copy_inputs and true or false, _nwarn = 0,
                              _out = ffi.new("gt_buf*[1]"), opts = opts, _nroots = 0, _shapes = {},
                              _gen = 0, _seg0 = 0, _wbl = false, _scopes = { n = 0, gen = 0 },
                              -- (every field a call sets, here from the start: a table that grows
                              -- in its first calls is rehashed, and the traces that formed on it differ)
                              _in1 = false, _in2 = false, _in3 = false, _in4 = false, _inn = 0, _resumes = 0,
                              _watch = false, _ang = 0, _staged = false, _wb = false, _sync = false,
                              -- (every tree's table has this one layout, keyed or bucketed too: a
                              -- trace through an op that reads the active tree's fields serves every
                              -- tree.  A table whose hash part had another size made the trace of a
                              -- shared body guard the slots, and another tree's replays left it
                              -- each op.  gt.keyed's and gt.buckets' state is one sub-object each.)
                              _keyed = false, _buckets = false,   -- (keyed.lua's and buckets.lua's state, when the tree has it)
                              _warn_shapes = opts.warn_shapes == false and huge or (opts.warn_shapes or 8) }, Tree)
  if opts.key ~= nil or opts.patch ~= nil or opts.verify ~= nil then
    gt.keyed._attach(self, opts)
  end
  if opts.buckets then gt.buckets._attach(self, opts.buckets, opts) end
  I.trees[#I.trees + 1] = self
  return self
end

--- gt.bucket([dim]) -> real, padded: inside a call of a tree with buckets, the
--- real size of the call's bucketed inputs along dim (default: the first
--- spec's dim) and the size they are padded to (the same number when the call
--- pads nothing: at a bucket's size, beyond the last bucket, verify's eager
--- run); nil outside such a call (eager code: `local n = gt.bucket() or x.shape[1]`)
function gt.bucket(dim)
  if dim ~= nil and (type(dim) ~= "number" or dim < 1 or dim ~= math.floor(dim) or dim >= 2 ^ 31) then
    I.error("gt.bucket([dim]): dim must be a bucketed dimension (a whole number >= 1), got " .. I.show(dim))
  end
  local b = rawget(gt, "buckets")            -- (loaded by every tree with buckets)
  if not b then return nil end
  return b._sizes(dim)
end

-- -- Calls ---------------------------------------------------------------

-- A tensor input that lives in this tree's pool (an output of its previous
-- call) or any tensor input with copy_inputs is copied to staging first.
-- An input must be live; an output of this tree's previous call (one
-- generation back) is too: it is copied before this call reuses its memory.
-- Returns whether x lives in this tree's pool.
-- Whether input x belongs to this tree, and whether it is live (a tensor
-- released or gone stale is passed to the body as it is, not staged: the
-- body raises where it uses it, as eager code does, and not if it does not).
local function check_input(self, x)
  local b = x._b
  local own = b.tree == self._t
  local g, now = x._gen, b.gen_now[0]
  return own, g == now or (own and now == self._gen and g == C.gt_tree_prev_gen(self._t))
end
I.check_input = check_input

-- An input that is not live, as the body gets it: itself, or for this tree's
-- own output released by the caller a handle that raises as it does (the
-- call's first buffers reuse its struct: tensor.lua's _dead_copy).
function I.unstaged(x, own)
  local b = x._b
  if own and bit.band(b.flags, RELEASED) ~= 0 and b.gen == x._gen then return I.dead_copy(x) end
  return x
end

-- The bytes [lo, hi) of its buffer that tensor x spans (a non-contiguous
-- view: from its first element to its last).
local function span(x)
  local st = x._strides
  if not st then return x._off, x._off + x._nb end
  local last, shape = 0, x._shape
  for i = 1, #shape do last = last + (shape[i] - 1) * st[i] end
  return x._off, x._off + (last + 1) * I.dtypes[x.dtype].size
end
I.span = span

-- The key of x's buffer among a call's inputs.
local function buf_key(x) return tonumber(ffi.cast("intptr_t", x._b)) end

-- Input x (the caller's tensor) of this call is worked on through its staged
-- copy px (outer chunks of chunk bytes, each padded to padded bytes in px):
-- after the call, what the call wrote into px goes back into x (write_back).
local function note_copy(self, x, px, outer, chunk, padded)
  local wb = self._wb
  if not wb then wb = {}; self._wb = wb end
  wb[#wb + 1] = { x = x, px = px, outer = outer, chunk = chunk, padded = padded }
end
I.note_copy = note_copy

-- After a call: each staged copy of a caller's tensor that the call wrote
-- into is copied back into it, so a write into an input reaches the caller
-- as without a tree (copy_inputs, buckets' padding).  An input of this
-- tree's own pool (the last call's output) is stale by now: nothing to do.
local function write_back(self)
  local wb, t = self._wb, self._t
  self._wb, self._wbl = nil, wb
  for k = 1, #wb do
    local w = wb[k]
    local x, px = w.x, w.px
    local pb = px._b
    if bit.band(pb.flags, RELEASED) ~= 0 and pb.gen == px._gen and x._b.tree ~= t then
      I.release_as(x, px)                 -- the body freed its copy: the caller's tensor, as eager code frees it
    elseif px._b.wgen == self._gen and x._b.tree ~= t and not x:is_stale() and   -- (the call wrote it: wgen; after an error too)
       C.gt_unstage(rt, px._b, px._off, x._b, x._off, w.outer, w.chunk, w.padded) ~= 0 then
      error(I.errmsg(), 4)
    end
  end
end
I.write_back = write_back

-- A result on the staged copy of a caller's tensor (wbl: write_back's list)
-- as the caller's own: x itself, or the same view of it, as without a tree
-- (a staged copy is the tree's and goes stale with the next call).  Only
-- where the copy lays its bytes out as x does (all of them with
-- copy_inputs; with buckets' padding, when the padded dim is the first).
local function unstage_one(wbl, y)
  if not is_tensor(y) then return y end
  local b = y._b
  for k = 1, #wbl do
    local w = wbl[k]
    local px = w.px
    if px._b == b and w.outer == 1 then
      local lo, hi = span(y)
      local rel = lo - px._off
      if rel >= 0 and hi - px._off <= w.chunk then
        local x = w.x
        if rel == 0 and y._sid == x._sid and y._dt == x._dt and y._vid == x._vid then return x end
        return I.view(x._b, x._off + rel, y._sid, y._dt, x._gen, y._vid)
      end
    end
  end
  return y
end
local function unstage_res(wbl, y, depth)
  if type(y) == "table" and getmetatable(y) == nil then   -- (tables in tables too, as anchor_deep)
    depth = depth or 1
    if depth <= 8 then for k, v in pairs(y) do y[k] = unstage_res(wbl, v, depth + 1) end end
    return y
  end
  return unstage_one(wbl, y)
end
I.unstage_res = unstage_res

-- x staged into slot `slot` (returns x itself when it needs no staging) and
-- the next free slot.  shared (from shared_inputs, or nil): the buffers that
-- several staged inputs of this call view; those share one staged copy of
-- the bytes they span, so that a write through one input is seen through
-- the other, as outside a tree (`step(h, h)`).
local function stage(self, x, slot, shared)
  local b = x._b
  local own, live = check_input(self, x)
  if not live then return I.unstaged(x, own), slot end
  if not own and not self._copy then return x, slot end
  local g = shared and shared[buf_key(x)]
  local px, lo, hi = nil, span(x)            -- (a non-contiguous view: the bytes it spans, and the same view of them)
  if g and g.n > 1 then                      -- (the same tensor twice: the same staged tensor twice)
    if g[x] then return g[x], slot end
    local new = not g.sb
    if new then
      if C.gt_tree_stage(rt, slot, b, g.lo, 1, g.hi - g.lo, g.hi - g.lo, self._out) ~= 0 then I.error(I.errmsg()) end
      g.sb, slot = self._out[0], slot + 1
    end
    px = I.view(g.sb, x._off - g.lo, x._sid, x._dt, g.sb.gen, x._vid, new)
    g[x] = px
  else
    if C.gt_tree_stage(rt, slot, b, lo, 1, hi - lo, hi - lo, self._out) ~= 0 then I.error(I.errmsg()) end
    local sb = self._out[0]
    px, slot = I.view(sb, x._off - lo, x._sid, x._dt, sb.gen, x._vid, true), slot + 1
  end
  if not own then note_copy(self, x, px, 1, hi - lo, hi - lo) end
  return px, slot
end

-- A call's arguments travel as n (how many), a1..a4 and rest (all n of them
-- in a table when n > 4, else nil): no vararg function between a tree's
-- __call and its body or its keyed hit.  LuaJIT cannot compile a tail call
-- or a return out of a vararg function that a trace entered from below (a
-- side trace of a callee, say needs_stage, returning into it: the trace
-- aborts, "return to lower frame"), and after a few such aborts the rest of
-- every call ran in the interpreter.
local function spread(n, a1, a2, a3, a4, rest)
  if n <= 2 then
    if n == 2 then return a1, a2 elseif n == 1 then return a1 end
    return
  end
  if n == 3 then return a1, a2, a3 elseif n == 4 then return a1, a2, a3, a4 end
  return unpack(rest, 1, n)
end

-- Argument i of n, a1..a4, rest.
local function arg_at(i, a1, a2, a3, a4, rest)
  if rest then return rest[i] end
  if i <= 2 then
    if i == 1 then return a1 end
    return a2
  end
  if i == 3 then return a3 end
  return a4
end

-- The arguments in a table of their own.
local function packed(n, a1, a2, a3, a4, rest)
  if rest then return { unpack(rest, 1, n) } end
  return { a1, a2, a3, a4 }
end
I.spread, I.arg_at, I.packed = spread, arg_at, packed

local function needs_stage(self, x)
  if not is_tensor(x) then return false end
  return self._copy or x._b.tree == self._t
end

-- x (a tensor, or tensors in a plain table) must be staged.
local function arg_needs_stage(self, x)
  if needs_stage(self, x) then return true end
  if type(x) == "table" and getmetatable(x) == nil then
    for _, v in pairs(x) do if needs_stage(self, v) then return true end end
  end
  return false
end

-- A previous call's staged tensor fed back in keeps its slot for this call.
local function pin(self, x)
  if is_tensor(x) then
    local b = x._b
    if b.tree == self._t and bit.band(b.flags, STAGING) ~= 0 then C.gt_tree_stage_pin(rt, b) end
  end
end

-- Before anything is staged: pins the slots that inputs of this call live in.
local function pin_inputs(self, args, n)
  for i = 1, n do
    local x = args[i]
    if type(x) == "table" and getmetatable(x) == nil then
      for _, v in pairs(x) do pin(self, v) end
    else pin(self, x) end
  end
end
I.pin_inputs = pin_inputs

-- (groups by buf_key: one more input x viewing its buffer)
local function add_input(groups, x)
  local k, lo, hi = buf_key(x), span(x)
  local g = groups[k]
  if g then g.n, g.lo, g.hi = g.n + 1, math.min(g.lo, lo), math.max(g.hi, hi)
  else groups[k] = { n = 1, lo = lo, hi = hi } end
end

-- (one: the first input to stage, kept until a second one makes groups)
local function note_input(x, one, groups)
  if not one then return x, nil end          -- the first one: nothing to share yet
  if not groups then groups = {}; add_input(groups, one) end
  add_input(groups, x)
  return one, groups
end

-- The buffers of the call's inputs to stage (args[1..n], and tensors in
-- plain tables among them), by buf_key: { n = inputs viewing it, lo, hi =
-- the bytes they span }; nil when fewer than two inputs are staged (no
-- buffer can be shared).
local function shared_inputs(self, args, n)
  local one, groups = nil, nil
  for i = 1, n do
    local x = args[i]
    if needs_stage(self, x) then one, groups = note_input(x, one, groups)
    elseif type(x) == "table" and getmetatable(x) == nil then
      for _, v in pairs(x) do if needs_stage(self, v) then one, groups = note_input(v, one, groups) end end
    end
  end
  return groups
end
I.shared_inputs = shared_inputs

-- Argument x staged (a tensor, or a plain table whose tensors need staging:
-- a copy of it holding their staged views) and the next free slot.
local function stage_arg(self, x, slot, shared)
  if is_tensor(x) then return stage(self, x, slot, shared) end
  if type(x) ~= "table" or getmetatable(x) ~= nil then return x, slot end
  local copy
  for k, v in pairs(x) do
    if needs_stage(self, v) then
      copy = copy or {}
      copy[k], slot = stage(self, v, slot, shared)
    end
  end
  if not copy then return x, slot end
  for k, v in pairs(x) do if copy[k] == nil then copy[k] = v end end
  return copy, slot
end

local function stage_args(self, n, a1, a2, a3, a4, rest)
  local args, slot = packed(n, a1, a2, a3, a4, rest), 0
  pin_inputs(self, args, n)
  local shared = shared_inputs(self, args, n)
  for i = 1, n do args[i], slot = stage_arg(self, args[i], slot, shared) end
  return args
end

-- anchor(self, x [, gen]): x (a tensor, or tensors in a plain table) returned
-- by the call of generation gen (default: the call self runs now)
local function anchor_deep(self, x, gen, depth)           -- (tables in a returned table: rare, not on the hot path)
  for _, v in pairs(x) do
    if is_tensor(v) then
      if v._b.tree == self._t then anchor_one(self, v, gen) end
    elseif depth < 8 and type(v) == "table" and getmetatable(v) == nil then
      anchor_deep(self, v, gen, depth + 1)
    end
  end
end
local function anchor(self, x, gen)
  if is_tensor(x) then
    if x._b.tree == self._t then anchor_one(self, x, gen or self._gen) end
  elseif type(x) == "table" and getmetatable(x) == nil then
    anchor_deep(self, x, gen or self._gen, 1)
  end
  return x
end
I.anchor = anchor

local function warned(self)
  local last = ffi.new("const char*[1]")
  self._nwarn = C.gt_tree_warnings(self._t, last)
  gt.on_warning(ffi.string(last[0]))
end

-- The call's end after its body returned: the last segment, the core's end, warnings.
-- (One call into the core when nothing needs explaining: in a step whose
-- end runs in the interpreter every call into C costs.)
-- (n, r1, r2: the body's results, the rest in extra[1..n-2]: a new node's outputs.)
local extra = {}
local function end_call(self, n, r1, r2)
  local r = C.gt_tree_return(rt, self._nwarn)
  if r == 0 then I.active = nil; return end
  if r >= 16 then                                 -- the first replays through the lane (gt.h's gt_tree_return)
    policy.retrace()                              -- (the traces formed on the recording's path go)
    r = r - 16
    if r == 0 then I.active = nil; return end
  end
  if r < 0 then
    local msg = I.errmsg()
    abort()
    -- what the segments that ran wrote into copied inputs reaches the caller, as after a body's error
    if self._wb then pcall(write_back, self) end
    I.error(msg)                  -- (the line that called the tree: the body has returned)
  end
  if r >= 8 then                                  -- a node's first visit: its cut and shapes
    I.explain(r - 8, 3, "return", { n = n, r1, r2, unpack(extra, 1, n - 2) })
    I.active = nil
    if C.gt_tree_end(rt) ~= 0 then I.error(I.errmsg()) end
    if C.gt_tree_warnings(self._t, nil) == self._nwarn then return end
  end
  I.active = nil
  warned(self)
end

local function shapes_of(a1, a2, a3, a4)
  local parts, args = {}, { a1, a2, a3, a4 }
  for i = 1, 4 do
    local x = args[i]
    if is_tensor(x) then parts[#parts + 1] = x.dtype .. " " .. I.shape_str(x._shape) end
  end
  return table.concat(parts, ", ")
end

-- Past warn_shapes distinct input shapes (new first segments), one warning.
-- (end_body calls it once a plain call made a new first node: the inputs are
-- the call's _in1.._in4.)
local function watch_shapes(self)
  while C.gt_tree_child(self._t, -1, self._nroots) >= 0 do self._nroots = self._nroots + 1 end
  local sig = shapes_of(self._in1, self._in2, self._in3, self._in4)
  local seen = self._shapes
  if not seen[sig] then seen[sig] = true; seen[#seen + 1] = sig end
  if #seen > self._warn_shapes then
    self._warn_shapes = huge
    gt.on_warning(("tree '%s' (%s) has seen %d input shapes (%s); each is its own recording: consider " ..
      "buckets = { dim = 1, sizes = gt.buckets.pow2(N) }"):format(self.name, self.where, #seen, table.concat(seen, "; ")))
  end
end

-- The end of a call whose body has returned (host.run calls it after the
-- body): ok false passes the body's error on; results past the second are
-- in extra[1..n-2].
local function anchor_extra(self, n)
  for i = 1, n - 2 do anchor(self, extra[i]) end
end
local function end_body(self, ok, n, r1, r2)
  if not ok then
    local K = self._keyed
    if K and K.tracing and C.gt_tree_discard(rt) == 1 then   -- (a traced keyed call: it runs again, keyed.lua)
      I.active = nil
      self._in1, self._in2, self._in3, self._in4 = false, false, false, false
      self._wb = false
      error(setmetatable({ err = r1 }, DISCARDED), 0)
    end
    C.gt_tree_abort_run(rt)          -- (what the body launched before its error runs, as outside a tree)
    I.active = nil
    self._in1, self._in2, self._in3, self._in4 = false, false, false, false
    -- what the segments that ran wrote into copied inputs reaches the caller, as eager code's writes do
    if self._wb then pcall(write_back, self) end
    error(r1, 0)
  end
  end_call(self, n, r1, r2)
  if self._wb then write_back(self) end
  if n >= 1 then anchor(self, r1) end
  if n >= 2 then anchor(self, r2) end
  if n > 2 then anchor_extra(self, n) end
  if self._watch then
    self._watch = false
    if C.gt_tree_child(self._t, -1, self._nroots) >= 0 then watch_shapes(self) end
  end
  self._in1, self._in2, self._in3, self._in4 = false, false, false, false   -- (the caller's tensors are theirs again)
end

-- host.run (main.c's host_run): the body and end_body, each in a pcall made
-- from C, so that compiled code returning from either stops cleanly at a C
-- frame.  (gt runs inside gtlua only: its core is the host's own code.)
local hrun = require("gt.host").run

local results = I.host_results   -- (hrun's results: results(extra, hrun(extra, ...)))

-- The body and the call's end.  (hrun's results are spread into results(): a
-- trace stops at the C call, cleanly, rather than stitching on into frames
-- it cannot return through.)
-- hrun's results; in a call whose inputs were copied (self._wbl, from
-- write_back: copy_inputs, buckets' padding), a result on a copy is the
-- caller's tensor (unstage_res; a padded one once narrowed: buckets.lua).
local function unstaged_results(self, ok, n, r1, r2)
  local wbl = self._wbl
  if ok and wbl then
    if n >= 1 then r1 = unstage_res(wbl, r1) end
    if n >= 2 then r2 = unstage_res(wbl, r2) end
    for i = 1, n - 2 do extra[i] = unstage_res(wbl, extra[i]) end
  end
  return results(extra, ok, n, r1, r2)
end
local function run_body(self, n, a1, a2, a3, a4, rest)
  return unstaged_results(self, hrun(extra, end_body, self, self.fn, spread(n, a1, a2, a3, a4, rest)))
end

-- A call has begun in the core (gen: its generation): the Lua side's state.
local function enter(self, gen)
  self._gen, self._seg0 = gen, 0                        -- the call's generation; its first segment's tensors from 0
  self._sync, self._staged, self._wb, self._wbl = false, false, false, false
  I.active, self._resumes = self, 0
  I.ops_new_call()
end

-- f(self, n, a1, a2, a3, a4, rest) (stage_args, or buckets' prep): the call's
-- arguments staged, in a pcall made from C as the body's (hrun).  An error
-- there ends the call before it is raised.
local function staged_end(_, ok, _, err)
  if not ok then
    abort()
    error(err, 0)
  end
end
local function stage_call(self, f, n, a1, a2, a3, a4, rest)
  local ok, _, args = hrun(extra, staged_end, self, f, self, n, a1, a2, a3, a4, rest)
  if not ok then error(args, 0) end
  return args
end

-- eager: nil, or a reason to run this call's segments eagerly without nodes
-- (false: neither eager nor padded, a bucketed call already at its bucket's size).
-- The arguments: n, a1..a4, rest (see spread).
local function run(self, eager, n, a1, a2, a3, a4, rest)
  local gen = C.gt_tree_call(rt, self._t, eager or nil)
  if gen == 0 then I.error(I.errmsg()) end   -- (the user's line: a call may come through several of gt's frames)
  enter(self, gen)
  local bk = self._buckets
  local prep = eager == nil and bk and bk.prep or nil     -- a call beyond the buckets pads nothing
  local staged = prep ~= nil
  if not staged then
    if not rest then                                      -- up to four arguments without a loop (see walk_keys)
      staged = n >= 1 and arg_needs_stage(self, a1) or n >= 2 and arg_needs_stage(self, a2) or
               n >= 3 and arg_needs_stage(self, a3) or n >= 4 and arg_needs_stage(self, a4)
    else
      for i = 1, n do if arg_needs_stage(self, rest[i]) then staged = true break end end
    end
  end
  self._inn = n                                           -- the inputs, for a new first node's shapes
  if staged then
    local args = stage_call(self, prep or stage_args, n, a1, a2, a3, a4, rest)
    self._staged = args
    a1, a2, a3, a4 = args[1], args[2], args[3], args[4]
    if rest then rest = args end
  end
  self._in1, self._in2, self._in3, self._in4 = a1, a2, a3, a4
  return run_body(self, n, a1, a2, a3, a4, rest)
end
Tree._run = run
Tree._body, Tree._enter, Tree._abort, Tree._stage_args, Tree._stage_call = run_body, enter, abort, stage_args, stage_call
I.stage_arg = stage_arg   -- buckets stage their non-bucketed inputs the same way

-- The call's kind: bucketed, keyed or plain (n, a1..a4, rest: see spread).
local function call(self, n, a1, a2, a3, a4, rest)
  local bk = self._buckets
  if bk then return bk.call(self, n, a1, a2, a3, a4, rest) end   -- (a keyed call inside, with key)
  local K = self._keyed
  if K then return K.call(self, false, n, a1, a2, a3, a4, rest) end
  self._watch = self._warn_shapes ~= huge                   -- its end counts new first nodes' shapes
  return run(self, nil, n, a1, a2, a3, a4, rest)
end

function Tree:__call(...)
  local n = select("#", ...)
  if n <= 4 then return call(self, n, ...) end
  local a1, a2, a3, a4 = ...
  return call(self, n, a1, a2, a3, a4, { ... })
end

-- -- Statistics ------------------------------------------------------------

local function skip_table(t)
  local r, reason, count = {}, ffi.new("const char*[1]"), ffi.new("int[1]")
  local i = 0
  while C.gt_tree_skip_reason(t, i, reason, count) == 0 do
    r[ffi.string(reason[0])] = count[0]
    i = i + 1
  end
  return r
end

-- Every distinct site node id's segment ended at, in order of first visit:
-- { site = "model.lua:31", reason = "item", cut = "model.lua:31 item", count = visits }
-- (cut as node.cut writes it; reason "return" at the call's end, "other" for
-- the visits past the first 8 sites).
local function cut_sites(t, id, site, count)
  local list, i = {}, 0
  while C.gt_tree_node_cut(t, id, i, site, count) == 0 do
    local text = ffi.string(site[0])
    local at, reason = text:match("^gt%.cut at (.*)$"), "gt.cut"
    if not at then at, reason = text:match("^(.*:%-?%d+) (.+)$") end      -- "file:line reason"
    if not at then at, reason = text:match("^(%S+) (.+)$") end
    if text == "return" then at, reason = "return", "return"
    elseif text == "other sites" then at, reason = "other sites", "other"
    elseif not at then at, reason = text, text end
    list[#list + 1] = { site = at, reason = reason, cut = text, count = count[0] }
    i = i + 1
  end
  return list
end

-- A tree method's receiver must be a tree: `tree.stats()` (a dot for the colon) raises here,
-- at the user's line, instead of passing nil to the core.
local function me(self, name)
  if getmetatable(self) ~= Tree then
    I.error("tree:" .. name .. "(...): call it with a colon on a tree from gt.tree (tree:" .. name ..
      "(...)), got " .. I.show(self) .. " for the tree", 2)
  end
end

--- tree:stats() -> the plain table of DESIGN.md section 9
function Tree:stats()
  me(self, "stats")
  local s = ffi.new("gt_tree_info")
  C.gt_tree_stats(self._t, s)
  local r = {
    name = self.name, where = self.where, calls = s.calls, nodes = s.nodes, recorded = s.recorded,
    warmups = s.warmups, replays = s.replays, eager = s.eager, updates = s.updates,
    skips = skip_table(self._t), skipped = s.skips, depth = s.depth, fused = s.path_fused,
    pool = { reserved = tonumber(s.reserved), in_use = tonumber(s.in_use), high_water = tonumber(s.high_water) },
    node = {},
  }
  local ni = ffi.new("gt_node_info")
  local site, count = ffi.new("const char*[1]"), ffi.new("int[1]")
  for id = 0, s.nodes - 1 do
    C.gt_tree_node(self._t, id, ni)
    local kids, k = {}, 0
    while true do
      local c = C.gt_tree_child(self._t, id, k)
      if c < 0 then break end
      kids[#kids + 1] = c
      k = k + 1
    end
    r.node[id] = {
      id = id, parent = ni.parent >= 0 and ni.parent or nil, depth = ni.depth, children = kids,
      label = ffi.string(ni.label), kernels = ni.kernels, visits = ni.visits, warmups = ni.warmups,
      recorded = ni.recorded ~= 0, records = ni.records, replays = ni.replays, updates = ni.updates, eager = ni.eager,
      skip = ni.skip ~= nil and ffi.string(ni.skip) or nil,
      record_us = ni.record_us, instantiate_us = ni.instantiate_us, replay_cpu_us = ni.replay_cpu_us,
      gpu_us = ni.gpu_us, planned_bytes = tonumber(ni.planned_bytes), checkpoint_bytes = tonumber(ni.checkpoint_bytes),
      reusable_bytes = tonumber(ni.reusable_bytes), keyed = ni.keyed ~= 0,
      last_call = tonumber(ni.last_call),
      shapes = ni.shapes ~= nil and ffi.string(ni.shapes) or nil, cut = ni.cut ~= nil and ffi.string(ni.cut) or nil,
      why = ni.why ~= nil and ffi.string(ni.why) or nil,
      shared = ni.shared, shared_with = ni.shared_with >= 0 and ni.shared_with or nil,
      cuts = cut_sites(self._t, id, site, count),
    }
  end
  if self._buckets then r.buckets = { verified = self._buckets.verified } end
  if self._keyed then
    local c = self._keyed.stats
    local refused = {}
    for why, count in pairs(c.refused) do refused[why] = count end
    r.keyed = { hits = s.keyed_hits, misses = c.misses, verified = c.verified, refused = refused, fused = s.keyed_fused }
  end
  r.roots = {}
  local k = 0
  while true do
    local c = C.gt_tree_child(self._t, -1, k)
    if c < 0 then break end
    r.roots[#r.roots + 1] = c
    k = k + 1
  end
  return r
end

--- tree:history() -> the last calls (up to 1024), oldest first: { call, warmups,
--- records, replays, eager, updates, cpu_us, in_use, reserved } each
function Tree:history()
  me(self, "history")
  local r, ci, i = {}, ffi.new("gt_call_info"), 0
  while C.gt_tree_history(self._t, i, ci) == 0 do
    r[#r + 1] = { call = ci.call, warmups = ci.warmups, records = ci.records, replays = ci.replays, eager = ci.eager,
                  updates = ci.updates, cpu_us = ci.cpu_us >= 0 and ci.cpu_us or nil,   -- (an untimed keyed hit: nil)
                  in_use = tonumber(ci.in_use), reserved = tonumber(ci.reserved) }
    i = i + 1
  end
  return r
end

--- tree:trim([keep = 0]) -> graphs dropped: frees the graphs and memory of
--- all but the keep most recently used recordings (they record again when visited)
function Tree:trim(keep)
  me(self, "trim")
  keep = keep or 0
  if type(keep) ~= "number" or keep < 0 or keep ~= math.floor(keep) or keep >= 2 ^ 31 then
    I.error("tree:trim(keep): keep must be a whole number of graphs to keep, 0 or more, got " .. I.show(keep))
  end
  local n = C.gt_tree_trim(rt, self._t, keep)
  if n < 0 then error(I.errmsg(), 2) end
  return n
end

--- tree:floor(iters [, sync_each [, patch [, calls]]]) -> cpu_us, step_us, patches:
--- the last call's graphs launched back to back from C with no tree logic (the
--- benchmark floor); patch: each step first repeats the kernel-node patches the
--- last call made (patches: how many a step repeats); calls: a list of argument
--- lists (n = their count where nils end them), each called once, whose paths
--- (and patches) the steps then launch in turn.  What the graphs write is
--- copied aside before the steps and back after (stats.c): the floor changes
--- no value a tensor reads
function Tree:floor(iters, sync_each, patch, calls)
  me(self, "floor")
  local what = "tree:floor(iters [, sync_each [, patch [, calls]]])"
  if iters ~= nil and (type(iters) ~= "number" or iters < 1 or iters ~= math.floor(iters) or iters >= 2 ^ 31) then
    I.error(what .. ": iters must be a whole number of steps, 1 or more, got " .. I.show(iters))
  end
  if sync_each ~= nil and type(sync_each) ~= "boolean" then
    I.error(what .. ": sync_each must be true or false, got " .. I.show(sync_each))
  end
  if patch ~= nil and type(patch) ~= "boolean" then
    I.error(what .. ": patch must be true or false, got " .. I.show(patch))
  end
  local t = self._t
  C.gt_tree_floor_clear(t)               -- (marks a failed call left)
  if calls ~= nil then
    if type(calls) ~= "table" or #calls == 0 then I.error("tree:floor: calls must be a list of argument lists") end
    for i, a in ipairs(calls) do
      if type(a) ~= "table" then I.error("tree:floor: calls[" .. i .. "] must be a list of arguments") end
      self(unpack(a, 1, a.n or #a))
      if C.gt_tree_floor_mark(rt, t) < 0 then C.gt_tree_floor_clear(t); error(I.errmsg(), 2) end
    end
  end
  local c, s = ffi.new("double[1]"), ffi.new("double[1]")
  local np = C.gt_tree_bench_floor(rt, t, iters or 100, sync_each == false and 0 or 1, patch and 1 or 0, c, s)
  if calls ~= nil then C.gt_tree_floor_clear(t) end
  if np < 0 then error(I.errmsg(), 2) end
  return c[0], s[0], np
end


--- tree:advise([{measure = true}]) -> the advisor's findings for this tree (gt.advise; gtlua --advise prints them)
function Tree:advise(opts) me(self, "advise"); return require("gt.advise").tree(self, opts) end

--- tree:dot([path]), tree:json([path]), tree:report(path): pictures (gt.report)
function Tree:dot(path) me(self, "dot"); return gt.report.dot(self, path, "tree:dot([path])") end
function Tree:json(path) me(self, "json"); return gt.report.json(self, path, "tree:json([path])") end
function Tree:report(path) me(self, "report"); return gt.report.html(self, path, "tree:report([path])") end

--- tostring(tree): the tree drawn for a terminal
function Tree:__tostring() me(self, "__tostring"); return require("gt.report").draw(self) end
