-- verbs_helpers.lua - spec helpers for driving a soft device by hand: a
-- connected pair of queue pairs in this process, buffers, completions.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")

local V = {}

V.LOOPBACK = string.rep("\0", 10) .. "\255\255\127\0\0\1"

-- Index of the GID ::ffff:127.0.0.1 on a port (RoCE v2 where typed).
function V.loopback_gid(dev, port)
  local best
  for _, g in ipairs(assert(dev:gids(port))) do
    if g.gid == V.LOOPBACK and (not best or g.type == "RoCEv2") then best = g.index end
  end
  return best
end

-- The same of a soft device opened for the asking (the index a link or a
-- program of this host picks for 127.0.0.1).
function V.loopback_index(name, port)
  local dev = assert(verbs.open(name))
  local i = V.loopback_gid(dev, port)
  dev:close()
  return i
end

-- A device with two QPs of this process connected to each other.
-- o: personality, type ("UC"/"RC"/...), port, depth, mr_len, recv_sge,
-- inline (max_inline_data), wire, faults, pcap, and connect options
-- (min_rnr_timer, rnr_retry, timeout, retry_cnt, mtu).
function V.pair(o)
  o = o or {}
  local dev = assert(verbs.open(o.device or "soft0", { personality = o.personality or "apple-uc",
    ports = o.ports, wire = o.wire, faults = o.faults, pcap = o.pcap }))
  local port = o.port or (dev.personality == "apple-uc" and 2 or 1)
  local pd = assert(dev:pd())
  local cq_a, cq_b = assert(dev:cq(256)), assert(dev:cq(256))
  local depth = o.depth or 64
  local a = assert(pd:qp{ type = o.type or "UC", send_cq = cq_a, recv_cq = cq_a,
    send_wr = depth, recv_wr = depth, recv_sge = o.recv_sge, inline = o.inline })
  local b = assert(pd:qp{ type = o.type or "UC", send_cq = cq_b, recv_cq = cq_b,
    send_wr = depth, recv_wr = depth, recv_sge = o.recv_sge, inline = o.inline })
  local len = o.mr_len or (256 * 1024)
  local abuf, bbuf = ffi.new("uint8_t[?]", len), ffi.new("uint8_t[?]", len)
  local amr = assert(pd:reg(abuf, len, o.access))
  local bmr = assert(pd:reg(bbuf, len, o.access))
  local p = { dev = dev, pd = pd, a = a, b = b, cq_a = cq_a, cq_b = cq_b, amr = amr, bmr = bmr,
    abuf = abuf, bbuf = bbuf, len = len, port = port }
  if o.connect ~= false then
    local ok, err = verbs.connect(a, b, { port = port, dgid = V.LOOPBACK,
      sgid_index = V.loopback_gid(dev, port), min_rnr_timer = o.min_rnr_timer,
      rnr_retry = o.rnr_retry, timeout = o.timeout, retry_cnt = o.retry_cnt, mtu = o.mtu })
    assert(ok, err)
  end
  return p
end

-- A message's bytes from its seed at buf + off, and the first of n that is
-- not (nil: all right).
function V.fill(buf, off, n, seed)
  for i = 0, n - 1 do buf[off + i] = (i * 7 + seed) % 251 end
end

function V.first_bad(buf, off, n, seed)
  for i = 0, n - 1 do
    if buf[off + i] ~= (i * 7 + seed) % 251 then return i end
  end
end

function V.close(p)
  for _, q in ipairs { p.a, p.b } do if q.q then q:destroy() end end
  p.amr:dereg()
  p.bmr:dereg()
  p.cq_a:destroy()
  p.cq_b:destroy()
  p.pd:free()
  p.dev:close()
end

return V
