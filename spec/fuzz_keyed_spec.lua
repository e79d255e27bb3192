-- Keyed trees against eager runs (spec/harness/fuzz_keyed.lua): random step
-- functions under gt.tree(fn, {key, patch, verify, copy_inputs}) and the same
-- functions run eagerly, over patch numbers traced through arithmetic and
-- branches, equal patch numbers, int/unsigned/long long/bool slots, signed
-- zero keys, captured non-static tensors, copy_inputs with static weights,
-- two trees feeding each other, verify, trims and floors.  Fixed seeds here;
-- `scripts/fuzz.sh keyedfuzz` runs more.  The seeds run in a gtlua process of
-- their own: a crash fails this spec naming its seed, not the whole suite.
local gt = require "gt"
local S = require "spec.support"
local F = require "spec.harness.fuzz_keyed"
for w in pairs(F.skip) do F.skip[w] = nil end     -- (every feature: KEYEDFUZZ_SKIP is for triage by hand)

-- Runs seeds first..first+seeds-1 for `steps` steps each in a subprocess:
-- the mismatches (a list of messages) and the closing line's counts.
local function campaign(first, seeds, steps, limit)
  local at = os.tmpname()
  local code = ("package.path = './?.lua;' .. package.path; " ..
    "local bad = require('spec.harness.fuzz_keyed').run(%d, %d, %d); os.exit(#bad == 0 and 0 or 1, true)")
    :format(first, seeds, steps)
  -- (this backend; without the triage variables a campaign by hand may have set)
  -- (Ulimit: a tensor the body captures, not static, passed as an argument too, only where a tree
  -- tells it from the argument, docs/DESIGN.md section 5's limit; no trimB, B:trim in A's body,
  -- whose stale outputs the eager side does not model)
  local status, out, err = S.sh(("timeout %d env -u KEYEDFUZZ_TRACE KEYEDFUZZ_SKIP=Ulimit,trimB KEYEDFUZZ_AT=%s \"$GTLUA\" " ..
    "--backend=%s -e %s"):format(limit, S.shq(at), gt.backend(), S.shq(code)))
  local f = io.open(at)
  local seed = f and f:read("*l")
  if f then f:close() end
  os.remove(at)
  local line = out:match("keyedfuzz: [^\n]*")
  if not line then
    error(("the keyed fuzzer's process ended (status %s) in seed %s without its closing line (rerun: " ..
      "KEYEDFUZZ_TRACE=1 scripts/fuzz.sh keyedfuzz 1 %d %s)\n%s%s"):format(tostring(status), tostring(seed), steps,
      tostring(seed), out:sub(-2000), err:sub(-2000)), 2)
  end
  local bad = {}
  for m in out:gmatch("(keyedfuzz seed [^\n]*\n[^\n]*)") do bad[#bad + 1] = m end
  local n = {}
  for k, v in pairs({ calls = "(%d+) calls", hits = "(%d+) hits", raised = "(%d+) raised", mismatches = "(%d+) mismatches" }) do
    n[k] = tonumber(line:match(v))
  end
  if n.mismatches > 0 and #bad == 0 then bad[1] = out:sub(-4000) end
  return bad, n, line
end

-- No mismatch, else how many and the first few (each with its steps and the warnings).
local function none(bad, line)
  if #bad == 0 then return end
  error(("%d programs mismatch (%s)\n%s"):format(#bad, line, table.concat(bad, "\n", 1, math.min(#bad, 8))), 2)
end

describe("keyed trees against eager runs (fuzz_keyed)", function()
  it("draw programs of every kind among the fixed seeds", function()
    -- what the programs' options say, and what their source shows (Lua patterns)
    local kinds = { "arithmetic only", "branches and math", "steady calls", "copy_inputs", "verify",
                    "B:trim in A's body", "U written", "U read", "B's output kept", "a number result",
                    "special numbers", "two patch numbers", "numbers keyed by value", "a -0.0 key" }
    local shown = { "kz_i", "kz_u", "kz_l", "kz_b", "kz_d", "kz_rep", "kz_2", "kz_w", "kz_in", "gt.cond", "gt.loop",
                    "gt.cut", "gt.full", "axpby", "KB%.", " %% 2 == 0 and 100", "[<>=~]=? ", "tostring", "T%[",
                    "env.f", "env.g", "math.floor", "math.min", "math.max", " / k", "type%(p%)", "tonumber%(",
                    "%.%. ''", "%^ 2", "%(%- " }
    local seen = {}
    for seed = 1, 600 do
      local desc, P = F.program(seed)
      local has = { ["arithmetic only"] = P.follow, ["branches and math"] = not P.follow, ["steady calls"] = P.steady,
                    copy_inputs = P.copy, verify = P.verifyA or P.verifyB, ["B:trim in A's body"] = P.trimB,
                    ["U written"] = P.useU and P.writeU, ["U read"] = P.useU and not P.writeU,
                    ["B's output kept"] = P.useO, ["a number result"] = P.retnum, ["special numbers"] = P.special > 0,
                    ["two patch numbers"] = #P.patchA == 2, ["numbers keyed by value"] = #P.patchA == 0 }
      for _, k in ipairs(P.keys) do if k == 0 and 1 / k < 0 then has["a -0.0 key"] = true end end
      for _, k in ipairs(kinds) do if has[k] then seen[k] = true end end
      for _, w in ipairs(shown) do if desc:find(w) then seen[w] = true end end
    end
    for _, k in ipairs(kinds) do assert.is_true(seen[k] == true, "no program among the fixed seeds has " .. k) end
    for _, w in ipairs(shown) do assert.is_true(seen[w] == true, "no program among the fixed seeds shows " .. w) end
  end)

  it("agree on 600 random programs of 60 steps each, with hits among the calls", function()
    local bad, n, line = campaign(1, 600, 60, 300)
    none(bad, line)
    assert.is_true(n.calls >= 20000, line)
    assert.is_true(n.hits >= n.calls / 50, "few calls were hits: " .. line)
  end)
end)

describe("keyed trees against eager runs, many seeds (fuzz_keyed) #slow", function()
  it("agree on 2500 more random programs of 60 steps each (about 10^5 calls)", function()
    local bad, n, line = campaign(601, 2500, 60, 1800)
    none(bad, line)
    assert.is_true(n.calls >= 90000, line)
  end)
end)
