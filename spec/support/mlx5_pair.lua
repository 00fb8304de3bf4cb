-- mlx5_pair.lua - both sides of the mlx5 data-path specs: one side is an
-- mlx5 verbs device with a PD, a CQ, an RC QP and a registered buffer; two
-- sides connect (in one process, or across two through small files).
local ffi = require("ffi")
local verbs = require("tbrt.verbs")

local X = {}

X.LOOPBACK = string.rep("\0", 10) .. "\255\255\127\0\0\1"
X.BUF = 65536
X.SEND_LEN = 12345
X.WRITE_OFF, X.WRITE_LEN = 20000, 30001

pcall(ffi.cdef, "int usleep(unsigned int usec);")

function X.now()
  return os.time() + (os.clock() % 1)
end

-- Pattern byte i of pattern p.
local function pat(i, p) return (i * 7 + p * 31 + 3) % 251 end
function X.fill(buf, off, len, p)
  for i = 0, len - 1 do buf[off + i] = pat(i, p) end
end
function X.check(buf, off, len, p)
  for i = 0, len - 1 do if buf[off + i] ~= pat(i, p) then return i end end
end

function X.loopback_gid(dev)
  for _, g in ipairs(assert(dev:gids(1))) do
    if g.gid == X.LOOPBACK then return g.index end
  end
end

-- opts: type ("RC"/"UC"), trace
function X.side(name, opts)
  opts = opts or {}
  local dev = assert(verbs.open(name, { trace = opts.trace }))
  local pd = assert(dev:pd())
  local cq = assert(dev:cq(64))
  local qp = assert(pd:qp{ type = opts.type or "RC", send_cq = cq, recv_cq = cq,
    send_wr = 32, recv_wr = 32 })
  local buf = ffi.new("uint8_t[?]", X.BUF)
  local mr = assert(pd:reg(buf, X.BUF))
  return { dev = dev, pd = pd, cq = cq, qp = qp, buf = buf, mr = mr, gid = X.loopback_gid(dev) }
end

function X.close(s)
  if s.qp.q then assert(s.qp:destroy()) end
  assert(s.mr:dereg())
  assert(s.cq:destroy())
  assert(s.pd:free())
  s.dev:close()
end

-- RESET -> INIT -> RTR -> RTS towards the peer { qpn, gid }.
function X.connect(s, peer)
  local rc = s.qp.q.qp_type == verbs.QPT.RC
  local ok, err = s.qp:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL }
  if not ok then return nil, err end
  local rtr = { state = "RTR", mtu = 1024, dest_qpn = peer.qpn, rq_psn = 0, dgid = X.LOOPBACK,
    sgid_index = s.gid, ah_port = 1 }
  if rc then rtr.min_rnr_timer = 1; rtr.max_dest_rd_atomic = 1 end
  ok, err = s.qp:modify(rtr)
  if not ok then return nil, err end
  local rts = { state = "RTS", sq_psn = 0 }
  if rc then rts.timeout = 14; rts.retry_cnt = 7; rts.rnr_retry = 7; rts.max_rd_atomic = 1 end
  return s.qp:modify(rts)
end

-- Wait (bounded, seconds) until n completions arrived.
function X.wait(cq, n, timeout)
  local out, deadline = {}, os.time() + (timeout or 5)
  while #out < n and os.time() <= deadline do
    local got, err = cq:poll(n - #out)
    if not got then return nil, err end
    for _, w in ipairs(got) do out[#out + 1] = w end
    if #got == 0 then ffi.C.usleep(100) end
  end
  return out
end

-- ---- exchange through files ---------------------------------------------------
function X.publish(path, s)
  local f = assert(io.open(path .. ".tmp", "w"))
  f:write(string.format("qpn=%d\naddr=%.0f\nrkey=%d\n", s.qp.num,
    tonumber(ffi.cast("uintptr_t", s.buf)), s.mr.rkey))
  f:close()
  assert(os.rename(path .. ".tmp", path))
end

function X.touch(path)
  local f = assert(io.open(path, "w"))
  f:close()
end

function X.await(path, timeout)
  local deadline = os.time() + (timeout or 10)
  while os.time() <= deadline do
    local f = io.open(path, "r")
    if f then
      local t = {}
      for k, v in f:read("*a"):gmatch("(%w+)=(%d+)") do t[k] = tonumber(v) end
      f:close()
      return t
    end
    ffi.C.usleep(2000)
  end
  return nil, "ETIMEDOUT: " .. path .. " did not appear"
end

return X
