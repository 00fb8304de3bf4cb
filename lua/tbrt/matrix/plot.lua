-- tbrt/matrix/plot.lua - the plots of a run, drawn by gnuplot (Debian's
-- gnuplot-nox) as PNG (pngcairo) and SVG, into DIR/plots/:
--   bw-<pattern>.{png,svg}          bandwidth vs size, a line per setting
--   lat-<pattern>.{png,svg}         one-way latency vs size, likewise
--   heatmap-<pattern>-<setting>-{lat,bw}.{png,svg}   N x N, for pairwise:
--                                   latency at the smallest size, and GB/s
--                                   from row to column at the largest
--   faults-<fault>-{bw,lat}.{png,svg}  the effect of each fault level
-- Beside each picture its data (.dat, the heatmaps as N rows of N values,
-- NaN where nothing was measured) and the gnuplot script (.gp), so a plot
-- can be redrawn or restyled by hand. plots/index.txt says what each is.
local proc = require("tbrt.matrix.proc")
local results = require("tbrt.matrix.results")
local stats = require("tbrt.matrix.stats")
local summary = require("tbrt.matrix.summary")
local cells = require("tbrt.matrix.cells")

local M = {}

local function slug(s)
  s = s:gsub("[^%w%.%-]+", "_"):gsub("^_+", ""):gsub("_+$", "")
  if #s > 60 then s = s:sub(1, 60) end
  return s ~= "" and s or "all"
end
M.slug = slug

local function gp_string(s) return '"' .. tostring(s):gsub("\\", "\\\\"):gsub('"', '\\"') .. '"' end

local function num(v) return v and string.format("%.6g", v) or "NaN" end

local function write(path, text)
  local f, err = io.open(path, "w")
  if not f then return nil, err end
  f:write(text)
  f:close()
  return true
end

-- Run gnuplot on a script that draws `body` to base.png and base.svg.
local function draw(dir, base, title, setup, body)
  local script = table.concat({
    "set terminal pngcairo noenhanced size 900,600",
    "set output " .. gp_string(dir .. "/" .. base .. ".png"),
    "set title " .. gp_string(title),
    setup, body,
    "set terminal svg noenhanced size 900,600",
    "set output " .. gp_string(dir .. "/" .. base .. ".svg"),
    "replot", "unset output", "",
  }, "\n")
  local gp = dir .. "/" .. base .. ".gp"
  write(gp, script)
  return proc.check({ "gnuplot", gp }, "plot " .. base, { timeout = 30 })
end

