-- tbrt/matrix/agent.lua - one rank of a matrix: `tbrt matrix agent`, as the
-- launchers start it on each host (netns, local, ssh, mpirun, srun). It
-- dials the coordinator (the driver), says hello, gets its rank and the
-- matrix file, then runs the steps it is sent, each in a task of its own
-- and each bounded by its cell's timeout, until told bye or until the
-- coordinator goes away (then it exits: an agent never outlives its driver).
--
-- Links between agents: every agent listens on one port (on the address
-- that faces the coordinator) for its whole life. The dialing end sends a
-- 40-byte preamble, then the link set-up (tbrt.setup) runs on the socket:
--   "TBMX" token[16] from_rank[8] step[8] nth[4]   (decimal, space padded)
-- The token (the run's secret, from the command line) keeps strangers out;
-- step and nth (the nth link between these two ranks in that step) let a
-- scenario make several links to one peer and a late connection from a
-- step that timed out never meet a new one. Incoming connections whose
-- preamble is late, bad or unclaimed are closed; at most MAX_WAITING wait
-- to be claimed, for at most CLAIM_S seconds.
local uv = require("luv")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local sock = require("tbrt.sock")
local msg = require("tbrt.matrix.msg")
local json = require("tbrt.matrix.json")
local netaddr = require("tbrt.matrix.netaddr")
local file = require("tbrt.matrix.file")
local step = require("tbrt.matrix.step")
local perf = require("tbrt.perf")

local M = {}

M.PREAMBLE = 40
local MAX_WAITING = 64
local CLAIM_S = 60
local MAX_RESULT = 256 * 1024        -- bytes of a scenario's encoded result

function M.preamble(token, from, step_id, nth)
  return string.format("TBMX%-16s%8d%8d%4d", token:sub(1, 16), from, step_id % 1e8, nth % 1e4)
end

function M.parse_preamble(s, token)
  if #s ~= M.PREAMBLE or s:sub(1, 4) ~= "TBMX" then return nil, "not a matrix link preamble" end
  if s:sub(5, 20) ~= string.format("%-16s", token:sub(1, 16)) then return nil, "wrong run token" end
  local from, st, nth = tonumber(s:sub(21, 28)), tonumber(s:sub(29, 36)), tonumber(s:sub(37, 40))
  if not (from and st and nth) then return nil, "bad numbers in the preamble" end
  return { from = from, step = st, nth = nth }
end

-- Rank and size from the launcher's environment (mpirun, srun), if any.
function M.env_rank()
  local env = os.getenv
  for _, v in ipairs {
    { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi" },
    { "PMIX_RANK", "PMIX_SIZE", "pmix" },
    { "PMI_RANK", "PMI_SIZE", "pmi" },
    { "SLURM_PROCID", "SLURM_NTASKS", "slurm" },
  } do
    local r = tonumber(env(v[1]) or "")
    if r then return r, tonumber(env(v[2]) or ""), v[3] end
  end
end

local Agent = {}
Agent.__index = Agent

local function log(self, fmt, ...)
  io.stderr:write(string.format("matrix agent %s: " .. fmt .. "\n", tostring(self.rank or "?"), ...))
  io.stderr:flush()
end

---------------------------------------------------------------------------
-- Incoming links.

function Agent:_accept_loop()
  while not self.stopping do
    local s = self.listener:accept(nil)
    if not s then break end
    task.spawn(function()
      local pre, err = s:recv(M.PREAMBLE, 5)
      local p = pre and M.parse_preamble(pre, self.token)
      if not p then
        log(self, "refused a link connection: %s", tostring(err or "bad preamble"))
        s:close()
        return
      end
      local key = p.step .. ":" .. p.from .. ":" .. p.nth
      local w = self.claims[key]
      if w then
        self.claims[key] = nil
        w.sock = s
        return
      end
      -- not claimed yet: keep it a while, bounded in number
      local count = 0
      for _ in pairs(self.waiting) do count = count + 1 end
      if count >= MAX_WAITING then
        local oldest, ok
        for k, v in pairs(self.waiting) do if not oldest or v.t < oldest.t then oldest, ok = v, k end end
        oldest.sock:close()
        self.waiting[ok] = nil
      end
      self.waiting[key] = { sock = s, t = uv.now() / 1000 }
    end)
  end
end

function Agent:_purge()
  local now = uv.now() / 1000
  for k, v in pairs(self.waiting) do
    if now - v.t > CLAIM_S then v.sock:close(); self.waiting[k] = nil end
  end
end

-- A link to peer for a step. role "client" dials, "server" waits for the
-- peer's dial. opts are link options (checked by tbrt: misuse becomes an
-- error here, not a crash of the agent).
function Agent:link(st, peer, opts, role, timeout)
  st.nth[peer.rank] = (st.nth[peer.rank] or 0) + 1
  local nth = st.nth[peer.rank]
  local s, err
  if role == "client" then
    s, err = sock.connect(peer.addr, peer.port, math.min(timeout, 15))
    if not s then return nil, err end
    local ok, serr = s:send(M.preamble(self.token, self.rank, st.id, nth), 5)
    if not ok then s:close() return nil, serr end
  else
    self:_purge()
    local key = st.id .. ":" .. peer.rank .. ":" .. nth
    local w = self.waiting[key]
    if w then
      self.waiting[key] = nil
      s = w.sock
    else
      local claim = {}
      self.claims[key] = claim
      st.claims[#st.claims + 1] = key
      local ok = task.wait(function() return claim.sock or self.canceled[st.id] end, timeout)
      self.claims[key] = nil
      if claim.sock == nil and self.canceled[st.id] then
        return nil, string.format("ECANCELED: rank %d failed before it dialed (the driver called the step off)",
          peer.rank)
      end
      if not ok then
        return nil, string.format("ETIMEDOUT: rank %d did not dial within %g s", peer.rank, timeout)
      end
      s = claim.sock
    end
  end
  local ok, l, lerr = pcall(tbrt.setup, s, opts, role)
  if not ok then
    s:close()
    return nil, "EINVAL: " .. tostring(l):gsub("^[^:]*:%d+: ", "")
  end
  if not l then return nil, lerr end
  st.links[#st.links + 1] = l
  return l
end

---------------------------------------------------------------------------
-- Steps.

local function peer_of(m, rank)
  local p = m.peers and m.peers[tostring(rank)]
  if type(p) ~= "table" or type(p.addr) ~= "string" or type(p.port) ~= "number" then
    return nil, "no address for rank " .. tostring(rank)
  end
  return { rank = rank, addr = p.addr, port = p.port, host = p.host }
end

-- The scenario context (what a user's scenario function gets).
function Agent:_context(st, m, timeout)
  local cell = json.denull(m.cell) or {}
  local opts = step.link_opts(m.opts, m.faults, timeout)
  local peers = {}
  for r, p in pairs(m.peers or {}) do
    peers[tonumber(r)] = { rank = tonumber(r), host = p.host, addr = p.addr }
  end
  local ctx = { rank = self.rank, size = m.size, peers = peers, cell = cell, opts = opts,
    timeout = timeout, perf = perf }
  -- link(peer_rank [, opts]): the lower rank waits, the higher dials
  function ctx.link(peer_rank, o)
    if type(peer_rank) ~= "number" or peer_rank == self.rank then
      error("ctx.link: expected the rank of another host, got " .. tostring(peer_rank), 2)
    end
    local p, err = peer_of(m, peer_rank)
    if not p then return nil, err end
    local lo = {}
    for k, v in pairs(opts) do lo[k] = v end
    for k, v in pairs(o or {}) do lo[k] = v end
    local l, lerr = self:link(st, p, lo, self.rank > peer_rank and "client" or "server", timeout)
    if l then
      local fok, ferr = step.apply_faults(l, m.faults)
      if not fok then l:close() return nil, ferr end
    end
    return l, lerr
  end
  function ctx.measure(l, n, mo)
    mo = mo or {}
    if mo.timeout == nil then mo.timeout = timeout end
    return perf.measure(l, n, mo)
  end
  function ctx.serve(l) return perf.serve(l, timeout) end
  function ctx.done(l) return perf.done(l) end
  function ctx.log(...) log(self, "%s", table.concat({ ... }, " ")) end
  return ctx
end

function Agent:_run_step(m)
  local timeout = m.timeout
  local st = { id = m.step, nth = {}, links = {}, claims = {} }
  local kind = m.kind
  -- the body's errors come back as values: with_timeout would turn a
  -- raised table into text
  local function body()
    if kind == "pair" then
      local peer = assert(peer_of(m, m.peer))
      local opts = step.link_opts(m.opts, m.faults, timeout)
      local function make() return self:link(st, peer, opts, m.role, timeout) end
      local s = { size = m.size, faults = m.faults, measure = m.measure }
      if m.role == "client" then return step.client(make, s, timeout) end
      return step.server(make, s, timeout)
    elseif kind == "scenario" then
      local pat = self.spec and self.spec.patterns[m.pattern]
      if not pat or not pat.scenario then
        error({ step = "scenario", message = "pattern " .. tostring(m.pattern) .. " is not a scenario here" }, 0)
      end
      local ctx = self:_context(st, m, timeout)
      local sok, r = pcall(pat.scenario, ctx)
      if not sok then error({ step = "scenario", message = tostring(r) }, 0) end
      local eok, text = pcall(json.encode, r == nil and json.null or r, "scenario result")
      if not eok then error({ step = "result", message = tostring(text) }, 0) end
      if #text > MAX_RESULT then
        error({ step = "result", message = string.format("scenario result is %d bytes encoded, over %d",
          #text, MAX_RESULT) }, 0)
      end
      return { result = r }
    end
    error({ step = "step", message = "unknown step kind " .. tostring(kind) }, 0)
  end
  local ok, res = pcall(task.with_timeout, timeout, function()
    local bok, r = pcall(body)
    if bok then return { value = r } end
    return { failure = r }
  end)
  if ok and res and res.failure ~= nil then ok, res = false, res.failure
  elseif ok and res then res = res.value end
  -- whatever the step left open goes now (a timeout cancels it mid-way)
  task.sleep(0)
  for _, l in ipairs(st.links) do pcall(l.close, l, 0.2) end
  for _, key in ipairs(st.claims) do self.claims[key] = nil end
  local reply = { t = "done", id = m.id }
  if ok and res then
    reply.ok = true
    reply.result = res
  else
    reply.ok = false
    local e = ok and string.format("ETIMEDOUT: the step did not finish within %.3g s (what was left of " ..
      "the cell's timeout)", timeout) or res
    if type(e) == "table" then
      reply.where, reply.error = e.step, e.message
    else
      e = tostring(e)
      reply.where = e:match("^ETIMEDOUT") and "timeout" or "step"
      reply.error = e:gsub("\nstack traceback:.*", "")
    end
  end
  local sok, serr = self.conn:send(reply, 30)
  if not sok then log(self, "cannot send a result: %s", serr) end
end

---------------------------------------------------------------------------

local function check_step(m)
  if type(m.id) ~= "number" or type(m.step) ~= "number" or type(m.timeout) ~= "number" or
      m.timeout <= 0 or m.timeout > 86400 then
    return nil, "a run message needs numbers id, step and timeout (0 < s <= 86400)"
  end
  if m.kind == "pair" and (m.role ~= "client" and m.role ~= "server" or type(m.peer) ~= "number"
      or type(m.size) ~= "number") then
    return nil, "a pair step needs role client|server, a peer rank and a size"
  end
  if m.opts ~= nil and type(m.opts) ~= "table" then return nil, "opts must be an object" end
  if m.faults ~= nil and type(m.faults) ~= "table" then return nil, "faults must be an object" end
  return true
end

-- args: { coord = "HOST:PORT" | "ssh:PORT", token, rank (optional) }.
-- Returns an exit code.
function M.run(args)
  local self = setmetatable({ token = args.token, claims = {}, waiting = {}, canceled = {} }, Agent)
  local env_rank, env_size, source = M.env_rank()
  self.rank = args.rank or env_rank
  local host, port = args.coord:match("^%[?([^%]]+)%]?:(%d+)$")
  port = tonumber(port)
  if not host or not port then log(self, "--coord %s is not HOST:PORT", args.coord) return 2 end
  if host == "ssh" then
    -- the address this ssh session came from: where the driver is
    host = (os.getenv("SSH_CONNECTION") or ""):match("^(%S+)")
    if not host then log(self, "--coord ssh:PORT outside an ssh session (no SSH_CONNECTION)") return 2 end
  end
  local s, err = sock.connect(host, port, 15)
  if not s then log(self, "cannot reach the coordinator at %s:%d: %s", host, port, err) return 3 end
  local addr = netaddr.sockname(s.fd)
  self.listener, err = sock.listen(addr or "0.0.0.0", 0)
  if not self.listener then log(self, "cannot listen on %s: %s", tostring(addr), err) return 3 end
  self.conn = msg.wrap(s, { what = "coordinator" })
  local ok, serr = self.conn:send({ t = "hello", token = self.token, rank = self.rank, env_size = env_size,
    rank_from = source or (args.rank and "command line"), host = uv.os_gethostname(),
    pid = uv.os_getpid(), version = tbrt.version, addr = addr, port = self.listener.port }, 10)
  if not ok then log(self, "hello: %s", serr) return 3 end
  local w, werr = self.conn:recv(args.welcome_timeout or 60)
  if not w or w.t ~= "welcome" then
    log(self, "no welcome from the coordinator: %s", tostring(werr or (w and w.t)))
    return 3
  end
  if type(w.rank) ~= "number" then log(self, "welcome without a rank") return 3 end
  self.rank = w.rank
  if type(w.text) == "string" then
    local spec, ferr = file.load_text(w.text, type(w.path) == "string" and w.path or "matrix")
    if not spec then log(self, "%s", ferr) end
    self.spec = spec
  end
  task.spawn(function() self:_accept_loop() end)
  -- the coordinator pings every liveness/3 s: a much longer silence means
  -- it is gone (its host vanished), and so should this agent be
  local idle = math.max(30, 4 * (type(w.liveness) == "number" and w.liveness or 15))
  while true do
    local m, rerr = self.conn:recv(idle, 30)
    if not m then
      if tostring(rerr):match("^ETIMEDOUT") then
        log(self, "the coordinator said nothing for %g s: leaving", idle)
      elseif not tostring(rerr):match("^EOF") then
        log(self, "coordinator connection: %s", rerr)
      end
      break
    end
    if m.t == "run" then
      local cok, why = check_step(m)
      if cok then
        task.spawn(function() self:_run_step(m) end)
      else
        self.conn:send({ t = "done", id = m.id, ok = false, where = "message", error = "EPROTO: " .. why }, 10)
      end
    elseif m.t == "cancel" then
      -- the other end of a pair failed: stop waiting for its dial
      if type(m.step) == "number" then
        self.canceled[m.step] = true
        local n = 0
        for _ in pairs(self.canceled) do n = n + 1 end
        if n > 1024 then self.canceled = { [m.step] = true } end
      end
    elseif m.t == "ping" then
      self.conn:send({ t = "pong", id = m.id }, 10)
    elseif m.t == "bye" then
      break
    else
      log(self, "ignoring a %s message", m.t)
    end
  end
  self.stopping = true
  self.listener:close()
  self.conn:close()
  return 0
end

return M
