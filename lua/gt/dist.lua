-- gt.dist: several processes (ranks), one a GPU, and collectives on tensors.
--
-- `gtlua --nproc N model.lua` starts the ranks (or any launcher that sets
-- RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun does);
-- gt.dist.init() joins them.  The cuda backend runs collectives through NCCL,
-- the cpu backend through a shared-memory group of the same semantics.
-- Outside a tree call a collective runs at once; inside one it is a node of
-- the segment's graph, replayed with it (src/dist.c, docs/DESIGN.md).
local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt

local dist = {}
local OPS = { sum = C.GT_RED_SUM, max = C.GT_RED_MAX, min = C.GT_RED_MIN }
local TT = gt.Tensor

local function env_int(name)
  local v = os.getenv(name)
  return v and tonumber(v), v
end

local function need_init(what, level)
  if C.gt_dist_world(rt) == 0 then
    I.error("gt.dist." .. what .. ": gt.dist.init() has not been called (call it once, at the start of the script)", level + 1)
  end
end

--- gt.dist.init() -> rank, world: joins the group from the environment (RANK,
--- WORLD_SIZE, MASTER_ADDR, MASTER_PORT: `gtlua --nproc N script.lua` sets them,
--- as torchrun does); again: the same answer.  Collectives wait at most
--- GTLUA_DIST_TIMEOUT seconds (60) for a rank that does not come.
function dist.init()
  if C.gt_dist_world(rt) > 0 then return C.gt_dist_rank(rt), C.gt_dist_world(rt) end
  local rank, rs = env_int("RANK")
  local world, ws = env_int("WORLD_SIZE")
  if not rs or not ws then
    I.error("gt.dist.init: RANK and WORLD_SIZE are not set: start the script with `gtlua --nproc N script.lua` " ..
            "(or a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as torchrun does)", 2)
  end
  if not rank or not world or rank % 1 ~= 0 or world % 1 ~= 0 then
    I.error("gt.dist.init: RANK=" .. rs .. " and WORLD_SIZE=" .. ws .. " must be whole numbers", 2)
  end
  local id = (os.getenv("MASTER_ADDR") or "127.0.0.1") .. ":" .. (os.getenv("MASTER_PORT") or "29500")
  local timeout = tonumber(os.getenv("GTLUA_DIST_TIMEOUT") or "") or 60
  if C.gt_dist_init(rt, rank, world, id, timeout) ~= 0 then I.fail() end
  return rank, world
end

--- gt.dist.rank() -> this process's rank (0 .. world - 1), after init
function dist.rank() need_init("rank", 2) return C.gt_dist_rank(rt) end

--- gt.dist.world() -> the number of ranks, after init
function dist.world() need_init("world", 2) return C.gt_dist_world(rt) end

--- gt.dist.barrier(): returns when every rank has called it (outside tree calls)
function dist.barrier()
  need_init("barrier", 2)
  if C.gt_dist_barrier(rt) ~= 0 then I.fail() end
end

-- The tensor argument `name` of collective `what`: contiguous, live.
local function arg(t, what, name, level)
  if not gt.is_tensor(t) then I.error("gt.dist." .. what .. ": " .. name .. " must be a tensor, got " .. I.show(t), level + 1) end
  if t:is_stale() then I.stale_error(t, level + 1) end
  if not t:is_contiguous() then
    I.error("gt.dist." .. what .. ": " .. name .. " is not contiguous; pass t:clone() (or the base tensor)", level + 1)
  end
  return t
end

local function run(what, kind, op, root, out, t, level)
  if C.gt_dist_coll(rt, kind, op, root, t._dt, out._b, out._off, out._nb, t._b, t._off, t._nb) ~= 0 then
    I.error(I.errmsg(), level + 1)
  end
end

local function red_op(op, what, level)
  local v = OPS[op or "sum"]
  if not v then I.error("gt.dist." .. what .. ": op " .. I.show(op) .. " is none of \"sum\", \"max\", \"min\"", level + 1) end
  return v
end

local function same_dtype(out, t, what, level)
  if out.dtype ~= t.dtype then
    I.error("gt.dist." .. what .. ": out is " .. out.dtype .. " but the input is " .. t.dtype, level + 1)
  end
end

--- gt.dist.all_reduce(t [, op]) -> t: every rank's t reduced ("sum", "max" or
--- "min"), in place, on every rank
function dist.all_reduce(t, op)
  need_init("all_reduce", 2)
  arg(t, "all_reduce", "t", 2)
  run("all_reduce", C.GT_COLL_ALL_REDUCE, red_op(op, "all_reduce", 2), 0, t, t, 2)
  return t
end

--- gt.dist.all_gather(out, t) -> out: every rank's t, in rank order, into out
--- (world x t's elements; out[r] is rank r's t when out has a leading dimension of world)
function dist.all_gather(out, t)
  need_init("all_gather", 2)
  arg(out, "all_gather", "out", 2); arg(t, "all_gather", "t", 2); same_dtype(out, t, "all_gather", 2)
  run("all_gather", C.GT_COLL_ALL_GATHER, 0, 0, out, t, 2)
  return out
end

--- gt.dist.reduce_scatter(out, t [, op]) -> out: t (world x out's elements)
--- reduced across ranks; rank r's out is piece r of the result
function dist.reduce_scatter(out, t, op)
  need_init("reduce_scatter", 2)
  arg(out, "reduce_scatter", "out", 2); arg(t, "reduce_scatter", "t", 2); same_dtype(out, t, "reduce_scatter", 2)
  run("reduce_scatter", C.GT_COLL_REDUCE_SCATTER, red_op(op, "reduce_scatter", 2), 0, out, t, 2)
  return out
end

--- gt.dist.broadcast(t, root) -> t: root's t into every rank's t, in place
function dist.broadcast(t, root)
  need_init("broadcast", 2)
  arg(t, "broadcast", "t", 2)
  if type(root) ~= "number" or root % 1 ~= 0 then I.error("gt.dist.broadcast: root must be a rank number, got " .. I.show(root), 2) end
  run("broadcast", C.GT_COLL_BROADCAST, 0, root, t, t, 2)
  return t
end

return dist
