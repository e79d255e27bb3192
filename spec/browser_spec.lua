-- browser_spec.lua: the HTML report of examples/branchy.lua rendered by headless Chromium (#browser; pending without one).
--
-- scripts/test.sh leaves #browser out unless TEST_BROWSER=1; run it alone with
--   build/gtlua $(command -v busted) --tags=browser spec/browser_spec.lua
-- CHROMIUM names the binary (default: the first of chromium, chromium-browser,
-- google-chrome on PATH); GTLUA_SHOT keeps the screenshot at that path.
local ffi = require "ffi"

local BIN = os.getenv("GTLUA_BIN")

local function shq(s) return "'" .. tostring(s):gsub("'", [['\'']]) .. "'" end

local function sh(cmd)
  local r = os.execute(cmd)
  return r == 0 or r == true
end

local function find_chromium()
  local env = os.getenv("CHROMIUM")
  if env and env ~= "" then return env end
  for _, name in ipairs { "chromium", "chromium-browser", "google-chrome" } do
    if sh("command -v " .. name .. " > /dev/null 2>&1") then return name end
  end
end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- -- A small PNG reader (8-bit RGB/RGBA, non-interlaced: what Chromium writes) --

local function u32(s, i) local a, b, c, d = s:byte(i, i + 3) return ((a * 256 + b) * 256 + c) * 256 + d end

local zlib
local function inflate(data, size)
  if zlib == nil then
    ffi.cdef "int uncompress(uint8_t *dst, unsigned long *dstlen, const uint8_t *src, unsigned long srclen);"
    local ok, lib = pcall(ffi.load, "z")
    if not ok then ok, lib = pcall(ffi.load, "libz.so.1") end
    zlib = ok and lib or false
  end
  if not zlib then return nil end
  local out, len = ffi.new("uint8_t[?]", size), ffi.new("unsigned long[1]", size)
  if zlib.uncompress(out, len, data, #data) ~= 0 then return nil end
  return out
end

-- Width, height and a function pixel(x, y) -> r, g, b; nil when it cannot decode.
local function read_png(s)
  if s:sub(1, 8) ~= "\137PNG\r\n\26\n" then return nil end
  local i, idat, w, h, depth, ctype, interlace = 9, {}, nil, nil, nil, nil, nil
  while i < #s do
    local len, kind = u32(s, i), s:sub(i + 4, i + 7)
    local body = s:sub(i + 8, i + 7 + len)
    if kind == "IHDR" then
      w, h, depth, ctype, interlace = u32(body, 1), u32(body, 5), body:byte(9), body:byte(10), body:byte(13)
    elseif kind == "IDAT" then idat[#idat + 1] = body end
    i = i + 12 + len
  end
  if not w or depth ~= 8 or interlace ~= 0 or (ctype ~= 2 and ctype ~= 6) then return w, h end
  local bpp = ctype == 6 and 4 or 3
  local stride = w * bpp
  local raw = inflate(table.concat(idat), h * (stride + 1))
  if not raw then return w, h end
  local px = ffi.new("uint8_t[?]", h * stride)
  for y = 0, h - 1 do                                  -- undo the per-row filters
    local f, src, dst, up = raw[y * (stride + 1)], y * (stride + 1) + 1, y * stride, (y - 1) * stride
    for x = 0, stride - 1 do
      local a = x >= bpp and px[dst + x - bpp] or 0
      local b = y > 0 and px[up + x] or 0
      local c = (x >= bpp and y > 0) and px[up + x - bpp] or 0
      local v = raw[src + x]
      if f == 1 then v = v + a
      elseif f == 2 then v = v + b
      elseif f == 3 then v = v + math.floor((a + b) / 2)
      elseif f == 4 then
        local p = a + b - c
        local pa, pb, pc = math.abs(p - a), math.abs(p - b), math.abs(p - c)
        v = v + ((pa <= pb and pa <= pc) and a or (pb <= pc and b or c))
      end
      px[dst + x] = v % 256
    end
  end
  return w, h, function(x, y)
    local o = y * stride + x * bpp
    return px[o], px[o + 1], px[o + 2]
  end
end

-- Chromium and a fresh scratch directory, or nil and why the spec is pending.
local function browser_run()
  local chromium = find_chromium()
  if not chromium then return nil, "no Chromium here (apt-get install chromium, or set CHROMIUM)" end
  if not BIN then return nil, "GTLUA_BIN is not set (run inside gtlua)" end
  local dir = os.tmpname()
  os.remove(dir)
  assert.is_true(sh("mkdir -p " .. shq(dir)))
  return chromium, dir
end

describe("the HTML report in a browser #browser", function()
  it("renders examples/branchy.lua's tree in headless Chromium", function()
    local chromium, dir = browser_run()
    if not chromium then return pending(dir) end
    local html, png = dir .. "/branchy.html", os.getenv("GTLUA_SHOT") or (dir .. "/branchy.png")
    assert.is_true(sh(string.format("timeout 60 %s --report=%s examples/branchy.lua > /dev/null 2>&1", shq(BIN), shq(html))))
    local cmd = string.format("cd %s && timeout 120 %s --headless --disable-gpu --no-sandbox --hide-scrollbars " ..
      "--user-data-dir=%s --screenshot=%s --window-size=1200,1800 %s > /dev/null 2>&1", shq(dir), shq(chromium),
      shq(dir .. "/profile"), shq(png), shq("file://" .. html))
    sh(cmd)
    local data = slurp(png)
    sh("rm -rf " .. shq(dir))
    assert.is_not_nil(data, "Chromium wrote no screenshot: " .. cmd)
    assert.is_true(#data > 20000, "a screenshot of " .. #data .. " bytes is too small to show the report")
    local w, h, pixel = read_png(data)
    assert.are.same({ 1200, 1800 }, { w, h })
    if not pixel then return end                      -- no zlib: the size checks are all we can do
    -- The tree's nodes have a 2px green border (#15803d: "has a graph") and the
    -- visits chart's replay bars are #2563eb: count pixels of each colour.
    local border, bars, white = 0, 0, 0
    for y = 0, h - 1, 1 do
      for x = 0, w - 1, 2 do
        local r, g, b = pixel(x, y)
        if r == 0x15 and g == 0x80 and b == 0x3d then border = border + 1
        elseif r == 0x25 and g == 0x63 and b == 0xeb then bars = bars + 1
        elseif r == 255 and g == 255 and b == 255 then white = white + 1 end
      end
    end
    assert.is_true(border > 500, "tree node borders: " .. border .. " pixels")
    assert.is_true(bars > 500, "replay bars: " .. bars .. " pixels")
    assert.is_true(white < w * h / 2 * 0.9, "the page is (almost) blank")
  end)
end)

-- Layout facts measured in the page by Chromium: a script appended to a copy
-- of the report (the report itself has none) writes them as JSON into <pre id="facts">.
local FACTS_JS = [[
(function () {
  var W = window.innerWidth, f = { W: W, roots: 0, rootsIn: 0, nodes: 0, titled: 0, textOver: 0, tables: 0, tablesIn: 0,
    scrollW: document.documentElement.scrollWidth, layout: "" };
  var tree = document.querySelector("svg.tree");
  if (tree) f.layout = tree.getAttribute("data-layout");
  document.querySelectorAll("g.node").forEach(function (g) {
    f.nodes++;
    if (g.querySelector("title")) f.titled++;
    var box = g.querySelector("rect").getBoundingClientRect();
    g.querySelectorAll("text").forEach(function (t) { if (t.getBoundingClientRect().right > box.right + 1) f.textOver++; });
    if (g.getAttribute("data-root")) { f.roots++; if (box.left >= 0 && box.right <= W) f.rootsIn++; }
  });
  document.querySelectorAll("table").forEach(function (t) {
    f.tables++;
    var r = t.getBoundingClientRect();
    if (r.left >= 0 && r.right <= W) f.tablesIn++;
  });
  var pre = document.createElement("pre");
  pre.id = "facts";
  pre.textContent = JSON.stringify(f);
  document.body.appendChild(pre);
})();
]]

local function chromium_run(chromium, dir, args, url)
  local out = dir .. "/out.txt"
  local cmd = string.format("cd %s && timeout 120 %s --headless --disable-gpu --no-sandbox --hide-scrollbars " ..
    "--user-data-dir=%s %s %s > %s 2> /dev/null", shq(dir), shq(chromium), shq(dir .. "/profile"), args, shq(url), shq(out))
  sh(cmd)
  return slurp(out) or "", cmd
end

describe("the HTML report of a 33-node tree in a browser #browser", function()
  it("keeps every root, every table and every label inside a 1280 px window", function()
    local chromium, dir = browser_run()
    if not chromium then return pending(dir) end
    local html = dir .. "/wide.html"
    assert.is_true(sh(string.format("timeout 60 %s --report=%s spec/fixtures/wide_tree.lua > /dev/null 2>&1", shq(BIN), shq(html))))
    local page = slurp(html)
    local f = io.open(dir .. "/facts.html", "wb")
    f:write((page:gsub("</body>", function() return "<script>" .. FACTS_JS .. "</script></body>" end)))
    f:close()
    local dom = chromium_run(chromium, dir, "--window-size=1280,900 --dump-dom", "file://" .. dir .. "/facts.html")
    local png = os.getenv("GTLUA_SHOT_WIDE") or (dir .. "/wide.png")
    chromium_run(chromium, dir, "--window-size=1280,1600 --screenshot=" .. shq(png), "file://" .. html)
    local shot = slurp(png)
    sh("rm -rf " .. shq(dir))
    local facts = dom:match('<pre id="facts">(.-)</pre>')
    assert.truthy(facts, "Chromium ran no layout script: " .. dom:sub(1, 200))
    local n = {}
    for k, v in facts:gmatch('"(%w+)":"?([%w%-]*)"?') do n[k] = tonumber(v) or v end
    assert.are.equal(1280, n.W)
    assert.are.equal(33, n.nodes)
    assert.are.equal(33, n.titled)                           -- every node has its full text on hover
    assert.are.equal(11, n.roots)
    assert.are.equal(n.roots, n.rootsIn)                     -- every root's box inside the window
    assert.are.equal(0, n.textOver)                          -- no label runs out of its box
    assert.is_true(n.tables >= 1)
    assert.are.equal(n.tables, n.tablesIn)                   -- no table wider than the page
    assert.is_true(n.scrollW <= n.W, "the page scrolls sideways: " .. n.scrollW)
    assert.are.equal("rows", n.layout)
    assert.is_not_nil(shot, "no screenshot")
    local w, h = read_png(shot)
    assert.are.same({ 1280, 1600 }, { w, h })
  end)
end)
