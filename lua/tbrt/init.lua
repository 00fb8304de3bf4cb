-- tbrt - the Lua library: links over RDMA (or TCP), set up by tasks on the
-- one libuv loop.
--
--   local tbrt = require("tbrt")
--   local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "soft" }))
--   local l = assert(srv:accept(5))              -- in a task
--   -- elsewhere: local l = assert(tbrt.connect("127.0.0.1", srv.port, opts))
--
-- connect/listen run the setup steps in Lua, each also callable alone:
--   sock = tbrt.tcp_connect(host, port, timeout)   bootstrap TCP (tbrt.sock)
--   link = tbrt.probe(sock, opts)                  device, port, GID, QP, rings
--   peer = (opts.exchange or caps.exchange)(sock, link:caps(), role, timeout)
--   link:activate(peer)                            RTR/RTS, receives, readiness
-- A side whose probe fails falls back to TCP (all-zero caps) unless
-- opts.fallback == false; all-zero caps from either side keep both on TCP,
-- except that a side with RDMA and fallback == false refuses a peer that
-- offers none (ENOTSUP), and one that accepts marks its link
-- peer_no_rdma = true ("peer has no RDMA: staying on TCP").
--
-- Every module of the library is reachable from here: tbrt.task,
-- tbrt.sock, tbrt.link, tbrt.caps, tbrt.verbs (a device by hand), and
-- tbrt.perf / tbrt.mlx5 (loaded on first use).
local ffi = require("ffi")
local core = require("tbrt.ffi")
local task = require("tbrt.task")
local sock = require("tbrt.sock")
local link = require("tbrt.link")
local caps = require("tbrt.caps")
local ggml_rpc = require("tbrt.ggml_rpc")

local C = core.C
local M = {
  task = task, sock = sock, link = link, caps = caps, ggml_rpc = ggml_rpc,
  verbs = require("tbrt.verbs"),
  spawn = task.spawn, sleep = task.sleep, all = task.all, with_timeout = task.with_timeout,
  channel = task.channel, run = task.run, now = link.now,
  version = ffi.string(C.tbrt_version()),
}

-- Modules that cost something to load (the mlx5 layout tables) or are
-- rarely needed come in on first use: tbrt.perf, tbrt.mlx5.
local LAZY = { perf = "tbrt.perf", mlx5 = "tbrt.mlx5" }
setmetatable(M, { __index = function(t, k)
  local name = LAZY[k]
  if not name then return nil end
  local mod = require(name)
  rawset(t, k, mod)
  return mod
end })

M.tcp_connect = sock.connect
M.tcp_listen = sock.listen

-- Probe, falling back to the tcp link when no RDMA device can be used.
function M.probe(s, opts)
  opts = link.check_opts(opts, 2)
  local l, err = link.probe(s, opts)
  if l or opts.fallback == false or opts.device == "tcp" then return l, err end
  local tcp_opts = {}
  for k, v in pairs(opts) do tcp_opts[k] = v end
  tcp_opts.device = "tcp"
  local t, terr = link.probe(s, tcp_opts)
  if not t then return nil, terr end
  t.fallback_why = err
  return t
end

-- Steps 2-4 on a connected bootstrap socket.
function M.setup(s, opts, role)
  opts = link.check_opts(opts, 2)
  local l, err = M.probe(s, opts)
  if not l then s:close() return nil, err end
  local exchange = opts.exchange or caps.exchange
  -- the exchange still talks over the socket the link now owns: give it a
  -- view of the same fd
  local view = setmetatable({ fd = l:_fds() == 2 and l.fds[1] or l.fds[0],
    what = "caps exchange" }, sock.Sock)
  -- exchange(sock, my_caps, role, timeout) -> peer_caps | nil, err [, sent]
  -- `sent`: the caps it actually sent, when not mine (all zero: this side
  -- declines RDMA, so both stay on TCP)
  local peer, xerr, sent = exchange(view, l:caps(), role, opts.timeout or 30)
  if not peer then l:close() return nil, xerr end
  if sent and caps.is_none(sent) then peer = caps.NONE end
  if type(peer) ~= "string" or #peer ~= caps.SIZE then
    l:close()
    return nil, string.format("EINVAL: caps exchange returned %s, not %d bytes",
      type(peer) == "string" and (#peer .. " bytes") or type(peer), caps.SIZE)
  end
  if caps.is_none(peer) and not caps.is_none(sent or l:caps()) then
    if opts.fallback == false then
      local id, dev = l.id, l:info().device
      l:close()
      return nil, string.format("ENOTSUP: link %d: caps exchange: the peer offers no RDMA (it sent " ..
        "all-zero caps: it asked for tcp, or has no usable device) and this side asked for %s " ..
        "with fallback = false", id, dev)
    end
    l.peer_no_rdma = true
  end
  local ok, aerr = l:activate(peer, opts.timeout)
  if not ok then l:close() return nil, aerr end
  return l
end

function M.connect(host, port, opts)
  opts = link.check_opts(opts, 2)
  local s, err = sock.connect(host, port, opts.connect_timeout or opts.timeout or 30)
  if not s then return nil, err end
  return M.setup(s, opts, "client")
end

local Server = {}
Server.__index = Server
M.Server = Server

function M.listen(host, port, opts)
  opts = link.check_opts(opts, 2)
  local srv, err = sock.listen(host, port)
  if not srv then return nil, err end
  return setmetatable({ srv = srv, port = srv.port, host = host, opts = opts }, Server)
end

function Server:accept(timeout)
  local s, err = self.srv:accept(timeout)
  if not s then return nil, err end
  return M.setup(s, self.opts, "server")
end

function Server:close() self.srv:close() end

-- Every device tbrt can see, usable or not.
function M.devices()
  local n = C.tbrt_devices(nil, 0)
  local list = ffi.new("tbrt_devinfo[?]", math.max(n, 1))
  n = math.min(C.tbrt_devices(list, n), n)
  local out = {}
  for i = 0, n - 1 do
    local d = list[i]
    out[#out + 1] = { name = ffi.string(d.name), kind = ffi.string(d.kind),
      personality = ffi.string(d.personality), flavor = ({ "apple", "linux" })[d.flavor],
      usable = d.usable ~= 0, why = ffi.string(d.why) }
  end
  return out
end

return M
