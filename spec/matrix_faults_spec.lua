-- matrix_faults_spec.lua - a faults axis: 0%, 0.1% and 1% drop on RC over
-- the soft device's UDP wire between two namespaces. Every byte must still
-- be right (perf checks each message) and retransmits must rise with the
-- drop rate. Needs the UDP wire and fault injection (probed, not assumed:
-- it skips saying which is missing).
local H = require("helpers")
local E = require("matrix_env")
local support = require("tbrt.matrix.support")

local function retransmits(counters)
  local n, seen = nil, {}
  for k, v in pairs(counters or {}) do
    seen[#seen + 1] = k
    if k:match("retrans") and type(v) == "number" then n = (n or 0) + v end
  end
  return n, table.concat(seen, ", ")
end

describe("tbrt matrix with a faults axis", function()
  it("drops 0, 0.1% and 1% on RC over UDP: every byte right, retransmits rise", function()
    local why = E.heavy_skip() or E.netns_skip()
    if why then return pending(why) end
    local wire, no_wire = support.soft_udp_wire()
    if not wire then return pending(no_wire) end
    local how, no_faults = support.faults()
    if not how then return pending(no_faults) end
    local text = [[return {
  name = "faults",
  hosts = { netns = 2 },
  patterns = { "pairwise" },
  axes = { size = { 4096, 65536 }, faults = { drop = { 0, 0.001, 0.01 } } },
  link = { device = "soft", personality = "linux-rc", qp_type = "RC", wire = "udp" },
  measure = { lat_bytes = 2 ^ 20, bw_bytes = 8 * 2 ^ 20 },
  timeout = 60,
}]]
    local r, out, _, dir = E.run_matrix(text, {}, { timeout = 180 })
    assert.equal(0, r.code, H.describe(r))
    local list = E.results(out)
    assert.same({}, E.leftovers(E.of_kind(list, "run")[1].driver_pid))
    local by = {}
    for _, m in ipairs(E.of_kind(list, "measurement")) do
      assert.is_true(m.ok, m.error)
      local n, names = retransmits(m.counters.client)
      local s = retransmits(m.counters.server)
      assert(n, "no retransmit counter in link:stats() (it has: " .. names .. ")")
      by[m.params.size] = by[m.params.size] or {}
      by[m.params.size][m.params.faults.drop] = n + (s or 0)
    end
    for size, t in pairs(by) do
      -- UDP itself may lose a packet (a full socket buffer on a loaded
      -- machine), and a preempted peer may let a timer fire: without drops
      -- there are few, never as many as at 1%
      assert.is_true(t[0] < t[0.01], size .. " B: as many retransmits without drops (" ..
        t[0] .. ") as at 1% (" .. t[0.01] .. ")")
      assert.is_true(t[0.01] > 0, size .. " B: no retransmits at 1% drop")
      assert.is_true(t[0.01] >= t[0.001], size .. " B: fewer retransmits at 1% than at 0.1%")
    end
    assert(E.png_ok(out .. "/plots/faults-drop-bw.png"))
    assert(E.svg_ok(out .. "/plots/faults-drop-lat.svg"))
    H.rmtree(dir)
  end)

  it("records a link's refusal of faults (a tcp link has no device) as the cell's error", function()
    local text = [[return { hosts = { ["local"] = 2 }, patterns = { "pairwise" },
      axes = { device = { "tcp" }, size = { 64 }, faults = { drop = { 0, 0.01 } } },
      measure = { lat_iters = 10, bw_iters = 10 } }]]
    local r, out, _, dir = E.run_matrix(text, {}, { timeout = 60 })
    assert.equal(3, r.code, H.describe(r))
    for _, m in ipairs(E.of_kind(E.results(out), "measurement")) do
      if m.params.faults.drop == 0 then
        assert.is_true(m.ok, m.error)
      else
        assert.is_false(m.ok)
        assert.equal("faults", m.step)
        assert.matches("^rank 0 %(.-%) faults: ENOTSUP: link %d+: faults: a tcp link has no device",
          m.error)
      end
    end
    H.rmtree(dir)
  end)
end)
