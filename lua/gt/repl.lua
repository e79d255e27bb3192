-- gt.repl - the REPL's Lua side: printing results, timing, completion, ?help.
-- The host (src/main_repl.c) reads and compiles lines; at the start it calls
-- repl.start() (the banner's second line, the global help), after each command
-- repl.show(quiet, seconds, ...), on Tab repl.complete(word), on "?x" repl.help("x").
-- Loading touches no globals; start() sets help (unless defined), show() sets _LAST.

local repl = {}

repl.color = false      -- the host sets it when stdout is a terminal (and NO_COLOR is unset)
repl.time_threshold = tonumber(os.getenv("GTLUA_REPL_TIME") or "") or 0.5   -- seconds; 0: always
repl.max_items = 40     -- table entries shown before "..."
repl.width = 78         -- wider tables print one entry a line

local keywords = {}
for w in ([[and break do else elseif end false for function goto if in local
  nil not or repeat return then true until while]]):gmatch("%a+") do keywords[w] = true end

local paint_codes = {
  string = "\27[32m", number = "\27[36m", boolean = "\27[35m", ["nil"] = "\27[35m",
  ["function"] = "\27[33m", cdata = "\27[34m", userdata = "\27[34m", thread = "\27[34m",
  time = "\27[2m",
}

local function paint(kind, s)
  if not repl.color or not paint_codes[kind] then return s end
  return paint_codes[kind] .. s .. "\27[0m"
end

-- -- Formatting ---------------------------------------------------------------

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") ~= nil
end

local function quote(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil and not keywords[k]
end

-- Numbers, then strings, then the rest; within a type by value.
local type_rank = { number = 1, string = 2 }
local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (type_rank[ta] or 3) < (type_rank[tb] or 3) or
    (type_rank[ta] == type_rank[tb] and ta < tb) end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

-- One value, never descending: tables with __tostring (tensors, trees) and cdata
-- use tostring; plain tables are "{...}" at depth > 0.
local function format(v, depth)
  local t = type(v)
  if t == "string" then return paint("string", quote(v)) end
  if t ~= "table" or has_tostring(v) then
    local s = tostring(v)
    if depth > 0 and s:find("\n") then   -- nested multi-line object: its summary line
      s = s:match("([^\n]*%S[^\n]*)\n*$") or s
    end
    return paint(t, s)
  end
  if depth > 0 then return next(v) == nil and "{}" or "{...}" end
  local parts, keys, n = {}, {}, 0
  while rawget(v, n + 1) ~= nil do
    n = n + 1
    parts[n] = format(rawget(v, n), 1)
  end
  for k in next, v do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_order)
  for _, k in ipairs(keys) do
    local ks = is_ident(k) and k or "[" .. format(k, 1) .. "]"
    parts[#parts + 1] = ks .. " = " .. format(rawget(v, k), 1)
  end
  if #parts > repl.max_items then
    local total = #parts
    for i = total, repl.max_items + 1, -1 do parts[i] = nil end
    parts[#parts + 1] = "... (" .. total .. " entries)"
  end
  local line = "{" .. table.concat(parts, ", ") .. "}"
  if #line:gsub("\27%[[%d;]*m", "") <= repl.width then return line end
  return "{\n  " .. table.concat(parts, ",\n  ") .. "\n}"
end

--- Returns the display text of one value (strings quoted, tables shallow and sorted).
function repl.format(v)
  return format(v, 0)
end

--- Prints each argument formatted, tab-separated; nothing when there are none.
function repl.print_results(...)
  local n = select("#", ...)
  if n == 0 then return end
  local out = {}
  for i = 1, n do out[i] = format((select(i, ...)), 0) end
  io.stdout:write(table.concat(out, "\t"), "\n")
end

--- After a command: sets _LAST to its first result, prints the results unless
--- the input ended with ';' (quiet), and the wall time when above the threshold.
function repl.show(quiet, seconds, ...)
  if select("#", ...) > 0 then _G._LAST = (...) end
  if not quiet then repl.print_results(...) end
  if seconds and (repl.time_threshold <= 0 or seconds >= repl.time_threshold) then
    io.stdout:write(paint("time", string.format("(%.3f s)", seconds)), "\n")
  end
end

-- -- Completion ---------------------------------------------------------------

-- Where to look for the fields of v: v itself (a table) and the __index tables
-- of its metatables (strings find the string library).  No __index function is
-- called: completion must not run user code.
local TENSOR_FIELDS = { shape = true, numel = true, dtype = true }   -- (a tensor's fields; its methods: gt.Tensor)
local function field_tables(v)
  local list, seen = {}, {}
  local gt = package.loaded.gt
  if type(v) == "cdata" and gt and gt.is_tensor(v) then return { TENSOR_FIELDS, gt.Tensor } end
  while v ~= nil and not seen[v] and #list < 16 do
    seen[v] = true
    if type(v) == "table" then list[#list + 1] = v end
    local mt = (type(v) == "table" or type(v) == "string") and getmetatable(v) or nil
    v = type(mt) == "table" and type(rawget(mt, "__index")) == "table" and rawget(mt, "__index") or nil
  end
  return list
end

local function lookup(v, name)
  for _, t in ipairs(field_tables(v)) do
    local x = rawget(t, name)
    if x ~= nil then return x end
    -- a field loaded on first use (gt.ops, gt.buckets): loaded now, to complete its own fields
    local mt = getmetatable(t)
    if type(mt) == "table" and type(rawget(mt, "__lazy")) == "table" then
      for _, k in ipairs(rawget(mt, "__lazy")) do if k == name then return t[name] end end
    end
  end
end

--- Returns the sorted completions of a word: "gt.te" -> {"gt.tensor", ...},
--- "string.fo" -> {"string.format"}, "s:up" -> {"s:upper"}, "pri" -> {"print"}.
function repl.complete(text)
  local path, sep, partial = text:match("^(.-)([%.:]?)([%a_]?[%w_]*)$")
  if not path or (path ~= "" and sep == "") or (path == "" and sep ~= "") then return {} end
  local v = _G
  if path ~= "" then
    for name in (path .. "."):gmatch("(.-)[%.:]") do
      if not is_ident(name) then return {} end
      v = lookup(v, name)
      if v == nil then return {} end
    end
  end
  local found, out = {}, {}
  local function offer(k, x)
    if is_ident(k) and k:sub(1, #partial) == partial and not found[k]
        and (k:sub(1, 1) ~= "_" or partial:sub(1, 1) == "_")   -- private names and metamethods on request
        and (sep ~= ":" or type(x) == "function") then
      found[k] = true
      out[#out + 1] = path .. sep .. k
    end
  end
  for _, t in ipairs(field_tables(v)) do
    for k, x in next, t do offer(k, x) end
    -- fields loaded on first use (gt.ops, gt.buckets): the metatable's __lazy list names them
    local mt = getmetatable(t)
    if sep ~= ":" and type(mt) == "table" and type(rawget(mt, "__lazy")) == "table" then
      for _, k in ipairs(rawget(mt, "__lazy")) do offer(k, true) end
    end
  end
  if path == "" then
    for k in pairs(keywords) do
      if k:sub(1, #partial) == partial and not found[k] then out[#out + 1] = k end
    end
  end
  table.sort(out)
  return out
end

-- -- Help -------------------------------------------------------------------

--- "?name" in the REPL: the documentation of an API function or object (gt.docs).
function repl.help(rest)
  rest = rest:match("^%s*(.-)%s*$")
  if rest == "" then
    io.stdout:write("usage: ?name   (e.g. ?gt, ?gt.tensor, ?t:narrow, ?step); ?tb: the last error's traceback\n")
    return
  end
  if rest == "tb" then
    local tb = debug.getregistry()["gtlua.traceback"]
    io.stdout:write(tb and tostring(tb) or "no error yet", "\n")
    return
  end
  local ok, docs = pcall(require, "gt.docs")
  if ok then return docs.ask(rest) end
  io.stdout:write("no help for ", rest, "\n")
end

-- -- Start ------------------------------------------------------------------

repl.hint = "?name for help (?gt: the API), help for a first page, ?tb: the last error's traceback, Ctrl-D to exit"

local intro = [==[
gtlua: CUDA graph trees from Lua.  A first session:
  x = gt.randn{4, 8}                                 -- tensors: gt.tensor zeros ones full randn from
  W = gt.randn({8, 8}, {seed = 1}):static()           -- linear's weight is {in, out}: x @ W
  K = gt.compile[[__global__ void twice(float *y, const float *x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }]]
  step = gt.tree(function(x)                          -- each path is recorded as CUDA graphs
    local h = gt.ops.linear(x, W, nil, "relu")
    local y = gt.tensor(h.shape); K.twice(1, 32, y, h, h.numel)
    return y
  end)
  for i = 1, 3 do step(x) end
  step                                                -- a tree prints as its drawing
?name (or help(value)) for any function, ?gt for the whole API, ?tb after an error.]==]

local help = setmetatable({}, {
  __tostring = function() return intro end,
  __call = function(_, x)   -- prints; returns nothing (the REPL would print the text again)
    if x == nil then io.stdout:write(intro, "\n") else require("gt.docs").help(x) end
  end,
})

--- At the start of a session: prints the hint line under the banner and sets
--- the global help (help prints a first page; help(x) the doc of x) unless defined.
function repl.start()
  io.stdout:write(repl.hint, "\n")
  io.stdout:flush()
  if rawget(_G, "help") == nil and package.loaded.gt then rawset(_G, "help", help) end
end

return repl
