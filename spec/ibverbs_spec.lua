-- ibverbs_spec.lua - the ibverbs device (core/ibverbs): libibverbs loaded at
-- run time. Without the library, with this machine's rdma-core (no RDMA
-- devices here), and end to end over tbrt's own libibverbs
-- build/lib/tbrt/verbs/libibverbs.so.1 (bindings/verbs: libibverbs on top of
-- soft devices) and its Apple flavor lib/tbrt/apple/librdma.so: listing, opening,
-- queries, the completion fd, error completions, UD address handles, links
-- in one process and between two, teardown order, and every failing
-- libibverbs call. The library is chosen once per process from
-- $TBRT_IBVERBS_LIB, so each case runs a child `tbrt` (ibverbs/child.lua)
-- that prints what it saw as JSON.
local cjson = require("cjson")
local H = require("helpers")

local OURS = H.build .. "/lib/tbrt/verbs/libibverbs.so.1"
local APPLE = H.build .. "/lib/tbrt/apple/librdma.so"
local CHILD = H.root .. "/spec/support/ibverbs/child.lua"
local LOOPBACK = "::ffff:127.0.0.1"
local FLAVOR_APPLE, FLAVOR_LINUX = 1, 2
local ENODATA = 61
local LIB_ENV = { "TBRT_IBVERBS_LIB", "TBRT_VERBS_DEVICES", "TBRT_VERBS_PERSONALITY",
  "TBRT_VERBS_COMPAT_CONTEXT", "TBRT_VERBS_FAIL", "TBRT_DEBUG", "TBRT_DEVICE", "SYSFS_PATH" }

-- Run child.lua MODE ARGS with only the given library settings; its RESULT.
-- TBRT_VERBS_FAIL is always set (empty: no failure), so the library checks
-- it on its data path too and the child can inject failures there.
local function child(args, changes, timeout)
  local env = {}
  for _, k in ipairs(LIB_ENV) do env[k] = false end
  env.TBRT_VERBS_FAIL = ""
  for k, v in pairs(changes or {}) do env[k] = v end
  local r = H.run_tbrt({ CHILD, unpack(args) }, { env = env, timeout = timeout })
  assert(r.code == 0 and not r.timed_out, H.describe(r))
  local json = r.stdout:match("RESULT (%b{})")
  assert(json, "no RESULT line\n" .. H.describe(r))
  return cjson.decode(json), r
end

-- One run of a mode serves several tests.
local memo = {}
local function once(key, args, changes)
  if not memo[key] then memo[key] = { child(args, changes) } end
  return unpack(memo[key])
end

local function contains(haystack, needle)
  assert(haystack:find(needle, 1, true), string.format("%q\ndoes not contain\n%q", haystack, needle))
end

local function teardown_calls(trace, from)
  -- the lifecycle calls from the first destroy on
  return trace:sub((trace:find(from, 1, true)))
end

