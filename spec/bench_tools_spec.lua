-- bench_tools_spec.lua - the programs `make bench` runs for views and scale
-- (build/tbrt-stream, tbrt-scale, tbrt-memcpy, tbrt-line; scripts/bench/stream.lua and
-- scale.lua; the ring's anchor scripts/bench/mpi_ring.c under mpirun) work on small runs and print the figures bench.lua parses: a
-- benchmark that rots silently would leave the table blank.
local H = require("helpers")

local function run(file, args, timeout)
  local r = H.run(file, args, { timeout = timeout or 60 })
  assert.equal(0, r.code, H.describe(r))
  return r.stdout
end

describe("the bench's programs", function()
  it("stream through copies and views, in C and in Lua, every byte checked", function()
    for _, mode in ipairs({ "copy", "view" }) do
      assert.matches("^stream_" .. mode .. "_65536 [%d.]+ GB/s\n$",
        run(H.build .. "/tbrt-stream", { "soft", "linux-rc", mode, "65536", "50" }))
      assert.matches("^stream_" .. mode .. "_100000 [%d.]+ GB/s\n$",
        run(H.build .. "/tbrt-stream", { "tcp", "-", mode, "100000", "20" }))
      assert.matches("^stream_" .. mode .. "_70000 [%d.]+ GB/s\n$",
        run(H.tbrt, { H.root .. "/scripts/bench/stream.lua", "soft", "apple-uc", mode, "70000", "30" }))
    end
  end)

  it("check a message against the pattern piece by piece: every wrong byte is found where it is",
    function()
      -- the check both stream twins use (bench_pattern.c, as a library for the Lua one)
      local ffi = require("ffi")
      for _, decl in ipairs({ "void bench_fill(uint8_t *b, size_t n);",
        "void bench_stamp(uint8_t *b, size_t n, uint64_t idx);",
        "long bench_pattern_bad(const uint8_t *p, size_t off, size_t n, uint64_t idx);",
        "bool bench_pattern_ok(const uint8_t *p, size_t off, size_t n, uint64_t idx);" }) do
        pcall(ffi.cdef, decl)     -- (declared once per process)
      end
      local P = ffi.load(H.build .. "/libtbrt-bench-pattern.so")
      local n, idx = 70001, 12345
      local m = ffi.new("uint8_t[?]", n)
      P.bench_fill(m, n)
      P.bench_stamp(m, n, idx)
      local function bad(off, len, i)
        local at = tonumber(P.bench_pattern_bad(m + off, off, len, i or idx))
        assert.equal(at == -1, P.bench_pattern_ok(m + off, off, len, i or idx))
        return at
      end
      -- whole, and in pieces that start and end off the 8-byte words, as views split a message
      assert.equal(-1, bad(0, n))
      for _, piece in ipairs({ { 0, 3 }, { 3, 9 }, { 5, 65531 }, { 65536, n - 65536 }, { 12, 0 } }) do
        assert.equal(-1, bad(piece[1], piece[2]), "piece at " .. piece[1])
      end
      -- another message's index, in the head or cut across a piece
      assert.equal(0, bad(0, n, idx + 1))
      assert.equal(3, bad(3, 9, idx + 2 ^ 24))
      -- one flipped byte anywhere: in the index, a word's middle, the tail past the last word
      for _, at in ipairs({ 7, 8, 4099, 65535, n - 1 }) do
        m[at] = bit.bxor(m[at], 0x40)
        assert.equal(at, bad(0, n), "byte " .. at)
        local from = at >= 5 and at - 5 or 0
        assert.equal(at, bad(from, n - from), "byte " .. at .. " from " .. from)
        m[at] = bit.bxor(m[at], 0x40)
      end
      -- a piece checked as if it lay 8 bytes further on (placed at a wrong offset)
      local shifted = tonumber(P.bench_pattern_bad(m + 56, 64, 128, idx))
      assert.is_true(shifted >= 64 and shifted < 72, "a piece 8 bytes off: " .. shifted)
      assert.equal(-1, bad(0, n))
    end)

  it("tbrt-bench streams from and into registered memory (bw-reg, lat-reg) and fresh lines (-fresh), every byte checked",
    function()
      -- sizes on both sides of the direct threshold (32 KiB) and of a shared READ (64 KiB)
      for _, n in ipairs({ "1000", "40000", "70000", "1048583" }) do
        assert.matches("^bw_" .. n .. " [%d.]+ GB/s\n$",
          run(H.build .. "/tbrt-bench", { "soft", "linux-rc", "bw-reg", n, "40" }))
      end
      assert.matches("^lat_70000 [%d.]+ us\nlat_mean_70000 [%d.]+ us\n$",
        run(H.build .. "/tbrt-bench", { "soft", "linux-rc", "lat-reg", "70000", "40" }))
      -- every line written before each send: the same bytes arrive, checked
      for _, mode in ipairs({ "bw-fresh", "bw-reg-fresh" }) do
        assert.matches("^bw_70000 [%d.]+ GB/s\n$",
          run(H.build .. "/tbrt-bench", { "soft", "linux-rc", mode, "70000", "40" }))
      end
    end)

  it("tbrt-bench splits a round trip where its stamps fall (split), on soft and tcp", function()
    for _, dev in ipairs({ { "soft", "linux-rc" }, { "tcp", "-" } }) do
      local out = run(H.build .. "/tbrt-bench", { dev[1], dev[2], "split", "64", "400" })
      local f = {}
      for name, v in out:gmatch("split_(%a+)_64 ([%d.]+) us\n") do f[name] = tonumber(v) end
      for _, k in ipairs({ "send", "there", "back", "rtt" }) do
        assert.is_true(f[k] and f[k] > 0, dev[1] .. ": no " .. k .. " in " .. out)
      end
      -- each round trip is there + back exactly; their medians come close
      assert.is_true(f.there < f.rtt and f.back < f.rtt, out)
      assert.is_true(f.there + f.back > 0.5 * f.rtt and f.there + f.back < 1.5 * f.rtt, out)
    end
    -- a message too short for its index and stamp is refused, saying how to call it
    local r = H.run(H.build .. "/tbrt-bench", { "soft", "linux-rc", "split", "8", "10" },
      { timeout = 30 })
    assert.equal(2, r.code, H.describe(r))
    assert.matches("split SIZE >= 16", r.stderr, 1, true)
  end)

  it("measure many links and a ring, in C and in Lua", function()
    local out = run(H.build .. "/tbrt-scale", { "soft", "linux-rc", "links", "3", "65536", "30" })
    for _, k in ipairs({ "links=3", "setup_ms=", "rss_kib=", "bw=", "lat_us=", "lat_max_us=" }) do
      assert.matches(k, out, 1, true)
    end
    assert.matches("^procs=4 bw=[%d.]+ lat_us=[%d.]+\n$",
      run(H.build .. "/tbrt-scale", { "soft", "linux-rc", "ring", "4", "65536", "20" }))
    local json = require("cjson").decode(run(H.tbrt, { H.root .. "/scripts/bench/scale.lua",
      "--links", "3", "--iters", "30" }))
    assert.equal(3, json.links)
    assert.is_true(json.bw > 0 and json.lat_us > 0 and json.rss_kib > 0 and json.setup_ms > 0)
  end)

  it("measure the ring's anchor through Open MPI (mpi-ring), every message checked", function()
    -- built by the Makefile's rule (mpicc) into a directory of its own, run
    -- as bench runs it
    if H.run("/bin/sh", { "-c", "command -v mpicc && command -v mpirun" }).code ~= 0 then
      return pending("mpicc or mpirun is not installed (openmpi-bin)")
    end
    local dir = H.tmpdir()
    local exe = dir .. "/mpi-ring"
    local b = H.run("make", { "-s", "-C", H.root, "BUILD=" .. dir, exe }, { timeout = 120 })
    if b.code ~= 0 and (b.stderr .. b.stdout):match("mpi%.h") then
      H.rmtree(dir)
      return pending("mpicc has no mpi.h (libopenmpi-dev)")
    end
    assert.equal(0, b.code, H.describe(b))
    local argv = { "--oversubscribe", "--bind-to", "none", "-np", "4", "--mca", "btl", "self,vader" }
    if H.run("id", { "-u" }).stdout:match("^0") then table.insert(argv, 1, "--allow-run-as-root") end
    local function ring(...)
      local a = { unpack(argv) }
      a[#a + 1] = exe
      for _, v in ipairs({ ... }) do a[#a + 1] = v end
      return H.run("mpirun", a, { timeout = 120 })
    end
    local r = ring("65536", "40")
    assert.equal(0, r.code, H.describe(r))
    assert.matches("^procs=4 bw=[%d.]+ lat_us=[%d.]+\n$", r.stdout)
    -- a size it cannot stamp an index into is refused by name
    r = ring("4", "10")
    assert.are_not.equal(0, r.code)
    assert.matches("SIZE must be 8 B", r.stderr .. r.stdout, 1, true)
    H.rmtree(dir)
  end)

  it("measure the memcpy ceilings, glibc's cliff beside bulk_copy, and rings across the CPUs",
    function()
    local out = run(H.build .. "/tbrt-memcpy", {})
    local names = {}
    for name in out:gmatch("([%w_]+) [%d.]+ GB/s\n") do names[#names + 1] = name end
    assert.same({ "memcpy_4m_hot", "memcpy_128k_ring16", "memcpy_64k_skew16", "memcpy_64k_aligned",
      "bulk_copy_64k_skew16", "xring_4m", "xring_dma_4m" }, names)
  end)

  it("measure a cache line's one-way between two processes (tbrt-line), the latency floor", function()
    -- (no upper bound: two spinners on a loaded machine wait for the CPU,
    -- a millisecond a one-way and more)
    local v = tonumber(run(H.build .. "/tbrt-line", { "1000" }):match("^line_oneway ([%d.]+) us\n$"))
    assert.is_true(v and v > 0 and v < math.huge, tostring(v))
    local r = H.run(H.build .. "/tbrt-line", { "10" })
    assert.equal(2, r.code)
    assert.matches("usage: tbrt%-line ITERS", r.stderr)
  end)

  it("refuse bad arguments with the usage", function()
    local r = H.run(H.build .. "/tbrt-scale", { "soft", "linux-rc", "ring", "3", "65536", "10" })
    assert.equal(2, r.code)
    assert.matches("ring needs an even number of processes", r.stderr)
    r = H.run(H.build .. "/tbrt-stream", { "soft" })
    assert.equal(2, r.code)
    assert.matches("usage: tbrt%-stream", r.stderr)
  end)

  it("take figures in rounds: medians, ratios paired within a round, runs with no figure left out",
    function()
      local r = {}
      local lines = {}
      local rounds = dofile(H.root .. "/scripts/bench/rounds.lua")(r, 4,
        function(line) lines[#lines + 1] = line end)
      -- the machine halves its speed after two rounds: the paired ratio sees
      -- 2 every round, the ratio of the medians would not
      local round = 0
      local fast = { 10, 10, 5, 5 }
      local fails = 0
      rounds.group({
        { "ours", "ours", function() round = round + 1 return fast[round] * 2 end },
        { "theirs", "theirs", function() return fast[round] end },
        { "flaky", "flaky", function()
          fails = fails + 1
          if fails % 2 == 0 then return nil, "no figure" end
          return fails
        end },
        { "never", "never", function() return nil, "not installed" end },
      })
      assert.equal(15, r.ours)                  -- median of 20 20 10 10
      assert.equal(7.5, r.theirs)
      assert.equal(2, rounds.paired("ours", "theirs"))
      assert.equal(2, r.flaky)                  -- rounds 1 and 3 gave 1 and 3
      assert.is_nil(r.never)
      assert.is_nil(rounds.paired("ours", "never"))
      assert.equal(0.5, rounds.paired("theirs", "ours"))
      -- a row keeps each round's ratio (the table shows their range): only
      -- rounds with both figures, in round order
      local row = rounds.row("ours / flaky", "ours", "flaky", "flaky", ">=", 1)
      assert.same({ 20, 10 / 3 }, row.ratios)   -- rounds 1 (20 / 1) and 3 (10 / 3)
      assert.near((20 + 10 / 3) / 2, row.ratio, 1e-12)
      assert.same({ "ours / flaky", 15, 2, "flaky", ">=", 1 }, { unpack(row, 1, 6) })
      -- the verdict: the median's, and in how many rounds the target held
      assert.equal(">= 1 (2 of 2 rounds)", rounds.verdict(row):match("^meets (.*)$"))
      -- (ratios 20 and 10 / 3, median 35 / 3: met by the median and one round, or one round only)
      assert.equal("meets >= 5 (1 of 2 rounds)",
        rounds.verdict(rounds.row("x", "ours", "flaky", "flaky", ">=", 5)))
      assert.equal("misses >= 15 (1 of 2 rounds)",
        rounds.verdict(rounds.row("x", "ours", "flaky", "flaky", ">=", 15)))
      assert.equal("misses <= 1 (0 of 2 rounds)",
        rounds.verdict(rounds.row("x", "ours", "flaky", "flaky", "<=", 1)))
      assert.equal("(information)", rounds.verdict(rounds.row("x", "ours", "flaky", "flaky")))
      assert.equal("", rounds.verdict(rounds.row("x", "ours", "never", "never", ">=", 1)))
      -- a row of two figures and no rounds (the matrix's): the median alone
      assert.equal("meets <= 0.5", rounds.verdict({ "m", 0.2, 1, "(seconds)", "<=", 0.5 }))
      assert.matches("# ours +15 %(4 runs%)", lines[1])
      assert.matches("# flaky +2 %(2 runs%)", lines[3])
      assert.matches("# never +NA: not installed", lines[4])
    end)

  it("take an anchor twice a round, first and last, its figure the mean of the two", function()
    local r, order = {}, {}
    local rounds = dofile(H.root .. "/scripts/bench/rounds.lua")(r, 2, function() end)
    -- the machine slows down through each round: 10, 9, 8, ... a take
    local speed = 11
    local function take(name)
      return function()
        speed = speed - 1
        order[#order + 1] = name
        return speed
      end
    end
    rounds.group({
      { "ours", "ours", take("ours") },
      { "anchor", "anchor", take("anchor"), bracket = true },
      { "other", "other", take("other") },
    })
    -- each round: the anchor, then the others in order, then the anchor
    assert.same({ "anchor", "ours", "other", "anchor", "anchor", "ours", "other", "anchor" }, order)
    -- round 1: anchor (10 + 7) / 2, ours 9; round 2: anchor (6 + 3) / 2, ours 5
    assert.same({ 8.5, 4.5 }, rounds.vals.anchor)
    assert.same({ 9, 5 }, rounds.vals.ours)
    assert.same({ 9 / 8.5, 5 / 4.5 }, select(2, rounds.paired("ours", "anchor")))
    -- an anchor that gave no figure on either take gives none for its round
    local fails = 0
    rounds.group({
      { "flaky_anchor", "flaky", function()
        fails = fails + 1
        if fails == 2 then return nil, "gone" end
        return 1
      end, bracket = true },
    })
    assert.same({ false, 1 }, rounds.vals.flaky_anchor)
  end)
end)
