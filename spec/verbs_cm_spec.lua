-- verbs_cm_spec.lua - tbrt's librdmacm (bindings/verbs/rdmacm) called
-- directly, for what the Debian programs of verbs_programs_spec only show
-- now and then: rdma_destroy_id waits only for the events the program was
-- given and has not acked, as librdmacm does; events still queued for the
-- id (never read by rdma_get_cm_event) go with it. (perftest's -R server
-- met that when the peer's hang-up queued one more event after
-- DISCONNECTED: "Failed to destroy RDMA CM ID".)
--
-- The calls run in a child `tbrt` started by `tbrt exec`, so the
-- librdmacm.so.1 and libibverbs.so.1 it loads are tbrt's (this process
-- may hold another libibverbs by then: hw_spec loads what it finds).
local H = require("helpers")

local CHILD = [==[
local ffi = require("ffi")
ffi.cdef [[
  struct tbrt_cm_chan { int fd; };
  struct tbrt_cm_event { void *id, *listen_id; int event; int status; };
  struct tbrt_cm_chan *rdma_create_event_channel(void);
  void rdma_destroy_event_channel(struct tbrt_cm_chan *ch);
  int rdma_create_id(struct tbrt_cm_chan *ch, void **id, void *context, int ps);
  int rdma_resolve_addr(void *id, void *src, void *dst, int timeout_ms);
  int rdma_get_cm_event(struct tbrt_cm_chan *ch, struct tbrt_cm_event **event);
  int rdma_ack_cm_event(struct tbrt_cm_event *event);
  int rdma_destroy_id(void *id);
  struct tbrt_sockaddr_in { uint16_t family; uint16_t port; uint8_t addr[4]; uint8_t zero[8]; };
  struct pollfd { int fd; short events; short revents; };
  int poll(struct pollfd *fds, unsigned long nfds, int timeout);
]]
local cm = ffi.load("librdmacm.so.1")     -- tbrt exec put tbrt's first
local uv = require("luv")
local function readable(fd, ms)
  local p = ffi.new("struct pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return ffi.C.poll(p, 1, ms) == 1
end
-- an id resolving 127.0.0.1: its ADDR_RESOLVED event queued
local function resolving()
  local ch = cm.rdma_create_event_channel()
  assert(ch ~= nil, "rdma_create_event_channel")
  local id = ffi.new("void *[1]")
  assert(cm.rdma_create_id(ch, id, nil, 0x0106) == 0, "rdma_create_id")
  local dst = ffi.new("struct tbrt_sockaddr_in")
  dst.family = 2
  dst.addr[0], dst.addr[3] = 127, 1
  assert(cm.rdma_resolve_addr(id[0], nil, dst, 2000) == 0, "rdma_resolve_addr")
  assert(readable(ch.fd, 5000), "no ADDR_RESOLVED event came")
  return ch, id[0]
end
local function destroy(id)
  local t0 = uv.hrtime()
  local rc = cm.rdma_destroy_id(id)
  return rc, (uv.hrtime() - t0) / 1e9
end
-- 1: never read
local ch, id = resolving()
local rc, took = destroy(id)
print(string.format("unread: rc %d took %.3f counted %s", rc, took, tostring(readable(ch.fd, 0))))
cm.rdma_destroy_event_channel(ch)
-- 2: read and acked
ch, id = resolving()
local ev = ffi.new("struct tbrt_cm_event *[1]")
assert(cm.rdma_get_cm_event(ch, ev) == 0, "rdma_get_cm_event")
local kind = ev[0].event
assert(cm.rdma_ack_cm_event(ev[0]) == 0, "rdma_ack_cm_event")
rc, took = destroy(id)
print(string.format("acked: event %d rc %d took %.3f", kind, rc, took))
cm.rdma_destroy_event_channel(ch)
]==]

describe("tbrt's librdmacm: rdma_destroy_id", function()
  local r
  setup(function()
    local dir = H.tmpdir()
    local script = H.write_file(dir .. "/cm_child.lua", CHILD)
    r = H.run_tbrt({ "exec", "--", H.tbrt, script }, { timeout = 30 })
    H.rmtree(dir)
  end)

  it("at once when the id's events were never read: they go with it", function()
    assert.equal(0, r.code, H.describe(r))
    local rc, took, counted = r.stdout:match("unread: rc (%-?%d+) took ([%d.]+) counted (%a+)")
    assert(rc, H.describe(r))
    assert.equal("0", rc, H.describe(r))
    assert.is_true(tonumber(took) < 1, "rdma_destroy_id took " .. took .. " s")
    assert.equal("false", counted, "the channel still counts the id's event")
  end)

  it("once the event it was given is acked", function()
    assert.equal(0, r.code, H.describe(r))
    local kind, rc, took = r.stdout:match("acked: event (%d+) rc (%-?%d+) took ([%d.]+)")
    assert(kind, H.describe(r))
    assert.equal("0", kind, "RDMA_CM_EVENT_ADDR_RESOLVED")
    assert.equal("0", rc, H.describe(r))
    assert.is_true(tonumber(took) < 1)
  end)
end)
