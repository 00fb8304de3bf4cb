-- hw_spec.lua - #hw: the ibverbs device on real RDMA hardware. Each test
-- takes the first ibverbs device with an ACTIVE port and a GID it can
-- bootstrap over (an IPv4-mapped or global IPv6 GID, or $TBRT_HW_ADDR, an
-- address of this host on the RDMA interface) and drives it: the verbs
-- objects a link needs, then a loopback link (two queue pairs of this
-- process on that device) with data both ways. Without such a device every
-- test is pending with the exact reason (no library, no devices, no ACTIVE
-- port, no usable GID) and never passes. Run only these with
--   build/tbrt spec/support/run.lua --tags=hw spec/hw_spec.lua
-- TBRT_HW_SOFT=1 with TBRT_IBVERBS_LIB set to tbrt's own libibverbs
-- (bindings/verbs, over the soft device) is a dry run of the tests' own code
-- (spec/ibverbs_spec.lua does it); it says nothing about hardware.
local ffi = require("ffi")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local verbs = require("tbrt.verbs")

local SIZE = 8 * 1024 * 1024 + 4321
pcall(ffi.cdef, "int memcmp(const void *a, const void *b, size_t n);")
pcall(ffi.cdef, "const char *tbrt_verbs_flavor(void);")

-- Is the library tbrt's own libibverbs (soft devices, not hardware)? It
-- says so by exporting its diagnostics.
local function is_tbrt_verbs(lib)
  local ok, L = pcall(ffi.load, lib)
  return ok and pcall(function() return L.tbrt_verbs_flavor end)
end

-- The bootstrap address a GID stands for, if a socket can use it.
local function gid_address(text)
  local v4 = text:match("^::ffff:(%d+%.%d+%.%d+%.%d+)$")
  if v4 then return v4 ~= "127.0.0.1" and v4 or nil end
  if text:match("^fe80:") or text == "0:0:0:0:0:0:0:0" then return nil end
  return text
end

local found
-- { name, port, addr } of the first usable device, or nil, reason.
local function find_hw()
  if found then return unpack(found) end
  local function done(...) found = { ... } return ... end
  local lib = os.getenv("TBRT_IBVERBS_LIB")
  if lib and os.getenv("TBRT_HW_SOFT") ~= "1" and is_tbrt_verbs(lib) then
    return done(nil, "TBRT_IBVERBS_LIB=" .. lib .. " is tbrt's own libibverbs (the soft " ..
      "device), not hardware")
  end
  local reasons = {}
  for _, d in ipairs(tbrt.devices()) do
    if d.kind == "ibverbs" and not d.usable then
      reasons[#reasons + 1] = d.why     -- no library, or no devices (with the hint)
    elseif d.kind == "ibverbs" then
      local dev, err = verbs.open(d.name)
      if not dev then
        reasons[#reasons + 1] = err
      else
        local q = assert(dev:query())
        local states = {}
        for p = 1, q.phys_port_cnt do
          local pa = assert(dev:port(p))
          states[#states + 1] = string.format("port %d %s", p, pa.state)
          if pa.state == "ACTIVE" then
            local addr = os.getenv("TBRT_HW_ADDR")
            for _, g in ipairs(assert(dev:gids(p))) do
              addr = addr or gid_address(g.text)
            end
            dev:close()
            if addr then return done({ name = d.name, port = p, addr = addr }) end
            return done(nil, string.format("%s port %d is ACTIVE but has no IPv4-mapped or " ..
              "global GID to bootstrap over (set TBRT_HW_ADDR to this host's address on it)",
              d.name, p))
          end
        end
        dev:close()
        reasons[#reasons + 1] = string.format("%s: no ACTIVE port (%s)", d.name,
          table.concat(states, ", "))
      end
    end
  end
  if #reasons == 0 then reasons[1] = "the ibverbs device kind lists nothing" end
  return done(nil, table.concat(reasons, "; "))
end

local function pattern(n, seed)
  local buf = ffi.new("uint8_t[?]", n)
  for i = 0, n - 1 do buf[i] = (i * 131 + seed) % 251 end
  return buf
end

describe("hardware", function()
  it("creates and destroys the verbs objects of a link on the first ACTIVE port #hw", function()
    local hw, why = find_hw()
    if not hw then pending("hw: " .. why) return end
    local C = require("tbrt.ffi").C
    local dev = assert(verbs.open(hw.name))
    assert.equal("ibverbs", ffi.string(C.tbrt_dev_kind(dev.d)))
    local pd = assert(dev:pd())
    local cq = assert(dev:cq(64))
    -- Apple's provider has UC queue pairs only (TN3205)
    local apple = C.tbrt_dev_flavor(dev.d) == C.TBRT_FLAVOR_APPLE
    local qp = assert(pd:qp{ type = apple and "UC" or "RC", send_cq = cq, recv_cq = cq })
    assert.is_true(qp.num > 0)
    local buf = ffi.new("uint8_t[?]", 65536)
    local mr = assert(pd:reg(buf, 65536))
    assert(qp:modify{ state = "INIT", port = hw.port, pkey_index = 0, access = verbs.ACCESS_ALL })
    assert(qp:destroy())
    assert(mr:dereg())
    assert(cq:destroy())
    assert(pd:free())
    dev:close()
  end)

  it("runs a loopback link with data both ways at once over the first ACTIVE port #hw", function()
    local hw, why = find_hw()
    if not hw then pending("hw: " .. why) return end
    task.run(function()
      local opts = { device = hw.name, port = hw.port, timeout = 10, fallback = false }
      local srv = assert(tbrt.listen(hw.addr, 0, opts))
      local t = task.spawn(function() return srv:accept(10) end)
      local a = assert(tbrt.connect(hw.addr, srv.port, opts))
      local b = assert(t:join(10))
      srv:close()
      assert.equal(hw.name, a:info().device)
      -- both ways at once: on each side one task sends while another reads
      local function sender(l, seed)
        return task.spawn(function()
          assert(l:send(pattern(SIZE, seed), SIZE))
          return assert(l:flush())
        end)
      end
      local function reader(l, seed)
        return task.spawn(function()
          local dst = ffi.new("uint8_t[?]", SIZE)
          assert.equal(SIZE, assert(l:recv_into(dst, SIZE, 20)))
          return ffi.C.memcmp(pattern(SIZE, seed), dst, SIZE)
        end)
      end
      local sa, sb, ra, rb = sender(a, 1), sender(b, 2), reader(a, 2), reader(b, 1)
      assert.equal(0, ra:join(30))
      assert.equal(0, rb:join(30))
      assert(sa:join(1))
      assert(sb:join(1))
      assert(a:close())
      assert(b:close())
      assert.equal("qp,mr,mr,buf,buf,cq,pd,dev", a:teardown())
    end)
  end)
end)
