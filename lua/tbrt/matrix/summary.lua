-- tbrt/matrix/summary.lua - summary.txt: the tables a person reads after a
-- run. Per pattern and combination of link options and faults, one row per
-- size over every pair and repetition measured: how many were measured, the
-- median one-way latency (and the median of the p99s when perf gives
-- percentiles), the median and the slowest bandwidth each way. Then the
-- hosts, the failures with their reasons, and the driver's own overhead
-- per cell (setup and teardown, outside the measurements).
local results = require("tbrt.matrix.results")
local stats = require("tbrt.matrix.stats")
local cells = require("tbrt.matrix.cells")
local perf = require("tbrt.perf")

local M = {}

-- "device=tcp drop=0" from a measurement's parameters (no pattern, size, rep).
function M.series_label(params)
  local flat = cells.flat_params(params or {})
  local names = {}
  for k in pairs(flat) do if k ~= "pattern" and k ~= "size" and k ~= "rep" then names[#names + 1] = k end end
  table.sort(names)
  local parts = {}
  for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. cells.fmt(flat[k]) end
  return #parts > 0 and table.concat(parts, " ") or "(one setting)"
end

-- Measurements grouped: pattern -> series label -> size -> list.
function M.group(meas)
  local g, order = {}, {}
  for _, r in ipairs(meas) do
    local p = r.params and r.params.pattern or "?"
    local s = M.series_label(r.params)
    if not g[p] then g[p] = {}; order[#order + 1] = p end
    g[p][s] = g[p][s] or {}
    local size = r.params and r.params.size or 0
    g[p][s][size] = g[p][s][size] or {}
    table.insert(g[p][s][size], r)
  end
  return g, order
end

local function keys_sorted(t, num)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out, function(a, b) if num then return a < b end return tostring(a) < tostring(b) end)
  return out
end
M.keys_sorted = keys_sorted

local function f(v, fmt) return v and string.format(fmt or "%.3f", v) or "-" end

function M.render(list, opts)
  opts = opts or {}
  local out = {}
  local function say(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  local runs, hosts_by_rank, host_events = {}, {}, {}
  local cell_recs = {}
  for _, r in ipairs(list) do
    if r.kind == "run" then runs[#runs + 1] = r end
    if r.kind == "cell" then cell_recs[r.cell] = r end
    if r.kind == "host" then host_events[#host_events + 1] = r end
  end
  local first = runs[1] or {}
  say("matrix %s (%s), %s launcher, %s hosts", tostring(first.matrix), tostring(first.file),
    tostring(first.launcher), tostring(first.count))
  say("tbrt %s, git %s; %d run%s, the first started %s", tostring(first.version), tostring(first.git),
    #runs, #runs == 1 and "" or "s (resumed)", tostring(first.time))
  say("")
  for _, r in ipairs(runs) do
    for _, h in ipairs(r.hosts or {}) do hosts_by_rank[h.rank] = h end
  end
  say("%-5s %-20s %-18s %-20s %s", "rank", "host", "address", "tbrt", "where")
  for _, rank in ipairs(keys_sorted(hosts_by_rank, true)) do
    local h = hosts_by_rank[rank]
    say("%-5d %-20s %-18s %-20s %s", rank, tostring(h.host), tostring(h.addr), tostring(h.version),
      tostring(h.where))
  end
  for _, e in ipairs(host_events) do
    say("  rank %s (%s) %s: %s", tostring(e.rank), tostring(e.host), tostring(e.status), tostring(e.why))
  end
  say("")
  local counts = { ok = 0, failed = 0, skipped = 0, partial = 0 }
  local overheads = {}
  for _, c in pairs(cell_recs) do
    counts[c.status] = (counts[c.status] or 0) + 1
    if c.overhead_s then overheads[#overheads + 1] = c.overhead_s end
  end
  local total = 0
  for _, n in pairs(counts) do total = total + n end
  if opts.planned then total = math.max(total, opts.planned) end
  say("cells: %d recorded of %d; %d ok, %d failed, %d partial (a host gone), %d skipped",
    counts.ok + counts.failed + counts.partial + counts.skipped, total, counts.ok, counts.failed,
    counts.partial, counts.skipped)
  if #overheads > 0 then
    say("driver overhead per cell (set-up and teardown, outside measurements): median %.3f s, max %.3f s",
      stats.median(overheads), stats.max(overheads))
  end
  local meas = results.latest(list)
  local g, order = M.group(meas)
  for _, p in ipairs(order) do
    for _, s in ipairs(keys_sorted(g[p])) do
      say("")
      say("pattern %s, %s", p, s)
      say("%10s %9s %12s %12s %12s %12s %12s", "size", "measured", "lat us", "lat p99 us",
        "GB/s -> med", "GB/s <- med", "GB/s -> min")
      local by_size = g[p][s]
      for _, size in ipairs(keys_sorted(by_size, true)) do
        local rows = by_size[size]
        local lat, p99, push, pull, okn = {}, {}, {}, {}, 0
        for _, r in ipairs(rows) do
          if r.ok then okn = okn + 1 end
          lat[#lat + 1] = results.lat_value(r.latency_us)
          p99[#p99 + 1] = r.latency_us and r.latency_us.p99
          push[#push + 1] = r.bw_gbps and r.bw_gbps.push
          pull[#pull + 1] = r.bw_gbps and r.bw_gbps.pull
        end
        say("%10s %9s %12s %12s %12s %12s %12s", perf.human(size), okn .. "/" .. #rows,
          f(stats.median(lat), "%.2f"), f(stats.median(p99), "%.2f"), f(stats.median(push)),
          f(stats.median(pull)), f(stats.min(push)))
      end
    end
  end
  local failures = {}
  for _, r in ipairs(meas) do
    if not r.ok then failures[#failures + 1] = r end
  end
  if #failures > 0 then
    say("")
    say("not measured (%d):", #failures)
    for i, r in ipairs(failures) do
      if i > 50 then say("  ... and %d more (results.jsonl has them all)", #failures - 50) break end
      local who = r.pair and string.format("pair %d-%d", r.pair[1], r.pair[2]) or
        (r.rank and ("rank " .. r.rank) or "all ranks")
      say("  %s %s: %s", r.cell, who, r.skipped and ("skipped: " .. r.skipped) or tostring(r.error))
    end
  end
  return table.concat(out, "\n") .. "\n"
end

function M.write(dir, list, opts)
  local f, err = io.open(dir .. "/summary.txt", "w")
  if not f then return nil, err end
  f:write(M.render(list, opts))
  f:close()
  return true
end

return M
