-- gt.keyed: keyed calls (DESIGN section 5).  gt.tree(fn, {key = f, patch = {i, ...}, verify = n})
-- declares that the path a call takes depends only on f(...) (plus the
-- arguments' shapes and dtypes, static tensors' addresses and the scalar
-- arguments not listed in patch, by their bits).  Once a key's path has
-- replayed, the next call of the key runs the body with its `patch` numbers
-- traced (gt.trace) and memoizes the path; later calls with that key check
-- those guards, patch input addresses and the scalars the traced numbers
-- reached, and launch the path's graphs from C without running the body.
local ffi = require "ffi"
local bit = require "bit"
local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local select, type, getmetatable, rawequal = select, require("gt.host_policy").original.type, getmetatable, rawequal
local is_tensor, view = gt.is_tensor, I.view
local unstage_res = I.unstage_res
local spread, arg_at, packed = I.spread, I.arg_at, I.packed
local band = bit.band
local STATIC, STAGING, RELEASED, SLAB = C.GT_BUF_STATIC, C.GT_BUF_STAGING, C.GT_BUF_RELEASED, C.GT_BUF_SLAB
local KIN_OTHER, KIN_TENSOR, KIN_PATCH = C.GT_KIN_OTHER, C.GT_KIN_TENSOR, C.GT_KIN_PATCH   -- gt_tree_keyed_save's kinds
local KEYED_HIT, KEYED_ANEW = C.GT_KEYED_HIT, C.GT_KEYED_ANEW
local TT = ffi.typeof("gt_tensor")
local anchor = I.anchor
local trace = require "gt.trace"
local is_traced, tonumber = trace.is_traced, require("gt.host_policy").original.tonumber

local M = {}

-- Keys of the memo trie for what is not a plain value.
local NIL, NEGZERO, TENSOR, PATCHED, STAGED = {}, {}, {}, {}, {}
local SHARES = setmetatable({}, { __index = function(t, j) local k = {}; t[j] = k; return k end })
-- (SHARES[j]: this tensor argument views argument j's buffer, then its offset from argument j's)

-- A NaN by its bits (its payload and sign): numbers are keys by their bits.
local NB = ffi.new("union { double d; uint64_t u; }")
local function nan_key(k)
  NB.d = k
  return "nan " .. tostring(NB.u)
end

local function child(node, k)
  if k == nil then k = NIL
  elseif k == 0 then if 1 / k < 0 then k = NEGZERO end         -- (-0.0 and 0.0: two keys; false, "": not 0)
  elseif k ~= k then k = nan_key(k) end
  local c = node[k]
  if not c then c = {}; node[k] = c end
  return c
end

-- The key's values: how many, the first three, and all of them in a table
-- when there are more.
local function key_values(...)
  local n = select("#", ...)
  if n <= 3 then return n, ... end
  return n, nil, nil, nil, { ... }
end

-- The key's values (key_values's) down the memo trie.  Up to three without a
-- loop: a loop run on every call becomes a trace of its own and stops the caller's.
local function walk_keys(node, n, k1, k2, k3, more)
  if more then
    for i = 1, n do node = child(node, more[i]) end
    return node
  end
  if n >= 1 then node = child(node, k1) end
  if n >= 2 then node = child(node, k2) end
  if n >= 3 then node = child(node, k3) end
  return node
end

