-- verbs_abi_spec.lua - tbrt's libibverbs (bindings/verbs) as an ABI: its
-- exports against Debian's own libraries' (nm -D --with-symbol-versions),
-- libraries that need nothing but libc, the Apple flavor without symbol
-- versions or GID types, and a verbs program of our own
-- (spec/support/verbs_abi, built against Debian's headers and -libverbs)
-- driving what Debian's tools do not: the extended CQ and QP APIs,
-- ibv_query_qp, address handles from completions, threads on one context,
-- every unsupported entry, the IBVERBS_1.0 ABI, SRQs and async events.
local H = require("helpers")
local X = require("programs")

local SYS = "/usr/lib/x86_64-linux-gnu"
local LIB = H.build .. "/lib/tbrt/verbs"
local APPLE = H.build .. "/lib/tbrt/apple/librdma.so"
local ABI_CHECK = H.build .. "/test/verbs_abi_check"

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return out
end

-- { ["name@VERSION"] = true } of the functions and objects a library defines
-- (the version nodes themselves left out).
local function exports(path)
  local set = {}
  for line in sh("nm -D --defined-only --with-symbol-versions " .. path):gmatch("[^\n]+") do
    local kind, sym = line:match("^%x+ (%a) (%S+)$")
    if sym and kind ~= "A" then set[(sym:gsub("@@", "@"))] = true end
  end
  return set
end

-- What Debian's programs import from a library (soname), name@VERSION.
local function imports(binaries, soname_version)
  local set = {}
  for _, b in ipairs(binaries) do
    for sym in sh("nm -D --undefined-only --with-symbol-versions " .. b):gmatch("(%S+@" ..
      soname_version .. "[%w_.]*)") do
      set[sym] = true
    end
  end
  return set
end

local function missing(want, have)
  local m = {}
  for s in pairs(want) do if not have[s] then m[#m + 1] = s end end
  table.sort(m)
  return m
end

local function have_tools()
  return sh("command -v nm"):find("nm") ~= nil and sh("command -v readelf"):find("readelf") ~= nil
end

describe("tbrt's libibverbs as an ABI", function()
  if not have_tools() then
    it("needs binutils (nm, readelf)", function() pending("nm/readelf not installed") end)
    return
  end

  describe("exports", function()
    it("libibverbs.so.1: every function of rdma-core 44's at its version, 1.0 aliases included", function()
      local theirs = exports(SYS .. "/libibverbs.so.1")
      local ours = exports(LIB .. "/libibverbs.so.1")
      local want, private = {}, {}
      for s in pairs(theirs) do
        if s:match("@IBVERBS_PRIVATE_") then private[s] = true else want[s] = true end
      end
      assert.same({}, missing(want, ours))
      -- of the provider interface, only what programs import (perftest, ibv_devinfo)
      assert.is_true(ours["ibv_query_gid_type@IBVERBS_PRIVATE_34"])
      local compat = 0
      for s in pairs(ours) do if s:match("@IBVERBS_1%.0$") then compat = compat + 1 end end
      assert.equal(42, compat)                -- the 33 aliases and the 9 1.0-only names
      -- nothing of the core leaks out: every export is libibverbs's or diagnostics
      for s in pairs(ours) do
        if not want[s] and not private[s] then
          assert.matches("^tbrt_verbs_[%w_]+@TBRT_VERBS_DIAG$", s)
        end
      end
    end)

    it("librdmacm.so.1: every function of rdma-core 44's at its version, nothing else", function()
      local theirs = exports(SYS .. "/librdmacm.so.1")
      local ours = exports(LIB .. "/librdmacm.so.1")
      assert.same({}, missing(theirs, ours))
      assert.same({}, missing(ours, theirs))
    end)

    it("libmlx5.so.1 and libefa.so.1: every version node, every function Debian's programs import", function()
      local progs = {}
      for _, p in ipairs { "/usr/bin/ib_send_bw", "/usr/bin/ib_write_bw", "/usr/bin/ib_read_lat",
        SYS .. "/ucx/libuct_ib.so.0" } do
        if io.open(p) then progs[#progs + 1] = p end
      end
      for _, l in ipairs { { "libmlx5.so.1", "MLX5_" }, { "libefa.so.1", "EFA_" } } do
        local ours = exports(LIB .. "/" .. l[1])
        assert.same({}, missing(imports(progs, l[2]), ours))
        local nodes = {}
        for v in sh("nm -D --with-symbol-versions " .. SYS .. "/" .. l[1]):gmatch(" A (" ..
          l[2] .. "[%d.]+)") do nodes[v] = true end
        local our_nodes = {}
        for v in sh("nm -D --with-symbol-versions " .. LIB .. "/" .. l[1]):gmatch(" A (" ..
          l[2] .. "[%d.]+)") do our_nodes[v] = true end
        assert.same({}, missing(nodes, our_nodes))
      end
    end)

    it("need nothing but glibc (librdmacm: the libibverbs beside it), and no RUNPATH", function()
      for _, l in ipairs { "libibverbs.so.1", "libmlx5.so.1", "libefa.so.1", "librdmacm.so.1" } do
        local d = sh("readelf -d " .. LIB .. "/" .. l)
        assert.is_nil(d:find("RUNPATH", 1, true), l)
        assert.is_nil(d:find("RPATH", 1, true), l)
        for need in d:gmatch("Shared library: %[([^%]]+)%]") do
          local ok = need == "libc.so.6" or need == "libm.so.6" or need:match("^ld%-linux") or
            (l == "librdmacm.so.1" and need == "libibverbs.so.1") or
            (os.getenv("TBRT_ASAN") and need:match("^lib[au]b?san"))
          assert(ok, l .. " needs " .. need)
        end
      end
    end)

    it("the Apple flavor librdma.so has no symbol versions and no GID types", function()
      local v = sh("readelf -V " .. APPLE)
      assert.is_nil(v:find(".gnu.version_d", 1, true), "version definitions in librdma.so")
      local ours = exports(APPLE)
      for _, s in ipairs { "ibv_get_device_list", "ibv_open_device", "ibv_create_qp",
        "ibv_reg_mr", "ibv_query_gid", "ibv_qp_to_qp_ex" } do
        assert.is_true(ours[s], s)
      end
      for _, s in ipairs { "_ibv_query_gid_ex", "_ibv_query_gid_table", "ibv_query_gid_type" } do
        assert.is_nil(ours[s], s)
      end
    end)
  end)

  describe("a program of our own on it (spec/support/verbs_abi)", function()
    local function run(case, opts)
      local r = X.exec({ ABI_CHECK, case }, opts)
      local oks, fails = {}, {}
      for name in r.stdout:gmatch("ok (%S+)") do oks[#oks + 1] = name end
      for line in r.stdout:gmatch("FAIL [^\n]+") do fails[#fails + 1] = line end
      assert.same({}, fails, H.describe(r))
      assert.equal(0, r.code, H.describe(r))
      return oks, r
    end

    it("the extended CQ and QP APIs on every operation the device has (atomics, an iova, " ..
      "timestamps of the work)", function()
      local oks = run("ex")
      assert.equal(26, #oks)
    end)

    it("what the library answers itself: ibv_query_qp, P_Keys, iova, AH from a completion, strings", function()
      local oks = run("query")
      assert.equal(24, #oks)
    end)

    it("five threads on one context: two senders on one QP, two pollers of one CQ, a querier; " ..
      "20000 messages each exactly once", function()
      local oks = run("threads")
      assert.equal(4, #oks)
    end)

    it("every unsupported entry: EOPNOTSUPP, with the reason under TBRT_DEBUG", function()
      local oks, r = run("unsupported", { exec = { "--debug" } })
      assert.equal(23, #oks)
      -- the library's own answer, not verbs.h's silent default
      for _, call in ipairs { "ibv_create_srq_ex", "ibv_alloc_mw", "ibv_alloc_td",
        "ibv_alloc_parent_domain", "ibv_alloc_dm", "ibv_alloc_null_mr", "ibv_create_flow",
        "ibv_create_wq", "ibv_open_xrcd", "ibv_create_counters", "ibv_open_qp",
        "ibv_reg_dmabuf_mr", "ibv_import_device", "ibv_resize_cq", "ibv_modify_cq",
        "ibv_attach_mcast", "ibv_advise_mr", "ibv_set_ece" } do
        assert(r.stderr:find("tbrt verbs: " .. call .. ": EOPNOTSUPP: not supported: ", 1, true),
          call .. " said nothing on stderr\n" .. r.stderr)
      end
    end)

    it("shared receive queues and their async events (limit, last WQE) through async_fd", function()
      local oks = run("srq")
      assert.equal(16, #oks)
    end)

    it("the IBVERBS_1.0 ABI: 1.0 objects, the 1.0 data path, a completion event, teardown", function()
      local oks = run("compat")
      assert.equal(12, #oks)
    end)
  end)
end)
