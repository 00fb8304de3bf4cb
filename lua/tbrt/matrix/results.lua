-- tbrt/matrix/results.lua - what a run leaves in its folder, and the
-- reading of it back:
--   results.jsonl  one JSON object a line, appended as things happen:
--                  kind "run" (the matrix, launcher, hosts, tbrt version
--                  and git sha), "measurement" (one pair of one cell, or
--                  one rank of a scenario: parameters, hosts, latency,
--                  bandwidth, message rate, transport counters, or the
--                  error and the step it came from), "cell" (its status,
--                  wall time, measurement time and the driver's overhead),
--                  "host" (a host that died, came back or vanished)
--   results.csv    the measurements, one row each, flattened
--   summary.txt    the tables (tbrt.matrix.summary)
-- Measurements are made from the raw rows perf.measure returned, whatever
-- fields this tbrt's perf gives: the latency fields (lat_us, lat_p99_us,
-- a lat table, ...) are gathered under latency_us by their names, the
-- bandwidth ones under bw_gbps; the raw rows are kept under perf.
local json = require("tbrt.matrix.json")
local cells = require("tbrt.matrix.cells")

local M = {}

M.MAX_LINE = 4 * 1024 * 1024

---------------------------------------------------------------------------
-- Normalizing perf rows.

local function merge_numbers(out, t)
  for k, v in pairs(t) do if type(k) == "string" and type(v) == "number" then out[k] = v end end
end

-- Fields of a perf row that count messages, not time or rate.
local COUNTS = { iters = true, warmup = true }

-- { min=, median=, mean=, p99=, ... } in microseconds from a perf row:
-- lat_us (a mean: the first perf), lat_<name>_us (min, typical, mean, p99,
-- p99_9, max, stdev), or a table of them. perf's "typical" is the median.
function M.latency(row)
  if type(row) ~= "table" then return nil end
  local out, any = {}, false
  for k, v in pairs(row) do
    if type(k) == "string" and k:match("^lat") then
      if type(v) == "number" then
        local name = k:gsub("^latency_?", ""):gsub("^lat_?", ""):gsub("^us_?", ""):gsub("_?us$", "")
        if not COUNTS[name] then
          out[name == "" and "mean" or name] = v
          any = true
        end
      elseif type(v) == "table" then
        merge_numbers(out, v)
        any = true
      end
    end
  end
  if out.typical and not out.median then out.median = out.typical end
  return any and out or nil
end

-- The one latency figure of a measurement: the median if perf gave one,
-- else the mean.
function M.lat_value(lat)
  if type(lat) ~= "table" then return nil end
  return lat.median or lat.typical or lat.p50 or lat.mean or lat.avg
end

function M.bandwidth(row)
  if type(row) ~= "table" then return nil end
  local out, any = {}, false
  for k, v in pairs(row) do
    if type(k) == "string" and type(v) == "number" and k:match("^bw_") and not COUNTS[k:sub(4)] then
      out[k:sub(4)] = v
      any = true
    elseif k == "bw" and type(v) == "table" then
      merge_numbers(out, v)
      any = true
    end
  end
  return any and out or nil
end

-- Messages per second: perf's own figures if it gives them, else derived
-- from the bandwidth and the size (marked derived = true).
function M.msg_rate(lat_row, bw_row, bw, size)
  local out, any = {}, false
  for _, row in ipairs { lat_row or {}, bw_row or {} } do
    for k, v in pairs(row) do
      if type(k) == "string" and k:match("rate") then
        if type(v) == "number" then
          local name = k:gsub("^msg_?rate_?", ""):gsub("^rate_?", "")
          out[name == "" and "value" or name] = v
          any = true
        elseif type(v) == "table" then
          merge_numbers(out, v)
          any = true
        end
      end
    end
  end
  if any then return out end
  if bw and size and size > 0 then
    for k, v in pairs(bw) do out[k] = v * 1e9 / size end
    out.derived = true
    return out
  end
end

---------------------------------------------------------------------------
-- Records.

function M.iso_time(t)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(t or os.time()))
end

-- The common part of every line.
function M.base(run, kind)
  return { kind = kind, run = run.id, version = run.version, git = run.git, time = M.iso_time(),
    t = os.time() }
end

