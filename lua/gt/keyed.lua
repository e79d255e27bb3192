-- gt.keyed: keyed calls (DESIGN section 5).  gt.tree(fn, {key = f, patch = {i, ...}, verify = n})
-- declares that the path a call takes depends only on f(...) (plus the
-- arguments' shapes and dtypes, static tensors' addresses and the scalar
-- arguments not listed in patch).  Once a key's path has replayed, a call
-- with that key checks those guards, patches input addresses and the patch
-- numbers, and launches the path's graphs from C without running the body.
local ffi = require "ffi"
local bit = require "bit"
local gt = require "gt"
local C, rt = gt._C, gt._rt
local select, type, getmetatable, rawequal = select, type, getmetatable, rawequal
local is_tensor, view = gt.is_tensor, gt._view
local unstage_res = gt._unstage_res
local spread, arg_at, packed = gt._spread, gt._arg_at, gt._packed
local band = bit.band
local STATIC, STAGING, RELEASED, SLAB = C.GT_BUF_STATIC, C.GT_BUF_STAGING, C.GT_BUF_RELEASED, C.GT_BUF_SLAB
local TT = ffi.typeof("gt_tensor")
local anchor = gt._anchor

local M = {}

-- Keys of the memo trie for what is not a plain value.
local NIL, NAN, TENSOR, PATCHED, STAGED = {}, {}, {}, {}, {}
local SHARES = setmetatable({}, { __index = function(t, j) local k = {}; t[j] = k; return k end })
-- (SHARES[j]: this tensor argument views argument j's buffer)

local function child(node, k)
  if k == nil then k = NIL elseif k ~= k then k = NAN end
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
  local a = self._ins[i - 1]
  a.buf = nil
  self._kinds[i - 1] = 0
  if is_tensor(x) then
    local b = x._b
    -- a released or overwritten tensor (this tree's own too: its last call's
    -- outputs are live until this call begins): the body runs, and raises
    -- where it uses it, as eager code
    if x._gen ~= b.gen_now[0] then return nil, false end
    if x._vid ~= 0 then return nil, "a non-contiguous tensor argument" end
    if self._copy or b.tree == self._t then          -- staged: a path of its own (its outputs may be staged views)
      self._kstage = true
      node = child(node, STAGED)
    end
    node = child(child(node, TENSOR), x._sid * 16 + x._dt)   -- shape and dtype: interned, one key
    if band(b.flags, STATIC) ~= 0 then
      node = child(node, tonumber(ffi.cast("uintptr_t", b)) + x._off)   -- a static tensor: by address
      return node
    end
    -- arguments that share a buffer are another path (the recording's edges
    -- and the core's inputs assumed otherwise; gt_tree_keyed_save refuses a
    -- path whose arguments share memory)
    for j = 1, i - 1 do
      if self._kinds[j - 1] == 1 and self._ins[j - 1].buf == b then node = child(node, SHARES[j]) break end
    end
    a.buf, a.off, a.nbytes = b, x._off, x._nb
    self._kinds[i - 1] = 1
    return node
  elseif type(x) == "number" and self._patch[i] then
    a.v.f64 = x
    self._kinds[i - 1] = 2
    node = child(node, PATCHED)
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
  self._kstage = false                     -- whether an argument needs staging (this tree's own output)
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

-- leaf -> the key's candidate (gt_tree_keyed_note), until its path is saved;
-- not a field of the leaf (a hit reads the leaf's few fields) nor of the tree
-- (every tree's table has one layout).  Weak keys: a leaf goes with its tree,
-- which frees the candidate.
local CANDS = setmetatable({}, { __mode = "k" })

local function key_text(self, ...)
  local parts = {}
  for i = 1, select("#", self._key(...)) do parts[i] = tostring((select(i, self._key(...)))) end
  return "(" .. table.concat(parts, ", ") .. ")"
end

-- (one warning per reason: a reason names its file:line, so a path's
-- refusal warns once however many key values take it)
local function refuse(self, leaf, why)
  local st = self._kstats
  st.refused[why] = (st.refused[why] or 0) + 1
  local warned = self._kwarned
  if not warned then warned = {}; self._kwarned = warned end
  if not warned[why] then
    warned[why] = true
    gt.on_warning(("tree '%s' (%s): a keyed call's path cannot be replayed without its body: %s; the body runs")
      :format(self.name, self.where, why))
  end
end

-- After a call that ran the body: what each result is, for rebuilding them
-- on a hit.  Returns the descriptors and the core's output list, or nil and why.
local function describe_outputs(self, args, n, ...)
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
    else
      -- an argument returned as is (a `patch` number, say) is this call's
      for i = 1, n do if y ~= nil and rawequal(args[i], y) then o = { kind = "arg", i = i } break end end
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
  if not staged then return end
  local ins, kinds = self._ins, self._kinds
  for i = 1, n do
    local s = staged[i]
    if kinds[i - 1] == 1 and is_tensor(s) then ins[i - 1].buf, ins[i - 1].off = s._b, s._off end
  end
end

-- After a body run of leaf's key: memoize, verify or confirm.
local function settle(self, leaf, verifying, n, args, ...)
  fill_staged(self, self._staged, n)
  local t, st = self._t, self._kstats
  if self._sync then leaf.refused = self._sync; leaf.k = nil; refuse(self, leaf, self._sync); return ... end
  for i = 1, n do                                -- a hit would not release it (the body frees an input)
    local a = args[i]
    if is_tensor(a) and band(a._b.flags, RELEASED) ~= 0 then
      leaf.refused, leaf.k = "it releases an argument", nil
      refuse(self, leaf, leaf.refused)
      return ...
    end
  end
  if leaf.k then
    local d = C.gt_tree_keyed_differs(t, leaf.k)
    if d >= 0 then
      leaf.k = nil                               -- (a key caught lying is memoized afresh)
      if verifying then
        gt._error(("tree '%s' (%s): keyed call with key %s took another path than the memoized one: its segment %d differs" ..
          " (the key must decide the path; add what decides it to key)"):format(self.name, self.where,
          key_text(self, unpack(args, 1, n)), d + 1))
      end
    else
      if verifying then
        if C.gt_tree_keyed_check(rt, leaf.k, self._ins) ~= 0 then
          leaf.k = nil
          gt._error(("tree '%s' (%s): keyed call with key %s launched other values than the memoized path: %s" ..
            " (the key must decide every number and tensor the body gives its kernels; add what decides it to key," ..
            " or pass it as an argument: a tensor argument's address and a `patch` number are patched)")
            :format(self.name, self.where, key_text(self, unpack(args, 1, n)), gt._errmsg()))
        end
        st.verified = st.verified + 1
      end
      if C.gt_tree_keyed_confirm(rt, leaf.k, self._ins) ~= 0 then leaf.k = nil end
      return ...
    end
  end
  local outs, cis = describe_outputs(self, args, n, ...)
  if not outs then leaf.refused = cis; refuse(self, leaf, cis); return ... end
  local ci = ffi.new("int[?]", math.max(#cis, 1), cis)
  local cands = CANDS
  local k = C.gt_tree_keyed_save(rt, t, self._ins, self._kinds, n, ci, #cis, cands[leaf])
  if k == nil then
    local why = gt._errmsg()
    if why:match("^not every segment replayed") then
      -- (recorded in this call: the key's candidate, whose numbers the save
      -- compares with its own to confirm `patch` slots at once)
      local kc = C.gt_tree_keyed_note(rt, t, self._ins, self._kinds, n, cands[leaf])
      cands[leaf] = kc ~= nil and kc or nil
    elseif not why:match("^the call launched nothing") then
      leaf.refused = why
      refuse(self, leaf, why)
    end
    return ...
  end
  cands[leaf] = nil                              -- (the save took it)
  leaf.k, leaf.outs, leaf.outb = k, outs.n == 1 and outs[1] or outs, ffi.new("gt_buf*[?]", math.max(#cis, 1))
  return ...
end

local verify_all = os.getenv("GTLUA_VERIFY_KEYS") == "1"

-- A keyed call; pad: its inputs are padded to their bucket (a bucketed call
-- below the bucket's size), for the body (tree.lua's run: nil pads, false
-- does not) and for the staging of a hit.  The arguments: n, a1..a4, rest
-- (tree.lua's spread): no vararg function on the way to a hit's outputs.
local function keyed_call(self, pad, n, a1, a2, a3, a4, rest)
  local mode = false
  if pad then mode = nil end
  if n > self._nins then
    self._nins = n
    self._ins, self._kinds = ffi.new("gt_arg[?]", n), ffi.new("uint8_t[?]", n)
  end
  local leaf, why = walk_args(self, walk_keys(self._memo, key_values(self._key(spread(n, a1, a2, a3, a4, rest)))),
                              n, a1, a2, a3, a4, rest)
  local st = self._kstats
  if not leaf then
    if why then refuse(self, self._memo, why) else st.misses = st.misses + 1 end
    return self._run(self, mode, n, a1, a2, a3, a4, rest)
  end
  if leaf.refused then refuse(self, leaf, leaf.refused); return self._run(self, mode, n, a1, a2, a3, a4, rest) end
  local k = leaf.k
  local verifying = false
  if k and (verify_all or self._verify) then      -- (a hit touches no Lua counter: the core counts hits)
    st.calls = st.calls + 1
    verifying = verify_all or st.calls % self._verify == 0
  end
  if k and not verifying and not (pad or self._kstage) then      -- nothing to stage: one call into the core
    local outb = leaf.outb
    local r = C.gt_tree_keyed_call(rt, k, self._ins, outb)
    if r == 0 then return outputs(self, leaf.outs, outb, nil, a1, a2, a3, a4, rest) end
    if r < 0 then gt._error(gt._errmsg()) end
    self._enter(self, C.gt_tree_gen(self._t))                      -- begun: run the body
    st.misses = st.misses + 1
    return settle(self, leaf, false, n, packed(n, a1, a2, a3, a4, rest), self._body(self, n, a1, a2, a3, a4, rest))
  end
  if k and not verifying then
    local gen = C.gt_tree_call(rt, self._t, nil)
    if gen == 0 then gt._error(gt._errmsg()) end
    self._enter(self, gen)
    local staged
    if pad or self._kstage then
      staged = self:_stage_call(pad and self._prep or self._stage_args, n, a1, a2, a3, a4, rest)
      self._staged = staged
      fill_staged(self, staged, n)
    end
    local r = C.gt_tree_keyed_run(rt, k, self._ins, leaf.outb)
    if r == 0 then
      gt._active = nil
      if self._wb then gt._write_back(self) end          -- a write into a copied (padded) input reaches the caller
      return outputs(self, leaf.outs, leaf.outb, staged, a1, a2, a3, a4, rest)
    end
    if r < 0 then self._abort(); gt._error(gt._errmsg()) end
    st.misses = st.misses + 1                      -- a patch needs the body: run it in this call
    local args = packed(n, a1, a2, a3, a4, rest)
    if staged then
      return settle(self, leaf, false, n, args, self._body(self, n, staged[1], staged[2], staged[3], staged[4], n > 4 and staged or nil))
    end
    return settle(self, leaf, false, n, args, self._body(self, n, a1, a2, a3, a4, rest))
  end
  if not k then st.misses = st.misses + 1 end
  return settle(self, leaf, verifying, n, packed(n, a1, a2, a3, a4, rest), self._run(self, mode, n, a1, a2, a3, a4, rest))
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
  tree._keyed, tree._key, tree._patch, tree._verify = true, key, patch, v
  tree._memo, tree._nins = {}, 0
  tree._kstats = { misses = 0, verified = 0, calls = 0, refused = {} }   -- (hits: the core's, tree:stats)
  tree._keyed_call = keyed_call
end

return M
