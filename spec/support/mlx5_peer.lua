-- mlx5_peer.lua - the other process of the two-process mlx5 spec, run by the
-- tbrt program:  tbrt spec/support/mlx5_peer.lua DIR
-- Opens its own model NIC ("mlx5:model0" is a new model in each process),
-- makes an RC QP and a 64 KiB MR, publishes them in DIR/peer.info, waits for
-- DIR/spec.info, connects, then: receives a SEND and checks every byte,
-- RDMA WRITEs its pattern into the spec's buffer, SENDs "done" with an
-- immediate, and prints "ok". Every wait is bounded.
package.path = package.path .. ";" .. arg[0]:gsub("mlx5_peer%.lua$", "?.lua")
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local X = require("mlx5_pair")

local dir = assert(arg[1], "usage: mlx5_peer.lua DIR")
local side = X.side("mlx5:model0")
X.publish(dir .. "/peer.info", side)
local spec = assert(X.await(dir .. "/spec.info", 15))
assert(X.connect(side, spec))
assert(side.qp:post_recv{ mr = side.mr, len = X.SEND_LEN, wr_id = 1 })
X.touch(dir .. "/peer.ready")

local wc = assert(X.wait(side.cq, 1, 10))
assert(wc[1] and wc[1].status == "IBV_WC_SUCCESS", "recv: " .. tostring(wc[1] and wc[1].status))
assert(wc[1].byte_len == X.SEND_LEN, "recv length " .. tostring(wc[1].byte_len))
local bad = X.check(side.buf, 0, X.SEND_LEN, 1)
assert(not bad, "byte " .. tostring(bad) .. " of the SEND differs")

X.fill(side.buf, X.WRITE_OFF, X.WRITE_LEN, 2)
assert(side.qp:post_send{ mr = side.mr, offset = X.WRITE_OFF, len = X.WRITE_LEN, wr_id = 2,
  opcode = "RDMA_WRITE", rkey = spec.rkey, raddr = spec.addr + X.WRITE_OFF })
assert(side.qp:post_send{ mr = side.mr, offset = 0, len = 16, wr_id = 3, opcode = "SEND_WITH_IMM",
  imm = 0x1234 })
wc = assert(X.wait(side.cq, 2, 10))
for _, w in ipairs(wc) do assert(w.status == "IBV_WC_SUCCESS", "send: " .. w.status .. " " .. tostring(w.why)) end
assert(#wc == 2, "send completions: " .. #wc)
assert(X.await(dir .. "/spec.done", 15))
X.close(side)
print("ok")
