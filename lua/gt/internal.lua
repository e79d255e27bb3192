-- gt.internal: the names gt's modules share with each other and not with users.
--
-- `local I = require "gt.internal"` in a module of lua/gt/; the public API
-- is the `gt` table alone.  Every shared name is listed here with the module
-- that sets it and what it is: a module defines its own entries when it
-- loads (init.lua loads them in order), and one reads another's at call time
-- (I.flush, I.active), so that a later definition (cond.lua's wrapped flush)
-- is the one called.  Each entry exists from the start (false until its
-- module sets it, a no-op for hooks): the table has one layout, and a
-- misspelt name reads nil where a declared one reads false.
-- One table per process: kept in the registry, as gt itself (init.lua), so
-- that a module loaded again (Busted's insulation) shares it.
local reg = debug.getregistry()
if reg["gtlua.internal"] then return reg["gtlua.internal"] end

local I = {
  -- init.lua: the core and errors at the user's line
  C = false,              -- ffi.C with gt.h declared
  rt = false,             -- the process's gt_runtime
  errmsg = false,         -- errmsg() -> the core's last failure as a message
  where = false,          -- where([level]) -> "file:line: " of the first frame outside gt, and a tail-called name
  error = false,          -- error(msg [, level]): error() at the user's line
  fail = false,           -- fail(): raises the core's last failure at the user's line
  show = false,           -- show(v) -> v as an error says what it got ("a tensor 4x4 f32")
  opts = false,           -- opts(opts, what) -> opts, or {} for nil; raises when not a table

  -- tensor.lua: dtypes, interned shapes, the tensor constructor, releases
  dtypes = false,         -- dtype name -> { code, size, ct, int, name [, half] }
  dtype_of_code = false,  -- GT_F32.. -> dtype name
  shape_str = false,      -- shape_str(shape) -> "8x256" (or "scalar")
  same_shape = false,     -- same_shape(a, b) -> whether two shapes have the same sizes
  shapes = false,         -- SHAPES[sid]: the interned shape table of shape id sid (never change it)
  numel = false,          -- NUMEL[sid]: its element count
  shape_id = false,       -- shape_id(shape, level) -> the shape's id; raises on a bad shape
  view = false,           -- view(b, off, sid, dt, gen, vid, new) -> a tensor: the one constructor
  new_sid = false,        -- new_sid(sid, d, level) -> a new tensor over a new buffer (a tree call's, in one)
  lane_buf = false,       -- lane_buf(j, bytes, li) -> the call's buffer struct j, made by the replay lane
  last_made = false,      -- int32_t[2]: the shape id and dtype code of the last tensor a tree call made
  release_as = false,     -- release_as(x, y): x released as y was (y's site in its message)
  stale_error = false,    -- stale_error(t, level): raises why tensor t is no longer valid
  dead_copy = false,      -- dead_copy(x) -> a handle that raises as released tensor x does
  plain_note = false,     -- plain_note(t): t noted in the innermost scope outside tree calls
  host_results = false,   -- host_results(extra, ok, n, r1, r2) -> the results of gt.host.run
  half_kernels = false,   -- half_kernels(dtype) -> kernels/half.cu compiled for "f16" or "bf16"
  read_raw = false,       -- read_raw(t, level) -> t's elements as stored (a host array), their count

  -- tree.lua: the active call, segment ends, a call's arguments
  active = false,         -- the tree whose call runs now (false or nil: none)
  trees = false,          -- every tree made (weakly, unless GTLUA_KEEP_TREES=1): --stats, --report, soak.sh
  flush = false,          -- flush(level, reason, cut): ends the segment (cond.lua wraps it)
  note_sync = false,      -- note_sync(what, level): a host read or write in a keyed tree's call
  spread = false,         -- spread(n, a1, a2, a3, a4, rest) -> the n arguments
  arg_at = false,         -- arg_at(i, a1, a2, a3, a4, rest) -> argument i
  packed = false,         -- packed(n, a1, a2, a3, a4, rest) -> the arguments in a table of their own

  -- tree_anchor.lua: how long a call's results keep the tree's memory
  anchor = false,         -- anchor(tree, x [, gen]) -> x: a call's result keeps the tree's memory
  anchor_view = false,    -- anchor_view(y, b): a view made outside calls of a tree's latest output

  -- tree_stage.lua: a call's inputs staged, and written back
  check_input = false,    -- check_input(tree, x) -> own, live
  unstaged = false,       -- unstaged(x, own) -> a not-live input as the body gets it
  span = false,           -- span(x) -> lo, hi: the bytes of its buffer tensor x spans
  note_copy = false,      -- note_copy(tree, x, px, outer, chunk, padded): px is x's staged copy
  write_back = false,     -- write_back(tree): what a call wrote into staged copies, back into the inputs
  unstage_res = false,    -- unstage_res(wbl, y) -> a result on a staged copy as the caller's tensor
  pin_inputs = false,     -- pin_inputs(tree, args, n): the staging slots inputs live in, kept
  shared_inputs = false,  -- shared_inputs(tree, args, n) -> the buffers several staged inputs view
  stage_arg = false,      -- stage_arg(tree, x, slot, shared) -> x staged, the next free slot
  apply_swaps = false,    -- apply_swaps(tree): each copied input's handle onto its copy for the call
  unswap = false,         -- unswap(tree): the copied inputs' handles and buffers as they were

  -- explain.lua, cond.lua, ops.lua
  explain = false,        -- explain(want, level, reason, results): a node's first visit, its cut and shapes
  in_body = false,        -- a function while a gt.cond/gt.loop body runs (no sync inside), else false or nil
  ops_new_call = function() end,   -- ops_new_call(): a tree call began (gt.ops resets its per-call state)
}

reg["gtlua.internal"] = I
return I
