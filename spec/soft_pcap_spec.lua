-- soft_pcap_spec.lua - captures of the soft device's UDP wire decoded by
-- Wireshark: a capture holding every opcode the wire emits (RC sends,
-- writes and READs in every shape with and without immediate, ACK, NAK
-- sequence error, RNR NAK, UC, UD, tbrt's own credit packets) read by
-- `tshark` (Debian's) finds RoCEv2 on the wire's UDP port, with 0 malformed
-- packets; and every ICRC, recomputed here from the headers tshark decoded
-- (RoCEv2 annex: CRC-32 over 8 bytes of ones, the IP and UDP headers with
-- TTL/ToS/checksums masked, BTH with resv8a masked, the rest), is right. A
-- capture with corrupted packets shows the check can fail. tbrt's control
-- packets carry a comment saying what they are.
local ffi = require("ffi")
local bit = require("bit")
local H = require("helpers")
local V = require("verbs_helpers")
local verbs = require("tbrt.verbs")
local task = require("tbrt.task")

local function have_tshark()
  local r = H.run("/bin/sh", { "-c", "command -v tshark" })
  return r.code == 0
end

-- CRC-32 (IEEE), written here, to check the wire's ICRCs independently.
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit.band(c, 1) ~= 0 then c = bit.bxor(bit.rshift(c, 1), 0xEDB88320) else c = bit.rshift(c, 1) end
  end
  crc_table[i] = c
end
local function crc32(bytes)
  local c = 0xFFFFFFFF
  for i = 1, #bytes do
    c = bit.bxor(crc_table[bit.band(bit.bxor(c, bytes[i]), 0xff)], bit.rshift(c, 8))
  end
  return bit.bnot(c)
end

local function hexbytes(h)
  local t = {}
  for x in h:gmatch("%x%x") do t[#t + 1] = tonumber(x, 16) end
  return t
end

local function ip4(s)
  local t = {}
  for n in s:gmatch("%d+") do t[#t + 1] = tonumber(n) end
  return t
end

-- The ICRC a packet must carry, from its decoded IPv4/UDP fields and its
-- UDP payload (the ICRC is its last 4 bytes, least significant first).
local function icrc_of(src, dst, sport, dport, payload)
  local b = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }
  local function add(...) for _, v in ipairs { ... } do b[#b + 1] = v end end
  local total = 20 + 8 + #payload
  add(0x45, 0xff, bit.rshift(total, 8), bit.band(total, 0xff), 0, 0, 0x40, 0, 0xff, 17, 0xff, 0xff)
  for _, v in ipairs(ip4(src)) do add(v) end
  for _, v in ipairs(ip4(dst)) do add(v) end
  local ulen = 8 + #payload
  add(bit.rshift(sport, 8), bit.band(sport, 0xff), bit.rshift(dport, 8), bit.band(dport, 0xff),
    bit.rshift(ulen, 8), bit.band(ulen, 0xff), 0xff, 0xff)
  for i = 1, #payload - 4 do b[#b + 1] = payload[i] end
  b[8 + 28 + 5] = 0xff          -- BTH resv8a (8 ones, IP 20, UDP 8, then BTH byte 4)
  local want = crc32(b)
  local n = #payload
  local got = bit.bor(payload[n - 3], bit.lshift(payload[n - 2], 8), bit.lshift(payload[n - 1], 16),
    bit.lshift(payload[n], 24))
  return bit.tobit(want) == bit.tobit(got)
end

-- Every opcode the wire emits, on one device in this process.
local function traffic(pcap)
  task.run(function()
    local p = V.pair{ personality = "linux-rc", type = "RC", wire = "udp", mtu = 1024,
      pcap = pcap, mr_len = 65536, min_rnr_timer = 1 }
    for _, op in ipairs { "SEND", "SEND_WITH_IMM" } do
      for _, n in ipairs { 100, 3000 } do
        assert(p.b:post_recv{ mr = p.bmr, len = 8192 })
        assert(p.a:post_send{ mr = p.amr, len = n, opcode = op, imm = 5 })
        assert(p.cq_b:wait(1, 2)) ; assert(p.cq_a:wait(1, 2))
      end
    end
    for _, op in ipairs { "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ" } do
      for _, n in ipairs { 100, 3000 } do
        if op == "RDMA_WRITE_WITH_IMM" then assert(p.b:post_recv{ mr = p.bmr, len = 0 }) end
        assert(p.a:post_send{ mr = p.amr, len = n, opcode = op, imm = 6, rkey = p.bmr.rkey,
          raddr = p.bmr.addr })
        assert(p.cq_a:wait(1, 2))
        if op == "RDMA_WRITE_WITH_IMM" then assert(p.cq_b:wait(1, 2)) end
      end
    end
    -- an RNR NAK (no receive yet), then a NAK sequence error (a lost packet)
    assert(p.a:post_send{ mr = p.amr, len = 10 })
    assert.equal(0, #assert(p.cq_a:wait(1, 0.01)))   -- the wire's turns: it is NAKed
    assert(p.b:post_recv{ mr = p.bmr, len = 100 })
    assert(p.cq_a:wait(1, 2)) ; assert(p.cq_b:wait(1, 2))
    assert(p.dev:faults{ drop_every = 2 })
    assert(p.b:post_recv{ mr = p.bmr, len = 8192 })
    assert(p.a:post_send{ mr = p.amr, len = 5000 })
    assert(p.dev:faults{})
    assert(p.cq_a:wait(1, 5)) ; assert(p.cq_b:wait(1, 5))
    V.close(p)
    -- UC sends and writes in every shape
    p = V.pair{ personality = "linux-rc", type = "UC", wire = "udp", mtu = 1024, pcap = pcap,
      mr_len = 65536 }
    for _, op in ipairs { "SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM" } do
      for _, n in ipairs { 100, 3000 } do
        if op:match("SEND") or op:match("IMM") then assert(p.b:post_recv{ mr = p.bmr, len = 8192 }) end
        assert(p.a:post_send{ mr = p.amr, len = n, opcode = op, imm = 7, rkey = p.bmr.rkey,
          raddr = p.bmr.addr })
        assert(p.cq_a:wait(1, 2))
        if op:match("SEND") or op:match("IMM") then assert(p.cq_b:wait(1, 2)) end
      end
    end
    V.close(p)
    -- UD, and apple-uc's credits
    local dev = assert(verbs.open("soft0", { personality = "linux-rc", wire = "udp", pcap = pcap }))
    local pd, cq = dev:pd(), dev:cq(16)
    local a = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq })
    for _, q in ipairs { a } do
      assert(q:modify{ state = "INIT", port = 1, pkey_index = 0, qkey = 0x11 })
      assert(q:modify{ state = "RTR" }) ; assert(q:modify{ state = "RTS", sq_psn = 0 })
    end
    local buf = ffi.new("uint8_t[4096]")
    local mr = assert(pd:reg(buf, 4096))
    assert(a:post_recv{ mr = mr, len = 2048 }) ; assert(a:post_recv{ mr = mr, len = 2048 })
    local ah = assert(dev:ah{ pd = pd, dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) })
    assert(a:post_send{ mr = mr, len = 64, ah = ah, remote_qpn = a.num, remote_qkey = 0x11 })
    assert(a:post_send{ mr = mr, len = 64, ah = ah, remote_qpn = a.num, remote_qkey = 0x11,
      opcode = "SEND_WITH_IMM", imm = 9 })
    assert(cq:wait(4, 1))
    a:destroy() ; mr:dereg() ; cq:destroy() ; pd:free() ; dev:close()
    p = V.pair{ personality = "apple-uc", type = "UC", wire = "udp", pcap = pcap, mr_len = 65536 }
    assert(p.b:post_recv{ mr = p.bmr, len = 4096 })
    assert(p.a:post_send{ mr = p.amr, len = 4096 })
    assert(p.cq_b:wait(1, 2)) ; assert(p.cq_a:wait(1, 2))
    V.close(p)
  end)
end

-- The payload is test bytes: tshark's heuristics that guess an upper
-- protocol in it (RPC over RDMA claims zeroes, then calls them malformed)
-- judge those bytes, not the wire's packets, so they are off.
local PAYLOAD_PROTOCOLS = { "smc", "smb_direct", "rpcordma", "nvme-rdma", "lnet", "iser",
  "infiniband_sdp", "fcoib" }

local function tshark(file, args)
  local port = os.getenv("TBRT_SOFT_UDP_PORT") or "4791"
  local argv = { "-o", "infiniband.rroce.port:" .. port, "-r", file }
  for _, h in ipairs(PAYLOAD_PROTOCOLS) do
    argv[#argv + 1] = "--disable-protocol"
    argv[#argv + 1] = h
  end
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local r = H.run("tshark", argv, { timeout = 60 })
  assert.equal(0, r.code, H.describe(r))
  return r.stdout
end

local function packets(file)
  local out = tshark(file, { "-T", "fields", "-E", "separator=|", "-e", "frame.number",
    "-e", "infiniband.bth.opcode", "-e", "ip.src", "-e", "ip.dst", "-e", "udp.srcport",
    "-e", "udp.dstport", "-e", "udp.payload", "-e", "frame.comment" })
  local list = {}
  for line in out:gmatch("[^\n]+") do
    local f = {}
    for v in (line .. "|"):gmatch("([^|]*)|") do f[#f + 1] = v end
    list[#list + 1] = { n = tonumber(f[1]), op = tonumber(f[2]), src = f[3], dst = f[4],
      sport = tonumber(f[5]), dport = tonumber(f[6]), payload = hexbytes(f[7] or ""),
      comment = f[8] }
  end
  return list
end

describe("soft UDP wire captures", function()
  it("decode in tshark as RoCEv2, every opcode, 0 malformed, 0 bad ICRCs", function()
    if not have_tshark() then return pending("tshark is not installed (scripts/deps.sh installs it)") end
    local dir = H.tmpdir()
    finally(function() H.rmtree(dir) end)
    local file = dir .. "/all.pcap"
    traffic(file)
    local list = packets(file)
    assert.is_true(#list > 50, #list .. " packets")
    local seen, bad, credit_comments = {}, 0, 0
    for _, p in ipairs(list) do
      assert(p.op, "packet " .. p.n .. " was not decoded as InfiniBand (RoCEv2)")
      seen[p.op] = (seen[p.op] or 0) + 1
      if not icrc_of(p.src, p.dst, p.sport, p.dport, p.payload) then bad = bad + 1 end
      if p.op == 0xC0 then
        assert.matches("tbrt control packet: apple%-uc receive credits", p.comment)
        credit_comments = credit_comments + 1
      end
    end
    assert.equal(0, bad, "packets with a bad ICRC")
    local want = {
      [0] = "RC SEND_FIRST", "RC SEND_MIDDLE", "RC SEND_LAST", "RC SEND_LAST_IMM", "RC SEND_ONLY",
      "RC SEND_ONLY_IMM", "RC WRITE_FIRST", "RC WRITE_MIDDLE", "RC WRITE_LAST", "RC WRITE_LAST_IMM",
      "RC WRITE_ONLY", "RC WRITE_ONLY_IMM", "RC READ_REQUEST", "RC READ_RESPONSE_FIRST",
      "RC READ_RESPONSE_MIDDLE", "RC READ_RESPONSE_LAST", "RC READ_RESPONSE_ONLY", "RC ACK",
    }
    for op = 0, 17 do assert(seen[op], want[op] .. " is missing from the capture") end
    for op = 0x20, 0x2b do assert(seen[op], string.format("UC opcode 0x%x is missing", op)) end
    assert(seen[0x64] and seen[0x65], "UD SEND_ONLY (with immediate)")
    assert(seen[0xC0] and credit_comments == seen[0xC0], "tbrt's credit packets, each with its comment")
    local malformed = tshark(file, { "-Y", "_ws.malformed || _ws.expert.severity >= error" })
    assert.equal("", malformed, "malformed packets:\n" .. malformed)
    -- NAKs: a sequence error and an RNR NAK are among the ACK packets
    local naks = tshark(file, { "-Y", "infiniband.aeth.syndrome >= 0x20", "-T", "fields", "-e",
      "infiniband.aeth.syndrome" })
    local seq, rnr = false, false
    for v in naks:gmatch("%w+") do
      local syn = tonumber(v)
      if syn == 0x60 then seq = true end
      if syn and syn >= 0x20 and syn < 0x40 then rnr = true end
    end
    assert.is_true(seq, "a NAK sequence error (syndrome 0x60): " .. naks)
    assert.is_true(rnr, "an RNR NAK (syndrome 0x2x): " .. naks)
  end)

  it("shows corrupted packets with bad ICRCs (the check can fail)", function()
    if not have_tshark() then return pending("tshark is not installed (scripts/deps.sh installs it)") end
    local dir = H.tmpdir()
    finally(function() H.rmtree(dir) end)
    local file = dir .. "/bad.pcap"
    task.run(function()
      local p = V.pair{ personality = "linux-rc", type = "RC", wire = "udp", pcap = file,
        faults = { corrupt = 0.3, seed = 4 }, timeout = 8 }
      assert(p.b:post_recv{ mr = p.bmr, len = 65536 })
      assert(p.a:post_send{ mr = p.amr, len = 65536 })
      assert.equal("IBV_WC_SUCCESS", assert(p.cq_b:wait(1, 10))[1].status)
      assert(p.cq_a:wait(1, 10))
      assert.is_true(p.dev:stats().icrc_failures > 0)
      V.close(p)
    end)
    local bad = 0
    for _, p in ipairs(packets(file)) do
      if p.op and not icrc_of(p.src, p.dst, p.sport, p.dport, p.payload) then bad = bad + 1 end
    end
    assert.is_true(bad > 0, "no bad ICRC among corrupted packets")
  end)
end)
