-- pair_script_spec.lua - scripts/pair.lua end to end: both ends from one
-- command, the table and --json, one end each with --listen/--connect, and
-- bad arguments.
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
  it("runs both ends on the soft device (apple-uc) and prints the table", function()
    local r = pair({ "--sizes", "1,4K,130K,1M", "--iters", "20" })
    assert.equal(0, r.code, r.stderr)
    assert.matches("pair: two processes on 127%.0%.0%.1:%d+, device soft %(apple%-uc%)", r.stdout)
    assert.matches("link: soft0 apple%-uc port 2 GID%[1%]", r.stdout)
    assert.matches("size%s+messages%s+GB/s %->%s+GB/s <%-%s+latency us", r.stdout)
    for _, size in ipairs { "1 B", "4 KiB", "130 KiB", "1 MiB" } do
      assert.matches("\n%s+" .. size .. "%s+80%s+[%d.]+%s+[%d.]+%s+[%d.]+", r.stdout)
    end
  end)

  it("prints one JSON object per row with --json", function()
    local r = pair({ "--personality", "linux-rc", "--sizes", "8,64K", "--iters", "10", "--json" })
    assert.equal(0, r.code, r.stderr)
    local rows = {}
    for line in r.stdout:gmatch("[^\n]+") do rows[#rows + 1] = cjson.decode(line) end
    assert.equal(2, #rows)
    assert.same({ 8, 65536 }, { rows[1].size, rows[2].size })
    for _, row in ipairs(rows) do
      assert.equal("linux-rc", row.personality)
      assert.equal(40, row.messages)
      assert.is_true(row.lat_us > 0 and row.bw_push > 0 and row.bw_pull > 0)
    end
  end)

  it("runs one end each with --listen and --connect", L.async(function()
    local out = uv.new_pipe(false)
    local port, done = nil, false
    local text = ""
    local proc = uv.spawn(H.tbrt, { args = { PAIR, "--listen", "127.0.0.1:0", "--device", "tcp" },
      stdio = { nil, out, 2 } }, function() done = true end)
    out:read_start(function(_, data)
      if data then text = text .. data; port = port or text:match("listening on [^:]+:(%d+)")
      else out:close() end
    end)
    assert(task.wait(function() return port end, 20))
    local r = pair({ "--connect", "127.0.0.1:" .. port, "--device", "tcp", "--sizes", "16M",
      "--iters", "3" })
    assert.equal(0, r.code, r.stderr)
    assert.matches("link: tcp", r.stdout)
    assert.matches("16 MiB%s+12%s", r.stdout)
    task.wait(function() return done end, 20)
    proc:close()
  end))

  it("says which device 'auto' picked and why", function()
    local r = pair({ "--device", "auto", "--sizes", "8", "--iters", "5" })
    assert.equal(0, r.code, r.stderr)
    assert.matches("why:  auto: [^\n]+", r.stdout)
  end)

  it("refuses bad arguments with a clear message", function()
    local r = pair({ "--sizes", "12Q" })
    assert.equal(1, r.code)
    assert.matches("bad size '12Q'", r.stderr)
    r = pair({ "--listen", "1", "--connect", "h:2" })
    assert.is_true(r.code ~= 0)
    assert.matches("option '%-%-connect' can not be used together with option '%-%-listen'", r.stderr)
  end)
end)
