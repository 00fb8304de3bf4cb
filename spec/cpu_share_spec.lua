-- Two ends that the scheduler put on one CPU: the waiter that finds its
-- peer waiting there moves itself to another CPU of its mask (once), and
-- the two end on different CPUs; ends pinned to one CPU cannot move, and
-- take turns on it instead (yielding), which still works.
local cjson = require("cjson")
local H = require("helpers")

local END = H.root .. "/spec/support/cpu_share_end.lua"

local function last_json(out)
  local line = out:match("({[^\n]*})%s*$")
  return line and cjson.decode(line)
end

local function pair(rounds, mode)
  local srv = H.spawn(H.tbrt, { END, "listen", tostring(rounds), mode })
  assert(srv:expect("port ", 20), "the listening end said no port: " .. srv:stderr())
  local port = assert(srv:stdout():match("port (%d+)"))
  local c = H.run_tbrt({ END, "connect", tostring(rounds), mode, port }, { timeout = 60 })
  local s = srv:wait(30)
  assert.equal(0, c.code, H.describe(c))
  assert.equal(0, s.code, H.describe(s))
  return last_json(c.stdout), last_json(s.stdout)
end

describe("ends that share a CPU", function()
  it("move apart: one end moves to another CPU of its mask, and they end on two CPUs", function()
    -- the scheduler may part them itself before either looks (about 1 run
    -- in 15 here): up to 4 runs for one where an end moved
    local runs, moved = {}, false
    for _ = 1, 4 do
      local a, b = pair(20000, "free")
      if a.cpus < 2 then return pending("one CPU in the affinity mask: nowhere to move") end
      runs[#runs + 1] = { a, b }
      assert.are_not.equal(a.cpu, b.cpu, "both ended on CPU " .. a.cpu)
      if a.moves + b.moves >= 1 then moved = true break end
    end
    assert.is_true(moved, "no end moved in any run: " .. cjson.encode(runs))
  end)

  it("pinned to one CPU, never move, and take turns on it", function()
    local a, b = pair(2000, "pinned")
    assert.equal(0, a.moves)
    assert.equal(0, b.moves)
    assert.equal(a.cpu, b.cpu)
  end)
end)
