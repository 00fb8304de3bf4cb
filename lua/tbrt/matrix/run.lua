-- tbrt/matrix/run.lua - running a matrix: make the hosts, start an agent
-- on each, run the cells one after another (the pairs of a round at the
-- same time), record everything as it happens, and clean up whatever
-- happens.
--
-- A cell: for a built-in pattern, its rounds of pairs (tbrt.matrix.patterns);
-- each pair is two steps sent at once, one to each end, each bounded by
-- what is left of the cell's timeout. For a scenario, one step to every
-- rank. A step that fails records its error (which host, which step) and
-- the matrix goes on.
--
-- Hosts that go away: after each cell, a rank whose agent died or fell
-- silent is started again where the launcher can (netns, local, ssh); if
-- it cannot be started, or does not check in, the host is marked vanished
-- ("host" line with the reason) and every later pair with it is skipped
-- with that reason.
--
-- Stopping: stop(why) (the command calls it on SIGINT/SIGTERM) abandons
-- the running cell (it is not recorded, so --resume runs it again), says
-- bye to the agents, stops their processes, removes the hosts that were
-- made, and still writes the summary, the CSV and the plots of what
-- finished. The exit code: 0 every cell ok, 3 some cell failed or was
-- skipped, 130 stopped, 1 could not run.
local uv = require("luv")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local cells_mod = require("tbrt.matrix.cells")
local patterns = require("tbrt.matrix.patterns")
local coord_mod = require("tbrt.matrix.coord")
local hosts = require("tbrt.matrix.hosts")
local results = require("tbrt.matrix.results")
local summary = require("tbrt.matrix.summary")
local plot = require("tbrt.matrix.plot")
local progress_mod = require("tbrt.matrix.progress")
local proc = require("tbrt.matrix.proc")
local file = require("tbrt.matrix.file")

local M = {}

local GRACE = 10          -- seconds the driver waits past a step's own bound
local RELAUNCH_MIN_S = 5  -- the least time an agent started again has to check in

local function now() uv.update_time() return uv.hrtime() / 1e9 end

local function random_hex(n)
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(n) or tostring(uv.hrtime()):rep(2):sub(1, n)
  if f then f:close() end
  return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end)):sub(1, 2 * n)
end

function M.git_sha()
  local host = package.loaded["tbrt.host"]
  local root = host and host.root
  if not root then return "unknown" end
  local r = proc.run({ "git", "-C", root, "rev-parse", "--short=12", "HEAD" }, { timeout = 5 })
  local sha = r and r.code == 0 and r.stdout:match("^(%x+)")
  return sha or "unknown"
end

local Run = {}
Run.__index = Run

function M.new(spec, opts)
  return setmetatable({ spec = spec, opts = opts, vanished = {}, next_step = 1, events = {} }, Run)
end

function Run:say(fmt, ...)
  local text = string.format(fmt, ...)
  if self.progress then self.progress:note(text) else print(text) end
end

function Run:who(rank)
  local a = self.coord and self.coord:agent(rank)
  return { rank = rank, host = a and a.host or "?", addr = a and a.addr, port = a and a.port }
end

function Run:name(rank)
  local w = self:who(rank)
  return string.format("rank %d (%s)", rank, w.host)
end

function Run:peers_of(list)
  local peers = {}
  for _, r in ipairs(list) do
    local w = self:who(r)
    peers[tostring(r)] = { addr = w.addr, port = w.port, host = w.host }
  end
  return peers
end

-- Why a rank's request failed, with how its process ended if it did.
function Run:death(rank, why)
  task.wait(function() return self.group:exited(rank) end, 1)
  local how = self.group:exited(rank)
  return how and (why .. "; " .. how) or why
end

---------------------------------------------------------------------------
-- One pair of a round.

