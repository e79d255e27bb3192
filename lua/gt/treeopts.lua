-- gt.treeopts: the options of gt.tree checked before anything is made; each bad one is an
-- error naming the option, what it got and what is allowed (unknown names too, with a
-- did-you-mean).  Returns a function check(opts, fail) -> opts, fail(msg) raising at the user's line.
local INT_MAX = 2147483647

-- v for a message: strings quoted, numbers as written (1.5, 4294967296, inf, nan): I.show.
local show = require("gt.internal").show

local function whole(v, lo, hi)
  return type(v) == "number" and v == math.floor(v) and v >= lo and v <= hi
end

-- A count for the C core's int; unlimited: math.huge is taken as 2^31-1.
local function count(lo, what, unlimited)
  return function(v)
    if whole(v, lo, INT_MAX) then return v end
    if unlimited and v == math.huge then return INT_MAX end
    return nil, string.format("a whole number in %d..%d%s (%s)", lo, INT_MAX, unlimited and " or math.huge" or "", what)
  end
end

local function position(v)
  if whole(v, 1, INT_MAX) then return v end
  return nil, "an argument position: a whole number >= 1"
end

-- Each option: a checker returning the value to use, or nil and what is allowed.
-- A check that v is of Lua type t; allowed: what the message says is allowed.
local function of_type(t, allowed)
  return function(v)
    if type(v) == t then return v end
    return nil, allowed
  end
end

local CHECK = {
  name = function(v)
    if type(v) == "string" and v ~= "" and not v:find("%z") then return v end
    return nil, "a non-empty string (the tree's name in messages and pictures)"
  end,
  warmup = count(0, "eager visits of a node before it records; 0 records on the first visit"),
  max_recordings = count(0, "graphs the tree may hold; math.huge for no limit", true),
  on_limit = function(v)
    if v == "eager" or v == "error" or v == "evict" then return v end
    return nil, '"eager" (new paths past max_recordings run eagerly), "error" (they raise) or "evict" (they run ' ..
      'eagerly and the least recently used recording is dropped after the call, so they record next)'
  end,
  copy_inputs = of_type("boolean", "true or false (copy every tensor input to a staging buffer first)"),
  warn_shapes = function(v)
    if v == false or v == math.huge or whole(v, 1, INT_MAX) then return v end
    return nil, "a whole number >= 1 (distinct input shapes before one warning) or false (never warn)"
  end,
  key = of_type("function", "a function of the call's arguments returning the values that decide its path"),
  verify = function(v)
    if whole(v, 1, INT_MAX) then return v end
    return nil, "a whole number >= 1 (run the body on every n-th keyed call and compare its path)"
  end,
}

