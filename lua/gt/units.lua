-- gt.units: numbers as people read them: bytes and microseconds (one formatter each, shared).
local format, floor = string.format, math.floor

local M = {}

--- units.bytes(n) -> "512 B", "8.0 KiB", "1.5 MiB", "2.0 GiB", "4.0 TiB" (nil counts as 0; src/util.c's gt_bytes)
function M.bytes(n)
  n = n or 0
  if n >= 2 ^ 40 then return format("%.1f TiB", n / 2 ^ 40) end
  if n >= 2 ^ 30 then return format("%.1f GiB", n / 2 ^ 30) end
  if n >= 2 ^ 20 then return format("%.1f MiB", n / 2 ^ 20) end
  if n >= 1024 then return format("%.1f KiB", n / 1024) end
  return format("%d B", n)
end

--- units.micros(us) -> "850.0 µs", "12.50 ms", "3.00 s" (nil counts as 0)
function M.micros(us)
  us = us or 0
  if us >= 1e6 then return format("%.2f s", us / 1e6) end
  if us >= 1e3 then return format("%.2f ms", us / 1e3) end
  return format("%.1f µs", us)
end

--- units.plain_us(us) -> time with no trailing zeros and never an exponent
--- ("850 µs", "12.5 ms", "3 s", "0.25 µs"): axis labels and tables.
function M.plain_us(v)
  v = v or 0
  if v >= 1e6 then return format("%s s", (format("%.3f", v / 1e6):gsub("%.?0+$", ""))) end
  if v >= 1e3 then return format("%s ms", (format("%.2f", v / 1e3):gsub("%.?0+$", ""))) end
  if v >= 10 or v == floor(v) then return format("%d µs", floor(v + 0.5)) end
  return format("%s µs", (format("%.2f", v):gsub("%.?0+$", "")))
end

return M