function M.cell_fields(rec, cell)
  rec.cell, rec.cell_index, rec.params, rec.opts = cell.key, cell.index, cell.params, cell.opts
  return rec
end

-- A measurement from the two ends' replies of a pair.
function M.pair_record(run, cell, round, pair, who, client, server, err)
  local rec = M.cell_fields(M.base(run, "measurement"), cell)
  rec.round, rec.pair = round, { pair[1], pair[2] }
  rec.hosts = { who[1].host, who[2].host }
  rec.addrs = { who[1].addr, who[2].addr }
  if err then
    rec.ok, rec.error, rec.step = false, err.text, err.step
  else
    rec.ok = true
  end
  local c = client or {}
  local lat, bw = M.latency(c.lat), M.bandwidth(c.bw)
  rec.latency_us, rec.bw_gbps = lat, bw
  rec.msg_rate = M.msg_rate(c.lat, c.bw, bw, cell.size)
  rec.perf = (c.lat or c.bw) and { lat = c.lat, bw = c.bw } or nil
  rec.counters = { client = c.stats, server = server and server.stats or nil }
  rec.link = c.info or (server and server.info)
  rec.setup_s, rec.measure_s, rec.teardown_s = c.setup_s, c.measure_s, c.teardown_s
  return rec
end

function M.scenario_record(run, cell, rank, who, reply, err)
  local rec = M.cell_fields(M.base(run, "measurement"), cell)
  rec.rank, rec.hosts, rec.addrs = rank, { who.host }, { who.addr }
  if err then
    rec.ok, rec.error, rec.step = false, err.text, err.step
  else
    rec.ok, rec.result = true, reply and reply.result
    -- a scenario that returns a perf row gets the figures a pair gets
    local row = rec.result
    if type(row) == "table" then
      rec.latency_us, rec.bw_gbps = M.latency(row), M.bandwidth(row)
      if rec.latency_us or rec.bw_gbps then
        rec.msg_rate = M.msg_rate(row, row, rec.bw_gbps, cell.size)
      end
    end
  end
  return rec
end

function M.skipped_record(run, cell, round, pair, who, why)
  local rec = M.cell_fields(M.base(run, "measurement"), cell)
  rec.round, rec.pair = round, pair and { pair[1], pair[2] } or nil
  rec.hosts = who and { who[1] and who[1].host, who[2] and who[2].host } or nil
  rec.ok, rec.skipped = false, why
  return rec
end

---------------------------------------------------------------------------
-- The file.

local Writer = {}
Writer.__index = Writer

function M.open(dir)
  local path = dir .. "/results.jsonl"
  local f, err = io.open(path, "a")
  if not f then return nil, "results: " .. err end
  f:setvbuf("line")
  return setmetatable({ f = f, path = path }, Writer)
end

function Writer:write(rec)
  self.f:write(json.encode(rec, "result line"), "\n")
  self.f:flush()
end

function Writer:close() if self.f then self.f:close() self.f = nil end end

