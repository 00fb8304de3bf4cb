-- tbrt/matrix/bench.lua - the matrix's figures for `make bench`: run
-- scripts/matrix/bench4.lua (4 netns hosts, pairwise, 3 sizes x 2 devices)
-- and read back the driver's overhead per cell (a cell's wall time less
-- the longest measurement of each of its rounds), and whether the whole
-- matrix took less than the sum of its pairs' measurements plus that
-- overhead (it should: a round's pairs run at the same time).
--   local f, why = require("tbrt.matrix.bench").run(tbrt_exe, root)
--   f = { overhead_median, overhead_max, cells, wall (the whole command: hosts, agents,
--         cells, files), cells_wall (the cells alone), measure_sum (every pair's own
--         measurement time), overhead_sum, failed }
local uv = require("luv")
local results = require("tbrt.matrix.results")
local stats = require("tbrt.matrix.stats")

local M = {}

function M.run(exe, root, file)
  file = file or (root .. "/scripts/matrix/bench4.lua")
  local dir = assert(uv.fs_mkdtemp("/tmp/tbrt-matrix-bench-XXXXXX"))
  local t0 = uv.hrtime()
  local p = io.popen(string.format("%s matrix %s --out %s/out 2>&1", exe, file, dir))
  local text = p:read("*a")
  p:close()
  local wall = (uv.hrtime() - t0) / 1e9
  local list = results.read(dir .. "/out")
  os.execute("rm -rf '" .. dir .. "'")
  if not list or #list == 0 then
    return nil, (text:match("tbrt matrix: ([^\n]+)") or text:match("matrix: ([^\n]+)") or text:sub(1, 200))
  end
  local over, measure_sum, failed, cells, cells_wall = {}, 0, 0, 0, 0
  for _, r in ipairs(list) do
    if r.kind == "cell" then
      cells = cells + 1
      cells_wall = cells_wall + (r.wall_s or 0)
      over[#over + 1] = r.overhead_s
      if r.status ~= "ok" then failed = failed + 1 end
    elseif r.kind == "measurement" and r.measure_s then
      measure_sum = measure_sum + r.measure_s
    end
  end
  local overhead_sum = 0
  for _, v in ipairs(over) do overhead_sum = overhead_sum + v end
  return { overhead_median = stats.median(over), overhead_max = stats.max(over), cells = cells,
    wall = wall, cells_wall = cells_wall, measure_sum = measure_sum, overhead_sum = overhead_sum,
    failed = failed }
end

return M
