-- tbrt/perf/report.lua - the tables pair.lua prints for perf.measure's rows,
-- one per test (latency, then bandwidth), columns declared as data.
--
--   for _, l in ipairs(report.header("lat")) do print(l) end
--   print(report.row(row, "lat"))
--
-- Latency is one way (half a round trip), in microseconds, over `iters`
-- timed round trips after `warm` untimed ones: min, typical (the median),
-- mean, p99, p99.9, max, stdev. Bandwidth is GB/s (10^9 bytes) and
-- million messages per second each way: -> this end sends, <- it receives.
local perf = require("tbrt.perf")

local M = {}

local LAT_US = "%.2f"

-- { key in the row, title, width, format, test, scale }
M.COLUMNS = {
  { "size", "size", 10, "size" },
  { "lat_iters", "iters", 7, "%d", "lat" },
  { "lat_warmup", "warm", 5, "%d", "lat" },
  { "lat_min_us", "min", 7, LAT_US, "lat" },
  { "lat_typical_us", "typical", 7, LAT_US, "lat" },
  { "lat_mean_us", "mean", 7, LAT_US, "lat" },
  { "lat_p99_us", "p99", 7, LAT_US, "lat" },
  { "lat_p99_9_us", "p99.9", 7, LAT_US, "lat" },
  { "lat_max_us", "max", 7, LAT_US, "lat" },
  { "lat_stdev_us", "stdev", 7, LAT_US, "lat" },
  { "bw_iters", "msgs", 7, "%d", "bw" },
  { "bw_warmup", "warm", 5, "%d", "bw" },
  { "bw_push", "GB/s ->", 8, "%.3f", "bw" },
  { "bw_pull", "GB/s <-", 8, "%.3f", "bw" },
  { "msg_rate_push", "Mmsg/s ->", 9, "%.3f", "bw", 1e-6 },
  { "msg_rate_pull", "Mmsg/s <-", 9, "%.3f", "bw", 1e-6 },
}

M.TITLE = {
  lat = "one-way latency, us (half of each round trip, every iteration timed)",
  bw = "bandwidth and message rate each way (-> this end sends, <- it receives)",
}

local function columns(test)
  local out = {}
  for _, c in ipairs(M.COLUMNS) do
    if c[5] == nil or c[5] == test then out[#out + 1] = c end
  end
  return out
end

local function pad(s, w) return string.rep(" ", w - #s) .. s end

-- The table of one test ("lat" or "bw"): its title, then the column titles.
function M.header(test)
  local titles = {}
  for _, c in ipairs(columns(test)) do titles[#titles + 1] = pad(c[2], c[3]) end
  return { M.TITLE[test], table.concat(titles, " ") }
end

function M.row(r, test)
  local cells = {}
  for _, c in ipairs(columns(test)) do
    local v = r[c[1]]
    local text
    if c[4] == "size" then
      text = perf.human(v)
    elseif v == nil then
      text = "-"
    else
      text = string.format(c[4], v * (c[6] or 1))
    end
    cells[#cells + 1] = pad(text, c[3])
  end
  return table.concat(cells, " ")
end

return M