-- Argument i (x) below node: fills ins/kinds for the core; returns the next
-- node, or nil and why the call cannot be keyed.
local function walk_arg(self, node, i, x)
  local K = self._keyed
  local a = K.ins[i - 1]
  a.buf = nil
  K.kinds[i - 1] = KIN_OTHER
  if is_tensor(x) then
    local b = x._b
    -- a released or overwritten tensor (this tree's own too: its last call's
    -- outputs are live until this call begins): the body runs, and raises
    -- where it uses it, as eager code
    if x._gen ~= b.gen_now[0] then return nil, false end
    if x._vid ~= 0 then return nil, "a non-contiguous tensor argument" end
    local staged = self._copy or b.tree == self._t
    if staged then                                   -- staged: a path of its own (its outputs may be staged views)
      K.stage = true
      node = child(node, STAGED)
    end
    node = child(child(node, TENSOR), x._sid * 16 + x._dt)   -- shape and dtype: interned, one key
    local static = band(b.flags, STATIC) ~= 0
    if static then
      node = child(node, tonumber(ffi.cast("uintptr_t", b)) + x._off)   -- a static tensor: by address
      -- (staged, the path reads its copy, patched as an input's)
      if not staged then return node end
    end
    -- arguments that share a buffer are another path, by how they lie (the
    -- recording's edges and the core's inputs assumed otherwise;
    -- gt_tree_keyed_save refuses a path whose arguments share memory)
    for j = 1, i - 1 do
      if K.kinds[j - 1] == KIN_TENSOR and K.ins[j - 1].buf == b then
        node = child(child(node, SHARES[j]), x._off - tonumber(K.ins[j - 1].off))
        break
      end
    end
    a.buf, a.off, a.nbytes = b, x._off, x._nb
    K.kinds[i - 1] = KIN_TENSOR
    return node
  elseif type(x) == "number" and K.patch[i] then
    a.v.f64 = x
    K.kinds[i - 1] = KIN_PATCH
    node = child(node, PATCHED)
    local cb = K.counts                            -- a bucketed count: its bucket is in the key (buckets.lua)
    if cb and cb[i] then node = child(node, cb[i].p) end
    return node
  elseif type(x) == "table" and getmetatable(x) == nil then
    return nil, "a table argument"
  end
  node = child(node, x)
  return node
end

-- The argument signature below the key's node; returns the leaf, or nil and
-- why the call cannot be keyed.  Up to four arguments without a loop.  (The
-- arguments: n, a1..a4, rest, as tree.lua's spread takes them.)
local function walk_args(self, node, n, a1, a2, a3, a4, rest)
  local K = self._keyed
  K.stage = false                     -- whether an argument needs staging (this tree's own output)
  local why
  if not rest then
    if n >= 1 then node, why = walk_arg(self, node, 1, a1); if not node then return nil, why end end
    if n >= 2 then node, why = walk_arg(self, node, 2, a2); if not node then return nil, why end end
    if n >= 3 then node, why = walk_arg(self, node, 3, a3); if not node then return nil, why end end
    if n >= 4 then node, why = walk_arg(self, node, 4, a4); if not node then return nil, why end end
  else
    for i = 1, n do
      node, why = walk_arg(self, node, i, rest[i])
      if not node then return nil, why end
    end
  end
  node = child(node, n)
  return node
end

local function key_text(self, ...)
  local K = self._keyed
  local parts = {}
  for i = 1, select("#", K.key(...)) do parts[i] = tostring((select(i, K.key(...)))) end
  return "(" .. table.concat(parts, ", ") .. ")"
end

-- (one warning per reason: a reason names its file:line, so a path's
-- refusal warns once however many key values take it)
local function refuse(self, leaf, why)
  local K = self._keyed
  local st = K.stats
  st.refused[why] = (st.refused[why] or 0) + 1
  local warned = K.warned
  if not warned then warned = {}; K.warned = warned end
  if not warned[why] then
    warned[why] = true
    gt.on_warning(("tree '%s' (%s): a keyed call's path cannot be replayed without its body: %s; the body runs")
      :format(self.name, self.where, why))
  end
end

-- After a call that ran the body: what each result is, for rebuilding them
-- on a hit.  Returns the descriptors and the core's output list, or nil and why.
-- traced[r]: result r was a traced number (trace.results): the argument it is, or false.
local function describe_outputs(self, args, n, traced, ...)
  local outs, cis = {}, {}
  for r = 1, select("#", ...) do
    local y = select(r, ...)
    local o
    if is_tensor(y) then
      local b = y._b
      -- a tensor the body released: a hit would return it live over memory
      -- the path reuses (the body run's raises when used)
      if band(b.flags, RELEASED) ~= 0 then return nil, "it returns a tensor it released" end
      for i = 1, n do if rawequal(args[i], y) then o = { kind = "arg", i = i } break end end
      if not o and b.tree ~= self._t then         -- a view of a tensor argument: the same view of this call's
        for i = 1, n do
          local a = args[i]
          if is_tensor(a) and a._b == b then
            o = { kind = "argview", i = i, off = y._off - a._off, sid = y._sid, dt = y._dt, vid = y._vid }
            break
          end
        end
      end
      if not o and y._gen == self._gen and b.tree == self._t then
        if band(b.flags, STAGING) ~= 0 then
          local staged = self._staged
          for i = 1, n do
            if staged and is_tensor(staged[i]) and staged[i]._b == b then
              o = { kind = "staged", i = i, off = y._off, sid = y._sid, dt = y._dt, vid = y._vid }
              break
            end
          end
          if not o then return nil, "it returns a staged view it cannot place" end
        else
          cis[#cis + 1] = b.ci
          o = { kind = "buf", bi = #cis - 1, off = y._off, sid = y._sid, dt = y._dt, vid = y._vid, nb = y._nb }
        end
      end
      o = o or { kind = "value", v = y }
    elseif type(y) == "table" and getmetatable(y) == nil then
      return nil, "it returns a table"
    elseif traced and traced[r] ~= nil then          -- a traced number: the call's own argument, else its own value
      local i = traced[r]
      if not i then return nil, "it returns a number computed from a `patch` argument" end
      o = { kind = "arg", i = i }
    else
      -- an argument returned as is is this call's (a number is one only when
      -- traced: one equal to an argument's, -0 beside 0, is a value of its own)
      if type(y) ~= "number" then
        for i = 1, n do if y ~= nil and rawequal(args[i], y) then o = { kind = "arg", i = i } break end end
      end
      o = o or { kind = "value", v = y }
    end
    outs[r] = o
  end
  outs.n = select("#", ...)
  return outs, cis
end

-- Result o of a hit; outb: the call's output buffers (gt_tree_keyed_run's);
-- a1..a4, rest: the call's arguments.
local function rebuild(self, o, outb, staged, a1, a2, a3, a4, rest)
  local k = o.kind
  if k == "buf" then
    local b = outb[o.bi]
    local y
    if band(b.flags, SLAB) ~= 0 then y = TT(b, o.off, o.nb, b.gen, o.sid, o.dt, o.vid)   -- (view's, its bytes kept)
    else y = view(b, o.off, o.sid, o.dt, b.gen, o.vid) end
    anchor(self, y, b.gen)                 -- (no tail calls on a hit: LuaJIT counts them against
    return y                               -- its loop unroll limit, for the whole trace)
  elseif k == "arg" then
    -- an input returned: the caller's tensor, or its staged copy when it was this tree's
    -- last output (which goes stale with this call), as a body run returns them
    local y = arg_at(o.i, a1, a2, a3, a4, rest)
    if staged and is_tensor(y) and y._b.tree == self._t then y = staged[o.i] end
    return y
  elseif k == "staged" then
    local s = staged[o.i]
    local y = view(s._b, o.off, o.sid, o.dt, s._gen, o.vid)
    if self._wbl then y = unstage_res(self._wbl, y) end   -- (a copy of the caller's tensor: the caller's)
    return y
  elseif k == "argview" then
    local a = arg_at(o.i, a1, a2, a3, a4, rest)
    if staged and a._b.tree == self._t then a = staged[o.i] end
    return view(a._b, a._off + o.off, o.sid, o.dt, a._gen, o.vid)
  end
  return o.v
end

-- outs: the results' descriptors (describe_outputs), or one result's
-- descriptor itself (a hit of a one-result path reads one table less).
local function outputs(self, outs, outb, staged, a1, a2, a3, a4, rest)
  if outs.kind then
    local y = rebuild(self, outs, outb, staged, a1, a2, a3, a4, rest)
    return y
  end
  local n = outs.n
  if n == 2 then
    return rebuild(self, outs[1], outb, staged, a1, a2, a3, a4, rest), rebuild(self, outs[2], outb, staged, a1, a2, a3, a4, rest)
  end
  local r = {}
  for i = 1, n do r[i] = rebuild(self, outs[i], outb, staged, a1, a2, a3, a4, rest) end
  return unpack(r, 1, n)
end

-- The call's arguments as the core sees them (staged copies in place of own-pool inputs).
local function fill_staged(self, staged, n)
  local K = self._keyed
  if not staged then return end
  local ins, kinds = K.ins, K.kinds
  for i = 1, n do
    local s = staged[i]
    if kinds[i - 1] == KIN_TENSOR and is_tensor(s) then ins[i - 1].buf, ins[i - 1].off = s._b, s._off end
  end
end

-- leaf's memoized path goes (another takes its place, or none).
local function drop(leaf)
  if leaf.k then C.gt_tree_keyed_drop(leaf.k); leaf.k = nil end
  leaf.confirm = nil
end

-- The first call of leaf's key with other `patch` numbers than the saving
-- call's ran the body: its launches are those the trace gives, or the trace
-- missed what decides a value (the key is refused).
local function confirmed(self, leaf, K)
  local r = C.gt_tree_keyed_check(rt, leaf.k, K.ins)
  leaf.confirm = nil
  if r < 0 then
    leaf.refused = "the body gives its kernels values that depend on a `patch` number in a way the trace cannot " ..
      "follow (a table indexed by it, a number kept from another call): " .. I.errmsg() .. "; add it to key"
    drop(leaf)
    refuse(self, leaf, leaf.refused)
  elseif r == KEYED_ANEW then drop(leaf); leaf.ready = true end
end

-- After a body run of leaf's key: memoize (tr: the call's trace), or
-- verify (the body's launches against the memoized path's).
local function settle(self, leaf, verifying, tr, n, args, ...)
  local K = self._keyed
  fill_staged(self, self._staged, n)
  local t, st = self._t, K.stats
  if self._sync then leaf.refused = self._sync; drop(leaf); refuse(self, leaf, self._sync); return ... end
  for i = 1, n do                                -- a hit would not release it (the body frees an input)
    local a = args[i]
    if is_tensor(a) and band(a._b.flags, RELEASED) ~= 0 then
      leaf.refused = "it releases an argument"; drop(leaf)
      refuse(self, leaf, leaf.refused)
      return ...
    end
  end
  if tr and tr.refused then leaf.refused = tr.refused; drop(leaf); refuse(self, leaf, tr.refused); return ... end
  if verifying == "confirm" then confirmed(self, leaf, K); return ... end
  if verifying then
    local r = C.gt_tree_keyed_check(rt, leaf.k, K.ins)
    if r < 0 then
      drop(leaf)                                 -- (a key caught lying is memoized afresh)
      I.error(("tree '%s' (%s): keyed call with key %s %s" ..
        " (the key must decide the path and every number and tensor the body gives its kernels; add what" ..
        " decides it to key, or pass it as an argument: a tensor argument's address and a `patch` number are patched)")
        :format(self.name, self.where, key_text(self, unpack(args, 1, n)), I.errmsg()))
    end
    st.verified = st.verified + 1
    if r == KEYED_ANEW then drop(leaf); leaf.ready = true end   -- (the same launches on nodes the runtime keyed anew: saved again)
    return ...
  end
  local outs, cis = describe_outputs(self, args, n, tr and tr.results, ...)
  if not outs then leaf.refused = cis; drop(leaf); refuse(self, leaf, cis); return ... end
  if not tr then                                 -- traced next time, once every segment holds a graph
    leaf.ready = C.gt_tree_keyed_ready(t) ~= 0
    return ...
  end
  local ci = ffi.new("int[?]", math.max(#cis, 1), cis)
  local ex, nex, sl, nsl = trace.arrays(tr)
  local k = C.gt_tree_keyed_save(rt, t, K.ins, K.kinds, n, ci, #cis, ex, nex, sl, nsl)
  if k == nil then
    local why = I.errmsg()
    drop(leaf)
    if why:match("^not every segment replayed") then leaf.ready = C.gt_tree_keyed_ready(t) ~= 0
    elseif not why:match("^the call launched nothing") then
      leaf.refused = why
      refuse(self, leaf, why)
    end
    return ...
  end
  drop(leaf)
  -- a trace of numbers is confirmed by the first call with other numbers, which runs the body and compares
  -- (a table the body indexes with a number has no entry for the saving call's, say, but has one for others)
  if nex > 0 then
    local nums = {}
    for i = 1, n do if K.kinds[i - 1] == KIN_PATCH then nums[i] = K.ins[i - 1].v.f64 end end
    leaf.confirm = nums
  end
  leaf.k, leaf.outs, leaf.outb = k, outs.n == 1 and outs[1] or outs, ffi.new("gt_buf*[?]", math.max(#cis, 1))
  return ...
end

-- A traced body run's results: a traced number as its value (tr.results[r]:
-- the argument it is, or false), in tables too.
local function plain(tr, depth, x)
  if is_traced(x) then return trace.value(x), true end
  if depth < 8 and type(x) == "table" and getmetatable(x) == nil then
    for k, v in pairs(x) do if is_traced(v) then x[k] = plain(tr, depth + 1, v) elseif type(v) == "table" then plain(tr, depth + 1, v) end end
  end
  return x, false
end
local function results(tr, ok, ...)
  local nr = select("#", ...)
  local r = { n = nr, ok = ok, ... }
  if not ok then return r end
  for i = 1, nr do
    local x = r[i]
    local y, was = plain(tr, 0, x)
    if was then
      tr.results = tr.results or {}
      tr.results[i] = trace.arg_index(tr, x) or false
      r[i] = y
    end
  end
  return r
end

-- args (a table of the call's n arguments) with each `patch` number traced
-- and each tensor a handle on a buffer struct of its own over the same
-- memory (gt_tree_dry_arg; a traced call is on): the path then tells a launch
-- that reaches the tensor through the argument from one that reaches its
-- memory another way (a captured tensor also passed in).
local function traced_args(self, n, args)
  local K = self._keyed
  local patch, r = K.patch, {}
  for i = 1, n do
    local x = args[i]
    if patch[i] and type(x) == "number" then x = trace.arg(i, x)
    elseif is_tensor(x) then
      local b = C.gt_tree_dry_arg(self._t, x._b)
      if b == nil then I.error(I.errmsg()) end
      x = view(b, x._off, x._sid, x._dt, x._gen, x._vid)
    end
    r[i] = x
  end
  return r
end

-- Whether the call has an argument of kind k (walk_args's kinds: KIN_TENSOR,
-- KIN_PATCH).
local function has_kind(self, n, k)
  local kinds = self._keyed.kinds
  for i = 0, n - 1 do if kinds[i] == k then return true end end
  return false
end

-- Whether a call that memoizes its path runs a traced call first: for its
-- `patch` numbers, or with copy_inputs for its tensors (the caller's handle
-- of a copied input is the copy's in the call, tree_stage's apply_swaps, so
-- only the traced call's own argument structs tell a captured tensor that
-- is also passed in from the argument).
local function traced(self, n)
  return has_kind(self, n, KIN_PATCH) or (self._copy and has_kind(self, n, KIN_TENSOR))
end

local DISCARDED = trace.DISCARDED

local function pack(...) return { n = select("#", ...), ... } end

-- A call of leaf's key that memoizes its path: the body runs first with its
-- `patch` numbers traced in a call that runs nothing on the device (gt_tree_dry:
-- every segment must replay, and the call is dropped at its end), begun (the
-- call has begun: self._body, on the staged inputs if any) or not (self._run
-- begins it; mode: its eager argument); then the call runs as usual, with
-- plain numbers, and gives the results.  The trace is kept when the plain
-- run took its path with the same values in every launch (so the trace saw
-- all that decides them: a table indexed by a traced number, or `type` of
-- one, would have given other values); else, or when the traced run raised
-- or met a use it cannot follow, the key is refused.
local EMPTY = { n = 0, op = {}, a = {}, b = {}, c = {}, arg = {}, slots = {}, refused = false }
local function traced_run(self, leaf, begun, mode, n, a1, a2, a3, a4, rest)
  local K = self._keyed
  local args = packed(n, a1, a2, a3, a4, rest)
  local t = self._t
  if not traced(self, n) then                     -- nothing to trace: the call as usual, its trace empty
    local st = self._staged
    if begun and st then
      return settle(self, leaf, false, EMPTY, n, args, self._body(self, n, st[1], st[2], st[3], st[4], n > 4 and st or nil))
    elseif begun then
      return settle(self, leaf, false, EMPTY, n, args, self._body(self, n, a1, a2, a3, a4, rest))
    end
    return settle(self, leaf, false, EMPTY, n, args, self._run(self, mode, n, a1, a2, a3, a4, rest))
  end
  if C.gt_tree_keep_last(t) ~= 0 then I.error(I.errmsg()) end   -- (what the dropped call gives back)
  local tr = trace.begin()
  C.gt_tree_dry(t, 1)
  local ok, ta = pcall(traced_args, self, n, begun and self._staged or args)
  if not ok then C.gt_tree_dry(t, 0); trace.finish(); error(ta, 0) end
  K.tracing = true
  local function go()
    if begun then return self._body(self, n, ta[1], ta[2], ta[3], ta[4], n > 4 and ta or nil) end
    return self._run(self, mode, n, ta[1], ta[2], ta[3], ta[4], n > 4 and ta or nil)
  end
  local r = results(tr, pcall(go))
  C.gt_tree_dry(t, 0)
  K.tracing = false
  trace.finish()
  local why = tr.refused
  if not r.ok then
    local err = r[1]
    if getmetatable(err) ~= DISCARDED then error(err, 0) end   -- (a failure to drop it: out of memory)
    local msg = tostring(err.err)
    -- (a segment that does not replay, or a host read: the plain run says what it is)
    if not (msg:match("a traced call's segment %d+ does not replay") or msg:match("a traced call runs nothing on the device")) then
      why = why or ("the body cannot take a traced `patch` number: %s"):format((msg:gsub("^[^:]*:%d+: ", "")))
    end
    tr = nil
  end
  local out = pack(self._run(self, mode, n, a1, a2, a3, a4, rest))       -- the call, as usual
  if why then
    leaf.refused = why
    drop(leaf)
    refuse(self, leaf, why)
    return unpack(out, 1, out.n)
  end
  if tr and C.gt_tree_dry_same(t) == 0 then
    tr = nil
    if C.gt_tree_keyed_ready(t) ~= 0 then         -- the same path would replay: the trace missed what decides a value
      local w = "the body gives its kernels values that depend on a `patch` number in a way the trace cannot follow " ..
        "(a table indexed by it, `type` of it, a number kept from another call): add it to key"
      leaf.refused = w
      drop(leaf)
      refuse(self, leaf, w)
      return unpack(out, 1, out.n)
    end
  end
  return settle(self, leaf, false, tr, n, args, unpack(out, 1, out.n))
end

local verify_all = os.getenv("GTLUA_VERIFY_KEYS") == "1"

-- Whether the call's `patch` numbers differ from those of the call that saved the path (nums).
local function other_numbers(nums, K, n)
  for i = 1, n do
    local v = nums[i]
    if v ~= nil and K.kinds[i - 1] == KIN_PATCH and K.ins[i - 1].v.f64 ~= v then return true end
  end
  return false
end

-- A keyed call; pad: its inputs are padded to their bucket (a bucketed call
-- below the bucket's size), for the body (tree.lua's run: nil pads, false
-- does not) and for the staging of a hit.  The arguments: n, a1..a4, rest
-- (tree.lua's spread): no vararg function on the way to a hit's outputs.
local function keyed_call(self, pad, n, a1, a2, a3, a4, rest)
  local K = self._keyed                    -- (the tree's keyed state: M._attach)
  local mode = false
  if pad then mode = nil end
  if n > K.nins then
    K.nins = n
    K.ins, K.kinds = ffi.new("gt_arg[?]", n), ffi.new("uint8_t[?]", n)
  end
  local leaf, why = walk_args(self, walk_keys(K.memo, key_values(K.key(spread(n, a1, a2, a3, a4, rest)))),
                              n, a1, a2, a3, a4, rest)
  local st = K.stats
  if not leaf then
    if why then refuse(self, K.memo, why) else st.misses = st.misses + 1 end
    return self._run(self, mode, n, a1, a2, a3, a4, rest)
  end
  if leaf.refused then refuse(self, leaf, leaf.refused); return self._run(self, mode, n, a1, a2, a3, a4, rest) end
  local k = leaf.k
  local verifying = false
  if k and (verify_all or K.verify) then      -- (a hit touches no Lua counter: the core counts hits)
    st.calls = st.calls + 1
    verifying = verify_all or st.calls % K.verify == 0
  end
  local confirm = leaf.confirm
  if k and confirm and not verifying and other_numbers(confirm, K, n) then verifying = "confirm" end
  if k and not verifying and not (pad or K.stage) then      -- nothing to stage: one call into the core
    local outb = leaf.outb
    local r = C.gt_tree_keyed_call(rt, k, K.ins, outb)
    if r == KEYED_HIT then return outputs(self, leaf.outs, outb, nil, a1, a2, a3, a4, rest) end
    if r < 0 then I.error(I.errmsg()) end
    self._enter(self, C.gt_tree_gen(self._t))                      -- begun: run the body
    st.misses = st.misses + 1
    return traced_run(self, leaf, true, mode, n, a1, a2, a3, a4, rest)
  end
  if k and not verifying then
    local gen = C.gt_tree_call(rt, self._t, nil)
    if gen == 0 then I.error(I.errmsg()) end
    self._enter(self, gen)
    local staged
    if pad or K.stage then
      staged = self:_stage_call(pad and self._buckets.prep or self._stage_args, n, a1, a2, a3, a4, rest)
      self._staged = staged
      fill_staged(self, staged, n)
    end
    local r = C.gt_tree_keyed_run(rt, k, K.ins, leaf.outb)
    if r == KEYED_HIT then
      I.active = nil
      if self._wb then I.write_back(self) end          -- a write into a copied (padded) input reaches the caller
      return outputs(self, leaf.outs, leaf.outb, staged, a1, a2, a3, a4, rest)
    end
    if r < 0 then I.unswap(self); self._abort(); I.error(I.errmsg()) end
    st.misses = st.misses + 1                      -- a patch needs the body: run it in this call
    return traced_run(self, leaf, true, mode, n, a1, a2, a3, a4, rest)
  end
  if not k then st.misses = st.misses + 1 end
  if not verifying and (leaf.ready or not traced(self, n)) then   -- (nothing to trace: the call itself memoizes)
    return traced_run(self, leaf, false, mode, n, a1, a2, a3, a4, rest)
  end
  return settle(self, leaf, verifying, nil, n, packed(n, a1, a2, a3, a4, rest), self._run(self, mode, n, a1, a2, a3, a4, rest))
end

--- Called by gt.tree when opts.key (or patch/verify) is given.
function M._attach(tree, opts)
  local key = opts.key
  if type(key) ~= "function" then error("gt.tree: key must be a function of the call's arguments returning the values that decide its path", 3) end
  local patch = {}
  for _, i in ipairs(opts.patch or {}) do
    if type(i) ~= "number" or i < 1 or i ~= math.floor(i) then error("gt.tree: patch lists argument positions (1, 2, ...)", 3) end
    patch[i] = true
  end
  local v = opts.verify
  if v ~= nil and (type(v) ~= "number" or v < 1 or v ~= math.floor(v)) then error("gt.tree: verify must be a whole number >= 1", 3) end
  -- The tree's keyed state, its one field tree._keyed (every field here from
  -- the start: its table keeps one layout).  key, patch (positions -> true),
  -- verify (every how many hits, or false); memo: the memo trie; ins, kinds,
  -- nins: the call's arguments for the core (grown to the most a call had);
  -- stage: a call's argument needs staging; stats (hits: the core's,
  -- tree:stats); warned: the refusals warned of; tracing: a traced body run
  -- (tree.lua's end_body); call: a call's entry.
  tree._keyed = { key = key, patch = patch, verify = v or false, memo = {}, ins = false, kinds = false, nins = 0,
                  stage = false, stats = { misses = 0, verified = 0, calls = 0, refused = {} }, warned = false,
                  tracing = false, call = keyed_call, counts = false }   -- (counts: buckets.lua's count specs by position)
end

return M
