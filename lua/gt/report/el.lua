-- gt.report.el: HTML and SVG elements built as values; the one place where text is escaped.
--
--   local el, raw = E.el, E.raw
--   el("text", { class = "label", x = 8, y = 16 }, "a < b")   --> <text class="label" x="8" y="16">a &lt; b</text>
--   el("rect", { width = 10, height = 3 })                    --> <rect width="10" height="3"/>
--   E.html(el("div", nil, { el("b", nil, "x"), "y" }))        --> <div><b>x</b>y</div>
--
-- A child is text (a string or number: escaped), markup (made by el or raw:
-- kept), a list of children, or nil/false (left out).  Attribute values are
-- escaped; a number is written as an integer when it is one, else with one
-- decimal; nil or false leaves the attribute out, true writes it empty.
-- Attributes come out in one fixed order (ORDER, then the rest sorted), so
-- the page is the same text every run.
local format, concat, sort, floor = string.format, table.concat, table.sort, math.floor
local type, tostring, setmetatable, getmetatable = type, tostring, setmetatable, getmetatable

local M = {}

local MARKUP = {}                          -- metatable: { text } that is markup already

--- E.raw(s) -> s as markup, not escaped again (CSS, or text built by el)
function M.raw(s) return setmetatable({ s }, MARKUP) end

local ENTITY = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

--- E.esc(s) -> s with & < > " ' as entities
function M.esc(s) return (tostring(s):gsub("[&<>\"']", ENTITY)) end
local esc = M.esc

local ORDER = {}
for i, k in ipairs { "class", "id", "lang", "charset", "name", "content", "href", "title", "data-id", "data-root",
  "data-layout", "transform", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "width", "height", "viewBox", "rx",
  "d", "points", "font-size", "text-anchor", "fill", "fill-opacity", "stroke", "stroke-width",
  "stroke-dasharray", "style" } do ORDER[k] = i end

local function attr_less(a, b)
  local ra, rb = ORDER[a] or 1e9, ORDER[b] or 1e9
  if ra ~= rb then return ra < rb end
  return a < b
end

local function value(v)
  if type(v) == "number" then return v == floor(v) and format("%d", v) or format("%.1f", v) end
  return esc(v)
end

local function attributes(attrs)
  if not attrs then return "" end
  local keys = {}
  for k, v in pairs(attrs) do if v ~= nil and v ~= false then keys[#keys + 1] = k end end
  sort(keys, attr_less)
  local out = {}
  for i, k in ipairs(keys) do
    local v = attrs[k]
    out[i] = v == true and (" " .. k) or format(' %s="%s"', k, value(v))
  end
  return concat(out)
end

local function add(out, c)
  local t = type(c)
  if t == "string" or t == "number" then out[#out + 1] = esc(c)
  elseif t == "table" and getmetatable(c) == MARKUP then out[#out + 1] = c[1]
  elseif t == "table" then for i = 1, #c do add(out, c[i]) end
  elseif c ~= nil and c ~= false then error("gt.report.el: a child must be text, markup or a list, not a " .. t, 3) end
end

local VOID = { meta = true, br = true, hr = true, img = true, input = true, link = true }

--- E.el(tag, attrs, ...) -> markup: <tag attrs>children</tag>; with no
--- children <tag attrs/> (SVG's empty element), or <tag attrs> for HTML's void tags.
function M.el(tag, attrs, ...)
  local n = select("#", ...)
  if n == 0 then return M.raw(format(VOID[tag] and "<%s%s>" or "<%s%s/>", tag, attributes(attrs))) end
  local out = { format("<%s%s>", tag, attributes(attrs)) }
  for i = 1, n do add(out, (select(i, ...))) end
  out[#out + 1] = "</" .. tag .. ">"
  return M.raw(concat(out))
end

--- E.html(x) -> the text of x, a child as el takes it (markup, text, a list)
function M.html(x)
  local out = {}
  add(out, x)
  return concat(out)
end

--- E.lines(list) -> markup: the children in list, one per line
function M.lines(list)
  local parts = {}
  for i = 1, #list do parts[i] = M.html(list[i]) end
  return M.raw(concat(parts, "\n"))
end

return M
