-- Two ends that the scheduler put on one CPU: the waiter that finds its
-- peer waiting there moves itself to another CPU of its mask (once), and
-- the two end on different CPUs; ends pinned to one CPU cannot move, and
-- take turns on it instead (yielding), which still works. A peer counts as
-- waiting there only while it waits on the link: one that went on to other
-- things (another link, work) is not (spec/support/wait_mark_end.lua).
local cjson = require("cjson")
local H = require("helpers")

local END = H.root .. "/spec/support/cpu_share_end.lua"
local MARK_END = H.root .. "/spec/support/wait_mark_end.lua"

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

  -- the looker's record (wait_mark_end.lua): the end with the lower QPN,
  -- which looks at the link while on the CPU the other end marked
  local function marks(mode)
    local srv = H.spawn(H.tbrt, { MARK_END, "listen", mode })
    assert(srv:expect("port ", 20), "the listening end said no port: " .. srv:stderr())
    local port = assert(srv:stdout():match("port (%d+)"))
    local c = H.run_tbrt({ MARK_END, "connect", mode, port }, { timeout = 60 })
    local s = srv:wait(30)
    assert.equal(0, c.code, H.describe(c))
    assert.equal(0, s.code, H.describe(s))
    local a, b = last_json(c.stdout), last_json(s.stdout)
    return a.role == "looker" and a or b
  end

  it("count a peer as waiting on their CPU only while it waits on the link", function()
    -- marking all the while: the looker finds it there and moves away
    local fresh = marks("fresh")
    if fresh.cpus < 2 then return pending("one CPU in the affinity mask: nowhere to move") end
    if fresh.bursts > 0 then
      assert.is_true(fresh.moves >= 1, "the looker did not move from a peer marking its CPU")
    end
    -- marked 50 ms before and not since: gone elsewhere, no reason to move
    -- (a ring's member marks its outgoing link while waiting for room, then
    -- waits on its incoming one: taken for here, its next member spun on
    -- the CPU it needed, a millisecond a hop)
    local stale = marks("stale")
    assert.is_true(stale.bursts > 0, "the looker never looked from the marked CPU")
    assert.equal(0, stale.moves, "the looker moved from a peer that stopped waiting 50 ms before")
  end)

  it("pinned to one CPU, never move, and take turns on it", function()
    local a, b = pair(2000, "pinned")
    assert.equal(0, a.moves)
    assert.equal(0, b.moves)
    assert.equal(a.cpu, b.cpu)
  end)
end)