local function by_size_lines(meas_by_size, fn)
  local lines = {}
  for _, size in ipairs(summary.keys_sorted(meas_by_size, true)) do
    local vals = {}
    for _, r in ipairs(meas_by_size[size]) do
      if r.ok then vals[#vals + 1] = fn(r) end
    end
    local m = stats.median(vals)
    if m then lines[#lines + 1] = string.format("%d %s", size, num(m)) end
  end
  return lines
end

-- N x N matrix text: m[a][b] (0-based ranks), NaN where missing.
function M.matrix_text(n, m)
  local rows = {}
  for a = 0, n - 1 do
    local row = {}
    for b = 0, n - 1 do row[#row + 1] = num(m[a] and m[a][b]) end
    rows[#rows + 1] = table.concat(row, " ")
  end
  return table.concat(rows, "\n") .. "\n"
end

local function heatmap(dir, made, n, pattern, label, rows, metric)
  local m = {}
  local function put(a, b, v)
    if not v then return end
    m[a] = m[a] or {}
    m[a][b] = m[a][b] or {}
    table.insert(m[a][b], v)
  end
  for _, r in ipairs(rows) do
    if r.ok and r.pair then
      local a, b = r.pair[1], r.pair[2]
      if metric == "lat" then
        local v = results.lat_value(r.latency_us)
        put(a, b, v) put(b, a, v)
      else
        put(a, b, r.bw_gbps and r.bw_gbps.push)
        put(b, a, r.bw_gbps and r.bw_gbps.pull)
      end
    end
  end
  local med = {}
  for a, row in pairs(m) do
    med[a] = {}
    for b, list in pairs(row) do med[a][b] = stats.median(list) end
  end
  local base = string.format("heatmap-%s-%s-%s", slug(pattern), slug(label), metric)
  write(dir .. "/" .. base .. ".dat", M.matrix_text(n, med))
  local size = rows[1] and rows[1].params.size
  local what = metric == "lat" and "one-way latency, us" or "GB/s from the row's rank to the column's"
  local ok, err = draw(dir, base, string.format("%s %s: %s at %s bytes", pattern, label, what, tostring(size)),
    table.concat({ metric == "lat" and "set xlabel 'rank'" or "set xlabel 'to rank (receiving)'",
      metric == "lat" and "set ylabel 'rank'" or "set ylabel 'from rank (sending)'",
      string.format("set xrange [-0.5:%d.5]", n - 1), string.format("set yrange [%d.5:-0.5]", n - 1),
      "set xtics 1", "set ytics 1", "set palette rgbformulae 33,13,10", "set view map" }, "\n"),
    string.format("plot %s matrix with image notitle", gp_string(dir .. "/" .. base .. ".dat")))
  made[#made + 1] = { base, ok and "heatmap" or ("failed: " .. tostring(err)) }
end

-- Draw every plot for the results in list. n: the number of hosts.
-- Returns the list of { base name, what } made, or nil, err when gnuplot
-- is missing.
function M.draw_all(dir, list, n)
  if not proc.which("gnuplot") then return nil, "gnuplot is not installed (apt-get install gnuplot-nox)" end
  local pdir = dir .. "/plots"
  os.execute("mkdir -p " .. proc.quote({ pdir }))
  local made = {}
  local meas = results.latest(list)
  local g, order = summary.group(meas)
  for _, p in ipairs(order) do
    for _, metric in ipairs { "bw", "lat" } do
      local blocks, plots = {}, {}
      for _, label in ipairs(summary.keys_sorted(g[p])) do
        local lines = by_size_lines(g[p][label], function(r)
          if metric == "bw" then return r.bw_gbps and r.bw_gbps.push end
          return results.lat_value(r.latency_us)
        end)
        if #lines > 0 then
          blocks[#blocks + 1] = "# " .. label .. "\n" .. table.concat(lines, "\n")
          plots[#plots + 1] = { label = label, index = #blocks - 1 }
        end
      end
      if #plots > 0 then
        local base = metric .. "-" .. slug(p)
        local dat = pdir .. "/" .. base .. ".dat"
        write(dat, table.concat(blocks, "\n\n\n") .. "\n")
        local parts = {}
        for _, pl in ipairs(plots) do
          parts[#parts + 1] = string.format("%s index %d using 1:2 with linespoints title %s",
            #parts == 0 and gp_string(dat) or "''", pl.index, gp_string(pl.label))
        end
        local ylabel = metric == "bw" and "GB/s (median over pairs, measuring -> answering)" or
          "one-way latency, us (median over pairs)"
        local ok, err = draw(pdir, base, string.format("%s: %s vs message size", p,
          metric == "bw" and "bandwidth" or "latency"), table.concat({
            "set logscale x 2", "set format x '%.0b%BB'", "set xlabel 'message size'",
            "set ylabel " .. gp_string(ylabel), metric == "lat" and "set logscale y" or "set yrange [0:*]",
            "set key outside right", "set grid" }, "\n"), "plot " .. table.concat(parts, ", "))
        made[#made + 1] = { base, ok and (metric .. " vs size") or ("failed: " .. tostring(err)) }
      end
    end
    -- pairwise: N x N heatmaps per setting
    if p == "pairwise" and n and n >= 2 then
      for _, label in ipairs(summary.keys_sorted(g[p])) do
        local sizes = summary.keys_sorted(g[p][label], true)
        heatmap(pdir, made, n, p, label, g[p][label][sizes[1]], "lat")
        heatmap(pdir, made, n, p, label, g[p][label][sizes[#sizes]], "bw")
      end
    end
  end
  -- faults: for each fault with more than one level, a line per pattern and size
  local levels = {}
  for _, r in ipairs(meas) do
    for k, v in pairs(r.params and r.params.faults or {}) do
      levels[k] = levels[k] or {}
      levels[k][cells.fmt(v)] = tonumber(v) or v
    end
  end
  for fault, set in pairs(levels) do
    local n_levels = 0
    for _ in pairs(set) do n_levels = n_levels + 1 end
    if n_levels > 1 then
      for _, metric in ipairs { "bw", "lat" } do
        local series = {}
        for _, r in ipairs(meas) do
          local lvl = tonumber(r.params.faults[fault])
          if r.ok and lvl then
            local key = r.params.pattern .. " " .. summary.series_label(r.params):gsub("%s*" .. fault .. "=%S+", "")
              .. " size=" .. r.params.size
            series[key] = series[key] or {}
            series[key][lvl] = series[key][lvl] or {}
            local v = metric == "bw" and (r.bw_gbps and r.bw_gbps.push) or results.lat_value(r.latency_us)
            table.insert(series[key][lvl], v)
          end
        end
        local blocks, parts = {}, {}
        local base = string.format("faults-%s-%s", slug(fault), metric)
        local dat = pdir .. "/" .. base .. ".dat"
        for _, key in ipairs(summary.keys_sorted(series)) do
          local lines = {}
          for _, lvl in ipairs(summary.keys_sorted(series[key], true)) do
            lines[#lines + 1] = string.format("%s %s", num(lvl), num(stats.median(series[key][lvl])))
          end
          blocks[#blocks + 1] = "# " .. key .. "\n" .. table.concat(lines, "\n")
          parts[#parts + 1] = string.format("%s index %d using 1:2 with linespoints title %s",
            #parts == 0 and gp_string(dat) or "''", #blocks - 1, gp_string(key))
        end
        if #parts > 0 then
          write(dat, table.concat(blocks, "\n\n\n") .. "\n")
          local ok, err = draw(pdir, base, string.format("effect of %s on %s", fault,
            metric == "bw" and "bandwidth" or "latency"), table.concat({
              "set xlabel " .. gp_string(fault .. " (fault level)"),
              "set ylabel " .. gp_string(metric == "bw" and "GB/s" or "one-way latency, us"),
              "set key outside right", "set grid", metric == "lat" and "set logscale y" or "set yrange [0:*]" }, "\n"),
            "plot " .. table.concat(parts, ", "))
          made[#made + 1] = { base, ok and ("effect of " .. fault) or ("failed: " .. tostring(err)) }
        end
      end
    end
  end
  local index = {}
  for _, m in ipairs(made) do index[#index + 1] = string.format("%-60s %s", m[1], m[2]) end
  write(pdir .. "/index.txt", table.concat(index, "\n") .. "\n")
  return made
end

return M
