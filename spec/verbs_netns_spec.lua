-- verbs_netns_spec.lua - Debian's verbs programs, unmodified, server and
-- client in two network namespaces joined by a veth (made here: addresses
-- from 198.18.0.0/15, names with this run's pid, removed at the end, also
-- on failure), each through `tbrt exec --wire udp`: the soft device's
-- RoCEv2-over-UDP wire carries what spec/verbs_programs_spec.lua runs over
-- shared memory. Each program is checked on its own output, and the veth's
-- packet counters show the traffic crossed the cable.
--
-- The GID index a program is given (-g, perftest's -x) is found in its own
-- namespace's ibv_devinfo -v: the RoCE v2 GID of the veth's address. (The
-- soft device lists 127.0.0.1 first, as it does on one host; perftest's own
-- choice, the first IPv4 GID, would be that.) A device bound to the veth
-- (TBRT_SOFT_NETDEVS, as rxe is bound to its interface) has the veth's
-- addresses only, and perftest's own choice works: one case shows it.
--
-- Heavy (two namespaces, two programs per case): the normal build only
-- (TBRT_ASAN). Iteration counts are small: these prove the programs run,
-- `make bench` measures them.
local H = require("helpers")
local N = require("netns")
local X = require("programs")
local P = require("netns_programs")

local PROGRAMS = { "ibv_devinfo", "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong",
  "ibv_srq_pingpong", "ib_send_bw", "ib_send_lat", "ib_write_bw", "ib_write_lat", "ib_read_bw", "ib_read_lat",
  "ib_atomic_lat",
  "rping" }

local function skip_why()
  if os.getenv("TBRT_ASAN") then
    return "heavy namespace spec: runs under the normal build only (TBRT_ASAN is set)"
  end
  local missing = {}
  for _, p in ipairs(PROGRAMS) do
    if not X.have(p) then missing[#missing + 1] = p end
  end
  if #missing > 0 then
    return "not installed (scripts/deps.sh): " .. table.concat(missing, ", ")
  end
  return N.skip()
end

local contains = X.contains

local ok_pair = X.ok_pair

-- "  local address:  LID 0x0000, QPN 0xcf0bc1, PSN ..., GID ::ffff:a.b.c.d"
local function pingpong_ends(out)
  return out:match("local address:.-QPN (0x%x+)"), out:match("remote address:.-QPN (0x%x+)"),
    out:match("local address:[^\n]-GID (%S+)"), out:match("remote address:[^\n]-GID (%S+)")
end

local perftest_row = X.perftest_row

describe("Debian's verbs programs between two network namespaces (tbrt exec --wire udp)", function()
  local why = skip_why()
  local net, addr, gid
  local port = 18515
  local function next_port()
    port = port + 1
    return port
  end

  setup(function()
    if why then return end
    net = N.make{ hosts = 2 }
    addr = net.cables[1].addr
    gid = {}
    for i = 1, 2 do
      local g, err = P.gid_index(net.hosts[i], addr[i])
      if not g then
        net.close()     -- (teardown too; this is in case setup's failure skips it)
        net = nil
        error(err, 0)
      end
      gid[i] = tostring(g)
    end
  end)
  teardown(function()
    if net then
      net.close()
      assert.same({}, N.leftovers(), "namespaces left behind")
    end
  end)

  -- Both ends through tbrt exec; argv_of(i) for host i; the client is
  -- given the server's address. Returns the results and the packets the
  -- veth carried meanwhile.
  local function pair(argv_of, o)
    o = o or {}
    local p0 = P.packets(net)
    local srv, cli = P.pair(net, argv_of, { port = o.port, client_extra = o.client_extra or
      { addr[1] }, env_of = o.env_of })
    return srv, cli, P.packets(net) - p0
  end

  local function pingpong(prog, iters, extra)
    local p = next_port()
    local srv, cli, pkts = pair(function(i)
      local a = { prog, "-g", gid[i], "-n", tostring(iters), "-p", tostring(p) }
      for _, w in ipairs(extra or {}) do a[#a + 1] = w end
      return a
    end, { port = p })
    local d = ok_pair(srv, cli)
    for _, r in ipairs { srv, cli } do
      assert.matches(iters .. " iters in [%d.]+ seconds = [%d.]+ usec/iter", r.stdout, nil, d)
    end
    local sl, sr, slg, srg = pingpong_ends(srv.stdout)
    local cl, cr, clg, crg = pingpong_ends(cli.stdout)
    assert(sl and cl, d)
    assert.equal(sl, cr, d)
    assert.equal(cl, sr, d)
    -- each end's GID is its namespace's address, and the other end knows it
    assert.equal("::ffff:" .. addr[1], slg, d)
    assert.equal("::ffff:" .. addr[2], clg, d)
    assert.equal(slg, crg, d)
    assert.equal(clg, srg, d)
    assert.is_true(pkts >= 2 * iters, "the veth carried " .. pkts .. " packets\n" .. d)
    return srv, cli
  end

  describe("the pingpong tools", function()
    it("ibv_rc_pingpong, checking every byte (-c), and sleeping on the completion channel (-e)", function()
      if why then return pending(why) end
      pingpong("ibv_rc_pingpong", 100, { "-c" })
      pingpong("ibv_rc_pingpong", 100, { "-c", "-e" })
    end)

    it("ibv_rc_pingpong -N: the ibv_wr_* post API of ibv_create_qp_ex", function()
      if why then return pending(why) end
      pingpong("ibv_rc_pingpong", 100, { "-c", "-N" })
    end)

    it("ibv_uc_pingpong", function()
      if why then return pending(why) end
      pingpong("ibv_uc_pingpong", 100)
    end)

    it("ibv_ud_pingpong (address handles, the GRH in front of every receive)", function()
      if why then return pending(why) end
      pingpong("ibv_ud_pingpong", 100)
    end)

    it("ibv_srq_pingpong: 16 QPs sharing one receive queue, busy polling and sleeping (-e)", function()
      if why then return pending(why) end
      for _, extra in ipairs { {}, { "-e" } } do
        local srv, cli = pingpong("ibv_srq_pingpong", 100, extra)
        for _, r in ipairs { srv, cli } do
          local n = 0
          for _ in r.stdout:gmatch("local address:") do n = n + 1 end
          assert.equal(16, n, P.describe(srv, cli))   -- -q 16: one SRQ behind all of them
        end
      end
    end)
  end)

  describe("perftest", function()
    -- With -R, perftest's client connects its data QPs right after the
    -- two ends' handshake, while the server is still to listen for them: a
    -- server late to its listen (a loaded machine) rejects the request
    -- (RDMA_CM_EVENT_REJECTED, 8: nobody listens there, as the kernel's CM
    -- answers). perftest 4.5-0.17 (Debian 12) then retries with the CM ids
    -- it has just freed and crashes (its rdma_cm_destroy_cma frees the
    -- nodes that _rdma_cm_client_connection uses next; later perftest
    -- keeps them). That race is perftest's: the pair runs again, up to
    -- CM_TRIES times, only on that answer.
    local CM_TRIES = 3
    local function rejected_early(cli)
      return cli.stderr:find("RDMA_CM_EVENT_REJECTED; error: 8.", 1, true) ~= nil
    end

    -- args, then -x (unless rdma_cm chooses the GID) and -p for each end
    local function perftest(args, o)
      o = o or {}
      local srv, cli, pkts
      for _ = 1, o.cm and CM_TRIES or 1 do
        local p = next_port()
        srv, cli, pkts = pair(function(i)
          local a = {}
          for _, w in ipairs(args) do a[#a + 1] = w end
          if not o.cm and not o.netdev and not o.own_gid then
            a[#a + 1] = "-x"
            a[#a + 1] = gid[i]
          end
          a[#a + 1] = "-p"
          a[#a + 1] = tostring(p)
          return a
        end, { port = p, env_of = o.netdev and function(i)
          return { TBRT_SOFT_NETDEVS = net.cables[1].dev[i] }
        end })
        if not (o.cm and rejected_early(cli)) then break end
      end
      local d = ok_pair(srv, cli)
      local row = perftest_row(cli.stdout)
      assert(row, d)
      assert.equal(200, row[2], d)            -- #iterations
      assert.is_true(pkts >= 200, "the veth carried " .. pkts .. " packets\n" .. d)
      return srv, cli, row, d
    end
    local function bw(args, bytes, o)
      local srv, cli, row, d = perftest(args, o)
      assert.equal(bytes, row[1], d)          -- #bytes
      assert.is_true(row[4] > 0, d)           -- BW average [MB/s]
      return srv, cli, d
    end
    local function lat(args, bytes)
      local srv, cli, row, d = perftest(args)
      assert.equal(bytes or 2, row[1], d)
      assert.is_true(row[6] > 0, d)           -- t_avg [usec]
      return srv, cli, d
    end

    it("ib_send_bw and ib_send_lat over RC", function()
      if why then return pending(why) end
      local srv, _, d = bw({ "ib_send_bw", "-n", "200" }, 65536)
      contains(srv.stdout, "Connection type : RC", d)
      contains(srv.stdout, "Device         : softib0", d)
      lat({ "ib_send_lat", "-n", "200" })
    end)

    it("ib_write_bw and ib_write_lat over RC", function()
      if why then return pending(why) end
      bw({ "ib_write_bw", "-n", "200" }, 65536)
      lat({ "ib_write_lat", "-n", "200" })
    end)

    it("ib_read_bw and ib_read_lat over RC", function()
      if why then return pending(why) end
      bw({ "ib_read_bw", "-n", "200" }, 65536)
      lat({ "ib_read_lat", "-n", "200" })
    end)

    it("ib_send_bw and ib_write_bw over UC", function()
      if why then return pending(why) end
      local srv, _, d = bw({ "ib_send_bw", "-n", "200", "-c", "UC" }, 65536)
      contains(srv.stdout, "Connection type : UC", d)
      bw({ "ib_write_bw", "-n", "200", "-c", "UC" }, 65536)
    end)

    it("ib_send_bw over UD: one port MTU (4096) per datagram", function()
      if why then return pending(why) end
      local srv, _, d = bw({ "ib_send_bw", "-n", "200", "-c", "UD" }, 4096)
      contains(srv.stdout, "Connection type : UD", d)
    end)

    it("ib_atomic_lat: FETCH_AND_ADD and CMP_AND_SWAP over RC", function()
      if why then return pending(why) end
      for _, a in ipairs { "FETCH_AND_ADD", "CMP_AND_SWAP" } do
        local srv, _, d = lat({ "ib_atomic_lat", "-n", "200", "-A", a }, 8)
        contains(srv.stdout, "Atomic " .. a .. " Latency Test", d)
      end
    end)

    it("ib_send_bw --use-srq: the receives come from a shared receive queue", function()
      if why then return pending(why) end
      local srv, _, d = bw({ "ib_send_bw", "-n", "200", "--use-srq" }, 65536)
      contains(srv.stdout, "Using SRQ      : ON", d)
    end)

    -- "GID: 00:...:255:255:198:19:x:1": each end's is its veth's address
    local function perftest_gid(a)
      local t = {}
      for n in a:gmatch("%d+") do t[#t + 1] = string.format("%02d", tonumber(n)) end
      return "255:255:" .. table.concat(t, ":")
    end

    -- ib_send_bw without -x: both ends chose their veth's address
    local function own_gid_choice(o)
      if why then return pending(why) end
      local srv, cli, d = bw({ "ib_send_bw", "-n", "200" }, 65536, o)
      for _, r in ipairs { srv, cli } do
        contains(r.stdout, perftest_gid(addr[1]), d)
        contains(r.stdout, perftest_gid(addr[2]), d)
      end
    end

    it("perftest's own GID choice (no -x) when each device is bound to its veth (TBRT_SOFT_NETDEVS)",
      function() own_gid_choice{ netdev = true } end)

    it("perftest's own GID choice (no -x) on a device of all addresses: 127.0.0.1 comes last",
      function() own_gid_choice{ own_gid = true } end)

    it("ib_send_bw -R: rdma_cm (tbrt's librdmacm over TCP) resolves the address to the soft GID", function()
      if why then return pending(why) end
      local srv, cli, d = bw({ "ib_send_bw", "-R", "-n", "200" }, 65536, { cm = true })
      contains(cli.stdout, "Data ex. method : rdma_cm", d)
      -- its ids go cleanly (the peer's hang-up leaves an event it never reads)
      for _, r in ipairs { srv, cli } do
        assert.is_nil((r.stdout .. r.stderr):find("Failed to destroy", 1, true), d)
      end
    end)
  end)

  describe("the RDMA CM", function()
    it("rping: RDMA READ and WRITE of 10 pings, data checked (-V)", function()
      if why then return pending(why) end
      local p = next_port()
      local srv, cli, pkts = pair(function(i)
        if i == 1 then
          return { "rping", "-s", "-a", addr[1], "-p", tostring(p), "-C", "10", "-V" }
        end
        return { "rping", "-c", "-a", addr[1], "-p", tostring(p), "-C", "10", "-V", "-v" }
      end, { port = p, client_extra = {} })
      local d = ok_pair(srv, cli)
      for i = 0, 9 do contains(cli.stdout, "ping data: rdma-ping-" .. i .. ": ", d) end
      contains(srv.stderr, "server DISCONNECT EVENT", d)
      assert.is_true(pkts >= 40, "the veth carried " .. pkts .. " packets\n" .. d)
    end)
  end)
end)
