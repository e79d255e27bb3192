-- gt.tree: graph trees from Lua functions: gt.tree and a tree's calls (staging: gt.tree_stage;
-- outputs' lifetimes: gt.tree_anchor; statistics and pictures: gt.tree_stats).
local ffi = require "ffi"

local gt = require "gt"
local I = require "gt.internal"
local C, rt, is_tensor = I.C, I.rt, gt.is_tensor
local DISCARDED = require("gt.trace").DISCARDED
local policy = require "gt.host_policy"
local select, type = select, type
local huge = math.huge

local Tree = {}
Tree.__index = Tree
gt.Tree = Tree

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

local track, anchor, WEAK_VALUES
do
  local A = require "gt.tree_anchor"
  track, anchor, WEAK_VALUES = A.track, A.anchor, A.WEAK_VALUES
end
local arg_needs_stage, stage_args, write_back, unstage_res
do
  local S = require "gt.tree_stage"
  arg_needs_stage, stage_args, write_back, unstage_res = S.arg_needs_stage, S.stage_args, S.write_back, S.unstage_res
end

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
    local a = I.active
    local K = a and a._keyed
    if not (K and K.tracing) then abort() end   -- (a traced call is dropped at its body's end: keyed.lua)
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
-- every tree made, for --stats/--report (weakly, unless the host asks to keep them)
I.trees = os.getenv("GTLUA_KEEP_TREES") == "1" and {} or setmetatable({}, WEAK_VALUES)
--- gt.tree(fn [, opts]) -> a callable tree.  opts: name, warmup (1),
--- max_recordings (64), on_limit ("eager"|"error"), copy_inputs (false),
--- buckets ({dim=, sizes=} or a list of them), warn_shapes (8), key, patch, verify,
--- graph_memory (bytes its graphs may hold), graph_width (a graph's launches that wait for nothing at most),
--- pool (another tree whose pool this one shares: their calls never overlap);
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
  o.on_limit_error = on_limit == "error" and 1 or on_limit == "evict" and 2 or 0
  o.graph_memory = opts.graph_memory or 0
  o.graph_width = opts.graph_width or 0
  if opts.pool then o.pool = opts.pool._t end
  local t = C.gt_tree_new(rt, o)
  if t == nil then error(I.errmsg(), 2) end
  local tc, held = track(t)
  local self = setmetatable({ fn = fn, name = name, where = where, _t = tc, _held = held,
                              _copy = opts.copy_inputs and true or false, _nwarn = 0,
                              _out = ffi.new("gt_buf*[1]"), opts = opts, _nroots = 0, _shapes = {},
                              _gen = 0, _seg0 = 0, _wbl = false, _scopes = { n = 0, gen = 0 },
                              -- (every field a call sets, here from the start: a table that grows
                              -- in its first calls is rehashed, and the traces that formed on it differ)
                              _in1 = false, _in2 = false, _in3 = false, _in4 = false, _inn = 0, _resumes = 0,
                              _watch = false, _ang = 0, _staged = false, _wb = false, _swapped = false, _sync = false,
                              -- (every tree's table has this one layout, keyed or bucketed too: a
                              -- trace through an op that reads the active tree's fields serves every
                              -- tree.  A table whose hash part had another size made the trace of a
                              -- shared body guard the slots, and another tree's replays left it
                              -- each op.  gt.keyed's and gt.buckets' state is one sub-object each.)
                              _keyed = false, _buckets = false,   -- (keyed.lua's and buckets.lua's state, when the tree has it)
                              _evict = on_limit == "evict", _evict_due = false, _limit_seen = 0, _evictions = 0,   -- (on_limit = "evict")
                              _warn_shapes = opts.warn_shapes == false and huge or (opts.warn_shapes or 8) }, Tree)
  if opts.key ~= nil or opts.patch ~= nil or opts.verify ~= nil then
    gt.keyed._attach(self, opts)
  end
  if opts.buckets then gt.buckets._attach(self, opts.buckets, opts) end
  I.trees[#I.trees + 1] = self
  return self
end

--- gt.bucket([dim | name]) -> real, padded: inside a call of a tree with buckets, the
--- real size of the call's bucketed inputs along dim (default: the first
--- spec's dim; a string: the spec with that name, a count spec's number and
--- its bucket) and the size they are padded to (the same number when the call
--- pads nothing: at a bucket's size, beyond the last bucket, verify's eager
--- run); nil outside such a call (eager code: `local n = gt.bucket() or x.shape[1]`)
function gt.bucket(dim)
  if dim ~= nil and not (type(dim) == "string" and dim ~= "") and
     (type(dim) ~= "number" or dim < 1 or dim ~= math.floor(dim) or dim >= 2 ^ 31) then
    I.error("gt.bucket([dim]): dim must be a bucketed dimension (a whole number >= 1) or a spec's name, got " ..
      I.show(dim))
  end
  local b = rawget(gt, "buckets")            -- (loaded by every tree with buckets)
  if not b then return nil end
  return b._sizes(dim)
end

-- -- Calls ---------------------------------------------------------------

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
local ENDED, EXPLAIN, JIT_FLUSH = C.GT_RET_ENDED, C.GT_RET_EXPLAIN, C.GT_RET_JIT_FLUSH   -- gt_tree_return's answers
local function end_call(self, n, r1, r2)
  local r = C.gt_tree_return(rt, self._nwarn)
  if r == ENDED then I.active = nil; return end
  if r >= JIT_FLUSH then                          -- the first replays through the lane (gt.h's gt_tree_return)
    policy.retrace()                              -- (the traces formed on the recording's path go)
    r = r - JIT_FLUSH
    if r == ENDED then I.active = nil; return end
  end
  if r < 0 then
    local msg = I.errmsg()
    abort()
    -- what the segments that ran wrote into copied inputs reaches the caller, as after a body's error
    if self._wb then pcall(write_back, self) end
    I.error(msg)                  -- (the line that called the tree: the body has returned)
  end
  if r >= EXPLAIN then                            -- a node's first visit: its cut and shapes
    I.explain(r - EXPLAIN, 3, "return", { n = n, r1, r2, unpack(extra, 1, n - 2) })
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
local evict
local function anchor_extra(self, n)
  for i = 1, n - 2 do anchor(self, extra[i]) end
end
local function end_body(self, ok, n, r1, r2)
  local K = self._keyed
  if K and K.tracing then        -- a traced keyed call runs nothing: dropped, then run as usual (keyed.lua)
    if ok then ok = C.gt_tree_dry_end(rt) == 0; r1 = not ok and I.errmsg() or r1
    elseif C.gt_tree_discard(rt) == 0 then C.gt_tree_abort(rt) end
    I.active = nil
    self._in1, self._in2, self._in3, self._in4 = false, false, false, false
    I.unswap(self)
    self._wb = false
    if not ok then error(setmetatable({ err = r1 }, DISCARDED), 0) end
    return
  end
  if not ok then
    C.gt_tree_abort_run(rt)          -- (what the body launched before its error runs, as outside a tree)
    I.active = nil
    self._in1, self._in2, self._in3, self._in4 = false, false, false, false
    -- what the segments that ran wrote into copied inputs reaches the caller, as eager code's writes do
    if self._wb then pcall(write_back, self) end
    error(r1, 0)
  end
  end_call(self, n, r1, r2)
  if self._evict then evict(self) end
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

-- on_limit = "evict": a call in which a path was refused a recording by
-- max_recordings (it ran eagerly) makes the next call first drop the least
-- recently used recording (tree:trim: the outputs of this call keep their
-- memory until then), so that path records on its next visits while the
-- others replay on.  A next call given one of this tree's outputs waits
-- (the trim would take its memory).
evict = function(self)
  local h = C.gt_tree_limit_hits(self._t)
  if h ~= self._limit_seen then self._limit_seen, self._evict_due = h, true end
end
local function own_output(self, x)
  if is_tensor(x) then return x._b.tree == self._t end
  if type(x) == "table" and getmetatable(x) == nil then
    for _, t in pairs(x) do if is_tensor(t) and t._b.tree == self._t then return true end end
  end
  return false
end
local function evict_now(self, n, a1, a2, a3, a4, rest)
  for i = 1, n do if own_output(self, I.arg_at(i, a1, a2, a3, a4, rest)) then return end end
  self._evict_due = false
  local dropped = C.gt_tree_trim(rt, self._t, math.max((self.opts.max_recordings or 64) - 1, 0))
  if dropped < 0 then I.error(I.errmsg()) end
  self._evictions = self._evictions + 1
end

-- host.run (main_gthost.c's host_run): the body and end_body, each in a pcall made
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
  I.unswap(self)                                  -- (a call that ended without its write-back)
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

-- The call's kind: bucketed, keyed or plain (n, a1..a4, rest: see spread).
local function call(self, n, a1, a2, a3, a4, rest)
  if self._evict_due then evict_now(self, n, a1, a2, a3, a4, rest) end
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

require "gt.tree_stats"   -- tree:stats(), history, trim, floor, advise and pictures
require "gt.tree_warm"    -- tree:warm(calls): paths recorded ahead of time
