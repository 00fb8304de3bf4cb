-- matrix_file_spec.lua - the parts of `tbrt matrix` that need no hosts: the
-- matrix file's checks, the cells (product, filter, --only), the patterns'
-- rounds, the coordinator's frames against hostile input, the result lines
-- made from both shapes of perf rows, diff's noise rule, and --dry-run.
local uv = require("luv")
local task = require("tbrt.task")
local sock = require("tbrt.sock")
local H = require("helpers")
local L = require("links")
local file = require("tbrt.matrix.file")
local cells = require("tbrt.matrix.cells")
local patterns = require("tbrt.matrix.patterns")
local msg = require("tbrt.matrix.msg")
local results = require("tbrt.matrix.results")
local diff = require("tbrt.matrix.diff")
local agent = require("tbrt.matrix.agent")

local function load(text) return file.load_text(text, "t.lua") end

local BASE = [[return { hosts = { ["local"] = 2 }, patterns = { "pairwise" }, %s }]]

describe("matrix file", function()
  it("loads a full description and normalizes it", function()
    local spec = assert(load([[return {
      name = "m", hosts = { netns = { count = 4 } },
      patterns = { "pairwise", { "ring", order = "random", seed = 3 }, "bisection",
                   { "one_to_all", root = 1 }, { name = "mine", scenario = function(ctx) end } },
      axes = { device = { "tcp", "soft" }, size = { 64, "4K", "1M" }, faults = { drop = { 0, 0.01 } },
               repetitions = 2, personality = "linux-rc" },
      link = { timeout = 9 }, measure = { lat_iters = 50 }, timeout = 12, liveness = 4 }]]))
    assert.equal("netns", spec.hosts.kind)
    assert.equal(4, spec.hosts.count)
    assert.same({ 64, 4096, 1048576 }, spec.sizes)
    assert.same({ "pairwise", "ring_random", "bisection", "one_to_all", "mine" },
      { spec.patterns[1].label, spec.patterns[2].label, spec.patterns[3].label, spec.patterns[4].label,
        spec.patterns[5].label })
    assert.same({ { name = "device", values = { "tcp", "soft" } }, { name = "personality", values = { "linux-rc" } } },
      spec.axes)
    assert.same({ { name = "drop", values = { 0, 0.01 } } }, spec.faults)
    assert.equal(2, spec.reps)
    assert.equal(50, spec.measure.lat_iters)
    assert.equal(12, spec.timeout)
    assert.equal(4, spec.liveness)
  end)

  it("refuses unknown keys, naming the place and what is allowed", function()
    local cases = {
      { "colour = 1", "matrix: unknown key colour %(allowed: .*hosts.*patterns" },
      { "measure = { latency = 5 }", "measure: unknown key latency %(allowed: .*lat_iters" },
      { "axes = { size = { 0 } }", "axes%.size%[1%]: expected a byte count" },
      { "axes = { size = { \"4X\" } }", "axes%.size%[1%]: .*'4X'" },
      { "axes = { repetitions = 0 }", "axes%.repetitions: expected an integer 1%.%.1000" },
      { "axes = { faults = { 0.1 } }", "axes%.faults: expected a table { drop" },
      { "axes = { device = {} }", "axes%.device: expected a non%-empty list" },
      { "axes = { pattern = { \"x\" } }", "axes%.pattern: is not an axis" },
      { "timeout = -1", "matrix%.timeout: expected a number of seconds > 0" },
    }
    for _, c in ipairs(cases) do
      local spec, err = load(string.format(BASE, c[1]))
      assert.is_nil(spec, c[1])
      assert.matches(c[2], err, 1, false)
      assert.matches("^matrix file t%.lua: ", err)
    end
    local _, err = load([[return { hosts = { ssh = { "a", tbrt = 1 } }, patterns = { "ring" } }]])
    assert.matches("hosts%.ssh%.tbrt: expected a string", err)
    _, err = load([[return { hosts = { netns = 2, ["local"] = 2 }, patterns = { "ring" } }]])
    assert.matches("names two launchers", err)
    _, err = load([[return { hosts = { slurm = 2 }, patterns = { "ring" } }]])
    assert.matches("unknown launcher slurm %(one of: netns, local, ssh, mpirun, srun%)", err)
    _, err = load([[return { hosts = { ssh = { "-oProxyCommand=x" } }, patterns = { "ring" } }]])
    assert.matches("is not a %[user@%]host%[:port%]", err)
    _, err = load([[return { hosts = { netns = 2 }, patterns = { "star" } }]])
    assert.matches("patterns%[1%]: unknown pattern star", err)
    _, err = load([[return { hosts = { netns = 2 }, patterns = { { "ring", order = "zigzag" } } }]])
    assert.matches("patterns%[1%]%.order: expected ordered or random", err)
    _, err = load([[return 42]])
    assert.matches("must return a table", err)
    _, err = load([[return { hosts = ]])
    assert.matches("^matrix file: ", err)
  end)

  it("passes link options through unchecked and names the ones this tbrt does not know", function()
    local spec = assert(load(string.format(BASE, "axes = { wirez = { \"udp\" }, device = { \"tcp\" } }")))
    assert.same({ "wirez" }, file.unknown_link_options(spec))
  end)
end)

describe("matrix cells", function()
  local spec = assert(load([[return { hosts = { ["local"] = 2 }, patterns = { "pairwise", "ring" },
    axes = { device = { "tcp", "soft" }, size = { 64, 4096 }, faults = { drop = { 0, 0.01 } }, repetitions = 2 },
    link = { personality = "linux-rc" },
    filter = function(c) return not (c.device == "tcp" and c.faults.drop > 0) end,
    timeout = function(c) return c.size > 1000 and 20 or 10 end }]]))

  it("is the product of the axes less the filter, with stable keys", function()
    local list = assert(cells.expand(spec))
    -- 2 reps x 2 patterns x (tcp: 1 drop level, soft: 2) x 2 sizes
    assert.equal(2 * 2 * 3 * 2, #list)
    assert.equal("pattern=pairwise device=tcp drop=0 size=64 rep=1", list[1].key)
    assert.equal("pattern=ring device=soft drop=0.01 size=4096 rep=2", list[#list].key)
    assert.same({ device = "soft", personality = "linux-rc" }, list[#list].opts)
    assert.equal(20, list[#list].timeout)
    assert.equal(10, list[1].timeout)
    local seen = {}
    for _, c in ipairs(list) do
      assert.is_nil(seen[c.key], c.key)
      seen[c.key] = true
      assert.is_false(c.params.device == "tcp" and c.faults.drop > 0)
    end
  end)

  it("keeps what --only names", function()
    local only = assert(cells.parse_only("device=soft,size=4K|64,drop=0.01"))
    local list = assert(cells.expand(spec, only))
    assert.equal(2 * 2 * 2, #list)
    for _, c in ipairs(list) do
      assert.equal("soft", c.params.device)
      assert.equal(0.01, c.faults.drop)
    end
    local _, err = cells.expand(spec, assert(cells.parse_only("colour=red")))
    assert.matches("%-%-only: colour is not a parameter of this matrix %(its parameters: device, drop, pattern, rep, size%)", err)
    assert.is_nil((cells.parse_only("device")))
  end)
end)

describe("matrix patterns", function()
  it("pairwise: every pair exactly once, in rounds of disjoint pairs", function()
    for n = 2, 9 do
      local rounds = patterns.pairwise((function() local t = {} for i = 1, n do t[i] = i - 1 end return t end)())
      assert.equal(n % 2 == 0 and n - 1 or n, #rounds)
      local seen, count = {}, 0
      for _, round in ipairs(rounds) do
        local busy = {}
        for _, p in ipairs(round) do
          assert.is_true(p[1] < p[2])
          assert.is_nil(busy[p[1]]) ; assert.is_nil(busy[p[2]])
          busy[p[1]], busy[p[2]] = true, true
          local k = p[1] .. "-" .. p[2]
          assert.is_nil(seen[k], "pair " .. k .. " twice for n = " .. n)
          seen[k] = true
          count = count + 1
        end
      end
      assert.equal(n * (n - 1) / 2, count)
    end
  end)

  it("ring: ordered, and random with a seed (same seed, same order)", function()
    local r = patterns.rounds({ kind = "ring", order = "ordered" }, 4, 1)
    assert.same({ { { 0, 1 }, { 1, 2 }, { 2, 3 }, { 3, 0 } } }, r)
    local a, order_a = patterns.rounds({ kind = "ring", order = "random" }, 6, 1, 5)
    local b, order_b = patterns.rounds({ kind = "ring", order = "random" }, 6, 1, 5)
    local _, order_c = patterns.rounds({ kind = "ring", order = "random" }, 6, 2, 5)
    assert.same(a, b)
    assert.same(order_a, order_b)
    assert.are_not.same(order_a, order_c)
    local sorted = { unpack(order_a) }
    table.sort(sorted)
    assert.same({ 0, 1, 2, 3, 4, 5 }, sorted)
  end)

  it("bisection and one_to_all", function()
    local r = patterns.rounds({ kind = "bisection" }, 6, 1, 1)
    assert.equal(1, #r)
    assert.equal(3, #r[1])
    local used = {}
    for _, p in ipairs(r[1]) do used[p[1]] = true; used[p[2]] = true end
    for i = 0, 5 do assert.is_true(used[i]) end
    assert.same({ { { 2, 0 } }, { { 2, 1 } }, { { 2, 3 } } }, patterns.rounds({ kind = "one_to_all", root = 2 }, 4, 1))
    assert.same({ { { 0, 1 }, { 0, 2 } } }, patterns.rounds({ kind = "one_to_all", concurrent = true }, 3, 1))
    assert.has_error(function() patterns.rounds({ kind = "one_to_all", root = 7 }, 4, 1) end,
      "pattern one_to_all: root 7, but the matrix has 4 hosts")
  end)
end)

describe("matrix coordinator frames", function()
  local function connected()
    local srv = assert(sock.listen("127.0.0.1", 0))
    local t = task.spawn(function() return srv:accept(5) end)
    local c = assert(sock.connect("127.0.0.1", srv.port, 5))
    local s = assert(t:join(5))
    srv:close()
    return c, s
  end

  it("carries typed messages and refuses what is hostile, before allocating", L.async(function()
    local c, s = connected()
    local a, b = msg.wrap(c, { what = "a" }), msg.wrap(s, { what = "b", max = 1000 })
    assert(a:send({ t = "hello", n = 1 }, 5))
    assert.same({ t = "hello", n = 1 }, b:recv(5))
    -- a frame announcing more than the bound
    assert(c:send("\0\1\0\0" .. "{}", 5))
    local m, err = b:recv(5)
    assert.is_nil(m)
    assert.equal("EPROTO: b: frame of 65536 bytes announced (bound 1000)", err)
    c:close() s:close()
    c, s = connected()
    b = msg.wrap(s, { what = "b" })
    -- JSON that is not a typed object, JSON nested too deep, bad JSON
    for _, body in ipairs { "[1,2]", string.rep("[", 100) .. string.rep("]", 100), "{\"t\":" } do
      c:send(string.char(0, 0, 0, #body) .. body, 5)
      m, err = b:recv(5)
      assert.is_nil(m)
      assert.matches("^EPROTO: b: ", err)
    end
    -- a header with no body: the read is bounded
    c:send("\0\0\0\20", 5)
    local t0 = H.now()
    m, err = b:recv(5, 0.3)
    assert.is_nil(m)
    assert.matches("^ETIMEDOUT", err)
    assert.is_true(H.now() - t0 < 2)
    c:close() s:close()
  end))

  it("refuses a message over the bound on the sending side", function()
    local f, err = msg.frame({ t = "x", pad = string.rep("a", 2000) }, 1000)
    assert.is_nil(f)
    assert.matches("^EMSGSIZE: message x is %d+ bytes, over the 1000%-byte bound", err)
  end)

  it("link preambles carry the token and are checked", function()
    local p = agent.preamble("0123456789abcdef0011", 3, 12, 2)
    assert.equal(agent.PREAMBLE, #p)
    assert.same({ from = 3, step = 12, nth = 2 }, agent.parse_preamble(p, "0123456789abcdef0011"))
    assert.same({ nil, "wrong run token" }, { agent.parse_preamble(p, "ffffffffffffffff") })
    assert.same({ nil, "not a matrix link preamble" }, { agent.parse_preamble("GET / HTTP/1.0", "x") })
  end)
end)

describe("matrix results", function()
  it("takes latency and bandwidth from perf rows of either shape", function()
    -- today's perf: one mean latency
    assert.same({ mean = 2.5 }, results.latency({ size = 8, lat_us = 2.5, messages = 10 }))
    -- percentiles as fields, or as a table
    assert.same({ min = 1, median = 2, p99 = 7, ["p99.9"] = 8, max = 9, stdev = 0.5, mean = 2.2 },
      results.latency({ lat_min_us = 1, lat_median_us = 2, lat_p99_us = 7, ["lat_p99.9_us"] = 8, lat_max_us = 9,
        lat_stdev_us = 0.5, lat_mean_us = 2.2 }))
    assert.same({ min = 1, median = 2 }, results.latency({ lat_us = { min = 1, median = 2 } }))
    -- this tbrt's perf: typical is the median; iteration counts are not latencies
    assert.same({ min = 1, typical = 2, median = 2, p99 = 5, p99_9 = 6 },
      results.latency({ lat_iters = 100, lat_warmup = 10, lat_min_us = 1, lat_typical_us = 2, lat_p99_us = 5,
        lat_p99_9_us = 6 }))
    assert.same({ push = 1 }, results.bandwidth({ bw_push = 1, bw_iters = 5, bw_warmup = 2 }))
    assert.equal(2, results.lat_value({ median = 2, mean = 3 }))
    assert.equal(3, results.lat_value({ mean = 3 }))
    assert.same({ push = 1.5, pull = 2 }, results.bandwidth({ bw_push = 1.5, bw_pull = 2, size = 64 }))
    local rate = results.msg_rate(nil, { bw_push = 1 }, { push = 1 }, 1000)
    assert.same({ push = 1e6, derived = true }, rate)
    assert.same({ push = 5, value = 7 }, results.msg_rate({ msg_rate = 7 }, { msg_rate_push = 5 }, nil, 8))
  end)
end)

describe("matrix diff", function()
  local function rec(key_params, pair, lat, bw)
    return { kind = "measurement", run = "r", ok = true, params = key_params, pair = pair,
      latency_us = { mean = lat }, bw_gbps = { push = bw, pull = bw } }
  end
  local function run_of(list)
    local out = {}
    local cellkeys = {}
    for _, r in ipairs(list) do
      r.cell = cells.key(r.params)
      out[#out + 1] = r
      cellkeys[r.cell] = true
    end
    for k in pairs(cellkeys) do out[#out + 1] = { kind = "cell", cell = k, run = "r", status = "ok" } end
    return out
  end
  local function series(size, lats, bws)
    local out = {}
    for i, lat in ipairs(lats) do
      out[#out + 1] = rec({ pattern = "pairwise", device = "tcp", size = size, rep = i, faults = {} }, { 0, 1 }, lat, bws[i])
    end
    return out
  end

  it("lists what moved beyond the noise of the repetitions, not what stayed within it", function()
    local a, b = {}, {}
    for _, r in ipairs(series(64, { 10, 10.5, 9.5 }, { 1, 1.01, 0.99 })) do a[#a + 1] = r end
    for _, r in ipairs(series(4096, { 20, 22, 18 }, { 3, 3.3, 2.7 })) do a[#a + 1] = r end
    -- 64 B latency doubles (noise +-0.5): moved; 4 KiB moves by less than its noise: not moved
    for _, r in ipairs(series(64, { 20, 20.5, 19.5 }, { 1, 1.01, 0.99 })) do b[#b + 1] = r end
    for _, r in ipairs(series(4096, { 21, 23, 19 }, { 3.1, 3.4, 2.8 })) do b[#b + 1] = r end
    local c = diff.compare(run_of(a), run_of(b))
    assert.equal(1, #c.moved)
    assert.equal("latency", c.moved[1].figure)
    assert.matches("size=64", c.moved[1].key)
    assert.near(1.0, c.moved[1].rel, 0.01)
    assert.equal(5, c.same)
  end)

  it("uses the threshold when there are no repetitions, and says so; the command exits 1", L.async(function()
    local dir = H.tmpdir()
    local function write(sub, list)
      uv.fs_mkdir(dir .. "/" .. sub, tonumber("755", 8))
      local lines = {}
      for _, r in ipairs(run_of(list)) do lines[#lines + 1] = require("tbrt.matrix.json").encode(r) end
      H.write_file(dir .. "/" .. sub .. "/results.jsonl", table.concat(lines, "\n") .. "\n")
    end
    write("a", series(64, { 10 }, { 1 }))
    write("b", series(64, { 12 }, { 1.05 }))
    local r = H.run_tbrt({ "matrix", "diff", dir .. "/a", dir .. "/b" })
    assert.equal(1, r.code, H.describe(r))
    assert.matches("moved  pattern=pairwise device=tcp size=64 pair 0%-1: latency 10 %(n=1%) %-> 12 %(n=1%) us " ..
      "%(%+20%.0%%, no repetitions to measure noise: over the 10%% threshold%)", r.stdout)
    assert.matches("1 figure moved, 2 within the noise", r.stdout)
    r = H.run_tbrt({ "matrix", "diff", dir .. "/a", dir .. "/b", "--threshold", "25" })
    assert.equal(0, r.code, H.describe(r))
    r = H.run_tbrt({ "matrix", "diff", dir .. "/a", dir .. "/nothing" })
    assert.equal(2, r.code)
    assert.matches("no results in .*/nothing", r.stderr)
    H.rmtree(dir)
  end))
end)

describe("tbrt matrix command line", function()
  it("--dry-run lists the cells and the rounds, and starts nothing", function()
    local dir = H.tmpdir()
    local path = H.write_file(dir .. "/m.lua", [[return { name = "dry", hosts = { netns = 5 },
      patterns = { "pairwise", "ring" }, axes = { device = { "tcp" }, size = { 64, 4096 } } }]])
    local r = H.run_tbrt({ "matrix", path, "--dry-run", "--only", "size=4K" })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("matrix dry %(.-m%.lua%): netns launcher, 5 hosts", r.stdout)
    assert.matches("pattern pairwise: 5 rounds, 10 pairs", r.stdout)
    assert.matches("pattern ring: 1 round, 5 pairs", r.stdout)
    assert.matches("2 cells %(of 4 before %-%-only%):", r.stdout)
    assert.matches("pattern=ring device=tcp size=4096 rep=1", r.stdout)
    assert.is_nil(uv.fs_stat(dir .. "/out"))
    H.rmtree(dir)
  end)

  it("says what is wrong with a bad file or command line", function()
    local dir = H.tmpdir()
    local path = H.write_file(dir .. "/bad.lua", [[return { hosts = { netns = 1 }, patterns = { "ring" } }]])
    local r = H.run_tbrt({ "matrix", path })
    assert.equal(2, r.code)
    assert.matches("tbrt matrix: matrix file .-bad%.lua: hosts%.netns%.count: expected an integer 2%.%.64, got 1", r.stderr)
    r = H.run_tbrt({ "matrix" })
    assert.equal(2, r.code)
    assert.matches("usage: tbrt matrix FILE%.lua", r.stderr)
    r = H.run_tbrt({ "matrix", "--help" })
    assert.equal(0, r.code)
    assert.matches("%-%-resume", r.stdout)
    H.rmtree(dir)
  end)
end)
