-- pair_script_spec.lua - scripts/pair.lua end to end: both ends from one
-- command, the tables and --json (latency per iteration: min, typical,
-- mean, p99, p99.9, max, stdev; bandwidth and message rate), one end each
-- with --listen/--connect, every option's bad values named, --quiet,
-- TBRT_DEVICE, and errors printed once. (--listen against bad peers:
-- pair_listen_spec.lua.)
local cjson = require("cjson")
local uv = require("luv")
local task = require("tbrt.task")
local H = require("helpers")
local L = require("links")

local PAIR = H.root .. "/scripts/pair.lua"

local function pair(args, opts)
  local full = { PAIR }
  for _, a in ipairs(args) do full[#full + 1] = a end
  return H.run(H.tbrt, full, opts or { timeout = 60 })
end

describe("scripts/pair.lua", function()
  it("runs both ends on the soft device (apple-uc) and prints a table per test", function()
    local r = pair({ "--sizes", "1,4K,130K,1M", "--iters", "20" })
    assert.equal(0, r.code, r.stderr)
    assert.matches("pair: two processes on 127%.0%.0%.1:%d+, device soft %(apple%-uc%)", r.stdout)
    local lo = require("verbs_helpers").loopback_index("soft0", 2)
    assert.matches("link: soft0 apple%-uc port 2 GID%[" .. lo .. "%]", r.stdout)
    local lat_at = assert(r.stdout:find("one-way latency, us", 1, true), r.stdout)
    local bw_at = assert(r.stdout:find("bandwidth and message rate each way", 1, true), r.stdout)
    assert.is_true(lat_at < bw_at)
    local lat, bw = r.stdout:sub(lat_at, bw_at - 1), r.stdout:sub(bw_at)
    assert.matches("\n%s+size%s+iters%s+warm%s+min%s+typical%s+mean%s+p99%s+p99%.9%s+max%s+stdev\n", lat)
    assert.matches("\n%s+size%s+msgs%s+warm%s+GB/s %->%s+GB/s <%-%s+Mmsg/s %->%s+Mmsg/s <%-\n", bw)
    local num = "%s+([%d.]+)"
    for _, size in ipairs { "1 B", "4 KiB", "130 KiB", "1 MiB" } do
      local mn, typ, mean, p99, p999, mx, sd = lat:match("\n%s+" .. size .. "%s+20%s+2" ..
        num:rep(7) .. "\n")
      assert.is_not_nil(mn, size .. " latency row in\n" .. lat)
      mn, typ, mean, p99, p999, mx = tonumber(mn), tonumber(typ), tonumber(mean), tonumber(p99),
        tonumber(p999), tonumber(mx)
      assert.is_true(mn > 0 and mn <= typ and typ <= mx and mn <= mean and mean <= mx, size)
      assert.is_true(p99 <= p999 and p999 <= mx and tonumber(sd) >= 0, size)
      assert.matches("\n%s+" .. size .. "%s+20%s+%d+" .. num:rep(4) .. "\n", bw)
    end
  end)

  it("prints one JSON object per size with --json, the same figures", function()
    local r = pair({ "--personality", "linux-rc", "--sizes", "8,64K", "--iters", "10", "--json" })
    assert.equal(0, r.code, r.stderr)
    local rows = {}
    for line in r.stdout:gmatch("[^\n]+") do rows[#rows + 1] = cjson.decode(line) end
    assert.equal(2, #rows)
    assert.same({ 8, 65536 }, { rows[1].size, rows[2].size })
    for _, row in ipairs(rows) do
      assert.equal("linux-rc", row.personality)
      assert.equal(40, row.messages)
      assert.equal(10, row.lat_iters)
      assert.equal(1, row.lat_warmup)
      assert.equal(10, row.bw_iters)
      assert.is_true(row.lat_min_us > 0 and row.lat_min_us <= row.lat_typical_us)
      assert.is_true(row.lat_typical_us <= row.lat_max_us and row.lat_mean_us <= row.lat_max_us)
      assert.is_true(row.lat_p99_us <= row.lat_p99_9_us and row.lat_p99_9_us <= row.lat_max_us)
      assert.is_true(row.lat_stdev_us >= 0)
      assert.is_true(row.bw_push > 0 and row.bw_pull > 0)
      assert.is_true(row.msg_rate_push > 0 and row.msg_rate_pull > 0)
      assert.near(row.bw_push * 1e9 / row.size, row.msg_rate_push, row.msg_rate_push * 1e-6)
    end
    r = pair({ "--sizes", "8", "--iters", "30", "--warmup", "7", "--test", "lat", "--json" })
    assert.equal(0, r.code, r.stderr)
    local row = cjson.decode(r.stdout)
    assert.equal(30, row.lat_iters)
    assert.equal(7, row.lat_warmup)
    assert.is_nil(row.bw_push)
  end)

  it("prints only the table with --quiet", function()
    local r = pair({ "--sizes", "8", "--iters", "5", "--quiet", "--test", "lat" })
    assert.equal(0, r.code, r.stderr)
    local lines = {}
    for l in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.equal(3, #lines, r.stdout)
    assert.matches("^one%-way latency", lines[1])
    assert.matches("^%s+size%s+iters", lines[2])
    assert.matches("^%s+8 B%s+5%s", lines[3])
  end)

  it("takes the device from TBRT_DEVICE when --device is not given", function()
    local r = pair({ "--sizes", "8", "--iters", "5", "--test", "lat" }, { env = { TBRT_DEVICE = "tcp" },
      timeout = 60 })
    assert.equal(0, r.code, r.stderr)
    assert.matches("device tcp %(from TBRT_DEVICE%)", r.stdout)
    assert.matches("\nlink: tcp\n", r.stdout)
    r = pair({ "--sizes", "8", "--iters", "5", "--test", "lat", "--device", "soft" },
      { env = { TBRT_DEVICE = "tcp" }, timeout = 60 })
    assert.equal(0, r.code, r.stderr)
    assert.matches("\nlink: soft0 apple%-uc", r.stdout)
  end)

  it("prints an error once, though both ends meet it", function()
    local r = pair({ "--device", "nosuch0", "--sizes", "8" })
    assert.equal(1, r.code)
    assert.equal(1, select(2, r.stderr:gsub("\n", "")), r.stderr)
    assert.matches("^pair.lua: ENODEV: link %d+: probe: no device named \"nosuch0\"", r.stderr)
    r = pair({ "--stride", "100", "--sizes", "8" })
    assert.equal(1, r.code)
    assert.equal(1, select(2, r.stderr:gsub("\n", "")), r.stderr)
    assert.matches("stride 100 must be a multiple of 4 KiB", r.stderr)
  end)

  it("runs one end each with --listen and --connect", L.async(function()
    local h = H.spawn(H.tbrt, { PAIR, "--listen", "127.0.0.1:0", "--device", "tcp" })
    assert(h:expect("listening on", 20), h:stderr())
    local port = h:stdout():match("listening on [^:]+:(%d+)")
    local r = pair({ "--connect", "127.0.0.1:" .. port, "--device", "tcp", "--sizes", "16M",
      "--iters", "3" })
    assert.equal(0, r.code, r.stderr)
    assert.matches("link: tcp", r.stdout)
    assert.matches("\n%s+16 MiB%s+3%s+1%s", r.stdout)
    assert.matches("\n%s+16 MiB%s+3%s+2%s", r.stdout)
    -- the listener ends once a peer has completed
    local done = h:wait(20)
    assert.equal(0, done.code, done.stderr)
    assert.matches("connection 1 from 127%.0%.0%.1:%d+: done: %d+ requests served", done.stderr)
  end))

  it("says which device 'auto' picked and why", function()
    local r = pair({ "--device", "auto", "--sizes", "8", "--iters", "5" })
    assert.equal(0, r.code, r.stderr)
    assert.matches("why:  auto: [^\n]+", r.stdout)
  end)

  it("refuses bad values naming the option, without a traceback", function()
    local cases = {
      { { "--sizes", "12Q" }, "%-%-sizes: '12Q' is not a size" },
      { { "--sizes", "8Q" }, "%-%-sizes: '8Q' is not a size" },
      { { "--sizes", "0" }, "%-%-sizes: size 0 is out of range: sizes go from 1 B to 16 MiB" },
      { { "--sizes", "32M" }, "%-%-sizes: size 32M is out of range" },
      { { "--sizes", "," }, "%-%-sizes: no sizes given" },
      { { "--iters", "abc" }, "%-%-iters: expected a whole number from 1 to %d+, got 'abc'" },
      { { "--iters", "0" }, "%-%-iters: expected a whole number from 1 to" },
      { { "--iters", "2.5" }, "%-%-iters: expected a whole number" },
      { { "--warmup=x" }, "%-%-warmup: expected a whole number from 0 to %d+, got 'x'" },
      { { "--nbuf", "0" }, "%-%-nbuf: expected a whole number from 1" },
      { { "--stride", "4Q" }, "%-%-stride: '4Q' is not a size" },
      { { "--timeout", "abc" }, "%-%-timeout: expected seconds > 0, got 'abc'" },
      { { "--timeout=0" }, "%-%-timeout: expected seconds > 0, got '0'" },
      { { "--setup-timeout", "x" }, "%-%-setup%-timeout: expected seconds > 0" },
      { { "--test", "fast" }, "argument for option '%-%-test' must be one of 'lat', 'bw', 'both'" },
      { { "--listen", "70000" }, "%-%-listen: expected %[HOST:%]PORT with PORT 0%.%.65535, got '70000'" },
      { { "--connect", "host" }, "%-%-connect: expected HOST:PORT with PORT 1%.%.65535, got 'host'" },
      { { "--ib-port", "0" }, "%-%-ib%-port: expected a whole number from 1 to 255" },
      { { "--device", "tcp", "--personality", "linux-rc" },
        "%-%-personality applies to the soft devices; %-%-device tcp is plain TCP" },
      { { "--device", "mlx5", "--personality", "linux-rc" },
        "%-%-personality applies to the soft devices; %-%-device mlx5 is an mlx5 device" },
      { { "--device", "tcp", "--nbuf", "4" }, "%-%-nbuf applies to RDMA devices; %-%-device tcp has none" },
      { { "--once" }, "%-%-once applies to %-%-listen" },
      { { "--listen", "1", "--connect", "h:2" },
        "option '%-%-connect' can not be used together with option '%-%-listen'" },
      { { "--frobnicate" }, "unknown option '%-%-frobnicate'" },
    }
    for _, c in ipairs(cases) do
      local r = pair(c[1])
      local what = table.concat(c[1], " ") .. ":\n" .. r.stderr
      assert.equal(1, r.code, what)
      assert.matches("^pair%.lua: " .. c[2], r.stderr, nil, what)
      assert.is_nil(r.stderr:find("traceback", 1, true), what)
      assert.equal("", r.stdout, what)
    end
    -- personality with the TBRT_DEVICE it would be ignored by
    local r = pair({ "--personality", "linux-rc" }, { env = { TBRT_DEVICE = "tcp" }, timeout = 60 })
    assert.equal(1, r.code)
    assert.matches("%-%-device tcp %(from TBRT_DEVICE%) is plain TCP", r.stderr)
  end)

  it("says what each option does in --help, and how --listen binds", function()
    local r = pair({ "--help" })
    assert.equal(0, r.code)
    for _, o in ipairs({ "--listen", "--connect", "--once", "--device", "--personality", "--ib-port",
        "--gid-index", "--nbuf", "--stride", "--fallback", "--sizes", "--iters", "--warmup", "--test",
        "--json", "--quiet", "--timeout", "--setup-timeout" }) do
      assert.matches("\n%s+[^\n]*" .. o:gsub("%p", "%%%0") .. " [^\n]*", r.stdout, nil, o)
    end
    assert.matches("PORT alone%s+listens on every IPv4 interface%s+%(0%.0%.0%.0%), as%s+perftest's server does", r.stdout)
    assert.matches("TBRT_DEVICE", r.stdout)
  end)
end)
