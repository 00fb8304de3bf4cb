-- matrix_ssh_spec.lua - the ssh launcher through a real OpenSSH: the spec
-- starts an sshd (openssh-server) in each of two namespaces it makes, with
-- host and user keys it generates, and the matrix reaches its agents only
-- through ssh (one master connection per host). A host without an sshd
-- fails the run at once with ssh's own words. Heavy: the normal build only.
local H = require("helpers")
local E = require("matrix_env")

local function ssh_matrix(hosts, options, extra)
  local quoted = {}
  for i, o in ipairs(options) do quoted[i] = string.format("%q", o) end
  local hl = {}
  for i, h in ipairs(hosts) do hl[i] = string.format("%q", h) end
  return string.format([[return {
  name = "ssh2",
  hosts = { ssh = { %s, options = { %s }, connect_timeout = 5 } },
  patterns = { "pairwise", "ring" },
  axes = { device = { "tcp" }, size = { 4096, 65536 } },
  measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 21 },
  timeout = 30, %s
}]], table.concat(hl, ", "), table.concat(quoted, ", "), extra or "")
end

describe("tbrt matrix over ssh", function()
  local sshd, why
  setup(function()
    why = E.heavy_skip() or E.netns_skip()
    if not why then sshd, why = E.sshd(2) end
  end)
  teardown(function() if sshd then sshd:stop() end end)

  it("runs the matrix through sshd in two namespaces", function()
    if not sshd then return pending(why) end
    local r, out, _, dir = E.run_matrix(ssh_matrix(sshd.hosts, sshd.options), {}, { timeout = 120 })
    assert.equal(0, r.code, H.describe(r))
    local list = E.results(out)
    local run = E.of_kind(list, "run")[1]
    assert.equal("ssh", run.launcher)
    for i, h in ipairs(run.hosts) do
      assert.equal("ssh " .. sshd.hosts[i], h.where)
      assert.equal(sshd.net.addrs[i], h.addr)
    end
    local cells_ = E.of_kind(list, "cell")
    assert.equal(4, #cells_)
    for _, c in ipairs(cells_) do assert.equal("ok", c.status, c.cell) end
    for _, m in ipairs(E.of_kind(list, "measurement")) do
      assert.is_true(m.ok, m.error)
      assert.is_true(m.bw_gbps.push > 0)
    end
    -- the agents ran under sshd (their parent is an sshd session), and are gone
    for _, h in ipairs(run.hosts) do
      assert.is_false(require("luv").kill(h.pid, 0) == 0, "agent " .. h.pid .. " still runs")
    end
    assert(E.png_ok(out .. "/plots/heatmap-pairwise-device_tcp-bw.png"))
    H.rmtree(dir)
  end)

  it("fails at once, with ssh's words, when a host has no sshd", function()
    if not sshd then return pending(why) end
    local hosts = { sshd.hosts[1], "root@" .. sshd.net.gateway }   -- nothing listens there
    local t0 = H.now()
    local r, _, _, dir = E.run_matrix(ssh_matrix(hosts, sshd.options), {}, { timeout = 60 })
    assert.equal(1, r.code, H.describe(r))
    assert.matches("ssh hosts: no master connection to root@" .. sshd.net.gateway:gsub("%.", "%%.") ..
      " %(exit 255%): .*Connection refused", r.stderr)
    assert.is_true(H.now() - t0 < 30)
    H.rmtree(dir)
  end)
end)
