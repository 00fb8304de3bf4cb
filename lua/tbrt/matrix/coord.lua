-- tbrt/matrix/coord.lua - the coordinator: the TCP rendezvous the driver
-- runs for its agents (the ranks). No home-made daemon: it lives only as
-- long as the driver's run.
--
--   local c = assert(coord.listen("198.18.7.254", { token = t, count = 4, text = file_text }))
--   c:await(30)                          every rank has said hello, or nil, err
--   local reply, err = c:request(rank, { t = "run", ... }, timeout)
--   c:alive(rank) -> true | false, why
--   c:close()                            bye to every agent, then close
--
-- An agent's connection: hello (token, rank, host, pid, version, the
-- address and port it takes links on) -> welcome (rank, size, the matrix
-- file's text) -> requests and their replies, matched by id; pings keep
-- it honest. Every frame is bounded (tbrt.matrix.msg); a hello must come
-- within HELLO_S seconds and carry the run's token and a rank no live agent
-- holds; at most MAX_PENDING connections may be saying hello at once.
--
-- Liveness: the coordinator pings each live agent every liveness/3
-- seconds; an agent that has said nothing for `liveness` seconds is marked
-- gone ("silent for N s"), as is one whose connection ends. Requests
-- waiting on a gone agent fail at once with the reason, so a vanished host
-- costs its cell one liveness bound, not the cell's whole timeout.
local uv = require("luv")
local task = require("tbrt.task")
local sock = require("tbrt.sock")
local msg = require("tbrt.matrix.msg")

local M = {}

local HELLO_S = 10
local MAX_PENDING = 64

local Coord = {}
Coord.__index = Coord

local function now() uv.update_time() return uv.now() / 1000 end

function M.listen(host, opts)
  local srv, err = sock.listen(host, opts.port or 0, 64)
  if not srv then return nil, "coordinator: " .. err end
  local self = setmetatable({ srv = srv, host = host, port = srv.port, token = opts.token,
    count = opts.count, text = opts.text, path = opts.path, agents = {}, pending = {},
    next_id = 1, hellos = 0, liveness = opts.liveness or 15, on_event = opts.on_event or function() end,
    refused = {} }, Coord)
  self.accepting = task.spawn(function() self:_accept_loop() end)
  self.beating = task.spawn(function() self:_heartbeat() end)
  return self
end

function Coord:_event(kind, rank, text) self.on_event(kind, rank, text) end

function Coord:_accept_loop()
  while not self.closed do
    local s = self.srv:accept(nil)
    if not s then break end
    if self.hellos >= MAX_PENDING then
      s:close()
    else
      self.hellos = self.hellos + 1
      task.spawn(function()
        local ok, err = pcall(self._greet, self, s)
        self.hellos = self.hellos - 1
        if not ok then s:close() self:_event("refused", nil, tostring(err)) end
      end)
    end
  end
end

local function refuse(self, conn, why)
  self.refused[#self.refused + 1] = why
  if #self.refused > 32 then table.remove(self.refused, 1) end
  self:_event("refused", nil, why)
  conn:close()
end

function Coord:_greet(s)
  local conn = msg.wrap(s, { what = "an agent (before hello)", max = 64 * 1024 })
  local h, err = conn:recv(HELLO_S, HELLO_S)
  if not h then return refuse(self, conn, "no hello: " .. tostring(err)) end
  if h.t ~= "hello" or h.token ~= self.token then
    return refuse(self, conn, "a connection without the run's token")
  end
  local rank = h.rank
  if type(rank) ~= "number" or rank % 1 ~= 0 or rank < 0 or rank >= self.count then
    return refuse(self, conn, string.format("hello with rank %s, not 0..%d", tostring(rank), self.count - 1))
  end
  if type(h.env_size) == "number" and h.env_size ~= self.count then
    return refuse(self, conn, string.format("rank %d says the launcher started %d ranks, the matrix has %d hosts",
      rank, h.env_size, self.count))
  end
  local old = self.agents[rank]
  if old and old.alive then return refuse(self, conn, "a second hello for live rank " .. rank) end
  if type(h.port) ~= "number" or type(h.addr) ~= "string" or #h.addr > 64 then
    return refuse(self, conn, "rank " .. rank .. ": hello without the address and port for links")
  end
  local function str(v, n) return type(v) == "string" and v:sub(1, n) or "?" end
  local a = { rank = rank, host = str(h.host, 64), addr = h.addr, port = h.port,
    pid = type(h.pid) == "number" and h.pid or nil, version = str(h.version, 64),
    rank_from = str(h.rank_from, 32), conn = conn, alive = true, seen = now(),
    incarnation = (old and old.incarnation or 0) + 1 }
  conn.what = string.format("rank %d (%s)", rank, a.host)
  conn.max = msg.MAX_FRAME
  local ok, serr = conn:send({ t = "welcome", rank = rank, size = self.count, text = self.text,
    path = self.path, liveness = self.liveness }, 10)
  if not ok then return refuse(self, conn, "welcome: " .. serr) end
  self.agents[rank] = a
  self:_event("hello", rank, a.host)
  task.spawn(function() self:_reader(a) end)
end

function Coord:_gone(a, why)
  if not a.alive then return end
  a.alive, a.why = false, why
  a.conn:close()
  for id, p in pairs(self.pending) do
    if p.agent == a then
      self.pending[id] = nil
      p.err = why
    end
  end
  self:_event("gone", a.rank, why)
end

function Coord:_reader(a)
  while a.alive do
    local m, err = a.conn:recv(nil, 30)
    if not m then
      -- EOF: closed; ECONNRESET, or EBADF (libuv's word for POLLERR on the
      -- socket): reset, as when a process dies with bytes unread
      local e = tostring(err)
      self:_gone(a, (e:match("^EOF") or e:match("^ECONNRESET") or e:match("^EBADF"))
        and "its agent's connection closed or was reset (process ended?)"
        or ("connection failed: " .. e))
      break
    end
    a.seen = now()
    local id = type(m.id) == "number" and m.id
    local p = id and self.pending[id]
    if p and p.agent == a then
      self.pending[id] = nil
      p.reply = m
    end
  end
end

function Coord:_heartbeat()
  while not self.closed do
    task.sleep(self.liveness / 3)
    local t = now()
    for _, a in pairs(self.agents) do
      if a.alive then
        if t - a.seen > self.liveness then
          self:_gone(a, string.format("silent for %.0f s (host unreachable or agent stuck)", t - a.seen))
        else
          local id = self.next_id
          self.next_id = id + 1
          task.spawn(function() a.conn:send({ t = "ping", id = id }, self.liveness) end)
        end
      end
    end
  end
end

-- Wait until every rank has said hello (or only the ones in `ranks`).
-- give_up(): a reason to stop waiting early (the agent's process ended).
function Coord:await(timeout, ranks, give_up)
  local function missing()
    local list = {}
    if ranks then
      for _, r in ipairs(ranks) do if not (self.agents[r] and self.agents[r].alive) then list[#list + 1] = r end end
    else
      for r = 0, self.count - 1 do if not (self.agents[r] and self.agents[r].alive) then list[#list + 1] = r end end
    end
    return list
  end
  local quit
  local ok = task.wait(function()
    if #missing() == 0 or self.abort then return true end
    quit = give_up and give_up()
    return quit
  end, timeout)
  if self.abort then return nil, self.abort end
  if quit and #missing() > 0 then return nil, "its agent ended before checking in: " .. quit, missing() end
  if ok then return true end
  local m = missing()
  local names = {}
  for i, r in ipairs(m) do names[i] = tostring(r) end
  local why = #self.refused > 0 and ("; refused: " .. self.refused[#self.refused]) or ""
  return nil, string.format("ETIMEDOUT: rank%s %s did not check in within %g s%s", #m > 1 and "s" or "",
    table.concat(names, ", "), timeout, why), m
end

function Coord:alive(rank)
  local a = self.agents[rank]
  if not a then return false, "never checked in" end
  if not a.alive then return false, a.why end
  return true
end

function Coord:agent(rank) return self.agents[rank] end

-- Send m (an id is added) to rank and wait for its reply within timeout.
function Coord:request(rank, m, timeout)
  local a = self.agents[rank]
  if not a or not a.alive then return nil, a and a.why or "rank " .. rank .. " is not connected" end
  local id = self.next_id
  self.next_id = id + 1
  m.id = id
  local p = { agent = a }
  self.pending[id] = p
  local ok, err = a.conn:send(m, 30)
  if not ok then
    self.pending[id] = nil
    self:_gone(a, "send failed: " .. err)
    return nil, a.why
  end
  local got = task.wait(function() return p.reply or p.err end, timeout)
  self.pending[id] = nil
  if p.reply then return p.reply end
  if p.err then return nil, p.err end
  if not got then return nil, string.format("ETIMEDOUT: no reply within %g s", timeout) end
end

-- Send m to rank without waiting for a reply (best effort).
function Coord:notify(rank, m)
  local a = self.agents[rank]
  if not a or not a.alive then return nil end
  return a.conn:send(m, 5)
end

-- Mark a rank gone from outside (its process exited, say).
function Coord:mark_gone(rank, why)
  local a = self.agents[rank]
  if a then self:_gone(a, why) end
end

function Coord:close()
  if self.closed then return end
  self.closed = true
  for id, p in pairs(self.pending) do
    self.pending[id] = nil
    p.err = "the coordinator closed (the run is ending)"
  end
  for _, a in pairs(self.agents) do
    if a.alive then
      pcall(a.conn.send, a.conn, { t = "bye" }, 2)
      a.alive, a.why = false, "the run ended"
      a.conn:close()
    end
  end
  self.srv:close()
  self.accepting:cancel("coordinator closed")
  self.beating:cancel("coordinator closed")
end

return M
