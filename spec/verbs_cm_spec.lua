-- verbs_cm_spec.lua - tbrt's librdmacm (bindings/verbs/rdmacm) called
-- directly, in this process, for what the Debian programs of
-- verbs_programs_spec only show now and then: rdma_destroy_id waits only
-- for the events the program was given and has not acked, as librdmacm
-- does; events still queued for the id (never read by
-- rdma_get_cm_event) go with it. (perftest's -R server met that when the
-- peer's hang-up queued one more event after DISCONNECTED: "Failed to
-- destroy RDMA CM ID".)
local ffi = require("ffi")
local H = require("helpers")

local DIR = H.build .. "/lib/tbrt/verbs"

pcall(ffi.cdef, [[
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
  struct tbrt_pollfd { int fd; short events; short revents; };
  int poll(struct tbrt_pollfd *fds, unsigned long nfds, int timeout);
]])

local RDMA_PS_TCP = 0x0106
local ADDR_RESOLVED = 0

local function readable(fd, ms)
  local p = ffi.new("struct tbrt_pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return ffi.C.poll(p, 1, ms) == 1
end

describe("tbrt's librdmacm: rdma_destroy_id", function()
  local cm
  setup(function()
    -- its libibverbs first, by path: librdmacm's need of libibverbs.so.1
    -- is then met by that one (by soname), not by the system's
    ffi.load(DIR .. "/libibverbs.so.1", true)
    cm = ffi.load(DIR .. "/librdmacm.so.1")
  end)

  local function resolving()
    local ch = cm.rdma_create_event_channel()
    assert(ch ~= nil, "rdma_create_event_channel")
    local id = ffi.new("void *[1]")
    assert.equal(0, cm.rdma_create_id(ch, id, nil, RDMA_PS_TCP))
    local dst = ffi.new("struct tbrt_sockaddr_in")
    dst.family, dst.port = 2, 0
    dst.addr[0], dst.addr[3] = 127, 1
    assert.equal(0, cm.rdma_resolve_addr(id[0], nil, dst, 2000))
    assert.is_true(readable(ch.fd, 5000), "no ADDR_RESOLVED event came")
    return ch, id[0]
  end

  it("at once when the id's events were never read: they go with it", function()
    local ch, id = resolving()
    local t0 = H.now()
    assert.equal(0, cm.rdma_destroy_id(id))
    assert.is_true(H.now() - t0 < 1, "rdma_destroy_id took " .. (H.now() - t0) .. " s")
    assert.is_false(readable(ch.fd, 0), "the channel still counts the id's event")
    cm.rdma_destroy_event_channel(ch)
  end)

  it("once the event it was given is acked", function()
    local ch, id = resolving()
    local ev = ffi.new("struct tbrt_cm_event *[1]")
    assert.equal(0, cm.rdma_get_cm_event(ch, ev))
    assert.equal(ADDR_RESOLVED, ev[0].event)
    assert.equal(0, cm.rdma_ack_cm_event(ev[0]))
    local t0 = H.now()
    assert.equal(0, cm.rdma_destroy_id(id))
    assert.is_true(H.now() - t0 < 1)
    cm.rdma_destroy_event_channel(ch)
  end)
end)
