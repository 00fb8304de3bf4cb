-- tbrt/perf/listener.lua - the answering end of perf as a server that keeps
-- serving: it accepts connections until a peer has completed a run (or,
-- with once, until the first connection is over), each connection a task
-- of its own, so a slow or bad one never holds up the next.
--
--   local ok, err = listener.run{
--     host = "0.0.0.0", port = 7000,         -- port 0: any free port
--     opts = { device = "soft" },            -- link options (tbrt.setup)
--     setup_timeout = 5,                     -- per connection: caps, probe, activation
--     timeout = 60,                          -- every wait once the link is up (perf.serve)
--     accept_timeout = 60,                   -- for the next connection (nil: no bound)
--     once = false,
--     log = function(text) end,              -- one line per event, below
--     on_listening = function(host, port) end,
--   }
--
-- Setup of one connection is bounded as a whole by setup_timeout,
-- separate from the data timeout. With the default caps exchange (both
-- sides send first, so a connecting peer has sent its caps without
-- waiting), the peer's 24 bytes are read before anything is probed: a
-- silent or trickling connection costs a socket and a timer, never a QP.
-- A link option `exchange` (a framing of its own) is used as it is.
--
-- Logged, one line each, "connection N from HOST:PORT: ...":
--   dropped during setup: <why>     refused: too many at once
--   peer has no RDMA: staying on TCP
--   failed: <why>                   done: <n> requests served
--   closed: <why>                   (the listener ended before it did)
-- Returns true once a peer completed (once: the first connection's
-- outcome, true or nil, err), or nil, err when nobody connected within
-- accept_timeout, or the server could not listen.
local tbrt = require("tbrt")
local task = require("tbrt.task")
local caps = require("tbrt.caps")
local perf = require("tbrt.perf")

local M = {}

M.SETUP_TIMEOUT = 5
-- Connections handled at once; one more is closed at once (logged).
M.MAX_CONNECTIONS = 16
-- How long the sessions still running get to close when the listener ends.
local CLOSE_TIMEOUT = 5

local CFG = { host = "string", port = "number", opts = "table", setup_timeout = "number",
  timeout = "number", accept_timeout = "number", once = "boolean", log = "function",
  on_listening = "function", max_size = "number" }

local function check(cfg)
  if type(cfg) ~= "table" then error("listener.run: expected a table", 3) end
  for k, v in pairs(cfg) do
    if not CFG[k] then error(string.format("listener.run: unknown key %q", tostring(k)), 3) end
    if type(v) ~= CFG[k] then
      error(string.format("listener.run: %s must be a %s, got %s", k, CFG[k], type(v)), 3)
    end
  end
  for _, k in ipairs { "setup_timeout", "timeout", "accept_timeout" } do
    if cfg[k] and not (cfg[k] > 0) then error("listener.run: " .. k .. " must be > 0", 3) end
  end
end

local function copy(t)
  local c = {}
  for k, v in pairs(t or {}) do c[k] = v end
  return c
end

-- One connection, in its own task: setup, then serve. Returns phase, ok,
-- result (phase: "setup" or "serve"; result: perf.serve's, or the error).
local function session(s, cfg, who)
  local deadline = tbrt.now() + cfg.setup_timeout
  local function left() return math.max(0.001, deadline - tbrt.now()) end
  local l, phase = nil, "setup"
  local ok, res = pcall(function()
    local opts = copy(cfg.opts)
    if not opts.exchange then
      s.what = "caps exchange with " .. tostring(s.peer)
      local peer, err, partial = s:recv(caps.SIZE, left())
      if not peer then
        if err:find("^ETIMEDOUT") then
          err = string.format("ETIMEDOUT: %s: %d of %d bytes of caps within the setup bound (%g s)",
            s.what, #(partial or ""), caps.SIZE, cfg.setup_timeout)
        end
        error(err, 0)
      end
      opts.exchange = function(view, mine)
        local sent, serr = view:send(mine, left())
        if not sent then return nil, serr end
        return peer
      end
    end
    opts.timeout = left()
    local sock = s
    s = nil                             -- tbrt.setup owns the socket now
    local err
    l, err = tbrt.setup(sock, opts, "server")
    if not l then error(err, 0) end
    if l.peer_no_rdma then cfg.log(who .. ": peer has no RDMA: staying on TCP") end
    phase = "serve"
    l:settimeouts(cfg.timeout)
    local r, serr = perf.serve(l, { timeout = cfg.timeout, max_size = cfg.max_size })
    if not r then error(serr, 0) end
    return r
  end)
  if s then s:close() end
  if l then l:close() end
  return phase, ok, res
end

function M.run(cfg)
  check(cfg)
  local log = cfg.log or function() end
  cfg = copy(cfg)
  cfg.log = log
  cfg.setup_timeout = cfg.setup_timeout or M.SETUP_TIMEOUT
  cfg.timeout = cfg.timeout or 60
  local srv, err = tbrt.tcp_listen(cfg.host or "0.0.0.0", cfg.port or 0)
  if not srv then return nil, err end
  if cfg.on_listening then cfg.on_listening(srv.host, srv.port) end

  local active, n_active, n = {}, 0, 0
  local finished, outcome, outcome_err, last_err = false, nil, nil, nil

  local function stop()
    finished = true
    srv:close()                         -- wakes the accept below
  end

  local function run_session(s, who)
    local phase, ok, res = session(s, cfg, who)
    if ok then
      log(string.format("%s: done: %d requests served", who, res.requests))
    elseif finished and tostring(res):find("^ECANCELED") then
      log(who .. ": closed: the listener is done")
    else
      log(string.format("%s: %s: %s", who, phase == "setup" and "dropped during setup" or "failed",
        tostring(res)))
      last_err = tostring(res)
    end
    if not finished and (ok or cfg.once) then
      outcome, outcome_err = ok or nil, not ok and tostring(res) or nil
      stop()
    end
  end

  while not finished do
    local s, aerr = srv:accept(cfg.accept_timeout)
    if not s then
      if not finished then
        outcome_err = aerr .. (last_err and ("; the last connection: " .. last_err) or "")
        finished = true
      end
      break
    end
    n = n + 1
    local who = string.format("connection %d from %s", n, s.peer or "?")
    if n_active >= M.MAX_CONNECTIONS then
      log(string.format("%s: refused: %d connections in progress already (listener." ..
        "MAX_CONNECTIONS)", who, n_active))
      s:close()
    else
      n_active = n_active + 1
      local t
      t = task.spawn(function()
        local ok, e = pcall(run_session, s, who)
        active[t], n_active = nil, n_active - 1
        if not ok then error(e, 0) end
      end)
      active[t] = true
      if cfg.once then
        -- no second connection: wait for this one (its setup and every
        -- wait of its serving are bounded already)
        task.wait(function() return finished end)
      end
    end
  end
  srv:close()
  for t in pairs(active) do t:cancel("the listener is done") end
  task.wait(function() return n_active == 0 end, CLOSE_TIMEOUT)
  if outcome then return true end
  return nil, outcome_err or "ECANCELED: the listener stopped"
end

return M
