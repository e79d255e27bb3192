-- gt.busted: luassert extensions for specs: assert.recorded, assert.replayed,
-- assert.nodes, assert.stale, assert.tensor_near, and a tensor formatter.
local gt = require "gt"
local I = require "gt.internal"
local reg = debug.getregistry()
local assert = require "luassert"
local say = require "say"
if reg["gtlua.busted"] then return reg["gtlua.busted"] end

local function count_assertion(name, field, what)
  say:set("assertion." .. name .. ".positive", "Expected tree %s to have %s " .. what .. ", it has %s")
  say:set("assertion." .. name .. ".negative", "Expected tree %s not to have %s " .. what)
  assert:register("assertion", name, function(_, args)
    local tree, n = args[1], args[2]
    local got = tree:stats()[field]
    args[1], args[3] = "'" .. tree.name .. "'", got
    args.n = 3
    return got == n
  end, "assertion." .. name .. ".positive", "assertion." .. name .. ".negative")
end
count_assertion("recorded", "recorded", "recordings")
count_assertion("replayed", "replays", "replays")
count_assertion("nodes", "nodes", "nodes")

say:set("assertion.stale.positive", "Expected %s to be stale (using it raises)")
say:set("assertion.stale.negative", "Expected %s to be usable, but using it raises")
assert:register("assertion", "stale", function(_, args)
  local t = args[1]
  local ok = pcall(t.tolist, t)
  return not ok and t:is_stale()
end, "assertion.stale.positive", "assertion.stale.negative")

local function flat(x, out)
  out = out or {}
  if type(x) == "table" then for i = 1, #x do flat(x[i], out) end else out[#out + 1] = x end
  return out
end

say:set("assertion.tensor_near.positive", "Expected %s to be near %s (tolerance %s): %s")
say:set("assertion.tensor_near.negative", "Expected %s not to be near %s (tolerance %s)")
--- assert.tensor_near(expected, t [, tol = 1e-5]): max |t - e| / (max |e| + tiny) <= tol
assert:register("assertion", "tensor_near", function(_, args)
  local expected, t, tol = args[1], args[2], args[3] or 1e-5
  if gt.is_tensor(expected) then expected = expected:tolist() end
  local e, g = flat(expected), flat(gt.is_tensor(t) and t:tolist() or t)
  local why
  if #e ~= #g then why = ("%d values, expected %d"):format(#g, #e)
  else
    local scale, worst, at = 1e-12, 0, 0
    for i = 1, #e do scale = math.max(scale, math.abs(e[i])) end
    for i = 1, #e do
      local d = math.abs(g[i] - e[i])
      if d ~= d or d > worst then worst, at = d, i end
    end
    if worst ~= worst or worst / scale > tol then
      why = ("at %d: %s vs %s (relative error %.3g)"):format(at, tostring(g[at]), tostring(e[at]), worst / scale)
    end
  end
  args[1], args[2], args[3], args[4] = t, expected, tol, why or "near"
  args.n = 4
  return why == nil
end, "assertion.tensor_near.positive", "assertion.tensor_near.negative")

-- Tensors print as "f32 8x256 [values...]", not as a table address.
assert:add_formatter(function(v)
  if not gt.is_tensor(v) then return nil end
  local head = v.dtype .. " " .. I.shape_str(v._shape)
  if v:is_stale() then return head .. " (stale)" end
  local ok, vals = pcall(v.tolist, v)
  if not ok then return head end
  local f = flat(vals)
  local shown = {}
  for i = 1, math.min(#f, 8) do shown[i] = string.format("%.6g", f[i]) end
  return head .. " [" .. table.concat(shown, ", ") .. (#f > 8 and ", ..." or "") .. "]"
end)

local M = { flat = flat }
reg["gtlua.busted"] = M
return M
