-- fuzz_shm_wire_spec.lua - libFuzzer against the soft device's shared-memory
-- wire (spec/support/fuzz_shm_wire.c): a hostile peer writing into what a
-- peer can write (either QP's shared block, b's MR table, b's context
-- header) between sends, WRITEs, READs and turns of two device contexts.
-- Seeds of clean traffic and of each kind of scribble: the clean one
-- completes, each scribble fails the work it meets with a status that says
-- so (never a crash, a hang or success on garbage); then mutations of them.
-- A crash, a sanitizer report, a write around the registered regions or a
-- completion status outside the API fails it.
--
-- Built by `make fuzz` (clang), so it runs under the normal build's pass
-- only, and skips where clang or its libFuzzer runtime is missing.
-- TBRT_FUZZ_RUNS: another count of inputs.
local bit = require("bit")
local H = require("helpers")
local F = require("fuzz")

local RUNS = tonumber(os.getenv("TBRT_FUZZ_RUNS")) or 5000

-- ops (spec/support/fuzz_shm_wire.c): the low 3 bits, then for sends the
-- length in 64-byte units in the high 5
local function send_a(units) return string.char(1 + 8 * units) end
local function send_b(units) return string.char(2 + 8 * units) end
local function write_a(units) return string.char(3 + 8 * units) end
local function read_a(units) return string.char(4 + 8 * units) end
local TURN = string.char(7)
local A_BLOCK, B_BLOCK, B_MRS, B_HEADER = 0, 1, 2, 3
local function scribble(where, off, bytes)
  return string.char(0, where, bit.band(off, 255), bit.rshift(off, 8), #bytes) .. bytes
end

local seeds = {
  clean = send_a(1) .. TURN .. send_b(1) .. TURN .. write_a(1) .. TURN .. read_a(1) .. TURN,
  -- WRITEs of 8 bytes go inline: run at post (shm_direct.c) into an empty queue
  direct = write_a(0) .. write_a(0) .. TURN .. write_a(0) .. TURN,
  direct_mrs = write_a(0) .. TURN .. scribble(B_MRS, 0, string.rep("\7", 255)) .. write_a(0) .. TURN,
  block = scribble(B_BLOCK, 0, string.rep("\255", 64)) .. send_a(1) .. TURN .. TURN,
  mrs = scribble(B_MRS, 0, string.rep("\7", 255)) .. write_a(1) .. TURN .. read_a(1) .. TURN,
  header = scribble(B_HEADER, 0, string.rep("\0", 16)) .. send_a(1) .. TURN .. send_b(1) .. TURN,
  results = send_a(1) .. scribble(A_BLOCK, 4096, string.rep("\1", 128)) .. TURN .. send_b(1) ..
    TURN .. TURN,
  indices = send_a(1) .. send_a(1) .. send_a(1) ..
    scribble(B_BLOCK, 200, string.rep("\0\1\0\0\0\0\0\0", 8)) .. TURN .. TURN,
}

-- One seed replayed with FUZZ_VERBOSE: the completions each QP saw, as
-- { qp = "a"|"b", wr_id =, status =, opcode = }.
local function replay(seed)
  local dir = F.seeds_dir { seed }
  local r = F.run("fuzz-shm-wire", { "-runs=0", dir }, { timeout = 120, env = { FUZZ_VERBOSE = "1" } })
  H.rmtree(dir)
  assert.equal(0, r.code, H.describe(r))
  local wcs = {}
  for qp, id, st, op in r.stderr:gmatch("QP (%a): wc wr_id (%d+) status (%d+) vendor_err %S+ opcode (%d+)") do
    wcs[#wcs + 1] = { qp = qp, wr_id = tonumber(id), status = tonumber(st), opcode = tonumber(op) }
  end
  return wcs, r
end

-- The completion of a's request wr_id (100 + its opcode, the harness's).
local function of_request(wcs, qp, wr_id)
  for _, w in ipairs(wcs) do if w.qp == qp and w.wr_id == wr_id then return w end end
end

local describe_once = os.getenv("TBRT_ASAN") and function() end or describe

describe_once("the shm wire against a hostile peer's writes into shared memory (libFuzzer)", function()
  local built, why

  setup(function() built, why = F.build() end)

  it("completes clean traffic both ways, and fails what meets a scribble with a status", function()
    if not built then pending(why) return end
    -- IBV_WR_SEND 2, RDMA_WRITE 0, RDMA_READ 4: wr_id 100 + opcode
    local wcs, r = replay(seeds.clean)
    for _, w in ipairs(wcs) do assert.equal(0, w.status, H.describe(r)) end
    for _, want in ipairs { { "a", 102 }, { "b", 102 }, { "a", 100 }, { "a", 104 } } do
      assert.is_not_nil(of_request(wcs, want[1], want[2]), want[1] .. " " .. want[2] .. ": " .. r.stderr)
    end
    -- inline WRITEs run at post: all three complete, clean
    wcs, r = replay(seeds.direct)
    local writes = 0
    for _, w in ipairs(wcs) do
      assert.equal(0, w.status, H.describe(r))
      if w.qp == "a" and w.wr_id == 100 then writes = writes + 1 end
    end
    assert.equal(3, writes, r.stderr)
    -- and one after b's MR table was garbled fails (REM_ACCESS_ERR), the one before not
    wcs, r = replay(seeds.direct_mrs)
    local st = {}
    for _, w in ipairs(wcs) do if w.qp == "a" and w.wr_id == 100 then st[#st + 1] = w.status end end
    assert.same({ 0, 10 }, st, r.stderr)
    -- b's block, b's MR table, b's header: a's request fails (REM_ACCESS_ERR
    -- for a key the garbled table cannot resolve), its flushed receives say so
    for name, status in pairs { block = false, mrs = 10, header = false } do
      wcs, r = replay(seeds[name])
      local w = of_request(wcs, "a", name == "mrs" and 100 or 102)
      assert.is_not_nil(w, name .. ": " .. r.stderr)
      assert.are_not.equal(0, w.status, name .. ": " .. r.stderr)
      if status then assert.equal(status, w.status, name .. ": " .. r.stderr) end
    end
  end)

  it("takes " .. RUNS .. " inputs from the seeds without a fault", function()
    if not built then pending(why) return end
    local list = {}
    for _, s in pairs(seeds) do list[#list + 1] = s end
    local r = F.fuzz("fuzz-shm-wire", list, RUNS)
    assert.equal(0, r.code, H.describe(r))
    assert.matches("Done " .. RUNS .. " runs", r.stderr)
  end)
end)
