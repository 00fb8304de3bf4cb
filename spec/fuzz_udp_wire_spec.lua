-- fuzz_udp_wire_spec.lua - libFuzzer against the soft device's UDP wire
-- (spec/support/fuzz_udp_wire.c): datagrams from a hostile host, most of
-- them aimed at a live queue pair (RC, UC, UD) with a correct ICRC, some
-- with its keys and PSNs, after seeds of every request and response shape
-- (SEND whole and in two packets, with immediate, WRITE, READ, an atomic,
-- ACKs, NAKs, READ responses, UC and UD sends, sends into a shared receive
-- queue, garbage). A crash, an ASan or UBSan report, a write
-- around the registered regions or a completion status the API has not
-- fails it; the run is a fixed number of inputs from a fixed seed, so a
-- failure replays.
--
-- Built by `make fuzz` (clang: its own instrumented build in build-fuzz/),
-- so it runs under the normal build's pass only, and skips where clang or
-- its libFuzzer runtime is missing. TBRT_FUZZ_RUNS: another count of inputs.
local bit = require("bit")
local H = require("helpers")
local F = require("fuzz")

local RUNS = tonumber(os.getenv("TBRT_FUZZ_RUNS")) or 10000

local function be(v, n)
  local t = {}
  for i = n - 1, 0, -1 do t[#t + 1] = string.char(bit.band(bit.rshift(v, 8 * i), 255)) end
  return table.concat(t)
end

-- BTH: opcode, SE/M/pad/version 0, P_Key 0xffff, QPN (the harness puts the
-- target's in), AckReq, PSN (the harness makes it the next one: flag 0x20)
local function bth(op, ack) return string.char(op, 0) .. be(0xffff, 2) .. be(0, 4) ..
  string.char(ack and 0x80 or 0) .. be(0, 3) end
local function reth(off, len) return be(0, 5) .. be(off, 3) .. be(0, 4) .. be(len, 4) end
local function aeth(syndrome, msn) return string.char(syndrome) .. be(msn, 3) end
local function bytes(n) return string.rep("\x5a", n) end

-- one record: flags, length (2 bytes, little-endian), the packet
local function rec(flags, pkt)
  return string.char(flags, bit.band(#pkt, 255), bit.rshift(#pkt, 8)) .. pkt
end

-- record flags (spec/support/fuzz_udp_wire.c): the target (a, b RC; c UC; u
-- UD; e RC on a shared receive queue), then what the harness does to the
-- packet
local A, B, C, U, E = 0, 1, 2, 3, 4
local KEEP_QPN, KEEP_ICRC, TURN, KEYS, PSN = 8, 16, 32, 64, 128
local function deth(qkey, sqpn) return be(qkey, 4) .. "\0" .. be(sqpn, 3) end
local seeds = {
  -- to a: requests from "b"
  string.char(0) .. rec(PSN + TURN, bth(0x04, true) .. bytes(64)),                 -- SEND only
  string.char(0) .. rec(PSN, bth(0x00, false) .. bytes(1024)) ..                  -- SEND first
    rec(PSN + TURN, bth(0x02, true) .. bytes(100)),                                -- and last
  string.char(0) .. rec(PSN + TURN, bth(0x05, true) .. be(7, 4) .. bytes(32)),     -- with imm
  string.char(0) .. rec(PSN + KEYS + TURN, bth(0x0a, true) .. reth(2048, 64) .. bytes(64)),
  string.char(0) .. rec(PSN + KEYS + TURN, bth(0x0c, true) .. reth(4096, 256)),    -- READ
  string.char(0) .. rec(PSN + KEYS + TURN, bth(0x14, true) .. be(0, 5) .. be(2048 + 512, 3) ..
    be(0, 4) .. be(1, 8) .. be(0, 8)),                                             -- FETCH_ADD
  -- to b, with requests of its own in flight: responses from "a"
  string.char(1) .. rec(B + PSN + TURN, bth(0x11, false) .. aeth(0x1f, 1)),        -- ACK
  string.char(1) .. rec(B + PSN + TURN, bth(0x11, false) .. aeth(0x60, 0)),        -- NAK: PSN
  string.char(1) .. rec(B + PSN + TURN, bth(0x11, false) .. aeth(0x21, 0)),        -- RNR NAK
  string.char(4) .. rec(B + PSN + TURN, bth(0x10, false) .. aeth(0x1f, 1) .. bytes(200)),
  string.char(8) .. rec(B + PSN + TURN, bth(0x12, false) .. aeth(0x1f, 1) .. be(42, 8)),
  -- to c (UC), with d's own SEND in flight: a SEND, a WRITE in two packets
  string.char(32) .. rec(C + PSN + TURN, bth(0x24, false) .. bytes(48)),
  string.char(0) .. rec(C + PSN + KEYS, bth(0x26, false) .. reth(4096, 1100) .. bytes(1024)) ..
    rec(C + PSN + TURN, bth(0x28, false) .. bytes(76)),
  -- to u (UD): a SEND with its Q_Key, and with immediate
  string.char(0) .. rec(U + KEYS + TURN, bth(0x64, false) .. deth(0, 0x99) .. bytes(100)),
  string.char(0) .. rec(U + KEYS + TURN, bth(0x65, false) .. deth(0, 0x99) .. be(9, 4) ..
    bytes(20)),
  -- to e, its receives from the SRQ, with f's own SEND in flight
  string.char(128) .. rec(E + PSN + TURN, bth(0x04, true) .. bytes(64)),
  string.char(0) .. rec(E + PSN, bth(0x00, false) .. bytes(1024)) ..
    rec(E + PSN + TURN, bth(0x02, true) .. bytes(16)),
  string.char(255) .. rec(A + KEEP_QPN + KEEP_ICRC + TURN, bytes(40)),            -- garbage
}

local describe_once = os.getenv("TBRT_ASAN") and function() end or describe

describe_once("the UDP wire against a hostile host's datagrams (libFuzzer)", function()
  local built, why

  setup(function() built, why = F.build() end)

  it("reaches every queue pair with the seeds: requests taken and acknowledged, NAKs heard, UC, UD and SRQ sends taken", function()
    if not built then pending(why) return end
    local dir = F.seeds_dir(seeds)
    local r = F.run("fuzz-udp-wire", { "-runs=0", dir }, { timeout = 120, env = { FUZZ_VERBOSE = "1" } })
    H.rmtree(dir)
    assert.equal(0, r.code, H.describe(r))
    -- the counters after the last seed (FUZZ_VERBOSE: each QP's after each input)
    local last = {}
    for qp, line in r.stderr:gmatch("QP (%a):([^\n]*)") do last[qp] = line end
    local function count(qp, name) return tonumber((last[qp] or ""):match(" " .. name .. "=(%d+)")) or 0 end
    assert.is_true(count("a", "pkts_recv") >= #seeds, "QP a: " .. tostring(last.a))
    assert.is_true(count("a", "acks_sent") > 0, "QP a: " .. tostring(last.a))
    assert.is_true(count("b", "acks_recv") > 0, "QP b: " .. tostring(last.b))
    assert.is_true(count("b", "naks_recv") > 0, "QP b: " .. tostring(last.b))
    assert.is_true(count("b", "rnr_naks_recv") > 0, "QP b: " .. tostring(last.b))
    assert.is_true(count("c", "pkts_recv") >= 4, "QP c: " .. tostring(last.c))
    assert.is_true(count("u", "pkts_recv") >= 2, "QP u: " .. tostring(last.u))
    assert.is_true(count("e", "pkts_recv") >= 5, "QP e: " .. tostring(last.e))
    assert.is_true(count("e", "acks_sent") > 0, "QP e: " .. tostring(last.e))
  end)

  it("takes " .. RUNS .. " inputs from the seeds of every packet shape without a fault", function()
    if not built then pending(why) return end
    local r = F.fuzz("fuzz-udp-wire", seeds, RUNS)
    assert.equal(0, r.code, H.describe(r))
    assert.matches("Done " .. RUNS .. " runs", r.stderr)
  end)
end)
