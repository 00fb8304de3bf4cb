-- soft_wake_spec.lua - a completion queue's wake-up socket (the shared-memory wire's) can be reached by
-- processes of its user only. The socket is found the way anyone on the host
-- can find it (/proc/net/unix, by the inode of the CQ's fd); a process of
-- another user sends to it and must not make the fd readable (a spurious
-- wake-up, or a full socket queue that swallows the real ones), while a
-- process of ours still can.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local core = require("tbrt.ffi")
local H = require("helpers")

local uv = require("luv")
-- other specs declare these too: the first declaration wins, and they agree
pcall(ffi.cdef, [[ struct pollfd { int fd; short events; short revents; }; ]])
pcall(ffi.cdef, [[ int poll(struct pollfd *fds, unsigned long nfds, int timeout); ]])
pcall(ffi.cdef, [[ unsigned geteuid(void); ]])
local C = ffi.C

-- /proc/self/fd/N of a socket reads "socket:[inode]"
local function inode_of(fd)
  return tonumber(assert(uv.fs_readlink("/proc/self/fd/" .. fd)):match("^socket:%[(%d+)%]$"))
end

-- The name /proc/net/unix gives the socket with this inode ("@..." abstract).
local function name_of(inode)
  for line in io.lines("/proc/net/unix") do
    local ino, path = line:match("^%x+: %x+ %x+ %x+ %x+ %x+%s+(%d+)%s*(.*)$")
    if ino and tonumber(ino) == inode then return path end
  end
end

local function readable(fd)
  local p = ffi.new("struct pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return C.poll(p, 1, 0) == 1
end

-- A child tbrt that (as uid/gid `uid` unless nil) sends one datagram to the
-- socket named `name`; returns what it printed: "sent" or the errno text.
local function send_as(uid, name)
  local code = [[
    local ffi = require("ffi")
    ffi.cdef[=[
      int socket(int, int, int); int setgid(unsigned); int setuid(unsigned);
      int setgroups(unsigned long, const unsigned *);
      long sendto(int, const void *, unsigned long, int, const void *, unsigned);
      char *strerror(int);
    ]=]
    local name, uid = arg[1], tonumber(arg[2])
    if uid then
      assert(ffi.C.setgroups(0, nil) == 0 and ffi.C.setgid(uid) == 0 and ffi.C.setuid(uid) == 0)
    end
    local fd = ffi.C.socket(1, 2, 0)                    -- AF_UNIX, SOCK_DGRAM
    local a = ffi.new("uint8_t[110]")
    a[0] = 1                                            -- sun_family = AF_UNIX
    local abstract = name:sub(1, 1) == "@"
    local path = abstract and name:sub(2) or name
    ffi.copy(a + 2 + (abstract and 1 or 0), path, #path)
    local len = 2 + #path + (abstract and 1 or 0)
    if ffi.C.sendto(fd, "x", 1, 0x40, a, len) == 1 then print("sent")
    else print(ffi.string(ffi.C.strerror(ffi.errno()))) end
  ]]
  local dir = H.tmpdir()
  local script = H.write_file(dir .. "/send.lua", code)
  os.execute("chmod 755 " .. dir)      -- the other user runs it
  local r = H.run_tbrt({ script, name, uid and tostring(uid) or "" })
  H.rmtree(dir)
  assert(r.code == 0, H.describe(r))
  return (r.stdout:gsub("%s+$", ""))
end

describe("soft completion wake-ups", function()
  it("reach the CQ from a process of its user, not from another user's", function()
    if C.geteuid() ~= 0 then return pending("needs root to act as another user") end
    local dev = assert(verbs.open("soft0", { personality = "linux-rc", wire = "shm" }))
    local cq = assert(dev:cq(16))
    local fd = cq.c.fd
    local name = name_of(inode_of(fd))
    assert.truthy(name and #name > 0, "the CQ's socket has a name in /proc/net/unix")
    assert.equal(0, core.C.tbrt_cq_arm(cq.c))

    -- another user: refused, and the fd stays quiet
    local other = send_as(65534, name)
    assert.is_false(readable(fd), "a datagram from uid 65534 (" .. other .. ") woke the CQ")
    assert.not_equal("sent", other)

    -- one of ours: the wake-up works (so the check above meant something)
    assert.equal("sent", send_as(nil, name))
    assert.is_true(readable(fd))
    assert.is_true(core.C.tbrt_cq_ack(cq.c) >= 1)
    assert(cq:destroy())
    dev:close()
  end)

  it("leave no socket behind when the CQ goes", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc", wire = "shm" }))
    local cq = assert(dev:cq(16))
    local name = name_of(inode_of(cq.c.fd))
    assert(cq:destroy())
    dev:close()
    if name:sub(1, 1) ~= "@" then
      assert.is_nil(io.open(name, "r"), name .. " is still there")
    end
  end)
end)
