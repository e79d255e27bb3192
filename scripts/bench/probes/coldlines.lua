-- coldlines.lua A200 A700 TOP: coldlines.sh's difference of two callgrind_annotate
-- reports (--show=Ir,DLmr,DLmw) of 200 and 700 calls, per call.
local function load(path)                       -- function -> { instructions, lines fetched }
  local t, on = {}, false
  for line in io.lines(path) do
    if line:find("file:function", 1, true) then on = true
    elseif on then
      local nums, name = {}, line
      for _ = 1, 3 do                              -- "1,234 (5.6%)" or "." three times, then the name
        local v, rest = name:match("^%s*([%d,%.]+)%s*%b()%s*(.*)$")
        if not v then v, rest = name:match("^%s*([%d,%.]+)%s+(.*)$") end
        if not v then break end
        nums[#nums + 1] = v == "." and 0 or tonumber((v:gsub(",", ""))) or 0
        name = rest
      end
      if #nums == 3 and name:sub(-1) == "]" and not name:find("^=>") then t[name] = { nums[1], nums[2] + nums[3] } end
    end
  end
  return t
end
local a, b, n = load(arg[1]), load(arg[2]), 500
local I, L, rows = 0, 0, {}
for name, v in pairs(b) do
  if not name:find("memset", 1, true) then
    local u = a[name] or { 0, 0 }
    local di, dl = (v[1] - u[1]) / n, (v[2] - u[2]) / n
    I, L = I + di, L + dl
    rows[#rows + 1] = { dl, di, name }
  end
end
table.sort(rows, function(x, y) return x[1] > y[1] end)
print(("per call: %d instructions, %.1f lines from memory (the eviction excluded)"):format(I, L))
for i = 1, math.min(tonumber(arg[3]), #rows) do
  if rows[i][1] >= 0.5 then print(("%8.1f %8.0f  %s"):format(rows[i][1], rows[i][2], rows[i][3]:sub(1, 100))) end
end