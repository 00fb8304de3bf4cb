-- matrix_netns_spec.lua - `tbrt matrix` across network namespaces it makes
-- itself (root): 4 hosts, pairwise and rings over tcp at 3 sizes (and over
-- the soft device once its UDP wire exists), Ctrl-C then --resume, and a
-- host whose cable is pulled in the middle of the run. Every run must leave
-- no namespace or interface behind. Heavy: the normal build only.
local H = require("helpers")
local E = require("matrix_env")
local support = require("tbrt.matrix.support")

local function skip_reason()
  return E.heavy_skip() or E.netns_skip()
end

local function matrix4(device)
  return string.format([[return {
  name = "netns4",
  hosts = { netns = 4 },
  patterns = { "pairwise", "ring" },
  axes = { device = { %q }, size = { 64, 4096, 65536 } },
  link = { personality = "linux-rc" },
  measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 21, warmup = 4 },
  timeout = 40,
}]], device)
end

local function driver_pid(list) return E.of_kind(list, "run")[1].driver_pid end

-- The checks every 4-host run must pass: each cell ok and in the results,
-- plots valid, the heatmap 4 x 4, nothing left behind.
local function check_full_run(device)
  local r, out, _, dir = E.run_matrix(matrix4(device), {}, { timeout = 120 })
  assert.equal(0, r.code, H.describe(r))
  local list = E.results(out)
  assert.same({}, E.leftovers(driver_pid(list)))
  local keys = {}
  for _, c in ipairs(E.of_kind(list, "cell")) do
    assert.equal("ok", c.status, c.cell)
    keys[c.cell] = true
  end
  for _, p in ipairs { "pairwise", "ring" } do
    for _, size in ipairs { 64, 4096, 65536 } do
      assert.is_true(keys[string.format("pattern=%s device=%s size=%d rep=1", p, device, size)])
    end
  end
  local pairs_seen = {}
  for _, m in ipairs(E.of_kind(list, "measurement")) do
    assert.is_true(m.ok, m.error)
    assert.matches("^198%.1[89]%.%d+%.[1-4]$", m.addrs[1])
    assert.are_not.equal(m.addrs[1], m.addrs[2])
    if m.params.pattern == "pairwise" then pairs_seen[m.pair[1] .. "-" .. m.pair[2]] = true end
  end
  local n = 0
  for _ in pairs(pairs_seen) do n = n + 1 end
  assert.equal(6, n)
  for _, base in ipairs { "bw-pairwise", "lat-pairwise", "bw-ring", "lat-ring",
    "heatmap-pairwise-device_" .. device .. "-lat", "heatmap-pairwise-device_" .. device .. "-bw" } do
    assert(E.png_ok(out .. "/plots/" .. base .. ".png"))
    assert(E.svg_ok(out .. "/plots/" .. base .. ".svg"))
  end
  for _, metric in ipairs { "lat", "bw" } do
    local dat = H.read_file(out .. "/plots/heatmap-pairwise-device_" .. device .. "-" .. metric .. ".dat")
    local rows = 0
    for line in dat:gmatch("[^\n]+") do
      rows = rows + 1
      local cols = 0
      for v in line:gmatch("%S+") do
        cols = cols + 1
        if cols == rows then assert.equal("NaN", v) else assert.is_true(tonumber(v) > 0, line) end
      end
      assert.equal(4, cols)
    end
    assert.equal(4, rows)
  end
  H.rmtree(dir)
end

