-- tbrt/matrix/step.lua - one pair of a built-in pattern, as an agent runs
-- it: the measuring end (client) and the answering end (server) of one
-- link, set up by the agent's link factory.
--
--   client: link -> faults -> latency (perf.measure lat_only, its warm-up first)
--           -> bandwidth (perf.measure bw_only) -> perf.done -> stats -> close
--   server: link -> faults -> perf.serve until done -> stats -> close
--
-- perf.measure checks every byte of every message; its rows are returned
-- as they come (whatever fields this tbrt's perf gives), and the driver
-- makes the result line of them. A failure says which step it was in
-- ("link", "faults", "latency", "bandwidth", "serve"), so the driver can
-- say which host failed at which step.
local perf = require("tbrt.perf")
local link = require("tbrt.link")
local support = require("tbrt.matrix.support")

local M = {}

local function step_error(where, err)
  error({ step = where, message = tostring(err) }, 0)
end

-- Set a cell's faults on a link (both ends do, each for what it sends).
function M.apply_faults(l, faults)
  if support.no_faults(faults) then return true end
  local how, why = support.faults()
  if how ~= "method" then
    if how == "option" then return true end        -- passed with the link options
    return nil, "ENOTSUP: " .. why
  end
  local ok, res, err = pcall(l.faults, l, faults)
  if not ok then return nil, "EINVAL: link:faults: " .. tostring(res) end
  if res == nil and err then return nil, err end
  return true
end

-- The link options of a cell as this tbrt takes them: faults travel as an
-- option only where links take one.
function M.link_opts(opts, faults, timeout)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.timeout == nil then o.timeout = math.min(timeout, 60) end
  if not support.no_faults(faults) and support.faults() == "option" then o.faults = faults end
  return o
end

local function stats_of(l)
  local ok, s = pcall(l.stats, l)
  return ok and s or nil
end

local function info_of(l)
  local i = l:info()
  return { kind = i.kind, device = i.device, personality = i.personality, framing = i.framing,
    qp_type = i.qp_type, nbuf = i.nbuf, stride = i.stride, port = i.port,
    fallback = l.fallback_why }
end

-- The measuring end. make_link() -> link | nil, err. Returns the raw result.
function M.client(make_link, s, timeout)
  local now = link.now
  local t0 = now()
  local l, err = make_link()
  if not l then step_error("link", err) end
  local res = { setup_s = now() - t0 }
  local ok, ferr = M.apply_faults(l, s.faults)
  if not ok then l:close() step_error("faults", ferr) end
  local m = s.measure or {}
  local n = s.size
  local t1 = now()
  local function run(what, mopts)
    mopts.timeout = timeout
    local pok, row = pcall(perf.measure, l, n, mopts)
    if not pok then
      l:close()
      step_error(what, row)
    end
    return row
  end
  -- the counts come from the matrix's budgets, so a cell's time is the
  -- file's to choose; the untimed warm-up is perf's (its own default when
  -- the file names none)
  if m.test ~= "bw" then
    res.lat = run("latency", { iters = m.lat_iters or perf.count_for(n, m.lat_bytes or 4 * 2 ^ 20, 20, 2000),
      warmup = m.warmup, lat_only = true })
  end
  if m.test ~= "lat" then
    res.bw = run("bandwidth", { iters = m.bw_iters or perf.count_for(n, m.bw_bytes or 32 * 2 ^ 20, 8, 4000),
      bw_only = true })
  end
  res.measure_s = now() - t1
  local dok, derr = pcall(perf.done, l)
  if not dok then l:close() step_error("done", derr) end
  res.stats, res.info = stats_of(l), info_of(l)
  local t2 = now()
  local cok, cerr = l:close()
  res.teardown_s = now() - t2
  if not cok then step_error("close", cerr) end
  return res
end

-- The answering end.
function M.server(make_link, s, timeout)
  local now = link.now
  local t0 = now()
  local l, err = make_link()
  if not l then step_error("link", err) end
  local res = { setup_s = now() - t0 }
  local ok, ferr = M.apply_faults(l, s.faults)
  if not ok then l:close() step_error("faults", ferr) end
  local t1 = now()
  local sok, serr = perf.serve(l, timeout)
  res.serve_s = now() - t1
  if not sok then l:close() step_error("serve", serr) end
  res.stats, res.info = stats_of(l), info_of(l)
  local cok, cerr = l:close()
  if not cok then step_error("close", cerr) end
  return res
end

return M
