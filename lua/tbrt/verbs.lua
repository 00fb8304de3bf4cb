-- tbrt/verbs.lua - the verbs tier from Lua: open a device and drive it by
-- hand (PDs, CQs, QPs, MRs, posts, polls), for scripts that provoke a
-- platform rule on purpose and for the REPL.
--
--   local verbs = require("tbrt.verbs")
--   local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
--   local pd, cq = dev:pd(), dev:cq(64)
--   local qp = assert(pd:qp{ type = "UC", send_cq = cq, recv_cq = cq, send_wr = 512, recv_wr = 512 })
--   qp:modify{ state = "INIT", port = 2, access = verbs.ACCESS_ALL }
--   local wcs = cq:poll(16)        -- { {wr_id=, status="IBV_WC_SUCCESS", ...}, ... }
--
-- Calls that fail return nil, "ECODE: soft0 (apple-uc): <op>: <cause>";
-- misuse (wrong argument types, unknown keys) raises.
local ffi = require("ffi")
local core = require("tbrt.ffi")

local C = core.C
local M = {}

local function fail(dev, rc)
  return nil, ffi.string(C.tbrt_errname(rc)) .. ": " .. ffi.string(C.tbrt_dev_why(dev))
end

local function check_keys(t, allowed, what)
  if type(t) ~= "table" then error(what .. ": expected a table", 3) end
  for k in pairs(t) do
    if not allowed[k] then
      local names = {}
      for n in pairs(allowed) do names[#names + 1] = n end
      table.sort(names)
      error(string.format("%s: unknown key %q (valid: %s)", what, tostring(k),
        table.concat(names, ", ")), 3)
    end
  end
end

M.QPT = { RC = C.IBV_QPT_RC, UC = C.IBV_QPT_UC, UD = C.IBV_QPT_UD }
M.STATE = { RESET = C.IBV_QPS_RESET, INIT = C.IBV_QPS_INIT, RTR = C.IBV_QPS_RTR,
  RTS = C.IBV_QPS_RTS, ERR = C.IBV_QPS_ERR }
M.ACCESS_ALL = bit.bor(C.IBV_ACCESS_LOCAL_WRITE, C.IBV_ACCESS_REMOTE_READ, C.IBV_ACCESS_REMOTE_WRITE)
M.ACCESS_ATOMIC = C.IBV_ACCESS_REMOTE_ATOMIC
M.LOCAL_WRITE = C.IBV_ACCESS_LOCAL_WRITE
M.OPCODE = { SEND = C.IBV_WR_SEND, SEND_WITH_IMM = C.IBV_WR_SEND_WITH_IMM,
  RDMA_WRITE = C.IBV_WR_RDMA_WRITE, RDMA_WRITE_WITH_IMM = C.IBV_WR_RDMA_WRITE_WITH_IMM,
  RDMA_READ = C.IBV_WR_RDMA_READ, CMP_AND_SWP = C.IBV_WR_ATOMIC_CMP_AND_SWP,
  FETCH_AND_ADD = C.IBV_WR_ATOMIC_FETCH_AND_ADD }

local WC_STATUS, WC_OPCODE, PORT_STATE = {}, {}, {}
for _, n in ipairs { "SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
  "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
  "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
  "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
  "RESP_TIMEOUT_ERR", "GENERAL_ERR" } do
  WC_STATUS[tonumber(C["IBV_WC_" .. n])] = "IBV_WC_" .. n
end
for _, n in ipairs { "SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "RECV",
  "RECV_RDMA_WITH_IMM" } do
  WC_OPCODE[tonumber(C["IBV_WC_" .. n])] = n
end
for _, n in ipairs { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER" } do
  PORT_STATE[tonumber(C["IBV_PORT_" .. n])] = n
end
local EVENT = {}
for _, n in ipairs { "CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED",
  "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE",
  "PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED",
  "CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL" } do
  EVENT[tonumber(C["IBV_EVENT_" .. n])] = n
end
M.WC_STATUS, M.PORT_STATE, M.EVENT = WC_STATUS, PORT_STATE, EVENT

---------------------------------------------------------------------------
local Dev, PD, CQ, QP, MR, SRQ = {}, {}, {}, {}, {}, {}
-- registered buffers by device (PD:reg): held until dereg or close
local held = {}
Dev.__index, PD.__index, CQ.__index, QP.__index, MR.__index, SRQ.__index = Dev, PD, CQ, QP, MR, SRQ
M.Dev, M.PD, M.CQ, M.QP, M.MR, M.SRQ = Dev, PD, CQ, QP, MR, SRQ

function M.open(name, opts)
  opts = opts or {}
  check_keys(opts, { personality = true, ports = true, pci = true, trace = true, wire = true,
    faults = true, pcap = true }, "verbs.open")
  local o = ffi.new("tbrt_dev_opts")
  o.personality, o.ports, o.pci = opts.personality, opts.ports, opts.pci
  o.wire, o.pcap = opts.wire, opts.pcap
  if opts.faults ~= nil then o.faults = M.faults_spec(opts.faults, "verbs.open") end
  o.trace = opts.trace and 1 or 0
  local out = ffi.new("tbrt_dev *[1]")
  local err = ffi.new("char[512]")
  local rc = C.tbrt_dev_open(name or "soft", o, out, err, 512)
  if rc ~= 0 then return nil, ffi.string(C.tbrt_errname(rc)) .. ": " .. ffi.string(err) end
  return setmetatable({ d = out[0], name = ffi.string(C.tbrt_dev_name(out[0])),
    personality = ffi.string(C.tbrt_dev_personality(out[0])), _keep = opts }, Dev)
end

function Dev:__tostring()
  local s = string.format("<device %s%s", self.name,
    self.personality ~= "" and (" " .. self.personality) or "")
  if self.d then
    local a = self:query()
    for p = 1, a and a.phys_port_cnt or 0 do
      local pa = self:port(p)
      s = s .. string.format(" port%d=%s", p, pa and pa.state or "?")
    end
  end
  return s .. ">"
end

function Dev:close()
  if self.d then C.tbrt_dev_close(self.d) self.d = nil end
  held[self] = nil              -- closing deregistered them: their buffers may go
end

function Dev:why() return ffi.string(C.tbrt_dev_why(self.d)) end

function Dev:query()
  local a = ffi.new("struct ibv_device_attr")
  local rc = C.tbrt_dev_query(self.d, a)
  if rc ~= 0 then return fail(self.d, rc) end
  return { fw_ver = ffi.string(a.fw_ver), max_qp = a.max_qp, max_qp_wr = a.max_qp_wr,
    max_sge = a.max_sge, max_cqe = a.max_cqe, max_mr_size = tonumber(a.max_mr_size),
    max_srq = a.max_srq, max_srq_wr = a.max_srq_wr, max_srq_sge = a.max_srq_sge,
    atomic_cap = tonumber(a.atomic_cap),
    phys_port_cnt = a.phys_port_cnt, raw = a }
end

function Dev:port(n)
  local a = ffi.new("struct ibv_port_attr")
  local rc = C.tbrt_port_query(self.d, n, a)
  if rc ~= 0 then return fail(self.d, rc) end
  return { state = PORT_STATE[tonumber(a.state)], active_mtu = 128 * 2 ^ tonumber(a.active_mtu),
    gid_tbl_len = a.gid_tbl_len, max_msg_sz = a.max_msg_sz, lid = a.lid, raw = a }
end

local SET_STATE = { down = C.IBV_PORT_DOWN, active = C.IBV_PORT_ACTIVE, init = C.IBV_PORT_INIT,
  armed = C.IBV_PORT_ARMED }

-- Take a port down (or up) at run time, as a pulled cable would; nil
-- restores the configured state. Soft devices: every process on the host
-- sees it until this one exits.
function Dev:set_port(port, state)
  local st = 0
  if state ~= nil then
    st = SET_STATE[state] or error("set_port: state must be down, active, init, armed or nil", 2)
  end
  local rc = C.tbrt_port_set_state(self.d, port, st)
  if rc ~= 0 then return fail(self.d, rc) end
  return true
end

-- Fault sets from Lua: a table { drop = 0.01, delay = "200us", seed = 7, ... }
-- (probabilities as fractions or "1%" strings; times and rates with their
-- units, as tc netem writes them), a list of such tables (several sets), or
-- TBRT_FAULTS's own string. Returns the string the device parses.
local PROB = { drop = true, corrupt = true, duplicate = true, reorder = true }
local FAULT_KEYS = { drop = true, drop_every = true, corrupt = true, duplicate = true,
  reorder = true, window = true, delay = true, jitter = true, distribution = true, rate = true,
  partition = true, seed = true, qp = true, dir = true }
local function one_set(t, what)
  local parts, keys = {}, {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = t[k]
    if not FAULT_KEYS[k] then
      error(string.format("%s: unknown fault %q (known: drop, drop_every, corrupt, duplicate, " ..
        "reorder, window, delay, jitter, distribution, rate, partition, seed, qp, dir)", what,
        tostring(k)), 4)
    end
    if PROB[k] and type(v) == "number" then
      if v < 0 or v > 1 then
        error(string.format("%s: %s = %s is a probability 0..1 (or a string like \"1%%\")",
          what, k, tostring(v)), 4)
      end
      v = string.format("%.10g%%", v * 100)
    elseif v == false then
      v = nil
    else
      v = tostring(v)
    end
    if v then parts[#parts + 1] = k .. "=" .. v end
  end
  return table.concat(parts, ",")
end
function M.faults_spec(f, what)
  what = what or "faults"
  if type(f) == "string" then
    -- the device parses it; unknown names are refused here already, by name
    for kv in f:gmatch("[^,;]+") do
      local k = kv:match("^%s*([%w_]+)=")
      if not k or not FAULT_KEYS[k] then
        error(string.format("%s: %q is not a known fault=value (known: drop, drop_every, " ..
          "corrupt, duplicate, reorder, window, delay, jitter, distribution, rate, partition, " ..
          "seed, qp, dir)", what, kv), 3)
      end
    end
    return f
  end
  if type(f) ~= "table" then error(what .. ": faults must be a table or a string", 3) end
  if f[1] ~= nil then
    local sets = {}
    for i, t in ipairs(f) do sets[i] = one_set(t, what) end
    return table.concat(sets, ";")
  end
  return one_set(f, what)
end

-- Set the device's faults (replacing all; {} clears them), while traffic runs.
function Dev:faults(f)
  local rc = C.tbrt_dev_faults(self.d, M.faults_spec(f, "dev:faults"))
  if rc ~= 0 then return fail(self.d, rc) end
  return true
end

-- The device's counters (of one QP: qpn), as a table name -> number.
function Dev:stats(qpn)
  local names, vals = ffi.new("const char *[64]"), ffi.new("uint64_t[64]")
  local n = C.tbrt_dev_counters(self.d, qpn or 0, names, vals, 64)
  local t = {}
  for i = 0, n - 1 do t[ffi.string(names[i])] = tonumber(vals[i]) end
  return t
end

-- How the device moves data ("wire udp, RoCEv2 over UDP port 4791, ...").
function Dev:describe() return ffi.string(C.tbrt_dev_describe(self.d)) end

local GID_TYPE = { [0] = "IB", "RoCEv1", "RoCEv2" }

-- The non-empty GIDs of a port: { {index, gid (16-byte string), text, type} }.
function Dev:gids(port)
  local pa = self:port(port)
  if not pa then return nil, select(2, self:port(port)) end
  local e = ffi.new("struct ibv_gid_entry")
  local out = {}
  for i = 0, pa.gid_tbl_len - 1 do
    local rc = C.tbrt_gid_query(self.d, port, i, e)
    if rc >= 0 then
      local raw = ffi.string(e.gid.raw, 16)
      local typ                 -- nil: the provider has no GID types
      if rc == 0 then typ = GID_TYPE[tonumber(e.gid_type)] end
      out[#out + 1] = { index = i, gid = raw, text = M.gid_text(raw), type = typ }
    end
  end
  return out
end

-- GID text as inet_ntop writes IPv6: ::ffff:a.b.c.d, fe80::..., ::1.
function M.gid_text(raw)
  if raw:sub(1, 12) == string.rep("\0", 10) .. "\255\255" then
    return "::ffff:" .. table.concat({ raw:byte(13, 16) }, ".")
  end
  local w = {}
  for i = 1, 16, 2 do w[#w + 1] = raw:byte(i) * 256 + raw:byte(i + 1) end
  -- the longest run of two or more zero groups becomes "::"
  local best, best_len, i = nil, 1, 1
  while i <= 8 do
    if w[i] == 0 then
      local j = i
      while j <= 8 and w[j] == 0 do j = j + 1 end
      if j - i > best_len then best, best_len = i, j - i end
      i = j
    else
      i = i + 1
    end
  end
  local function hex(a, b)
    local t = {}
    for k = a, b do t[#t + 1] = string.format("%x", w[k]) end
    return table.concat(t, ":")
  end
  if not best then return hex(1, 8) end
  return hex(1, best - 1) .. "::" .. hex(best + best_len, 8)
end

function Dev:pd()
  local out = ffi.new("tbrt_pd *[1]")
  local rc = C.tbrt_pd_alloc(self.d, out)
  if rc ~= 0 then return fail(self.d, rc) end
  return setmetatable({ p = out[0], dev = self }, PD)
end

function Dev:cq(n)
  local out = ffi.new("tbrt_cq *[1]")
  local rc = C.tbrt_cq_create(self.d, n or 64, out)
  if rc ~= 0 then return fail(self.d, rc) end
  return setmetatable({ c = out[0], dev = self, wc = ffi.new("struct ibv_wc[64]") }, CQ)
end

function PD:free()
  local rc = C.tbrt_pd_free(self.p)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return true
end

-- Register memory: a cdata buffer and its length; iova: the address SGEs
-- and remote addresses name it by (default: buf). The device holds the
-- buffer until the region is deregistered or the device closed, as a NIC
-- pins registered pages: a peer may write into it until then, and memory
-- the collector freed and handed out again must never be a target. (Held
-- from this module, so a device dropped without close keeps them too.)
function PD:reg(buf, len, access, iova)
  local out = ffi.new("tbrt_mr *[1]")
  local rc = iova and C.tbrt_mr_reg_iova(self.p, buf, len, iova, access or M.ACCESS_ALL, out)
    or C.tbrt_mr_reg(self.p, buf, len, access or M.ACCESS_ALL, out)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  local mr = setmetatable({ m = out[0], buf = buf, len = len, dev = self.dev,
    lkey = out[0].lkey, rkey = out[0].rkey, addr = out[0].iova }, MR)
  local mine = held[self.dev] or {}
  held[self.dev], mine[mr] = mine, true
  return mr
end

function MR:dereg()
  local rc = C.tbrt_mr_dereg(self.m)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  if held[self.dev] then held[self.dev][self] = nil end
  return true
end

local QP_KEYS = { type = true, send_cq = true, recv_cq = true, send_wr = true, recv_wr = true,
  send_sge = true, recv_sge = true, inline = true, sig_all = true, srq = true }

function PD:qp(t)
  check_keys(t, QP_KEYS, "pd:qp")
  local init = ffi.new("tbrt_qp_init")
  init.qp_type = M.QPT[t.type or "RC"] or error("pd:qp: type must be RC, UC or UD", 2)
  init.send_cq = t.send_cq.c
  init.recv_cq = (t.recv_cq or t.send_cq).c
  init.cap.max_send_wr = t.send_wr or 16
  init.cap.max_recv_wr = t.recv_wr or 16
  init.cap.max_send_sge = t.send_sge or 1
  init.cap.max_recv_sge = t.recv_sge or 1
  init.cap.max_inline_data = t.inline or 0
  init.sq_sig_all = t.sig_all and 1 or 0
  if t.srq then init.srq = t.srq.s end
  local out = ffi.new("tbrt_qp *[1]")
  local rc = C.tbrt_qp_create(self.p, init, out)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return setmetatable({ q = out[0], dev = self.dev, num = out[0].qp_num }, QP)
end

function QP:state()
  for name, v in pairs(M.STATE) do if v == self.q.state then return name end end
end

local MODIFY_KEYS = { state = true, port = true, access = true, pkey_index = true, qkey = true,
  mtu = true, dest_qpn = true, rq_psn = true, sq_psn = true, dgid = true, sgid_index = true,
  min_rnr_timer = true, timeout = true, retry_cnt = true, rnr_retry = true, max_rd_atomic = true,
  max_dest_rd_atomic = true, mask = true, ah_port = true }
local MTU = { [256] = 1, [512] = 2, [1024] = 3, [2048] = 4, [4096] = 5 }

-- Modify with named attributes; the mask is built from the keys given
-- (plus `mask` for extra IBV_QP_* bits), so missing attributes stay missing.
function QP:modify(t)
  check_keys(t, MODIFY_KEYS, "qp:modify")
  local a = ffi.new("struct ibv_qp_attr")
  local mask = t.mask or 0
  local function set(bitname) mask = bit.bor(mask, C[bitname]) end
  if t.state then a.qp_state = M.STATE[t.state] or error("qp:modify: bad state " .. t.state, 2); set("IBV_QP_STATE") end
  if t.port then a.port_num = t.port; set("IBV_QP_PORT") end
  if t.pkey_index then a.pkey_index = t.pkey_index; set("IBV_QP_PKEY_INDEX") end
  if t.access then a.qp_access_flags = t.access; set("IBV_QP_ACCESS_FLAGS") end
  if t.qkey then a.qkey = t.qkey; set("IBV_QP_QKEY") end
  if t.mtu then a.path_mtu = MTU[t.mtu] or error("qp:modify: mtu 256..4096", 2); set("IBV_QP_PATH_MTU") end
  if t.dest_qpn then a.dest_qp_num = t.dest_qpn; set("IBV_QP_DEST_QPN") end
  if t.rq_psn then a.rq_psn = t.rq_psn; set("IBV_QP_RQ_PSN") end
  if t.sq_psn then a.sq_psn = t.sq_psn; set("IBV_QP_SQ_PSN") end
  if t.dgid then
    a.ah_attr.is_global = 1
    ffi.copy(a.ah_attr.grh.dgid.raw, t.dgid, 16)
    a.ah_attr.grh.sgid_index = t.sgid_index or 0
    a.ah_attr.grh.hop_limit = 64
    a.ah_attr.port_num = t.ah_port or 0
    set("IBV_QP_AV")
  end
  if t.min_rnr_timer then a.min_rnr_timer = t.min_rnr_timer; set("IBV_QP_MIN_RNR_TIMER") end
  if t.timeout then a.timeout = t.timeout; set("IBV_QP_TIMEOUT") end
  if t.retry_cnt then a.retry_cnt = t.retry_cnt; set("IBV_QP_RETRY_CNT") end
  if t.rnr_retry then a.rnr_retry = t.rnr_retry; set("IBV_QP_RNR_RETRY") end
  if t.max_rd_atomic then a.max_rd_atomic = t.max_rd_atomic; set("IBV_QP_MAX_QP_RD_ATOMIC") end
  if t.max_dest_rd_atomic then a.max_dest_rd_atomic = t.max_dest_rd_atomic; set("IBV_QP_MAX_DEST_RD_ATOMIC") end
  local rc = C.tbrt_qp_modify(self.q, a, mask)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return true
end

-- Bring a pair of QPs (of this process) to RTS facing each other.
function M.connect(a, b, o)
  o = o or {}
  local port = o.port or 1
  local access = o.access or M.ACCESS_ALL
  for _, q in ipairs { a, b } do
    local ok, err = q:modify{ state = "INIT", port = port, pkey_index = 0, access = access }
    if not ok then return nil, err end
  end
  local rc_extra = function(q, peer)
    local t = { state = "RTR", mtu = o.mtu or 1024, dest_qpn = peer.num, rq_psn = 0,
      dgid = o.dgid, sgid_index = o.sgid_index or 0, ah_port = port }
    if q.q.qp_type == M.QPT.RC then
      t.min_rnr_timer = o.min_rnr_timer or 1
      t.max_dest_rd_atomic = 1
    end
    return t
  end
  for _, pair in ipairs { { a, b }, { b, a } } do
    local ok, err = pair[1]:modify(rc_extra(pair[1], pair[2]))
    if not ok then return nil, err end
    local r = { state = "RTS", sq_psn = 0 }
    if pair[1].q.qp_type == M.QPT.RC then
      r.timeout = o.timeout or 14
      r.retry_cnt = o.retry_cnt or 7
      r.rnr_retry = o.rnr_retry or 7
      r.max_rd_atomic = 1
    end
    ok, err = pair[1]:modify(r)
    if not ok then return nil, err end
  end
  return true
end

local SEND_KEYS = { mr = true, offset = true, len = true, wr_id = true, opcode = true,
  signaled = true, inline = true, imm = true, rkey = true, raddr = true, ah = true,
  remote_qpn = true, remote_qkey = true, sge = true, compare_add = true, swap = true }

-- Post one send: the bytes [offset, offset+len) of mr.
function QP:post_send(t)
  check_keys(t, SEND_KEYS, "qp:post_send")
  local sge = ffi.new("struct ibv_sge")
  local wr = ffi.new("struct ibv_send_wr")
  if t.mr then
    sge.addr = t.mr.addr + (t.offset or 0)
    sge.length = t.len or t.mr.len
    sge.lkey = t.mr.lkey
    wr.sg_list = sge
    wr.num_sge = 1
  end
  wr.wr_id = t.wr_id or 0
  wr.opcode = M.OPCODE[t.opcode or "SEND"] or error("qp:post_send: bad opcode", 2)
  wr.send_flags = bit.bor(t.signaled == false and 0 or C.IBV_SEND_SIGNALED,
    t.inline and C.IBV_SEND_INLINE or 0)
  if t.imm then wr.imm_data = t.imm end
  if t.opcode == "CMP_AND_SWP" or t.opcode == "FETCH_AND_ADD" then
    wr.wr.atomic.rkey = t.rkey
    wr.wr.atomic.remote_addr = t.raddr
    wr.wr.atomic.compare_add = t.compare_add or 0
    wr.wr.atomic.swap = t.swap or 0
  elseif t.rkey then wr.wr.rdma.rkey = t.rkey; wr.wr.rdma.remote_addr = t.raddr end
  if t.ah then
    wr.wr.ud.ah = C.tbrt_ah_handle(t.ah)
    wr.wr.ud.remote_qpn = t.remote_qpn
    wr.wr.ud.remote_qkey = t.remote_qkey or 0
  end
  local rc = C.tbrt_post_send(self.q, wr, nil)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return true
end

local function recv_wr(t, what)
  check_keys(t, { mr = true, offset = true, len = true, wr_id = true }, what)
  local sge = ffi.new("struct ibv_sge")
  local wr = ffi.new("struct ibv_recv_wr")
  sge.addr = t.mr.addr + (t.offset or 0)
  sge.length = t.len or t.mr.len
  sge.lkey = t.mr.lkey
  wr.sg_list = sge
  wr.num_sge = 1
  wr.wr_id = t.wr_id or 0
  return wr, sge
end

function QP:post_recv(t)
  local wr, sge = recv_wr(t, "qp:post_recv")
  local rc = C.tbrt_post_recv(self.q, wr, nil)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return true
end

-- Shared receive queues: pd:srq{ max_wr =, max_sge = }.
function PD:srq(t)
  check_keys(t or {}, { max_wr = true, max_sge = true }, "pd:srq")
  local a = ffi.new("struct ibv_srq_attr")
  a.max_wr, a.max_sge = (t and t.max_wr) or 16, (t and t.max_sge) or 1
  local out = ffi.new("tbrt_srq *[1]")
  local rc = C.tbrt_srq_create(self.p, a, out)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return setmetatable({ s = out[0], dev = self.dev, num = out[0].srq_num }, SRQ)
end

function SRQ:post_recv(t)
  local wr, sge = recv_wr(t, "srq:post_recv")
  local rc = C.tbrt_post_srq_recv(self.s, wr, nil)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return true
end

-- modify{ max_wr =, limit = }: the mask from the keys given (verbs.h's
-- enum ibv_srq_attr_mask, which tbrt.h does not carry into the cdef).
local SRQ_MAX_WR, SRQ_LIMIT = 1, 2

function SRQ:modify(t)
  check_keys(t, { max_wr = true, limit = true }, "srq:modify")
  local a = ffi.new("struct ibv_srq_attr")
  local mask = 0
  if t.max_wr then a.max_wr = t.max_wr; mask = bit.bor(mask, SRQ_MAX_WR) end
  if t.limit then a.srq_limit = t.limit; mask = bit.bor(mask, SRQ_LIMIT) end
  local rc = C.tbrt_srq_modify(self.s, a, mask)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return true
end

function SRQ:query()
  local a = ffi.new("struct ibv_srq_attr")
  local rc = C.tbrt_srq_query(self.s, a)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return { max_wr = a.max_wr, max_sge = a.max_sge, limit = a.srq_limit }
end

function SRQ:destroy()
  local rc = C.tbrt_srq_destroy(self.s)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  self.s = nil
  return true
end

-- The device's asynchronous events: dev:event() -> { type = "PORT_ERR", port =,
-- qp_num = } or nil when none; dev:event_fd() to poll.
function Dev:event_fd()
  local fd = C.tbrt_dev_event_fd(self.d)
  if fd < 0 then return fail(self.d, fd) end
  return fd
end

function Dev:event()
  local ev = ffi.new("tbrt_event")
  local rc = C.tbrt_dev_event(self.d, ev)
  if rc < 0 then return fail(self.d, rc) end
  if rc == 0 then return nil end
  return { type = EVENT[tonumber(ev.type)] or tonumber(ev.type), port = ev.port,
    num = ev.num, qp = ev.qp ~= nil and ev.qp or nil, cq = ev.cq ~= nil and ev.cq or nil,
    srq = ev.srq ~= nil and ev.srq or nil }
end

function QP:destroy()
  local rc = C.tbrt_qp_destroy(self.q)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  self.q = nil
  return true
end

-- Poll up to n completions: a list of tables with status names and the
-- device's text for an error's vendor_err.
function CQ:poll(n, with_ts)
  n = math.min(n or 16, 64)
  if with_ts and not self.ts then self.ts = ffi.new("uint64_t[64]") end
  local got = with_ts and C.tbrt_cq_poll_ts(self.c, n, self.wc, self.ts)
    or C.tbrt_cq_poll(self.c, n, self.wc)
  if got < 0 then return fail(self.dev.d, got) end
  local out = {}
  for i = 0, got - 1 do
    local w = self.wc[i]
    out[#out + 1] = { wr_id = tonumber(w.wr_id), status = WC_STATUS[tonumber(w.status)] or tonumber(w.status),
      opcode = WC_OPCODE[tonumber(w.opcode)], byte_len = w.byte_len, qp_num = w.qp_num,
      src_qp = w.src_qp, imm = bit.band(w.wc_flags, C.IBV_WC_WITH_IMM) ~= 0 and w.imm_data or nil,
      wc_flags = w.wc_flags, sl = w.sl,
      vendor_err = w.vendor_err, ts_ns = with_ts and tonumber(self.ts[i]) or nil,
      why = w.status ~= 0 and ffi.string(C.tbrt_dev_vendor_err(self.dev.d, w.vendor_err)) or nil }
  end
  return out
end

-- Poll until n completions arrived or timeout seconds passed (busy).
function CQ:wait(n, timeout)
  local out, deadline = {}, os.clock() + (timeout or 1)
  while #out < n and os.clock() < deadline do
    local got, err = self:poll(n - #out)
    if not got then return nil, err end
    for _, w in ipairs(got) do out[#out + 1] = w end
  end
  return out
end

function CQ:destroy()
  local rc = C.tbrt_cq_destroy(self.c)
  if rc ~= 0 then return fail(self.dev.d, rc) end
  return true
end

function Dev:ah(t)
  local a = ffi.new("struct ibv_ah_attr")
  a.is_global = 1
  a.port_num = t.port or 1
  ffi.copy(a.grh.dgid.raw, t.dgid, 16)
  a.grh.sgid_index = t.sgid_index or 0
  a.grh.hop_limit = 64
  local out = ffi.new("tbrt_ah *[1]")
  local rc = C.tbrt_ah_create(t.pd.p, a, out)
  if rc ~= 0 then return fail(self.d, rc) end
  return out[0]
end

return M
