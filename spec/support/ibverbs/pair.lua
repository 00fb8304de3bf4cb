-- pair.lua - a pair of links in one process driven through the C link API
-- (tbrt_link_probe / activate / send / recv over the FFI, no Lua link
-- library in between): connected TCP sockets made with luv, activation
-- with each other's caps, and data moved with the non-blocking calls, every
-- byte checked. Used by child.lua (spec/ibverbs_spec.lua). Every wait is
-- bounded.
--
--   local P = require("ibverbs.pair")
--   local fa, fb = P.tcp_pair("127.0.0.1")
--   local a = assert(P.probe(fa, { device = "ibverbs" }))
local uv = require("luv")
local task = require("tbrt.task")
local b = require("tbrt.ffi")
local ffi, C = b.ffi, b.C

local P = {}

for _, decl in ipairs({
  "int dup(int fd);",
  "int close(int fd);",
  "struct pollfd { int fd; short events; short revents; };",
  "int poll(struct pollfd *fds, unsigned long nfds, int timeout);",
}) do
  pcall(ffi.cdef, decl)
end

local function errtext(rc, msg) return b.err(rc, msg) end

-- Two connected TCP sockets on host (an address of this machine), as plain
-- fds that the caller owns (a link takes one over in probe).
function P.tcp_pair(host, timeout)
  timeout = timeout or 5
  local server = uv.new_tcp()
  assert(server:bind(host, 0))
  local accepted
  assert(server:listen(1, function(err)
    assert(not err, err)
    accepted = uv.new_tcp()
    server:accept(accepted)
  end))
  local port = server:getsockname().port
  local client = uv.new_tcp()
  local connected, cerr
  client:connect(host, port, function(err) connected, cerr = true, err end)
  assert(task.wait(function() return connected and accepted end, timeout),
    "tcp_pair: no connection to " .. host .. " within " .. timeout .. " s")
  assert(not cerr, cerr)
  local fa, fb = C.dup(uv.fileno(client)), C.dup(uv.fileno(accepted))
  for _, h in ipairs({ client, accepted, server }) do h:close() end
  assert(fa >= 0 and fb >= 0, "tcp_pair: dup failed")
  return fa, fb
end

-- Probe a link over fd; opts: the tbrt_link_opts fields by name.
-- Returns link, caps (a 24-byte string) or nil, "EWHAT: message".
function P.probe(fd, opts)
  local o = ffi.new("tbrt_link_opts")
  C.tbrt_link_opts_init(o)
  local keep = {}
  for k, v in pairs(opts or {}) do
    if type(v) == "string" then
      keep[#keep + 1] = v
      o[k] = v
    else
      o[k] = v
    end
  end
  local out = ffi.new("tbrt_link *[1]")
  local caps = ffi.new("uint8_t[?]", C.TBRT_CAPS_SIZE)
  local err = ffi.new("char[512]")
  local rc = C.tbrt_link_probe(fd, o, out, caps, err, 512)
  if rc ~= 0 then return nil, errtext(rc, ffi.string(err)) end
  return ffi.gc(out[0], C.tbrt_link_free), ffi.string(caps, C.TBRT_CAPS_SIZE)
end

function P.why(l) return ffi.string(C.tbrt_link_why(l)) end

function P.info(l)
  local i = ffi.new("tbrt_link_info")
  C.tbrt_link_info_get(l, i)
  return {
    state = i.state, flavor = i.flavor, framing = i.framing, qp_type = i.qp_type,
    device = ffi.string(i.device), kind = ffi.string(i.kind), port = i.port,
    gid_index = i.gid_index, qpn = i.qpn, peer_qpn = i.peer_qpn,
    why_device = ffi.string(i.why_device), stride = i.stride, nbuf = i.nbuf,
  }
end

-- Both links of one process: activate each with the other's caps, then
-- wait (bounded) until both have the peer's readiness byte.
function P.activate_pair(a, caps_a, b_, caps_b, timeout)
  local rc = C.tbrt_link_activate(a, caps_b, #caps_b)
  if rc ~= 0 then return nil, errtext(rc, P.why(a)) end
  rc = C.tbrt_link_activate(b_, caps_a, #caps_a)
  if rc ~= 0 then return nil, errtext(rc, P.why(b_)) end
  local deadline = uv.hrtime() / 1e9 + (timeout or 5)
  local ra, rb = -11, -11
  repeat
    if ra ~= 0 then ra = C.tbrt_link_ready(a) end
    if rb ~= 0 then rb = C.tbrt_link_ready(b_) end
    if ra ~= 0 and ra ~= -11 then return nil, errtext(ra, P.why(a)) end
    if rb ~= 0 and rb ~= -11 then return nil, errtext(rb, P.why(b_)) end
    if ra == 0 and rb == 0 then return true end
    task.sleep(0.001)
  until uv.hrtime() / 1e9 > deadline
  return nil, "ETIMEDOUT: activate_pair: not ready within " .. (timeout or 5) .. " s"
end

-- Deterministic bytes: a different sequence per seed.
function P.pattern(n, seed)
  local buf = ffi.new("uint8_t[?]", n)
  local x = seed % 251 + 1
  for i = 0, n - 1 do
    x = (x * 33 + 7) % 65521
    buf[i] = x % 256
  end
  return buf
end

-- Index of the first differing byte, or nil when equal.
function P.first_diff(x, y, n)
  for i = 0, n - 1 do
    if x[i] ~= y[i] then return i end
  end
  return nil
end

-- Move n bytes from link `from` to link `to` in this process with the
-- non-blocking calls (the blocking ones would wait for a reader that the
-- same thread has to be). Returns true, or nil, "EWHAT: ..." naming the side.
function P.transfer(from, to, n, seed, timeout)
  local src, dst = P.pattern(n, seed), ffi.new("uint8_t[?]", n)
  local sent, got, flushed = 0, 0, false
  local deadline = uv.hrtime() / 1e9 + (timeout or 5)
  while got < n do
    if sent < n then
      local k = tonumber(C.tbrt_link_send(from, src + sent, n - sent))
      if k > 0 then sent = sent + k
      elseif k ~= -11 then return nil, errtext(k, "send: " .. P.why(from)) end
    elseif not flushed then
      local rc = C.tbrt_link_flush(from)
      if rc == 0 then flushed = true
      elseif rc ~= -11 then return nil, errtext(rc, "flush: " .. P.why(from)) end
    end
    local pr = C.tbrt_link_progress(from)
    if pr < 0 then return nil, errtext(pr, "progress: " .. P.why(from)) end
    local r = tonumber(C.tbrt_link_recv(to, dst + got, n - got))
    if r > 0 then got = got + r
    elseif r == 0 then return nil, "EOF: recv: the link ended after " .. got .. " bytes"
    elseif r ~= -11 then return nil, errtext(r, "recv: " .. P.why(to)) end
    if uv.hrtime() / 1e9 > deadline then
      return nil, string.format("ETIMEDOUT: transfer: %d of %d bytes sent, %d received", sent,
        n, got)
    end
  end
  local at = P.first_diff(src, dst, n)
  if at then return nil, string.format("EBADMSG: byte %d differs (%d != %d)", at, dst[at], src[at]) end
  return true
end

return P
