-- fuzz_mlx5_device_spec.lua - libFuzzer against the mlx5 driver with a lying
-- device under it (spec/support/fuzz_mlx5_device.c): two "mlx5:model0"
-- devices brought up, given a PD, CQ, RC QP and MR each, connected, made to
-- move a SEND and a WRITE, and closed, while the input falsifies what the
-- device answers: any firmware command's output (inline bytes, delivery
-- status, output mailboxes), any read of a BAR0 register and any CQE. The clean run
-- completes; each kind of lie fails the step it meets with a reason that
-- names it (never a crash, a hang, a leak, a silent failure or a completion
-- status outside the API); then mutations of them.
--
-- Built by `make fuzz` (clang), so it runs under the normal build's pass
-- only, and skips where clang or its libFuzzer runtime is missing.
-- TBRT_FUZZ_MLX5_RUNS: another count of inputs.
local H = require("helpers")
local F = require("fuzz")

local RUNS = tonumber(os.getenv("TBRT_FUZZ_MLX5_RUNS")) or 600

-- records (spec/support/fuzz_mlx5_device.c)
local function answer(seq, where, off, bytes)
  return string.char(0, seq, where, off, #bytes) .. bytes
end
local INLINE, DELIVERY = 0, 1
local function mailbox(block) return 2 + 3 * block end
local function register_read(index, xor4)
  return string.char(1, index % 256, math.floor(index / 256)) .. xor4
end
-- CQE n of device dev (0 a, 1 b): byte off XORed with bits
local function cqe(dev, n, off, bits) return string.char(2, dev, n, off, bits) end

-- One input replayed with FUZZ_VERBOSE: the run's result, the commands it
-- rang in order (names, from 0), the outcome line of each step, by
-- "<side>: <step>" ("a: open", "b: cq", ...), and the input's lines.
local function replay(input)
  local dir = F.seeds_dir { input }
  local r = F.run("fuzz-mlx5-device", { "-runs=0", dir }, { timeout = 120, env = { FUZZ_VERBOSE = "1" } })
  H.rmtree(dir)
  assert.equal(0, r.code, H.describe(r))
  local cmds, steps, text = {}, {}, {}
  -- libFuzzer runs an empty input before a corpus: this input's lines only
  local mine = false
  for line in r.stderr:gmatch("[^\n]+") do
    local len = line:match("^input: (%d+) bytes")
    if len then mine = not next(steps) and tonumber(len) == #input end
    local seq, name = line:match("^  command (%d+): ([%u%d_]+)$")
    if mine and seq then cmds[tonumber(seq)] = name end
    local step, what = line:match("^  (%a: [%a ]+): (.*)$")
    if mine and step then steps[step] = steps[step] or what end
    if mine then text[#text + 1] = line end
  end
  return r, cmds, steps, table.concat(text, "\n") .. "\n"
end

-- The number of the first command named name.
local function first(cmds, name)
  for i = 0, #cmds do if cmds[i] == name then return i end end
  error("no " .. name .. " command in the clean run")
end

local describe_once = os.getenv("TBRT_ASAN") and function() end or describe

describe_once("the mlx5 driver against a lying device (libFuzzer)", function()
  local built, why, cmds

  setup(function()
    built, why = F.build()
    if built then
      local r
      r, cmds = replay("")
      assert.matches("5 of 5 completions", r.stderr, nil, true)
    end
  end)

  it("brings both devices up and moves a SEND and a WRITE when nothing is falsified", function()
    if not built then pending(why) return end
    local _, c, steps, text = replay("")
    assert.equal("ENABLE_HCA", c[0])
    for _, s in ipairs { "a: open", "b: open", "a: cq", "b: qp", "a: RTS", "b: RTS", "a: post send",
      "a: post write", "b: post recv", "a: destroy qp", "b: free pd" } do
      assert.equal("ok", steps[s], s .. ": " .. text)
    end
    assert.matches("b: wc wr_id 1 status 0 opcode 128 len 1000", text, nil, true)
    assert.matches("a: wc wr_id 3 status 0 opcode 1 len 3000", text, nil, true)
    assert.matches("a: wc wr_id 4 status 0 opcode 128 len 1000", text, nil, true)
    assert.matches("5 of 5 completions", text, nil, true)
  end)

  it("fails the open naming a QUERY_PAGES answer beyond what the firmware can be owed", function()
    if not built then pending(why) return end
    -- num_pages is the output's last inline word (bytes 12..15)
    local _, _, steps = replay(answer(first(cmds, "QUERY_PAGES"), INLINE, 12, "\127"))
    assert.matches("QUERY_PAGES %(boot%): the firmware asks for %d+ pages", steps["a: open"])
    assert.matches("more than it can be owed", steps["a: open"])
  end)

  it("says why a command failed: its status, or its delivery status", function()
    if not built then pending(why) return end
    -- a CREATE_CQ the device says failed (BAD_RES_ERR) after making it: the
    -- reason is the CQ's, and the EQ the device now holds by it stays with it
    local _, _, steps = replay(answer(first(cmds, "CREATE_CQ"), INLINE, 0, "\5"))
    assert.matches("create_cq: mlx5 CREATE_CQ: bad / unallocated resource", steps["a: cq"], nil, true)
    assert.matches("its EQ 0x%x+ could not be destroyed after .*stays with the device", steps["a: cq"])
    _, _, steps = replay(answer(first(cmds, "CREATE_QP"), DELIVERY, 0, "\14"))
    assert.matches("create_qp: mlx5 CREATE_QP: delivery status command input length error (0x7)",
      steps["a: qp"], nil, true)
  end)

  it("fails the open naming a register that reads wrong", function()
    if not built then pending(why) return end
    -- the driver's first read: the command interface revision
    local _, _, steps = replay(register_read(0, "\255\255\255\255"))
    assert.matches("command interface revision %d+, need 5", steps["a: open"])
    -- garbage in the capability pages' mailboxes: an answer, not a crash
    _, _, steps = replay(answer(first(cmds, "QUERY_HCA_CAP"), mailbox(0), 0, string.rep("\255", 255)))
    assert.is_string(steps["a: open"])
  end)

  it("pays a large page debt within a command's time, and stops using a queue the device went silent on", function()
    if not built then pending(why) return end
    -- QUERY_PAGES says 524,272 pages (2 GiB, within the bound) instead of 6:
    -- one MANAGE_PAGES of them answered within the harness's 0.5 s command
    -- timeout (the model once looked each page up among all 2,048 chunks:
    -- seconds), and all taken back at close
    local _, _, steps, text = replay(answer(first(cmds, "QUERY_PAGES"), INLINE, 12, "\0\7\255\246"))
    assert.equal("ok", steps["a: open"], text)
    assert.matches("5 of 5 completions", text, nil, true)
    -- the command queue's stride read wrong (128 bytes, not 64): the command
    -- in the last slot is never seen; its wait ends, and the queue, whose
    -- entry the device may still answer into, takes no more
    _, _, steps = replay(register_read(5, "\1\0\0\0"))
    assert.matches("mlx5 MANAGE_PAGES: no completion within 500 ms; the command queue takes no " ..
      "more commands", steps["a: open"], nil, true)
  end)

  it("turns a CQE that lies into an error completion, never a success on garbage", function()
    if not built then pending(why) return end
    -- b's first CQE (its receive) says 2^31 more bytes than came (byte_cnt, bytes 44..47)
    local _, _, _, text = replay(cqe(1, 0, 44, 128))
    assert.matches("b: wc wr_id 1 status 1 ", text, nil, true)        -- IBV_WC_LOC_LEN_ERR
    -- a's first CQE (its SEND's) names a WQE never posted (wqe_counter, bytes 60..61)
    _, _, _, text = replay(cqe(0, 0, 60, 255))
    assert.not_matches("a: wc wr_id 2 status 0", text, nil, true)
    assert.matches("a: wc wr_id %d+ status [1-9]", text)
    -- a CQE whose owner bit lies is not there yet: a's completions stop, b's come
    _, _, _, text = replay(cqe(0, 0, 63, 1))
    assert.not_matches("a: wc wr_id", text, nil, true)
    assert.matches("b: wc wr_id 1 status 0", text, nil, true)
  end)

  it("takes " .. RUNS .. " inputs from the seeds without a fault", function()
    if not built then pending(why) return end
    local seeds = { "" }
    local n = #cmds + 1          -- numbered from 0
    -- each command's answer garbled, then its delivery status, then (the
    -- ones with output mailboxes) its first two blocks; the first registers
    for seq = 0, n - 1 do
      seeds[#seeds + 1] = answer(seq, INLINE, 0, string.rep("\255", 16))
      seeds[#seeds + 1] = answer(seq, DELIVERY, 0, "\14")
    end
    for _, name in ipairs { "QUERY_HCA_CAP", "QUERY_NIC_VPORT_CONTEXT", "QUERY_MKEY", "QUERY_PAGES" } do
      for block = 0, 1 do
        seeds[#seeds + 1] = answer(first(cmds, name), mailbox(block), 0, string.rep("\255", 255))
      end
    end
    for index = 0, 24 do seeds[#seeds + 1] = register_read(index, "\255\255\255\255") end
    -- every field of the first CQEs of each side
    for dev = 0, 1 do
      for n = 0, 2 do
        for off = 0, 63, 4 do seeds[#seeds + 1] = cqe(dev, n, off + 3, 255) end
      end
    end
    local r = F.fuzz("fuzz-mlx5-device", seeds, RUNS)
    assert.equal(0, r.code, H.describe(r))
    -- (the seeds run first, each once, however many there are)
    local done = tonumber(r.stderr:match("Done (%d+) runs"))
    assert.is_true(done and done >= RUNS and done >= #seeds, r.stderr:sub(-300))
  end)
end)
