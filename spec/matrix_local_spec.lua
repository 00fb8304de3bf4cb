-- matrix_local_spec.lua - `tbrt matrix` with `local` hosts (tbrt processes
-- on this machine): the tcp link and the soft device (shared memory reaches
-- between them) over three sizes, every result file and plot; a peer killed
-- in the middle of a cell; the resumed run and the live bar on a terminal.
local uv = require("luv")
local task = require("tbrt.task")
local H = require("helpers")
local L = require("links")
local E = require("matrix_env")
local pty = require("pty")

local LOCAL3 = [[return {
  name = "local3",
  hosts = { ["local"] = 3 },
  patterns = { "pairwise", "ring" },
  axes = { device = { "tcp", "soft" }, size = { 64, 4096, 65536 } },
  link = { personality = "linux-rc" },
  measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 21, warmup = 4 },
  timeout = 40,
}]]

describe("tbrt matrix on local hosts", function()
  it("measures every cell over tcp and soft and leaves results, CSV, summary and plots", function()
    local r, out, _, dir = E.run_matrix(LOCAL3, {}, { timeout = 120 })
    assert.equal(0, r.code, H.describe(r))
    local list = E.results(out)
    local runs, cells_, meas = E.of_kind(list, "run"), E.of_kind(list, "cell"), E.of_kind(list, "measurement")
    assert.equal(1, #runs)
    assert.equal(3, #runs[1].hosts)
    assert.is_string(runs[1].git)
    -- 2 patterns x 2 devices x 3 sizes
    assert.equal(12, #cells_)
    local keys = {}
    for _, c in ipairs(cells_) do
      assert.equal("ok", c.status, c.cell)
      keys[c.cell] = true
      assert.is_true(c.overhead_s >= 0 and c.overhead_s < c.wall_s + 1e-9)
    end
    for _, dev in ipairs { "tcp", "soft" } do
      for _, size in ipairs { 64, 4096, 65536 } do
        for _, p in ipairs { "pairwise", "ring" } do
          assert.is_true(keys[string.format("pattern=%s device=%s size=%d rep=1", p, dev, size)], p .. " " .. dev .. " " .. size)
        end
      end
    end
    -- pairwise on 3 hosts: 3 pairs; ring: 3 pairs; per device and size
    assert.equal(12 * 3, #meas)
    for _, m in ipairs(meas) do
      assert.is_true(m.ok, m.error)
      assert.is_true(m.bw_gbps.push > 0 and m.bw_gbps.pull > 0)
      assert.is_true(m.latency_us.mean > 0 or m.latency_us.median > 0)
      assert.is_table(m.msg_rate)
      assert.is_true(m.counters.client.bytes_sent > m.params.size)
      assert.is_true(m.counters.server.bytes_recv > 0)
      assert.equal(m.params.device == "tcp" and "tcp" or "rdma", m.link.kind == "tcp" and "tcp" or "rdma")
      assert.is_string(m.version)
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT", m.time)
      assert.equal(2, #m.hosts)
    end
    -- the soft cells really ran on the soft device
    for _, m in ipairs(meas) do
      if m.params.device == "soft" then assert.equal("linux-rc", m.link.personality) end
    end
    local csv = H.read_file(out .. "/results.csv")
    local header = csv:match("^[^\n]+")
    for _, col in ipairs { "cell", "pattern", "device", "size", "rep", "host_a", "host_b", "ok",
      "bw_push_gbps", "bw_pull_gbps", "client_bytes_sent" } do
      assert.matches("%f[%w_]" .. col .. "%f[^%w_]", header, nil, false)
    end
    local rows = select(2, csv:gsub("\n", "\n")) - 1
    assert.equal(36, rows)
    local summary = H.read_file(out .. "/summary.txt")
    assert.matches("cells: 12 recorded of 12; 12 ok", summary)
    assert.matches("pattern pairwise, device=soft\n", summary)
    assert.matches("\n%s+64 KiB%s+3/3%s+[%d.]+", summary)
    assert.matches("driver overhead per cell", summary)
    for _, base in ipairs { "bw-pairwise", "lat-pairwise", "bw-ring", "lat-ring",
      "heatmap-pairwise-device_soft-lat", "heatmap-pairwise-device_tcp-bw" } do
      assert(E.png_ok(out .. "/plots/" .. base .. ".png"))
      assert(E.svg_ok(out .. "/plots/" .. base .. ".svg"))
    end
    -- the heatmap: 3 x 3, the diagonal empty, every pair both ways filled
    local dat = H.read_file(out .. "/plots/heatmap-pairwise-device_tcp-bw.dat")
    local n = 0
    for line in dat:gmatch("[^\n]+") do
      n = n + 1
      local vals = {}
      for v in line:gmatch("%S+") do vals[#vals + 1] = v end
      assert.equal(3, #vals)
      for j, v in ipairs(vals) do
        if j == n then assert.equal("NaN", v) else assert.is_true(tonumber(v) > 0) end
      end
    end
    assert.equal(3, n)
    H.rmtree(dir)
  end)

  it("records a cell whose peer is killed, starts the peer again and goes on", function()
    local text = [[
local function die_now()
  local ffi = require("ffi")
  pcall(ffi.cdef, "int kill(int pid, int sig); int getpid(void);")
  ffi.C.kill(ffi.C.getpid(), 9)
end
return {
  name = "killed",
  hosts = { ["local"] = 2 },
  patterns = { { name = "pair", scenario = function(ctx)
    local l = assert(ctx.link(1 - ctx.rank))
    if ctx.rank == 1 then
      if ctx.cell.rep == 2 then die_now() end
      assert(ctx.serve(l))
      l:close()
      return { served = true }
    end
    local row = ctx.measure(l, ctx.cell.size, { iters = 100 })
    ctx.done(l)
    l:close()
    return row
  end } },
  axes = { device = { "tcp" }, size = { 4096 }, repetitions = 3 },
  timeout = 20,
}]]
    local r, out, _, dir = E.run_matrix(text, {}, { timeout = 90 })
    assert.equal(3, r.code, H.describe(r))
    local list = E.results(out)
    local status = {}
    for _, c in ipairs(E.of_kind(list, "cell")) do status[c.params.rep] = c.status end
    assert.same({ "ok", "failed", "ok" }, status)
    local errs = {}
    for _, m in ipairs(E.of_kind(list, "measurement")) do
      if m.params.rep == 2 then errs[m.rank] = m.error end
      if m.params.rep ~= 2 then assert.is_true(m.ok) end
    end
    -- which host, which step: the killed one says how it died, the other what it saw
    assert.matches("^rank 1 %(.-%) agent: its agent's connection closed or was reset %(process ended%?%); " ..
      "killed by signal 9", errs[1])
    assert.matches("^rank 0 %(.-%) scenario: E[A-Z]+: ", errs[0])
    local events = {}
    for _, h in ipairs(E.of_kind(list, "host")) do events[#events + 1] = h.rank .. " " .. h.status end
    assert.same({ "1 died", "1 relaunched" }, events)
    -- the scenario's perf row became figures
    local m3
    for _, m in ipairs(E.of_kind(list, "measurement")) do if m.params.rep == 3 and m.rank == 0 then m3 = m end end
    assert.is_true(m3.bw_gbps.push > 0)
    H.rmtree(dir)
  end)

  it("bounds a cell by its timeout, records where it stopped and goes on", function()
    local text = [[return {
  hosts = { ["local"] = 2 },
  patterns = { { name = "stuck", scenario = function(ctx)
    if ctx.cell.size == 64 and ctx.rank == 1 then require("tbrt.task").sleep(60) end
    return { rank = ctx.rank }
  end } },
  axes = { device = { "tcp" }, size = { 64, 128 } },
  timeout = 2,
}]]
    local t0 = H.now()
    local r, out = E.run_matrix(text, {}, { timeout = 60 })
    assert.equal(3, r.code, H.describe(r))
    assert.is_true(H.now() - t0 < 20, "the stuck cell was not cut at its timeout")
    local status = {}
    for _, c in ipairs(E.of_kind(E.results(out), "cell")) do status[c.params.size] = c.status end
    assert.same({ [64] = "failed", [128] = "ok" }, status)
    for _, m in ipairs(E.of_kind(E.results(out), "measurement")) do
      if m.params.size == 64 and m.rank == 1 then
        assert.equal("timeout", m.step)
        assert.matches("^rank 1 %(.-%) timeout: ETIMEDOUT: the step did not finish within 2 s %(what was left of the cell's timeout%)",
          m.error)
      else
        assert.is_true(m.ok, m.error)
      end
    end
  end)

  it("calls the other end off at once when one end fails before it dials", function()
    local text = [[return { hosts = { ["local"] = 2 }, patterns = { { name = "asym", scenario = function(ctx)
      if ctx.rank == 1 then error("rank 1 gives up before dialing") end
      assert(ctx.link(1))
    end } }, axes = { size = { 64 } }, timeout = 30 }]]
    local t0 = H.now()
    local r, out = E.run_matrix(text, {}, { timeout = 60 })
    assert.equal(3, r.code, H.describe(r))
    assert.is_true(H.now() - t0 < 15, "the waiting end sat out the cell's timeout")
    local errs = {}
    for _, m in ipairs(E.of_kind(E.results(out), "measurement")) do errs[m.rank] = m.error end
    assert.matches("rank 1 gives up before dialing", errs[1])
    assert.matches("ECANCELED: rank 1 failed before it dialed", errs[0])
  end)

  it("draws a bar on a terminal; --resume runs only what is missing", L.async(function()
    local dir = H.tmpdir()
    local path = H.write_file(dir .. "/m.lua", [[return { hosts = { ["local"] = 2 }, patterns = { "pairwise" },
      axes = { device = { "tcp" }, size = { 64, 128, 256, 512 } }, measure = { lat_iters = 20, bw_iters = 20 } }]])
    local p = pty.spawn(H.tbrt, { "matrix", path, "--out", dir .. "/out", "--only", "size=64|128" })
    local code = p:wait_exit(60)
    assert.equal(0, code, p:describe())
    local raw = p:output()
    p:close()
    -- redrawn in place: CR + erase line, a bar with the count
    assert.matches("\r\27%[K%[##########..........%] 1/2 cells, 0 failed", raw)
    assert.matches("\r\27%[K%[####################%] 2/2 cells", raw)
    local r = H.run_tbrt({ "matrix", path, "--out", dir .. "/out" })
    assert.equal(1, r.code)
    assert.matches("already holds results .*%-%-resume continues them", r.stderr)
    r = H.run_tbrt({ "matrix", path, "--out", dir .. "/out", "--resume" }, { timeout = 60 })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("resuming in .-: 2 of 4 cells done, 2 to run", r.stdout)
    assert.matches("cell 1/2: pattern=pairwise device=tcp size=256 rep=1", r.stdout, nil, true)
    local list = E.results(dir .. "/out")
    local count, n = {}, 0
    for _, c in ipairs(E.of_kind(list, "cell")) do
      assert.equal("ok", c.status)
      if not count[c.cell] then n = n + 1 end
      count[c.cell] = (count[c.cell] or 0) + 1
      assert.equal(1, count[c.cell], c.cell)
    end
    assert.equal(4, n)
    assert.equal(2, #E.of_kind(list, "run"))
    assert.matches("cells: 4 recorded of 4; 4 ok", H.read_file(dir .. "/out/summary.txt"))
    r = H.run_tbrt({ "matrix", path, "--out", dir .. "/out", "--resume" }, { timeout = 60 })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("4 of 4 cells done, 0 to run", r.stdout)
    H.rmtree(dir)
  end))
end)
