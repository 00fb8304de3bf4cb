-- verbs_programs_spec.lua - Debian's own verbs programs, unmodified, on
-- tbrt's libibverbs through `tbrt exec` (bindings/verbs): ibv_devices,
-- ibv_devinfo, the ibv_*_pingpong tools, perftest, and the RDMA CM ones
-- (rping, ucmatose, rdma_server/rdma_client, perftest -R) on tbrt's
-- librdmacm, each checked on its own output, server and client as two
-- processes over the soft device's shared-memory wire, including what
-- phase 2 gave the device: shared receive queues (ibv_srq_pingpong,
-- ib_send_bw --use-srq) and RC atomics (ib_atomic_lat/bw). Iteration counts
-- are small: these prove the programs run, `make bench` measures them.
local H = require("helpers")
local X = require("programs")

local PROGRAMS = { "ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_uc_pingpong",
  "ibv_ud_pingpong", "ibv_srq_pingpong", "ib_send_bw", "ib_send_lat", "ib_write_bw",
  "ib_write_lat", "ib_read_bw", "ib_read_lat", "ib_atomic_lat", "ib_atomic_bw", "rping", "ucmatose",
  "rdma_server", "rdma_client" }

local missing = {}
for _, p in ipairs(PROGRAMS) do
  if not X.have(p) then missing[#missing + 1] = p end
end

local contains = X.contains

local ok_pair = X.ok_pair

-- "  local address:  LID 0x0000, QPN 0xcf0bc1, ..." -> "0xcf0bc1", and the remote
local function pingpong_qpns(out)
  return out:match("local address:.-QPN (0x%x+)"), out:match("remote address:.-QPN (0x%x+)")
end

-- The pingpong tools' summary: both ends moved iters messages and agree on
-- each other's queue pair numbers.
local function check_pingpong(srv, cli, iters)
  local d = ok_pair(srv, cli)
  for _, r in ipairs { srv, cli } do
    assert.matches(iters .. " iters in [%d.]+ seconds = [%d.]+ usec/iter", r.stdout, nil, d)
    assert.matches("bytes in [%d.]+ seconds = [%d.]+ Mbit/sec", r.stdout, nil, d)
  end
  local sl, sr = pingpong_qpns(srv.stdout)
  local cl, cr = pingpong_qpns(cli.stdout)
  assert(sl and cl, d)
  assert.equal(sl, cr, d)
  assert.equal(cl, sr, d)
end

local perftest_row = X.perftest_row

describe("Debian's verbs programs on tbrt's libibverbs (tbrt exec)", function()
  if #missing > 0 then
    it("need ibverbs-utils and perftest (scripts/deps.sh)", function()
      pending("not installed: " .. table.concat(missing, ", "))
    end)
    return
  end

  describe("ibv_devices and ibv_devinfo", function()
    it("ibv_devices lists the soft devices with their node GUIDs", function()
      local r = X.exec({ "ibv_devices" })
      assert.equal(0, r.code, H.describe(r))
      assert.matches("softib0%s+0254420000000000", r.stdout)
      assert.is_nil(r.stdout:find("softib1", 1, true))
      r = X.exec({ "ibv_devices" }, { exec = { "--devices", "3" } })
      assert.equal(0, r.code, H.describe(r))
      assert.matches("softib1%s+0254420000000100", r.stdout)
      assert.matches("softib2%s+0254420000000200", r.stdout)
    end)

    it("ibv_devinfo -v shows a non-Mellanox RoCE device with typed GIDs", function()
      local r = X.exec({ "ibv_devinfo", "-v" })
      assert.equal(0, r.code, H.describe(r))
      local o = r.stdout
      contains(o, "hca_id:\tsoftib0")
      contains(o, "fw_ver:\t\t\t\ttbrt-soft 0.1 linux-rc")
      contains(o, "vendor_id:\t\t\t0x0000")          -- never Mellanox's 0x02c9
      contains(o, "vendor_part_id:\t\t\t2")
      contains(o, "atomic_cap:\t\t\tATOMIC_HCA (1)")
      contains(o, "max_srq:\t\t\t1024")
      contains(o, "max_srq_wr:\t\t\t32768")
      contains(o, "max_srq_sge:\t\t\t30")
      contains(o, "max_sge:\t\t\t30")
      contains(o, "hca_core_clock:\t\t\t1000000kHZ")  -- the extended query answered
      contains(o, "state:\t\t\tPORT_ACTIVE (4)")
      contains(o, "link_layer:\t\tEthernet")
      contains(o, "::ffff:127.0.0.1, RoCE v2")
      assert.equal("", r.stderr)
    end)

    it("ibv_devinfo under apple-uc: port 1 DOWN, port 2 ACTIVE", function()
      local r = X.exec({ "ibv_devinfo" }, { exec = { "--personality", "apple-uc" } })
      assert.equal(0, r.code, H.describe(r))
      contains(r.stdout, "tbrt-soft 0.1 apple-uc")
      contains(r.stdout, "phys_port_cnt:\t\t\t2")
      assert.matches("port:\t1\n\t\t\tstate:\t\t\tPORT_DOWN %(1%)", r.stdout)
      assert.matches("port:\t2\n\t\t\tstate:\t\t\tPORT_ACTIVE %(4%)", r.stdout)
    end)
  end)

  describe("the pingpong tools", function()
    -- GID 3 is ::ffff:127.0.0.1 RoCE v2 on linux-rc (ibv_devinfo above)
    it("ibv_rc_pingpong, busy polling, checking every byte (-c)", function()
      local srv, cli = X.pair({ "ibv_rc_pingpong", "-g", "3", "-n", "300", "-c" })
      check_pingpong(srv, cli, 300)
    end)

    it("ibv_rc_pingpong -e: sleeping on the completion channel", function()
      local srv, cli = X.pair({ "ibv_rc_pingpong", "-g", "3", "-n", "300", "-e", "-c" })
      check_pingpong(srv, cli, 300)
    end)

    it("ibv_rc_pingpong -N: the ibv_wr_* post API of ibv_create_qp_ex", function()
      local srv, cli = X.pair({ "ibv_rc_pingpong", "-g", "3", "-n", "300", "-N", "-c" })
      check_pingpong(srv, cli, 300)
    end)

    it("ibv_rc_pingpong -t: ibv_create_cq_ex with completion timestamps", function()
      local srv, cli = X.pair({ "ibv_rc_pingpong", "-g", "3", "-n", "100", "-t" })
      check_pingpong(srv, cli, 100)
      for _, r in ipairs { srv, cli } do
        assert.matches("Average receive completion clock cycles = [%d.]+", r.stdout)
      end
    end)

    it("ibv_uc_pingpong", function()
      local srv, cli = X.pair({ "ibv_uc_pingpong", "-g", "3", "-n", "300" })
      check_pingpong(srv, cli, 300)
    end)

    it("ibv_ud_pingpong (address handles, the GRH in front of every receive)", function()
      local srv, cli = X.pair({ "ibv_ud_pingpong", "-g", "3", "-n", "300" })
      check_pingpong(srv, cli, 300)
    end)

    it("under apple-uc, ibv_uc_pingpong meets Apple's rule for memory (TN3205) before anything else", function()
      -- its buffer is registered LOCAL_WRITE only; Apple's provider refuses that
      local r = X.exec({ "ibv_uc_pingpong", "-g", "1", "-i", "2" },
        { exec = { "--personality", "apple-uc", "--debug" } })
      assert.equal(1, r.code, H.describe(r))
      contains(r.stderr, "Couldn't register MR")
      contains(r.stderr, "tbrt verbs: ibv_reg_mr: EINVAL: soft0 (apple-uc): reg_mr: access 0x1 " ..
        "lacks LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE")
    end)

    it("ibv_srq_pingpong: 16 QPs sharing one receive queue, busy polling and sleeping (-e)", function()
      -- 1 MiB messages checked (-c): copies the receiving process shares,
      -- each finished into the SRQ's receive by whoever makes it whole
      for _, extra in ipairs { {}, { "-e" }, { "-s", "1048576", "-c" } } do
        local argv = { "ibv_srq_pingpong", "-g", "3", "-n", "300" }
        for _, w in ipairs(extra) do argv[#argv + 1] = w end
        local srv, cli = X.pair(argv)
        local d = ok_pair(srv, cli)
        for _, r in ipairs { srv, cli } do
          assert.matches("300 iters in [%d.]+ seconds = [%d.]+ usec/iter", r.stdout, nil, d)
          local n = 0
          for _ in r.stdout:gmatch("local address:") do n = n + 1 end
          assert.equal(16, n, d)            -- -q 16: one SRQ behind all of them
        end
      end
    end)
  end)

  describe("perftest", function()
    local function bw(args, bytes)
      local srv, cli = X.pair(args)
      local d = ok_pair(srv, cli)
      local row = perftest_row(cli.stdout)
      assert(row, d)
      assert.equal(bytes, row[1], d)          -- #bytes
      assert.equal(200, row[2], d)            -- #iterations
      assert.is_true(row[4] > 0, d)           -- BW average [MB/s]
      return srv, cli
    end
    local function lat(args)
      local srv, cli = X.pair(args)
      local d = ok_pair(srv, cli)
      local row = perftest_row(cli.stdout)
      assert(row, d)
      assert.equal(2, row[1], d)
      assert.equal(200, row[2], d)
      assert.is_true(row[6] > 0, d)           -- t_avg [usec]
      return srv, cli
    end

    it("ib_send_bw and ib_send_lat over RC", function()
      local srv = bw({ "ib_send_bw", "-n", "200" }, 65536)
      contains(srv.stdout, "Connection type : RC")
      contains(srv.stdout, "Device         : softib0")
      lat({ "ib_send_lat", "-n", "200" })
    end)

    it("ib_write_bw and ib_write_lat over RC", function()
      bw({ "ib_write_bw", "-n", "200" }, 65536)
      lat({ "ib_write_lat", "-n", "200" })
    end)

    it("ib_read_bw and ib_read_lat over RC", function()
      bw({ "ib_read_bw", "-n", "200" }, 65536)
      lat({ "ib_read_lat", "-n", "200" })
    end)

    it("ib_send_bw and ib_write_bw over UC, ib_send_bw over UD", function()
      local srv = bw({ "ib_send_bw", "-n", "200", "-c", "UC" }, 65536)
      contains(srv.stdout, "Connection type : UC")
      bw({ "ib_write_bw", "-n", "200", "-c", "UC" }, 65536)
      srv = bw({ "ib_send_bw", "-n", "200", "-c", "UD" }, 4096)  -- one MTU per datagram
      contains(srv.stdout, "Connection type : UD")
    end)

    it("ib_atomic_lat (FETCH_AND_ADD, CMP_AND_SWAP) and ib_atomic_bw over RC", function()
      for _, a in ipairs { "FETCH_AND_ADD", "CMP_AND_SWAP" } do
        local srv, cli = X.pair({ "ib_atomic_lat", "-n", "200", "-A", a })
        local d = ok_pair(srv, cli)
        contains(srv.stdout, "Atomic " .. a .. " Latency Test", d)
        local row = perftest_row(cli.stdout)
        assert(row, d)
        assert.equal(8, row[1], d)              -- #bytes: an atomic's 8
        assert.equal(200, row[2], d)
        assert.is_true(row[6] > 0, d)
      end
      local srv, cli = X.pair({ "ib_atomic_bw", "-n", "200" })
      local d = ok_pair(srv, cli)
      local row = perftest_row(cli.stdout)
      assert(row, d)
      assert.equal(8, row[1], d)
      assert.equal(200, row[2], d)
      assert.is_true(row[4] > 0, d)
    end)

    it("ib_send_bw --use-srq: the receives come from a shared receive queue", function()
      local srv = bw({ "ib_send_bw", "-n", "200", "--use-srq" }, 65536)
      contains(srv.stdout, "Using SRQ      : ON")
    end)
  end)

  describe("the RDMA CM (tbrt's librdmacm over TCP)", function()
    local function ends(srv, cli)
      local d = ok_pair(srv, cli)
      return d
    end

    it("rping: RDMA READ and WRITE of 10 pings, data checked (-V), rdma-cm making the QP", function()
      local port = X.free_port()
      local srv, cli = X.pair({}, { port = port, port_flag = false, address = false,
        server_argv = { "rping", "-s", "-a", "127.0.0.1", "-p", tostring(port), "-C", "10", "-V" },
        client_argv = { "rping", "-c", "-a", "127.0.0.1", "-p", tostring(port), "-C", "10", "-V",
          "-v" } })
      local d = ends(srv, cli)
      for i = 0, 9 do contains(cli.stdout, "ping data: rdma-ping-" .. i .. ": ", d) end
      contains(srv.stderr, "server DISCONNECT EVENT", d)
    end)

    it("rping -q: the program makes and moves its own QP (rdma_init_qp_attr, rdma_establish)", function()
      local port = X.free_port()
      local srv, cli = X.pair({}, { port = port, port_flag = false, address = false,
        server_argv = { "rping", "-s", "-q", "-a", "127.0.0.1", "-p", tostring(port), "-C", "5", "-v" },
        client_argv = { "rping", "-c", "-q", "-a", "127.0.0.1", "-p", tostring(port), "-C", "5", "-v" } })
      local d = ends(srv, cli)
      contains(cli.stdout, "ping data: rdma-ping-4: ", d)
      contains(srv.stdout, "server ping data: rdma-ping-4: ", d)
    end)

    it("ucmatose: connect, sends both ways, disconnect", function()
      local port = X.free_port()
      local srv, cli = X.pair({}, { port = port, port_flag = false, address = false,
        server_argv = { "ucmatose", "-p", tostring(port) },
        client_argv = { "ucmatose", "-s", "127.0.0.1", "-p", tostring(port) } })
      local d = ends(srv, cli)
      for _, r in ipairs { srv, cli } do
        contains(r.stdout, "data transfers complete", d)
        contains(r.stdout, "return status 0", d)
      end
      contains(srv.stdout, "disconnected", d)
    end)

    it("rdma_server / rdma_client: the synchronous API (rdma_getaddrinfo, rdma_create_ep, " ..
      "rdma_get_request)", function()
      local port = X.free_port()
      local srv, cli = X.pair({}, { port = port, port_flag = false, address = false,
        server_argv = { "rdma_server", "-p", tostring(port) },
        client_argv = { "rdma_client", "-s", "127.0.0.1", "-p", tostring(port) } })
      local d = ends(srv, cli)
      contains(srv.stdout, "rdma_server: end 0", d)
      contains(cli.stdout, "rdma_client: end 0", d)
    end)

    -- (whether the silent ones are closed as the oldest of too many or for
    -- saying nothing depends on how fast the kernel lets them in; either
    -- way the client gets in)
    it("a listener survives strangers: garbage, a lying length, 70 silent connections", function()
      local uv = require("luv")
      local task = require("tbrt.task")
      local port = X.free_port()
      local srv, cli
      task.run(function()
        local ts = task.spawn(function()
          return X.exec({ "rping", "-s", "-a", "127.0.0.1", "-p", tostring(port), "-C", "3" },
            { exec = { "--debug" } })
        end)
        local deadline = H.now() + X.LISTEN_TIMEOUT
        while not X.listening(port) and H.now() < deadline do task.sleep(0.02) end
        local socks, connected, closed = {}, 0, 0
        local function stranger(bytes)
          local s = uv.new_tcp()
          s:connect("127.0.0.1", port, function(err)
            if err then return end
            connected = connected + 1
            if bytes then
              s:write(bytes)
              s:read_start(function(_, data) if not data then closed = closed + 1 end end)
            end
          end)
          socks[#socks + 1] = s
        end
        -- first the liars, until the server has hung up on both
        stranger("GET / HTTP/1.0\r\n\r\n")                  -- not the CM at all
        stranger("TBCM\1\1\255\255" .. string.rep("x", 300))  -- a length past the limit
        deadline = H.now() + 10
        while closed < 2 and H.now() < deadline do task.sleep(0.02) end
        -- then connections that never say a word (rping's backlog is 3: the
        -- kernel lets them in a few at a time, retrying the rest)
        for _ = 1, 70 do stranger(nil) end
        deadline = H.now() + 15
        while connected < 72 and H.now() < deadline do task.sleep(0.05) end
        task.sleep(0.2)
        cli = X.exec({ "rping", "-c", "-a", "127.0.0.1", "-p", tostring(port), "-C", "3", "-v" })
        for _, s in ipairs(socks) do s:close() end
        srv = ts:join(X.TIMEOUT + 10)
      end)
      local d = ok_pair(srv, cli)
      contains(cli.stdout, "ping data: rdma-ping-2: ", d)
      contains(srv.stderr, "message magic 0x47455420 != TBCM", d)
      contains(srv.stderr, "message of 65535 bytes > ", d)
    end)

    it("perftest -R: ib_send_bw, ib_send_lat, ib_write_bw, ib_read_lat, and ib_send_bw over UD", function()
      for _, argv in ipairs {
        { "ib_send_bw", "-R", "-n", "200" }, { "ib_send_lat", "-R", "-n", "200" },
        { "ib_write_bw", "-R", "-n", "200" }, { "ib_read_lat", "-R", "-n", "200" },
        { "ib_send_bw", "-R", "-n", "200", "-c", "UD" } } do
        local srv, cli = X.pair(argv)
        local d = ok_pair(srv, cli)
        contains(cli.stdout, "Data ex. method : rdma_cm", d)
        for _, r in ipairs { srv, cli } do   -- its ids go cleanly (verbs_cm_spec)
          assert.is_nil((r.stdout .. r.stderr):find("Failed to destroy", 1, true), d)
        end
        local row = perftest_row(cli.stdout)
        assert(row, d)
        assert.equal(200, row[2], d)
      end
    end)
  end)
end)
