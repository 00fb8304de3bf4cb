-- tbrt/repl/play.lua - helpers for playing with links at the REPL: pair{} makes
-- a connected pair, help() says what can be done, links() lists what is
-- open, and everything opened is closed when the REPL ends.
--
--   a, b = pair{ device = "soft0" }             -- two links in this process
--   a, peer = pair{ device = "soft1", child = true }  -- b: an echo peer in a child tbrt
--   help()  help(a)  help(tbrt)                 -- what there is, one line each
--
-- install(env) puts the helpers (and tbrt, task, uv) in env, and starts
-- keeping a weak list of every link made after that (link.watch), so
-- close_all() can close the ones still open when the REPL exits.
local uv = require("luv")
local task = require("tbrt.task")
local pretty = require("tbrt.repl.pretty")
local help_text = require("tbrt.repl.help_text")

local M = {}

-- Bound on making a pair (connect, accept, exchange, activate); a child
-- tbrt must also start (and an ASan build starts slowly).
M.PAIR_TIMEOUT = 20
-- Bound on closing everything at exit: the links' sends in flight get this
-- long, peers as long again to exit after SIGTERM.
M.CLOSE_TIMEOUT = 2

local open_links = setmetatable({}, { __mode = "k" })
local peers = setmetatable({}, { __mode = "k" })

local function tbrt_module()
  return require("tbrt")
end

---------------------------------------------------------------------------
-- pair{}

-- pair's own keys; the rest are link options (checked by tbrt.link).
local PAIR_KEYS = { child = "boolean" }

local function split_opts(t, level)
  if t ~= nil and type(t) ~= "table" then error("pair: expected a table of options", level + 1) end
  local own, link_opts = {}, {}
  for k, v in pairs(t or {}) do
    if PAIR_KEYS[k] then
      if type(v) ~= PAIR_KEYS[k] then
        error(string.format("pair: option %s must be a %s, got %s", k, PAIR_KEYS[k], type(v)), level + 1)
      end
      own[k] = v
    else
      link_opts[k] = v
    end
  end
  require("tbrt.link").check_opts(link_opts, level + 1)
  return own, link_opts
end