describe("ibverbs device", function()
  describe("without libibverbs", function()
    it("lists one unusable entry naming the library and dlerror, and a probe says so", function()
      local res = child({ "list", "mlx5_0", "ibverbs" },
        { TBRT_IBVERBS_LIB = "/nonexistent/libibverbs.so.1" })
      assert.equal(1, #res.devices)
      local d = res.devices[1]
      assert.equal("ibverbs", d.name)
      assert.is_false(d.usable)
      contains(d.why, "cannot load /nonexistent/libibverbs.so.1 (TBRT_IBVERBS_LIB)")
      contains(d.why, "No such file or directory")
      -- a link asked for device = "ibverbs" fails naming the device and why
      contains(res.probe, "ENODEV: link ")
      contains(res.probe, "no usable RDMA device: ibverbs: cannot load /nonexistent/libibverbs.so.1")
      -- any other name is an ibverbs name: it cannot exist either
      contains(res.opens.mlx5_0, "ENODEV: mlx5_0: no such device")
      contains(res.opens.mlx5_0, "no ibverbs library: cannot load")
      contains(res.opens.ibverbs, "no usable ibverbs device: ibverbs: cannot load")
    end)

    it("refuses a library without the verbs, naming the missing symbol", function()
      local res = child({ "list" }, { TBRT_IBVERBS_LIB = "libc.so.6" })
      assert.is_false(res.devices[1].usable)
      assert.equal("libc.so.6 is not a usable libibverbs: it lacks ibv_get_device_list",
        res.devices[1].why)
    end)
  end)

  describe("with this machine's libibverbs", function()
    it("loads it without a word on stderr and says why there is no device", function()
      local res, r = child({ "list", "mlx5_0" }, {})
      assert.equal("", r.stderr)
      local kernel = io.open("/sys/class/infiniband_verbs/abi_version")
      if kernel then
        -- a machine with RDMA: every device is listed by its name
        kernel:close()
        for _, d in ipairs(res.devices) do
          assert.equal("ibverbs", d.kind)
          assert.not_equal("ibverbs", d.name, d.why)
        end
        return
      end
      assert.equal(1, #res.devices)
      local d = res.devices[1]
      assert.is_false(d.usable)
      assert.equal("linux", d.flavor)
      contains(d.why, "libibverbs found no RDMA devices (libibverbs.so.1")
      contains(d.why, "/sys/class/infiniband_verbs is absent")
      contains(res.probe, "no usable RDMA device: ibverbs: libibverbs found no RDMA devices")
      contains(res.opens.mlx5_0, "mlx5_0: no such device")
    end)
  end)

  describe("over tbrt's libibverbs", function()
    local OURS_ONLY = { TBRT_IBVERBS_LIB = OURS }

    it("lists its devices as usable LINUX ibverbs devices, or none with the reason", function()
      local res = child({ "list", "softib1", "nosuch0", "softx" },
        { TBRT_IBVERBS_LIB = OURS, TBRT_VERBS_DEVICES = "2" })
      assert.same({ "softib0", "softib1" }, { res.devices[1].name, res.devices[2].name })
      for _, d in ipairs(res.devices) do
        assert.is_true(d.usable)
        assert.equal("ibverbs", d.kind)
        assert.equal("linux", d.flavor)
        assert.equal("", d.personality)
      end
      assert.equal("opened softib1", res.opens.softib1)
      -- names that exist nowhere; "softx" is not soft<N>, so ibverbs answers
      assert.equal("ENODEV: nosuch0: no such device (not soft<N> or mlx5:..., and libibverbs " ..
        "lists only softib0, softib1)", res.opens.nosuch0)
      contains(res.opens.softx, "softx: no such device")
      local none = child({ "list" }, { TBRT_IBVERBS_LIB = OURS, TBRT_VERBS_DEVICES = "0" })
      assert.equal(1, #none.devices)
      assert.is_false(none.devices[1].usable)
      contains(none.devices[1].why, "libibverbs found no RDMA devices (" .. OURS .. ")")
    end)

    it("explains an empty list from the sysfs libibverbs reads ($SYSFS_PATH)", function()
      local dir = H.tmpdir()
      local function why(lib, dirs)
        local sys = dir .. "/sys" .. #dirs
        for _, d in ipairs(dirs) do os.execute("mkdir -p " .. sys .. "/class/" .. d) end
        local res = child({ "list", "softib0" }, { TBRT_IBVERBS_LIB = lib, TBRT_VERBS_DEVICES = "0",
          SYSFS_PATH = sys })
        return res.devices[1].why, res.opens.softib0, sys
      end
      local w, open, sys = why(OURS, {})
      contains(w, "the kernel offers no RDMA verbs: " .. sys .. "/class/infiniband_verbs is absent")
      contains(open, "softib0: no such device (not soft<N> or mlx5:..., and libibverbs found no")
      w, _, sys = why(OURS, { "infiniband_verbs" })
      contains(w, sys .. "/class/infiniband is absent: the kernel has no RDMA device")
      w, _, sys = why(OURS, { "infiniband_verbs", "infiniband" })
      contains(w, "the devices in " .. sys .. "/class/infiniband have no user-space provider")
      w = why(APPLE, {})
      contains(w, "is RDMA over Thunderbolt enabled? (TN3205: `rdma_ctl enable` in macOS Recovery")
      H.rmtree(dir)
    end)

    it("queries the device, ports and typed GIDs through the extended context", function()
      local res = once("verbs", { "verbs", "1" }, OURS_ONLY)
      assert.equal("ibverbs", res.kind)
      assert.equal("", res.personality)
      assert.equal(FLAVOR_LINUX, res.flavor)
      assert.equal(1, res.phys_port_cnt)
      assert.same({ state = "ACTIVE", gid_tbl_len = 256, mtu = 4096 }, res.ports[1])
      assert.equal(LOOPBACK, res.gid_text)
      assert.equal(0, res.gid_rc)             -- typed: _ibv_query_gid_ex
      assert.equal(2, res.gid_type)           -- IBV_GID_TYPE_ROCE_V2
      assert.equal(-ENODATA, res.empty_gid_rc)
      assert.equal("EINVAL: softib0: query_port 9: Invalid argument", res.bad_port)
    end)

    it("moves data over RC and makes the armed completion fd readable", function()
      local res = once("verbs", { "verbs", "1" }, OURS_ONLY)
      assert.same({ status = "IBV_WC_SUCCESS", opcode = "RECV", byte_len = 18, src_ok = true,
        data = "hello over ibverbs" }, res.recv)
      assert.is_false(res.fd_readable_before)
      assert.is_true(res.fd_readable_after)
      assert.equal(1, res.acked)
      assert.is_false(res.fd_readable_acked)
    end)

    it("passes error completions through with the soft device's status and vendor_err", function()
      local res = once("verbs", { "verbs", "1" }, OURS_ONLY)
      local statuses = {}
      for i, w in ipairs(res.errors_ibverbs) do
        local s = res.errors_soft[i]
        assert.equal(s.status, w.status)
        assert.equal(s.opcode, w.opcode)
        assert.equal(s.vendor_err, w.vendor_err)
        assert.equal(string.format("provider vendor_err 0x%x", w.vendor_err), w.why)
        statuses[#statuses + 1] = w.status
      end
      assert.same({ "IBV_WC_LOC_LEN_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_WR_FLUSH_ERR" },
        statuses)
    end)

    it("sends a UD datagram through the library's own address handle", function()
      local res = once("verbs", { "verbs", "1" }, OURS_ONLY)
      assert.same({ status = "IBV_WC_SUCCESS", byte_len = 40 + 8, data = "datagram" }, res.ud)
      assert.equal("EINVAL: softib0: post_send: UD work request 0 (wr_id 4) has no address " ..
        "handle (wr.ud.ah = tbrt_ah_handle(ah))", res.ud_without_ah)
    end)

    it("destroys what a caller left open, children first, when the device closes", function()
      local res = once("verbs", { "verbs", "1" }, OURS_ONLY)
      assert.equal("ibv_destroy_qp,ibv_destroy_qp,ibv_dereg_mr,ibv_destroy_cq," ..
        "ibv_destroy_comp_channel,ibv_dealloc_pd,ibv_close_device", res.close_trace)
    end)

    it("queries ports through the exported call on a context without extensions", function()
      local res = child({ "verbs", "1" }, { TBRT_IBVERBS_LIB = OURS, TBRT_VERBS_COMPAT_CONTEXT = "1" })
      assert.equal("ACTIVE", res.ports[1].state)
      assert.equal(256, res.ports[1].gid_tbl_len)
      local verbs_once = once("verbs", { "verbs", "1" }, OURS_ONLY)
      assert.is_nil(verbs_once.trace:find("ibv_query_port,", 1, true))
      contains(res.trace, "ibv_open_device,ibv_query_port,")
      assert.is_nil(res.trace:find("verbs_context.query_port", 1, true))
    end)

    it("runs a link in one process: GID selection, activation, data, teardown order", function()
      local res = child({ "link" }, OURS_ONLY)
      for _, side in ipairs { res.a, res.b } do
        assert.equal("softib0", side.device)
        assert.equal("ibverbs", side.kind)
        assert.equal(FLAVOR_LINUX, side.flavor)
        assert.equal(2, side.qp_type)         -- RC
        assert.equal(2, side.framing)         -- variable
        assert.equal(3, side.state)           -- READY
        assert.matches("^softib0 port 1, GID%[%d+%] ::ffff:127%.0%.0%.1 RoCEv2 matches the " ..
          "bootstrap address$", side.why_device)
      end
      assert.equal(res.a.qpn, res.b.peer_qpn)
      assert.equal(res.b.qpn, res.a.peer_qpn)
      assert.equal("ok", res.a_to_b)
      assert.equal("ok", res.b_to_a)
      assert.equal("qp,mr,mr,buf,buf,cq,pd,dev", res.teardown_a)
      assert.equal("qp,mr,mr,buf,buf,cq,pd,dev", res.teardown_b)
      -- the device did it through the library: same order, one per link
      local one = "ibv_destroy_qp,ibv_dereg_mr,ibv_dereg_mr,ibv_destroy_cq," ..
        "ibv_destroy_comp_channel,ibv_dealloc_pd,ibv_close_device"
      assert.equal(one .. "," .. one, teardown_calls(res.trace, "ibv_destroy_qp"))
      assert.is_true(res.counts.post_send > 0 and res.counts.post_recv > 0 and
        res.counts.poll_cq > 0)
    end)

    it("breaks a link on both sides with the error completions it got", function()
      -- the sender's strides are 128 KiB, the receiver posts 4 KiB
      local res = child({ "link", "4096" }, OURS_ONLY)
      assert.equal("EIO", res.err_a)
      assert.equal("EIO", res.err_b)
      assert.matches("^link %d+: send completion: IBV_WC_REM_INV_REQ_ERR %(remote invalid " ..
        "request error%): provider vendor_err 0x", res.why_a)
      assert.matches("^link %d+: recv completion: IBV_WC_LOC_LEN_ERR %(local length error%): " ..
        "provider vendor_err 0x", res.why_b)
      assert.equal("qp,mr,mr,buf,buf,cq,pd,dev", res.teardown_a)
    end)

    it("names the call and the errno of every libibverbs failure", function()
      local cases = {
        { "ibv_get_device_list:ENOSYS", "ibverbs: libibverbs found no RDMA devices (" .. OURS ..
          ": ibv_get_device_list: Function not implemented); the kernel offers no RDMA verbs" },
        { "ibv_open_device:EACCES", "softib0: ibv_open_device: Permission denied (no access " ..
          "to /dev/infiniband/uverbs*?)" },
        { "ibv_query_device:EIO", "softib0: query_device: Input/output error" },
        { "ibv_query_port:EIO", "softib0: query_port 1: Input/output error" },
        { "ibv_alloc_pd:ENOMEM", "EN" .. "OMEM: link 1: probe: alloc_pd: softib0: alloc_pd: " ..
          "Cannot allocate memory" },
        { "ibv_create_comp_channel:EMFILE", "EMFILE: link 1: probe: create_cq: softib0: " ..
          "create_cq: ibv_create_comp_channel: Too many open files" },
        { "ibv_create_cq:ENOMEM", "probe: create_cq: softib0: create_cq (40 entries): Cannot " ..
          "allocate memory" },
        -- 16 strides and 8 more sends: direct transfers' reads and control frames
        { "ibv_create_qp:EINVAL", "softib0: create_qp RC (send 24 x 1 sge, recv 16 x 1 sge): " ..
          "Invalid argument" },
        { "ibv_reg_mr:EPERM", "EPERM: link 1: probe: reg_mr send ring: softib0: reg_mr: " ..
          "Operation not permitted (2097152 bytes at 0x" },
      }
      for _, c in ipairs(cases) do
        local res = child({ "list" }, { TBRT_IBVERBS_LIB = OURS, TBRT_VERBS_FAIL = c[1] })
        assert(res.probe:find(c[2], 1, true),
          string.format("TBRT_VERBS_FAIL=%s: probe said\n%s\nexpected\n%s", c[1], res.probe, c[2]))
      end
    end)

    it("fails every verb with the operation, the object and the errno, never a crash", function()
      local e = once("errors", { "errors" }, OURS_ONLY).e
      local qpn = "QP 0x%x+"
      local want = {
        -- refused by the soft device underneath (libibverbs passes only errno)
        post_send_reset = "^EINVAL: softib0: post_send " .. qpn .. " in RESET: Invalid argument$",
        post_recv_reset = "^EINVAL: softib0: post_recv " .. qpn .. " in RESET: Invalid argument$",
        modify_bad = "^EINVAL: softib0: modify_qp " .. qpn .. " RESET %-> RTS %(mask 0x10001%): " ..
          "Invalid argument$",
        dealloc_busy = "^EBUSY: softib0: dealloc_pd: Device or resource busy %(a QP, MR or AH " ..
          "still uses it%)$",
        destroy_cq_busy = "^EBUSY: softib0: destroy_cq: Device or resource busy %(a QP still " ..
          "uses it%)$",
        ah_bad_port = "^EINVAL: softib0: create_ah %(port 9, sgid_index 0%): Invalid argument$",
        gid_negative = "^%-22 softib0: query_gid: index %-1 < 0$",
        gid_too_far = "^%-22 softib0: query_gid port 1 index 999: Invalid argument$",
        untyped_too_far = "^%-22 softib0: query_gid port 1 index 999: Invalid argument$",
        -- failed by the library (injected), a -errno return included
        modify_negative = "^EINVAL: softib0: modify_qp " .. qpn .. " RESET %-> INIT",
        post_recv = "^ENOMEM: softib0: post_recv " .. qpn .. " in INIT: Cannot allocate memory$",
        poll = "^EIO: softib0: poll_cq: the provider returned %-5",
        arm = "^%-5 softib0: req_notify_cq: Input/output error$",
        channel_fd = "^EBADF: softib0: create_cq: completion channel fd %-1: O_NONBLOCK: Bad " ..
          "file descriptor$",
        destroy_qp = "^EIO: softib0: destroy_qp " .. qpn .. ": Input/output error$",
        dereg = "^EIO: softib0: dereg_mr %(lkey 0x%x+%): Input/output error$",
        destroy_ah = "^%-5 softib0: destroy_ah: Input/output error$",
        destroy_cq = "^EIO: softib0: destroy_cq: Input/output error$",
        destroy_channel = "^EIO: softib0: destroy_cq: ibv_destroy_comp_channel: Input/output error$",
        dealloc = "^EIO: softib0: dealloc_pd: Input/output error$",
        -- UD chains: the bad request is the caller's, not a copy
        ud_bad_why = "^softib0: post_send " .. qpn .. " %(UD%): Invalid argument$",
        ud_other_dev = "^%-22 softib0: post_send: UD work request 0 %(wr_id 100%) has an " ..
          "address handle of another device$",
        ud_post_fail = "^%-5 true softib0: post_send " .. qpn .. " %(UD%): Input/output error$",
        open_nameless = "^ENODEV: softib0: no such device %(.*libibverbs lists only %?%)$",
      }
      for k, pat in pairs(want) do
        assert(type(e[k]) == "string" and e[k]:match(pat),
          string.format("%s: %s\ndoes not match\n%s", k, tostring(e[k]), pat))
      end
      assert.equal(1, e.untyped_after)        -- untyped from then on
      assert.equal("", e.vendor_err_zero)
      assert.equal(0, e.ud_chain_rc)          -- longer than the on-stack copy
      assert.equal(17, e.ud_chain_recvs)
      assert.equal(-22, e.ud_bad_rc)
      assert.equal(1, e.ud_bad_index)
      assert.same({ name = "?", kind = "ibverbs", usable = false, flavor = "linux",
        personality = "", why = "ibv_get_device_name returned no name" }, e.nameless)
    end)

    it("closes the context even when every destroy of a leftover fails", function()
      local res = once("errors", { "errors" }, OURS_ONLY)
      assert.equal("ibv_close_device", res.trace)
    end)

    it("puts the soft personality TBRT_VERBS_PERSONALITY names under its devices", function()
      -- a LINUX-flavored library over apple-uc: the engine asks for RC, the
      -- soft device refuses, and only errno crosses libibverbs (the library's
      -- TBRT_DEBUG shows the soft device's reason)
      local res, r = child({ "list" }, { TBRT_IBVERBS_LIB = OURS,
        TBRT_VERBS_PERSONALITY = "apple-uc", TBRT_DEBUG = "1" })
      contains(res.probe, "EOPNOTSUPP: link 1: probe: create_qp: softib0: create_qp RC (send 24 " ..
        "x 1 sge, recv 16 x 1 sge): Operation not supported")
      contains(r.stderr, "tbrt verbs: ibv_create_qp: EOPNOTSUPP: soft0 (apple-uc): " ..
        "create_qp: RC queue pairs are not supported")
    end)

    it("falls back to untyped GIDs when _ibv_query_gid_ex is not supported", function()
      local res = child({ "list" }, { TBRT_IBVERBS_LIB = OURS,
        TBRT_VERBS_FAIL = "_ibv_query_gid_ex:EOPNOTSUPP" })
      assert.equal("ok", res.probe)
      -- no type to prefer RoCE v2 by: the first entry with the address
      assert.matches("^softib0 port 1, GID%[%d+%] ::ffff:127%.0%.0%.1 matches", res.why_device)
    end)

    it("runs a link between two processes over tbrt.listen / tbrt.connect", function()
      for _, lib in ipairs { OURS, APPLE } do
        local dir = H.tmpdir()
        local port_file = dir .. "/port"
        local env = { TBRT_IBVERBS_LIB = lib }
        local task = require("tbrt.task")
        local server, client
        task.run(function()
          local ts = task.spawn(function() return child({ "serve", port_file }, env, 30) end)
          local tc = task.spawn(function() return child({ "connect", port_file }, env, 30) end)
          server, client = ts:join(40), tc:join(40)
        end)
        H.rmtree(dir)
        -- both ends reported (a child that failed joins as nil)
        assert.is_table(server, "the serving child reported nothing")
        assert.is_table(client, "the connecting child reported nothing")
        for _, res in ipairs { server, client } do
          assert.equal("ok", res.received)
          assert.equal("softib0", res.info.device)
          assert.equal("ibverbs", res.info.kind)
          assert.equal(lib == APPLE and "UC" or "RC", res.info.qp_type)
          assert.equal(lib == APPLE and "fixed" or "variable", res.info.framing)
          assert.equal("qp,mr,mr,buf,buf,cq,pd,dev", res.teardown)
          -- blocking waits slept on the completion channel
          assert.is_true(res.counts.req_notify_cq > 0, cjson.encode(res.counts))
          assert.is_true(res.counts.ack_cq_events > 0, cjson.encode(res.counts))
          assert.equal("ibv_destroy_qp,ibv_dereg_mr,ibv_dereg_mr,ibv_destroy_cq," ..
            "ibv_destroy_comp_channel,ibv_dealloc_pd,ibv_close_device",
            teardown_calls(res.trace, "ibv_destroy_qp"))
        end
        assert.equal(server.info.qpn, client.info.peer_qpn)
        assert.equal(client.info.qpn, server.info.peer_qpn)
      end
    end)
  end)

  describe("the hardware tests (spec/hw_spec.lua)", function()
    local function run_hw(changes)
      local env = {}
      for _, k in ipairs(LIB_ENV) do env[k] = false end
      env.TBRT_HW_SOFT, env.TBRT_HW_ADDR = false, false
      for k, v in pairs(changes) do env[k] = v end
      local r = H.run_tbrt({ H.root .. "/spec/support/run.lua", H.root .. "/spec/hw_spec.lua" },
        { env = env, timeout = 60 })
      assert.is_false(r.timed_out, H.describe(r))
      return r
    end

    it("skip with the reason on this machine, never pass", function()
      if io.open("/sys/class/infiniband_verbs/abi_version") then
        pending("this machine has RDMA devices: spec/hw_spec.lua runs for real")
        return
      end
      local r = run_hw({})
      assert.equal(0, r.code, H.describe(r))
      contains(r.stdout, "0 passed, 0 failed, 2 skipped")
      contains(r.stdout, "hw: libibverbs found no RDMA devices (libibverbs.so.1")
      local soft = run_hw({ TBRT_IBVERBS_LIB = OURS })
      contains(soft.stdout, "0 passed, 0 failed, 2 skipped")
      contains(soft.stdout, "hw: TBRT_IBVERBS_LIB=" .. OURS .. " is tbrt's own libibverbs (the " ..
        "soft device), not hardware")
    end)

    it("run their own code over both flavors of tbrt's library when asked to (a dry run)", function()
      for _, lib in ipairs { OURS, APPLE } do
        local r = run_hw({ TBRT_IBVERBS_LIB = lib, TBRT_HW_SOFT = "1" })
        assert.equal(0, r.code, H.describe(r))
        contains(r.stdout, "2 passed, 0 failed, 0 skipped")
      end
    end)
  end)

  describe("over the Apple flavor (librdma.so)", function()
    it("gives APPLE devices with untyped GIDs and a first ACTIVE port that is not 1", function()
      local res = child({ "verbs", "2" }, { TBRT_IBVERBS_LIB = APPLE })
      assert.equal(FLAVOR_APPLE, res.flavor)
      assert.equal("DOWN", res.ports[1].state)
      assert.equal("ACTIVE", res.ports[2].state)
      assert.equal(LOOPBACK, res.gid_text)
      assert.equal(1, res.gid_rc)             -- no _ibv_query_gid_ex: type unknown
      assert.equal(0, res.gid_type)           -- reported as IB
      assert.equal(-ENODATA, res.empty_gid_rc)
      assert.equal("hello over ibverbs", res.recv.data)
      assert.equal("IBV_WC_LOC_LEN_ERR", res.errors_ibverbs[1].status)
      assert.equal(res.errors_soft[1].vendor_err, res.errors_ibverbs[1].vendor_err)
    end)

    it("runs a link in one process with UC and fixed strides on port 2", function()
      local res = child({ "link" }, { TBRT_IBVERBS_LIB = APPLE })
      for _, side in ipairs { res.a, res.b } do
        assert.equal(FLAVOR_APPLE, side.flavor)
        assert.equal(3, side.qp_type)         -- UC
        assert.equal(1, side.framing)         -- fixed
        assert.equal(2, side.port)
        assert.matches("^softib0 port 2 %(port 1 DOWN%), GID%[%d+%] ::ffff:127%.0%.0%.1 " ..
          "matches the bootstrap address$", side.why_device)
      end
      assert.equal("ok", res.a_to_b)
      assert.equal("ok", res.b_to_a)
      assert.equal("qp,mr,mr,buf,buf,cq,pd,dev", res.teardown_a)
    end)
  end)
end)