describe("tbrt matrix on netns hosts", function()
  it("runs 4 hosts pairwise and in a ring over tcp, 3 sizes, with plots and a 4 x 4 heatmap", function()
    local why = skip_reason()
    if why then return pending(why) end
    check_full_run("tcp")
  end)

  it("runs the same over the soft device between namespaces", function()
    local why = skip_reason()
    if why then return pending(why) end
    local ok, no = support.soft_udp_wire()
    if not ok then return pending(no) end
    check_full_run("soft")
  end)

  it("stops cleanly on SIGINT, keeps what finished, and --resume does the rest", function()
    local why = skip_reason()
    if why then return pending(why) end
    local text = [[return { name = "stop", hosts = { netns = 3 }, patterns = { "pairwise" },
      axes = { device = { "tcp" }, size = { 64, 4096 }, repetitions = 4 },
      measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 20 }, timeout = 30 }]]
    local r, out, path, dir = E.run_matrix(text, {}, { timeout = 90, signal = "sigint", signal_when = "cell 3/8:" })
    assert.equal(130, r.code, H.describe(r))
    assert.matches("matrix: stopped %(SIGINT%); what finished is kept", r.stdout)
    local list = E.results(out)
    local pid = driver_pid(list)
    assert.same({}, E.leftovers(pid))
    local done = #E.of_kind(list, "cell")
    assert.is_true(done >= 2 and done < 8, "cells done before the stop: " .. done)
    -- the agents are gone too
    for _, h in ipairs(E.of_kind(list, "run")[1].hosts) do
      assert.is_false(require("luv").kill(h.pid, 0) == 0, "agent " .. h.pid .. " still runs")
    end
    local r2 = H.run_tbrt({ "matrix", path, "--out", out, "--resume" }, { timeout = 90 })
    assert.equal(0, r2.code, H.describe(r2))
    assert.matches(string.format("resuming in .-: %d of 8 cells done, %d to run", done, 8 - done), r2.stdout)
    list = E.results(out)
    local seen, n = {}, 0
    for _, c in ipairs(E.of_kind(list, "cell")) do
      assert.equal("ok", c.status)
      assert.is_nil(seen[c.cell], "cell recorded twice: " .. c.cell)
      seen[c.cell] = true
      n = n + 1
    end
    assert.equal(8, n)
    assert.same({}, E.leftovers(E.of_kind(list, "run")[2].driver_pid))
    H.rmtree(dir)
  end)

  it("marks a host whose cable is pulled as vanished and skips its pairs with the reason", function()
    local why = skip_reason()
    if why then return pending(why) end
    local text = [[return {
  name = "unplug",
  hosts = { netns = 3 },
  patterns = { "pairwise", { name = "unplug", scenario = function(ctx)
    if ctx.rank == 2 and ctx.cell.rep == 2 then
      for dev in io.popen("ls /sys/class/net"):lines() do
        if dev ~= "lo" then os.execute("ip link set " .. dev .. " down") end
      end
    end
    return { rank = ctx.rank }
  end } },
  axes = { device = { "tcp" }, size = { 4096 }, repetitions = 3 },
  measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 20 },
  timeout = 20,
  liveness = 2,
}]]
    local r, out, _, dir = E.run_matrix(text, {}, { timeout = 90 })
    assert.equal(3, r.code, H.describe(r))
    local list = E.results(out)
    assert.same({}, E.leftovers(driver_pid(list)))
    local status = {}
    for _, c in ipairs(E.of_kind(list, "cell")) do status[c.cell] = c.status end
    assert.equal("ok", status["pattern=unplug device=tcp size=4096 rep=1"])
    assert.equal("ok", status["pattern=pairwise device=tcp size=4096 rep=2"])
    assert.equal("failed", status["pattern=unplug device=tcp size=4096 rep=2"])
    assert.equal("partial", status["pattern=pairwise device=tcp size=4096 rep=3"])
    assert.equal("skipped", status["pattern=unplug device=tcp size=4096 rep=3"])
    local vanished
    for _, h in ipairs(E.of_kind(list, "host")) do if h.status == "vanished" then vanished = h end end
    assert.equal(2, vanished.rank)
    assert.matches("silent for %d+ s", vanished.why)
    local ok_pairs, skipped = 0, 0
    for _, m in ipairs(E.of_kind(list, "measurement")) do
      if m.params.pattern == "pairwise" and m.params.rep == 3 then
        if m.ok then
          ok_pairs = ok_pairs + 1
          assert.same({ 0, 1 }, m.pair)
        else
          skipped = skipped + 1
          assert.matches("^rank 2 %(.-%) vanished: silent for", m.skipped)
        end
      end
    end
    assert.same({ 1, 2 }, { ok_pairs, skipped })
    assert.matches("not measured", H.read_file(out .. "/summary.txt"))
    H.rmtree(dir)
  end)
end)