local function check_patch(v, bad, fail)
  if type(v) ~= "table" then bad("patch", v, "a list of argument positions, e.g. {2, 3}") end
  for k, i in pairs(v) do
    if not whole(k, 1, #v) then fail("gt.tree: option patch must be a list of argument positions, e.g. {2, 3}; it has the key " .. show(k)) end
    local _, allowed = position(i)
    if allowed then bad("patch[" .. k .. "]", i, allowed) end
  end
end

local SPEC_KEYS = { dim = true, sizes = true, arg = true, pad = true, count = true, name = true }
local TOP_KEYS = { narrow = true, verify = true }   -- the buckets table's own (one spec's table, or the list's)

-- narrow and verify, on the buckets table (where: "buckets").
local function check_top(b, where, bad)
  local rule = b.narrow
  if rule ~= nil and type(rule) ~= "function" then
    local ok = type(rule) == "table" and getmetatable(rule) == nil
    for k, i in pairs(ok and rule or {}) do ok = ok and whole(k, 1, #rule) and whole(i, 1, INT_MAX) end
    if not ok then
      bad(where .. ".narrow", rule, "a list of result positions (e.g. {1, 3}: those results are narrowed back) " ..
        "or a function(i, t, k) returning whether result i (t, at key k in a table result) is")
    end
  end
  if b.verify ~= nil and not whole(b.verify, 1, INT_MAX) then
    bad(where .. ".verify", b.verify, "a whole number >= 1 (every n-th padded call also runs the body eagerly " ..
      "without padding and compares the results)")
  end
end

local function check_bucket(b, where, bad, fail, top)
  if type(b) ~= "table" then bad(where, b, "a table {dim = d, sizes = {...}} (e.g. sizes = gt.buckets.pow2(64))") end
  for k in pairs(b) do
    if TOP_KEYS[k] and not top then
      fail("gt.tree: option " .. where .. " has the key " .. show(k) .. ", which belongs to the buckets table " ..
        "itself: buckets = { {dim = ...}, {dim = ...}, " .. k .. " = ... }")
    end
    if not SPEC_KEYS[k] and not (top and TOP_KEYS[k]) then
      fail("gt.tree: option " .. where .. " has the unknown key " .. show(k) ..
        "; a bucket spec is {dim = d (1-based, default 1), sizes = {...} [, arg = i (the argument to pad)]" ..
        " [, pad = v (the pad value, 0 by default)] [, name = s]} or {count = i (a number argument), sizes = {...}" ..
        " [, name = s]}, and the buckets table may say narrow = {...} and verify = n")
    end
  end
  if b.name ~= nil and (type(b.name) ~= "string" or b.name == "") then
    bad(where .. ".name", b.name, "a non-empty string (gt.bucket(name) gives that spec's sizes)")
  end
  if b.count ~= nil then
    local _, allowed = position(b.count)
    if allowed then bad(where .. ".count", b.count, allowed .. " (the number argument the spec buckets)") end
    for _, k in ipairs { "dim", "arg", "pad" } do
      if b[k] ~= nil then
        fail("gt.tree: option " .. where .. " has both count and " .. k .. ": a count spec buckets a number " ..
          "argument (count = i); dim, arg and pad belong to a spec that pads a tensor")
      end
    end
  end
  if b.pad ~= nil and type(b.pad) ~= "number" then
    bad(where .. ".pad", b.pad, "a number (what the padding holds, 0 by default; -math.huge before a max)")
  end
  if top then check_top(b, where, bad) end
  if b.dim ~= nil and not whole(b.dim, 1, INT_MAX) then bad(where .. ".dim", b.dim, "a dimension: a whole number >= 1 (1-based)") end
  if b.arg ~= nil then
    local _, allowed = position(b.arg)
    if allowed then bad(where .. ".arg", b.arg, allowed) end
  end
  local sizes = b.sizes
  if type(sizes) ~= "table" or #sizes == 0 then
    bad(where .. ".sizes", sizes, "a non-empty list of increasing whole numbers >= 1 (e.g. gt.buckets.pow2(64))")
  end
  local least = b.count ~= nil and 0 or 1            -- (a count may be 0: a step with no rows of that kind)
  for i, s in ipairs(sizes) do
    if not whole(s, least, 2 ^ 53) or (i > 1 and s <= sizes[i - 1]) then
      bad(where .. ".sizes[" .. i .. "]", s, "increasing whole numbers >= " .. least ..
        (i > 1 and type(sizes[i - 1]) == "number" and (" (the size before it is " .. show(sizes[i - 1]) .. ")") or ""))
    end
  end
end

local function check_buckets(v, bad, fail)
  if type(v) ~= "table" then bad("buckets", v, "{dim = d, sizes = {...}} or a list of them") end
  if v.sizes ~= nil or v.dim ~= nil or v.arg ~= nil or v.pad ~= nil or v.count ~= nil then
    return check_bucket(v, "buckets", bad, fail, true)
  end
  if #v == 0 then bad("buckets", v, "{dim = d, sizes = {...}} or a non-empty list of them") end
  for k in pairs(v) do
    if not whole(k, 1, #v) and not TOP_KEYS[k] then
      fail("gt.tree: option buckets must be {dim = d, sizes = {...}} or a list of them (with narrow = {...}, " ..
        "verify = n); it has the key " .. show(k))
    end
  end
  for i, b in ipairs(v) do check_bucket(b, "buckets[" .. i .. "]", bad, fail, false) end
  check_top(v, "buckets", bad)
end

local NAMES = { "name", "warmup", "max_recordings", "on_limit", "copy_inputs", "buckets", "warn_shapes", "key", "patch", "verify" }
local KNOWN = {}
for _, n in ipairs(NAMES) do KNOWN[n] = true end
-- Options DESIGN names for later: asking for one raises (never silently ignored).
local NOT_BUILT = { pool = "sharing one pool between trees (pool = other_tree) is not implemented yet; give each tree its own" }

-- Levenshtein distance, for did-you-mean (names are short).
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

local function unknown(k, fail)
  if type(k) ~= "string" then
    fail("gt.tree: options are named (opts = {warmup = 1, ...}); got the key " .. show(k) ..
      ". Options: " .. table.concat(NAMES, ", "))
  end
  if NOT_BUILT[k] then fail("gt.tree: option '" .. k .. "': " .. NOT_BUILT[k]) end
  local best, bestd = nil, math.huge
  for _, n in ipairs(NAMES) do
    local d = distance(k:lower(), n)
    if d < bestd then best, bestd = n, d end
  end
  local hint = bestd <= math.max(2, math.floor(#k / 3)) and (" (did you mean '" .. best .. "'?)") or ""
  fail("gt.tree: unknown option '" .. k .. "'" .. hint .. ". Options: " .. table.concat(NAMES, ", "))
end

--- check(opts, fail) -> a checked copy of opts (numbers as the C core takes them: math.huge
--- becomes 2^31-1).  fail(msg) raises; it is called for the first bad option.
return function(opts, fail)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail("gt.tree: the options must be a table {warmup = 1, ...}, got " .. show(opts)) end
  local function bad(option, got, allowed)
    fail("gt.tree: option " .. option .. " must be " .. allowed .. ", got " .. show(got))
  end
  local out = {}
  for k, v in pairs(opts) do
    if not KNOWN[k] then unknown(k, fail) end
    if k == "patch" then check_patch(v, bad, fail)
    elseif k == "buckets" then check_buckets(v, bad, fail)
    else
      local ok, allowed = CHECK[k](v)
      if ok == nil then bad(k, v, allowed) end
      v = ok
    end
    out[k] = v
  end
  if (out.patch or out.verify) and not out.key then
    fail("gt.tree: option " .. (out.patch and "patch" or "verify") .. " needs key = function(...) (they belong to keyed calls)")
  end
  return out
end