-- Every line of DIR/results.jsonl (bad lines counted, not fatal).
function M.read(dir)
  local path = dir .. "/results.jsonl"
  local f = io.open(path, "rb")
  if not f then return nil, "no results in " .. dir .. " (" .. path .. " missing)" end
  local list, bad = {}, 0
  for line in f:lines() do
    if #line > M.MAX_LINE then
      bad = bad + 1
    elseif line:match("%S") then
      local rec = json.decode(line, path)
      if type(rec) == "table" and type(rec.kind) == "string" then
        list[#list + 1] = json.denull(rec)
      else
        bad = bad + 1
      end
    end
  end
  f:close()
  return list, bad
end

-- The cells a run finished (ok or failed): key -> record. Cells skipped
-- (a host was gone) or never finished are not in it: --resume runs them.
function M.finished(list)
  local done = {}
  for _, r in ipairs(list) do
    if r.kind == "cell" and (r.status == "ok" or r.status == "failed") then done[r.cell] = r end
  end
  return done
end

-- The last word on each cell: only the measurements of its last attempt
-- count (a resumed run may have tried a cell before).
function M.latest(list)
  local attempt = {}
  for _, r in ipairs(list) do
    if r.kind == "cell" then attempt[r.cell] = r.run end
  end
  local out = {}
  for _, r in ipairs(list) do
    if r.kind == "measurement" and attempt[r.cell] == r.run then out[#out + 1] = r end
  end
  return out
end

---------------------------------------------------------------------------
-- CSV.

local function csv_field(v)
  if v == nil then return "" end
  if type(v) == "number" then return cells.fmt(v) end
  if type(v) == "boolean" then return v and "true" or "false" end
  if type(v) == "table" then v = json.encode(v) end
  v = tostring(v)
  if v:find("[,\"\n\r]") then return '"' .. v:gsub('"', '""') .. '"' end
  return v
end
M.csv_field = csv_field

function M.write_csv(dir, list)
  local meas = M.latest(list)
  local params, lat_keys, bw_keys, rate_keys, cc, sc = {}, {}, {}, {}, {}, {}
  local function note(set, t)
    for k, v in pairs(t or {}) do if type(v) == "number" then set[k] = true end end
  end
  for _, r in ipairs(meas) do
    for k in pairs(cells.flat_params(r.params or {})) do params[k] = true end
    note(lat_keys, r.latency_us)
    note(bw_keys, r.bw_gbps)
    note(rate_keys, r.msg_rate)
    note(cc, r.counters and r.counters.client)
    note(sc, r.counters and r.counters.server)
  end
  local function sorted(set, first)
    local out = {}
    for k in pairs(set) do out[#out + 1] = k end
    table.sort(out, function(a, b)
      local fa, fb = first and first[a], first and first[b]
      if fa or fb then return (fa or 99) < (fb or 99) end
      return a < b
    end)
    return out
  end
  local pcols = sorted(params, { pattern = 1 })
  local lcols = sorted(lat_keys, { min = 1, median = 2, mean = 3, p99 = 4, p999 = 5, max = 6, stdev = 7 })
  local bcols, rcols, ccols, scols = sorted(bw_keys), sorted(rate_keys), sorted(cc), sorted(sc)
  local header = { "cell" }
  for _, k in ipairs(pcols) do header[#header + 1] = k end
  for _, k in ipairs { "round", "a", "b", "rank", "host_a", "host_b", "ok", "skipped", "step", "error" } do
    header[#header + 1] = k
  end
  for _, k in ipairs(lcols) do header[#header + 1] = "lat_" .. k .. "_us" end
  for _, k in ipairs(bcols) do header[#header + 1] = "bw_" .. k .. "_gbps" end
  for _, k in ipairs(rcols) do header[#header + 1] = "rate_" .. k end
  for _, k in ipairs(ccols) do header[#header + 1] = "client_" .. k end
  for _, k in ipairs(scols) do header[#header + 1] = "server_" .. k end
  for _, k in ipairs { "setup_s", "measure_s", "time" } do header[#header + 1] = k end
  local f, err = io.open(dir .. "/results.csv", "w")
  if not f then return nil, err end
  f:write(table.concat(header, ","), "\n")
  for _, r in ipairs(meas) do
    local flat = cells.flat_params(r.params or {})
    local row = { csv_field(r.cell) }
    for _, k in ipairs(pcols) do row[#row + 1] = csv_field(flat[k]) end
    local pair, hosts = r.pair or {}, r.hosts or {}
    local fixed = { n = 10, r.round, pair[1], pair[2], r.rank, hosts[1], hosts[2], r.ok, r.skipped, r.step, r.error }
    for i = 1, fixed.n do row[#row + 1] = csv_field(fixed[i]) end
    local c = r.counters or {}
    for _, k in ipairs(lcols) do row[#row + 1] = csv_field((r.latency_us or {})[k]) end
    for _, k in ipairs(bcols) do row[#row + 1] = csv_field((r.bw_gbps or {})[k]) end
    for _, k in ipairs(rcols) do row[#row + 1] = csv_field((r.msg_rate or {})[k]) end
    for _, k in ipairs(ccols) do row[#row + 1] = csv_field((c.client or {})[k]) end
    for _, k in ipairs(scols) do row[#row + 1] = csv_field((c.server or {})[k]) end
    local tail = { n = 3, r.setup_s, r.measure_s, r.time }
    for i = 1, tail.n do row[#row + 1] = csv_field(tail[i]) end
    f:write(table.concat(row, ","), "\n")
  end
  f:close()
  return true
end

return M
