-- tbrt/matrix/diff.lua - `tbrt matrix diff A B`: compare two result
-- folders and list the cells whose figures moved by more than the noise of
-- their repetitions.
--
-- A cell here is everything but the repetition (pattern, options, faults,
-- size) and the pair. For each figure (one-way latency, GB/s each way) the
-- repetitions of A and of B give a mean and a sample standard deviation;
-- a figure moved when |mean B - mean A| > sigmas x sqrt(sdA^2/nA + sdB^2/nB)
-- (the standard error of the difference; 3 sigmas by default) and by more
-- than the floor (1% by default, so a perfectly quiet figure does not flag
-- a 0.1% change). Without two repetitions on each side there is no noise to
-- measure: then the threshold (10% by default) decides, and the line says so.
-- Exit code: 0 nothing moved, 1 something moved, 2 could not compare.
local results = require("tbrt.matrix.results")
local stats = require("tbrt.matrix.stats")
local cells = require("tbrt.matrix.cells")

local M = {}

M.DEFAULTS = { sigmas = 3, floor = 0.01, threshold = 0.10 }

local FIGURES = {
  { name = "latency", unit = "us", get = function(r) return results.lat_value(r.latency_us) end },
  { name = "GB/s ->", unit = "GB/s", get = function(r) return r.bw_gbps and r.bw_gbps.push end },
  { name = "GB/s <-", unit = "GB/s", get = function(r) return r.bw_gbps and r.bw_gbps.pull end },
}

-- key -> { label, values per figure }
function M.collect(list)
  local out = {}
  for _, r in ipairs(results.latest(list)) do
    if r.ok and r.params then
      local where = r.pair and string.format("pair %d-%d", r.pair[1], r.pair[2]) or
        (r.rank and ("rank " .. r.rank) or "")
      local key = cells.series_key(r.params) .. " " .. where
      local g = out[key]
      if not g then
        g = { label = key, figures = {} }
        out[key] = g
      end
      for _, f in ipairs(FIGURES) do
        local v = f.get(r)
        if v then
          g.figures[f.name] = g.figures[f.name] or {}
          table.insert(g.figures[f.name], v)
        end
      end
    end
  end
  return out
end

-- Compare two lists of result lines; returns { moved = {...}, same = n,
-- only_a = n, only_b = n }.
function M.compare(list_a, list_b, opts)
  opts = opts or {}
  local sigmas = opts.sigmas or M.DEFAULTS.sigmas
  local floor = opts.floor or M.DEFAULTS.floor
  local threshold = opts.threshold or M.DEFAULTS.threshold
  local a, b = M.collect(list_a), M.collect(list_b)
  local out = { moved = {}, same = 0, only_a = 0, only_b = 0 }
  for key in pairs(b) do if not a[key] then out.only_b = out.only_b + 1 end end
  local keys = {}
  for key in pairs(a) do keys[#keys + 1] = key end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local ga, gb = a[key], b[key]
    if not gb then
      out.only_a = out.only_a + 1
    else
      for _, f in ipairs(FIGURES) do
        local va, vb = ga.figures[f.name], gb.figures[f.name]
        if va and vb then
          local ma, mb = stats.mean(va), stats.mean(vb)
          local sa, sb = stats.stdev(va), stats.stdev(vb)
          local delta = mb - ma
          local rel = ma ~= 0 and delta / ma or math.huge
          local moved, noise
          if sa and sb then
            noise = sigmas * math.sqrt(sa ^ 2 / #va + sb ^ 2 / #vb)
            moved = math.abs(delta) > noise and math.abs(rel) > floor
          else
            moved = math.abs(rel) > threshold
          end
          if moved then
            out.moved[#out.moved + 1] = { key = key, figure = f.name, unit = f.unit, a = ma, b = mb,
              sd_a = sa, sd_b = sb, n_a = #va, n_b = #vb, rel = rel, noise = noise }
          else
            out.same = out.same + 1
          end
        end
      end
    end
  end
  return out
end

local function pm(m, sd, n)
  return string.format("%.4g%s (n=%d)", m, sd and string.format(" +- %.2g", sd) or "", n)
end

function M.format(c, opts)
  opts = opts or {}
  local lines = {}
  for _, m in ipairs(c.moved) do
    lines[#lines + 1] = string.format("moved  %s: %s %s -> %s %s (%+.1f%%, %s)", m.key, m.figure,
      pm(m.a, m.sd_a, m.n_a), pm(m.b, m.sd_b, m.n_b), m.unit, m.rel * 100,
      m.noise and string.format("noise %.2g at %g sigmas", m.noise, opts.sigmas or M.DEFAULTS.sigmas)
        or string.format("no repetitions to measure noise: over the %g%% threshold",
          100 * (opts.threshold or M.DEFAULTS.threshold)))
  end
  lines[#lines + 1] = string.format("%d figure%s moved, %d within the noise; %d cell-pairs only in A, %d only in B",
    #c.moved, #c.moved == 1 and "" or "s", c.same, c.only_a, c.only_b)
  return table.concat(lines, "\n")
end

function M.main(dir_a, dir_b, opts)
  local la, ea = results.read(dir_a)
  if not la then return nil, ea end
  local lb, eb = results.read(dir_b)
  if not lb then return nil, eb end
  local c = M.compare(la, lb, opts)
  print(M.format(c, opts))
  return #c.moved > 0 and 1 or 0
end

return M