-- A Lua literal for link options (strings, numbers, booleans only).
local function literal(opts)
  local parts = {}
  for k, v in pairs(opts) do
    local t = type(v)
    if t ~= "string" and t ~= "number" and t ~= "boolean" then
      error("pair: option " .. k .. " cannot be passed to a child process (" .. t .. ")", 4)
    end
    parts[#parts + 1] = string.format("[%q] = %s", k, t == "string" and string.format("%q", v) or tostring(v))
  end
  return "{ " .. table.concat(parts, ", ") .. " }"
end

-- The peer in the child: connect, then send back whatever arrives until
-- the link ends. A quiet link is not an end (recv times out, loop again).
local ECHO_PEER = [[
local tbrt = require("tbrt")
local l = assert(tbrt.connect("127.0.0.1", %d, %s))
io.stdout:write("echo peer ready: ", tostring(l), "\n")
io.stdout:flush()
while true do
  local data, err = l:recv_some(65536, 3600)
  if data then
    assert(l:send(data))
    assert(l:flush())
  elseif not err:match("^ETIMEDOUT") then
    io.stdout:write("echo peer: ", err, "\n")
    break
  end
end
l:close()
]]

local Peer = {}
Peer.__index = Peer
M.Peer = Peer

function Peer:__tostring()
  return string.format("<peer process %d echo %s>", self.pid,
    self.code and string.format("exited %d%s", self.code,
      (self.signal or 0) ~= 0 and (" signal " .. self.signal) or "") or "running")
end

-- What the peer printed so far (stdout and stderr).
function Peer:output() return table.concat(self.out) end

function Peer:kill(sig)
  if self.code == nil then self.proc:kill(sig or "sigterm") end
end

-- Wait for the peer to exit: code, signal; or nil, "ETIMEDOUT: ...".
function Peer:wait(timeout)
  local ok, err = task.wait(function() return self.code ~= nil end, timeout)
  if not ok then return nil, err end
  return self.code, self.signal
end

-- End the peer: SIGTERM, then SIGKILL if it has not gone within timeout.
function Peer:close(timeout)
  if self.code ~= nil then return true end
  self:kill("sigterm")
  if task.current() and self:wait(timeout or M.CLOSE_TIMEOUT) then return true end
  self:kill("sigkill")
  return true
end

local function exe()
  local host = package.loaded["tbrt.host"]
  return host and host.exe or "tbrt"
end

local function spawn_peer(port, opts)
  local out, err_out = uv.new_pipe(false), uv.new_pipe(false)
  local self = setmetatable({ out = {}, port = port }, Peer)
  local proc, pid = uv.spawn(exe(), {
    args = { "-e", string.format(ECHO_PEER, port, literal(opts)) },
    stdio = { nil, out, err_out },
  }, function(code, signal)
    self.code, self.signal = code, signal
    self.proc:close()
  end)
  if not proc then
    out:close()
    err_out:close()
    return nil, "pair: cannot start a child tbrt: " .. tostring(pid)
  end
  self.proc, self.pid = proc, pid
  for _, pipe in ipairs({ out, err_out }) do
    pipe:read_start(function(err, data)
      if data then self.out[#self.out + 1] = data else pipe:close() end
      if err then self.out[#self.out + 1] = "[read error: " .. err .. "]" end
    end)
  end
  peers[self] = true
  return self
end

-- pair{device=, personality=, child=false|true, <link options>} -> a, b:
-- two links connected over 127.0.0.1 (a connected, b accepted); with
-- child = true, b is a Peer: a tbrt process echoing back what a sends.
-- Waits (run it at the REPL or in a task); nil, err on failure.
function M.pair(t)
  local own, opts = split_opts(t, 2)
  local tbrt = tbrt_module()
  local srv, lerr = tbrt.listen("127.0.0.1", 0, opts)
  if not srv then return nil, lerr end
  if own.child then
    local peer, perr = spawn_peer(srv.port, opts)
    if not peer then srv:close() return nil, perr end
    local a, err = srv:accept(M.PAIR_TIMEOUT)
    srv:close()
    if not a then
      peer:close()
      return nil, err .. "\n(peer output: " .. peer:output() .. ")"
    end
    return a, peer
  end
  local accepting = task.spawn(function() return srv:accept(M.PAIR_TIMEOUT) end)
  local a, aerr = tbrt.connect("127.0.0.1", srv.port, opts)
  local b, berr = accepting:join(M.PAIR_TIMEOUT)
  srv:close()
  if a and b then return a, b end
  if a then a:close() end
  if b then b:close() end
  return nil, aerr or berr
end

---------------------------------------------------------------------------
-- The links and peers of this session.

local tracking = false

function M.track()
  if tracking then return end
  tracking = true
  require("tbrt.link").watch(function(l) open_links[l] = true end)
end

-- The links made since track() that are still open, oldest first.
function M.links()
  local list = {}
  for l in pairs(open_links) do
    if l:info().state ~= "closed" then list[#list + 1] = l end
  end
  table.sort(list, function(x, y) return x.id < y.id end)
  return list
end

-- Close every open link and end every peer (bounded; in a task).
function M.close_all()
  for _, l in ipairs(M.links()) do pcall(l.close, l, M.CLOSE_TIMEOUT) end
  for p in pairs(peers) do pcall(p.close, p, M.CLOSE_TIMEOUT) end
end

---------------------------------------------------------------------------
-- help()

local function print_lines(lines)
  print(table.concat(lines, "\n"))
end

-- help(): the helpers, the modules, the keys. help(obj): what obj is and
-- its methods, one line each.
function M.help(...)
  local n = select("#", ...)
  if n > 1 then error("help: one object at a time", 2) end
  if n == 0 then return print_lines(help_text.overview()) end
  print_lines(help_text.describe((...)))
end

---------------------------------------------------------------------------

-- Put the helpers in env (the REPL's globals). tbrt is loaded if it can
-- be (the REPL works without libtbrt: the reason is returned).
function M.install(env)
  env.pair = M.pair
  env.help = M.help
  env.links = M.links
  env.pp = function(v, width) print(pretty.format(v, { width = width })) end
  env.devices = function(verbose) require("tbrt.cli").devices(verbose) end
  env.task = env.task or task
  env.uv = env.uv or uv
  local ok, tbrt = pcall(tbrt_module)
  if not ok then return tostring(tbrt) end
  env.tbrt = env.tbrt or tbrt
  env.verbs = env.verbs or require("tbrt.verbs")
  M.track()
  return nil
end

return M