function Run:pair(cell, round, pair, deadline)
  local a, b = pair[1], pair[2]
  local who = { self:who(a), self:who(b) }
  for _, r in ipairs(pair) do
    if self.vanished[r] then
      return results.skipped_record(self.run, cell, round, pair, who,
        string.format("%s vanished: %s", self:name(r), self.vanished[r])), "skipped"
    end
  end
  local step_id = self.next_step
  self.next_step = step_id + 1
  local left = math.max(1, deadline - now())
  local base = { t = "run", kind = "pair", step = step_id, size = cell.size, opts = cell.opts,
    faults = cell.faults, measure = self.spec.measure, timeout = left, peers = self:peers_of(pair) }
  local function msg_for(role, peer)
    local m = {}
    for k, v in pairs(base) do m[k] = v end
    m.role, m.peer = role, peer
    return m
  end
  local replies = {}
  local function ask(i, rank, m)
    return function()
      local rep, err = self.coord:request(rank, m, left + GRACE)
      replies[i] = rep or { ok = false, where = "agent", error = self:death(rank, err), gone = true }
      -- one end failed: the other must not wait out the cell for its dial
      local other = i == 1 and b or a
      if not replies[i].ok and not replies[3 - i] then
        self.coord:notify(other, { t = "cancel", step = step_id })
      end
      return true
    end
  end
  local t = { task.spawn(ask(1, a, msg_for("client", b))), task.spawn(ask(2, b, msg_for("server", a))) }
  task.all(t, left + GRACE + 5)
  local c, s = replies[1] or { ok = false, where = "driver", error = "no reply" },
    replies[2] or { ok = false, where = "driver", error = "no reply" }
  local err
  if not c.ok or not s.ok then
    local parts = {}
    -- a dead end first: it is the cause, the other end's error the effect
    local order = (s.gone and not c.gone) and { { b, s }, { a, c } } or { { a, c }, { b, s } }
    for _, e in ipairs(order) do
      local rank, rep = e[1], e[2]
      if not rep.ok then
        parts[#parts + 1] = string.format("%s %s: %s", self:name(rank), tostring(rep.where), tostring(rep.error))
      end
    end
    local first = order[1][2].ok and order[2] or order[1]
    err = { text = table.concat(parts, "; "), step = first[2].where }
  end
  -- replies are an agent's word: tables where tables are expected
  local cres = c.ok and type(c.result) == "table" and c.result or nil
  local sres = s.ok and type(s.result) == "table" and s.result or nil
  local rec = results.pair_record(self.run, cell, round, pair, who, cres, sres, err)
  local mt = cres and type(cres.measure_s) == "number" and cres.measure_s or 0
  return rec, rec.ok and "ok" or "failed", mt
end

---------------------------------------------------------------------------
-- A cell.

function Run:builtin_cell(cell, deadline)
  local n = self.spec.hosts.count
  local rounds, order = patterns.rounds(cell.pattern, n, cell.rep, self.spec.seed)
  local counts, measure = { ok = 0, failed = 0, skipped = 0 }, 0
  for r, round in ipairs(rounds) do
    local recs, times = {}, {}
    local list = {}
    for i, pair in ipairs(round) do
      list[i] = function()
        local rec, status, mt = self:pair(cell, r, pair, deadline)
        if order then rec.order = order end
        recs[i] = rec
        times[i] = mt
        counts[status] = counts[status] + 1
        return true
      end
    end
    local ok, err = task.all(list, math.max(1, deadline - now()) + GRACE + 10)
    if not ok then error("cell " .. cell.key .. ": round " .. r .. ": " .. tostring(err), 0) end
    local round_max = 0
    for i = 1, #round do
      self.out:write(recs[i])
      if (times[i] or 0) > round_max then round_max = times[i] end
    end
    measure = measure + round_max
  end
  return counts, measure
end

function Run:scenario_cell(cell, deadline)
  local n = self.spec.hosts.count
  local ranks, counts = {}, { ok = 0, failed = 0, skipped = 0 }
  for r = 0, n - 1 do ranks[#ranks + 1] = r end
  for _, r in ipairs(ranks) do
    if self.vanished[r] then
      self.out:write(results.skipped_record(self.run, cell, nil, nil, nil,
        string.format("%s vanished: %s", self:name(r), self.vanished[r])))
      counts.skipped = counts.skipped + 1
      return counts, 0
    end
  end
  local step_id = self.next_step
  self.next_step = step_id + 1
  local left = math.max(1, deadline - now())
  local peers = self:peers_of(ranks)
  local replies = {}
  local list = {}
  local t0 = now()
  for i, r in ipairs(ranks) do
    list[i] = function()
      local rep, err = self.coord:request(r, { t = "run", kind = "scenario", step = step_id,
        pattern = cell.pattern.index, size = n, cell = cell.params, opts = cell.opts, faults = cell.faults,
        timeout = left, peers = peers }, left + GRACE)
      replies[i] = rep or { ok = false, where = "agent", error = self:death(r, err) }
      if not replies[i].ok then
        -- a rank failed: the others must not wait out the cell for its dials
        for j, other in ipairs(ranks) do
          if not replies[j] then self.coord:notify(other, { t = "cancel", step = step_id }) end
        end
      end
      return true
    end
  end
  task.all(list, left + GRACE + 5)
  local wall = now() - t0
  for i, r in ipairs(ranks) do
    local rep = replies[i] or { ok = false, where = "driver", error = "no reply" }
    local err = not rep.ok and { text = string.format("%s %s: %s", self:name(r), tostring(rep.where),
      tostring(rep.error)), step = rep.where } or nil
    self.out:write(results.scenario_record(self.run, cell, r, self:who(r),
      rep.ok and type(rep.result) == "table" and rep.result or nil, err))
    counts[rep.ok and "ok" or "failed"] = counts[rep.ok and "ok" or "failed"] + 1
  end
  -- a scenario's time is all its own: the driver's part is the messages
  return counts, wall
end

function Run:cell(cell)
  local t0 = now()
  local deadline = t0 + cell.timeout
  local counts, measure
  if cell.pattern.kind == "scenario" then
    counts, measure = self:scenario_cell(cell, deadline)
  else
    counts, measure = self:builtin_cell(cell, deadline)
  end
  local wall = now() - t0
  local status = counts.failed > 0 and "failed" or
    (counts.skipped > 0 and (counts.ok > 0 and "partial" or "skipped")) or "ok"
  local rec = results.cell_fields(results.base(self.run, "cell"), cell)
  rec.status, rec.wall_s, rec.measure_s = status, wall, measure
  rec.overhead_s = math.max(0, wall - measure)
  rec.pairs = counts
  self.out:write(rec)
  return status, wall
end

---------------------------------------------------------------------------
-- Hosts that died or fell silent.

function Run:host_event(rank, status, why)
  local w = self:who(rank)
  local rec = results.base(self.run, "host")
  rec.rank, rec.host, rec.status, rec.why = rank, w.host, status, why
  self.out:write(rec)
  self:say("matrix: %s %s: %s", self:name(rank), status, why)
end

function Run:check_hosts()
  for rank = 0, self.spec.hosts.count - 1 do
    if not self.vanished[rank] then
      local alive, why = self.coord:alive(rank)
      if not alive then
        why = self:death(rank, why or "gone")
        self:host_event(rank, "died", why)
        local ok, err = self.group:relaunch(rank)
        if ok then
          -- a host that is really gone should not cost long: twice the
          -- liveness bound, at least RELAUNCH_MIN_S
          local bound = math.min(self.spec.launch_timeout, math.max(RELAUNCH_MIN_S, 2 * self.spec.liveness))
          ok, err = self.coord:await(bound, { rank }, function() return self.group:exited(rank) end)
        end
        if ok then
          self:host_event(rank, "relaunched", "its agent was started again and checked in")
        else
          self.vanished[rank] = string.format("%s; starting it again failed: %s", why, tostring(err))
          self:host_event(rank, "vanished", self.vanished[rank])
        end
      end
    end
  end
end

---------------------------------------------------------------------------

function Run:stop(why)
  if self.stopping then
    -- a second time: do not wait for anything any more
    if self.group then self.group:cleanup_now() end
    io.stdout:write("\nmatrix: stopped hard (", why, ")\n")
    os.exit(130)
  end
  self.stopping = why
  if self.coord then self.coord.abort = "stopped: " .. why end
  if self.cell_task then self.cell_task:cancel(why) end
end

local function mkdir_p(path)
  local ok = os.execute("mkdir -p " .. proc.quote({ path }))
  return ok == 0 or ok == true
end

function Run:prepare_out()
  local o = self.opts
  local dir = o.out or string.format("matrix-%s-%s", self.spec.name, os.date("%Y%m%d-%H%M%S"))
  if not mkdir_p(dir .. "/logs") then return nil, "cannot make the output folder " .. dir end
  self.dir = dir
  local existing = results.read(dir)
  if existing and #existing > 0 and not o.resume then
    return nil, string.format("%s already holds results (results.jsonl): --resume continues them, or " ..
      "choose another --out", dir)
  end
  self.finished = existing and results.finished(existing) or {}
  return true
end

function Run:finish_files(planned)
  local list = results.read(self.dir) or {}
  results.write_csv(self.dir, list)
  summary.write(self.dir, list, { planned = planned })
  local made, perr = plot.draw_all(self.dir, list, self.spec.hosts.count)
  return made, perr
end

function Run:execute()
  local spec = self.spec
  local list, err = cells_mod.expand(spec, self.opts.only)
  if not list then return nil, err end
  local ok
  ok, err = self:prepare_out()
  if not ok then return nil, err end
  local todo = {}
  for _, c in ipairs(list) do if not self.finished[c.key] then todo[#todo + 1] = c end end
  if self.opts.resume then
    print(string.format("matrix: resuming in %s: %d of %d cells done, %d to run", self.dir,
      #list - #todo, #list, #todo))
  end
  if #todo == 0 then
    -- nothing left to run: no hosts to make, only the files to redraw
    local made, perr = self:finish_files(#list)
    print(string.format("matrix: nothing to run; results in %s: results.jsonl, results.csv, summary.txt, %s",
      self.dir, made and (#made .. " plots in plots/") or ("no plots: " .. tostring(perr))))
    return 0
  end
  for _, k in ipairs(file.unknown_link_options(spec)) do
    print(string.format("matrix: warning: %s is not a link option of this tbrt: cells with it will " ..
      "fail here with the link's reason", k))
  end
  self.token = random_hex(16)
  self.run = { id = random_hex(4), version = tbrt.version, git = M.git_sha() }
  self.out = assert(results.open(self.dir))
  self.group = hosts.new(spec.hosts, { pid = uv.os_getpid(), logdir = self.dir .. "/logs", token = self.token })
  local code = 0
  local body_ok, body_err = pcall(function()
    ok, err = self.group:setup()
    if not ok then error({ setup = err }, 0) end
    local listen_host, agent_host = self.group:coordinator()
    self.coord, err = coord_mod.listen(listen_host, { token = self.token, count = spec.hosts.count,
      text = spec.text, path = spec.path, liveness = spec.liveness or 15 })
    if not self.coord then error({ setup = err }, 0) end
    local coord_arg = (agent_host:find(":", 1, true) and ("[" .. agent_host .. "]") or agent_host) ..
      ":" .. self.coord.port
    ok, err = self.group:launch(function(rank)
      -- the token travels in the environment (or ssh's stdin), never on a command line
      local a = { "matrix", "agent", "--coord", coord_arg }
      if rank then a[#a + 1] = "--rank"; a[#a + 1] = tostring(rank) end
      return a
    end)
    if not ok then error({ setup = err }, 0) end
    local missing
    ok, err, missing = self.coord:await(spec.launch_timeout)
    if not ok then
      local why = {}
      for _, r in ipairs(missing or {}) do
        local how = self.group:exited(r)
        if how then why[#why + 1] = string.format("rank %d: %s", r, how) end
      end
      error({ setup = err .. (#why > 0 and ("; " .. table.concat(why, "; ")) or "") }, 0)
    end
    local run_rec = results.base(self.run, "run")
    run_rec.matrix, run_rec.file, run_rec.launcher, run_rec.count = spec.name, spec.path, spec.hosts.kind,
      spec.hosts.count
    run_rec.cells, run_rec.todo, run_rec.driver_pid = #list, #todo, uv.os_getpid()
    run_rec.hosts = {}
    for r = 0, spec.hosts.count - 1 do
      local a = self.coord:agent(r)
      run_rec.hosts[#run_rec.hosts + 1] = { rank = r, host = a.host, addr = a.addr, pid = a.pid,
        version = a.version, where = self.group:describe(r), rank_from = a.rank_from }
    end
    self.out:write(run_rec)
    self.progress = progress_mod.new({ total = #todo, tty = self.opts.tty })
    local failed = 0
    for _, cell in ipairs(todo) do
      if self.stopping then break end
      self.progress:cell_start(cell.key)
      local status, wall
      local cell_err
      self.cell_task = task.spawn(function()
        local cok, st, w = pcall(self.cell, self, cell)
        if cok then status, wall = st, w else cell_err = st end
      end)
      local t = self.cell_task
      local ended = task.wait(function()
        local st = t:status()
        return st == "done" or st == "failed" or st == "canceled" or self.stopping
      end, cell.timeout + 3 * GRACE + 30)
      if self.stopping then break end
      if not ended then
        t:cancel("the cell outlived its bound")
        cell_err = string.format("the driver gave up on cell %s after %g s", cell.key, cell.timeout + 3 * GRACE + 30)
      end
      if cell_err then
        if tostring(cell_err):match("ECANCELED") and self.stopping then break end
        -- a bug or a bound in the driver, not a measurement: record and go on
        local rec = results.cell_fields(results.base(self.run, "cell"), cell)
        rec.status, rec.error = "failed", "driver: " .. tostring(cell_err)
        self.out:write(rec)
        status, wall = "failed", 0
      end
      if status ~= "ok" then failed = failed + 1 end
      self.progress:cell_end(status, wall)
      self:check_hosts()
    end
    code = self.stopping and 130 or (failed > 0 and 3 or 0)
  end)
  -- whatever happened: agents away, hosts removed, files written
  local stopped = self.stopping and string.format("matrix: stopped (%s); what finished is kept: " ..
    "run again with --resume to continue", self.stopping)
  if self.progress then self.progress:finish(stopped or nil) elseif stopped then print(stopped) end
  if self.coord then self.coord:close() end
  self.group:stop()
  self.group:cleanup()
  self.out:close()
  if not body_ok then
    if type(body_err) == "table" and body_err.setup then
      err = body_err.setup
    else
      err = tostring(body_err)
    end
    if self.stopping then err = nil end       -- stopped while starting: not a failure to report
    if err then
      io.stderr:write("matrix: ", err, "\n")
      code = 1
    else
      code = 130
    end
  end
  local made, perr = self:finish_files(#list)
  print(string.format("matrix: results in %s: results.jsonl, results.csv, summary.txt, %s", self.dir,
    made and (#made .. " plots in plots/") or ("no plots: " .. tostring(perr))))
  return code
end

return M
