-- soft_small_spec.lua - the soft device's small-message path (issue 14):
-- a SEND of up to 32 bytes travels in its receive's result line
-- (scatter-to-CQE) and is placed by the receive's owner, through its own
-- keys; links post small frames inline; a waiter learns where its peer is;
-- registering memory leaves its untouched pages unallocated, and memory
-- unmapped while registered is never written again.
local ffi = require("ffi")
local bit = require("bit")
local verbs = require("tbrt.verbs")
local core = require("tbrt.ffi")
local V = require("verbs_helpers")
local L = require("links")

local C = core.C

ffi.cdef [[
  void *mmap(void *, size_t, int, int, int, long);
  int munmap(void *, size_t);
  int getpid(void);
]]
local PROT_READ, PROT_RW, MAP_PRIVATE_ANON = 1, 3, 0x22

-- Post one receive of several pieces of mr: { {offset, len}, ... }.
local function post_recv_pieces(qp, mr, pieces, lkey)
  local sge = ffi.new("struct ibv_sge[?]", #pieces)
  for i, pc in ipairs(pieces) do
    sge[i - 1].addr = mr.addr + pc[1]
    sge[i - 1].length = pc[2]
    sge[i - 1].lkey = lkey or mr.lkey
  end
  local wr = ffi.new("struct ibv_recv_wr")
  wr.sg_list, wr.num_sge, wr.wr_id = sge, #pieces, 77
  assert.equal(0, C.tbrt_post_recv(qp.q, wr, nil))
end

describe("soft device, small messages", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("places a SEND of up to 32 bytes over the receive's pieces, and nothing beyond", function()
    p = V.pair{ personality = "linux-rc", type = "RC", recv_sge = 2, inline = 64 }
    ffi.fill(p.bbuf, 256, 0xee)
    for i = 0, 19 do p.abuf[i] = i + 1 end
    post_recv_pieces(p.b, p.bmr, { { 0, 5 }, { 100, 100 } })
    assert(p.a:post_send{ mr = p.amr, len = 20, inline = true })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    local r = assert(p.cq_b:wait(1))[1]
    assert.equal("IBV_WC_SUCCESS", r.status)
    assert.equal(20, r.byte_len)
    assert.equal(77, r.wr_id)
    for i = 0, 4 do assert.equal(i + 1, p.bbuf[i]) end
    for i = 5, 99 do assert.equal(0xee, p.bbuf[i]) end
    for i = 0, 14 do assert.equal(i + 6, p.bbuf[100 + i]) end
    for i = 115, 255 do assert.equal(0xee, p.bbuf[i]) end
  end)

  it("fails a receive whose lkey is bad when its owner places a small SEND (the sender's " ..
     "completes), and at the responder for a larger one (the sender's fails too)", function()
    p = V.pair{ personality = "linux-rc", type = "RC" }
    -- 16 bytes: they travel in the result; the owner meets the bad key
    post_recv_pieces(p.b, p.bmr, { { 0, 64 } }, p.bmr.lkey + 1)
    assert(p.a:post_send{ mr = p.amr, len = 16 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    local r = assert(p.cq_b:wait(1))[1]
    assert.equal("IBV_WC_LOC_PROT_ERR", r.status)
    assert.matches("bad lkey", r.why)
    V.close(p)
    -- 64 bytes: the responder meets it, and an RC sender hears of it
    p = V.pair{ personality = "linux-rc", type = "RC" }
    post_recv_pieces(p.b, p.bmr, { { 0, 64 } }, p.bmr.lkey + 1)
    assert(p.a:post_send{ mr = p.amr, len = 64 })
    assert.equal("IBV_WC_LOC_PROT_ERR", assert(p.cq_b:wait(1))[1].status)
    assert.equal("IBV_WC_REM_OP_ERR", assert(p.cq_a:wait(1))[1].status)
  end)

  it("places a small SEND only while its receive's region is registered (its owner keeps the " ..
     "region it placed into last, until any region comes or goes)", function()
    p = V.pair{ personality = "linux-rc", type = "RC" }
    -- a region of b's own, then messages placed into it: kept
    local buf = ffi.new("uint8_t[?]", 4096)
    local mr = assert(p.pd:reg(buf, 4096, verbs.ACCESS_ALL))
    local lkey = mr.lkey
    for round = 1, 2 do
      post_recv_pieces(p.b, mr, { { 0, 64 } })
      assert(p.a:post_send{ mr = p.amr, len = 16 })
      assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
      assert.equal("IBV_WC_SUCCESS", assert(p.cq_b:wait(1))[1].status, "round " .. round)
    end
    -- gone: a receive that still names it is not placed into its memory
    assert(mr:dereg())
    ffi.fill(buf, 64, 0xab)
    post_recv_pieces(p.b, { addr = ffi.cast("uint64_t", buf), lkey = lkey }, { { 0, 64 } })
    assert(p.a:post_send{ mr = p.amr, len = 16 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    local r = assert(p.cq_b:wait(1))[1]
    assert.equal("IBV_WC_LOC_PROT_ERR", r.status)
    assert.matches("bad lkey", r.why)
    for i = 0, 63 do assert.equal(0xab, buf[i], "byte " .. i .. " written") end
  end)

  it("refuses to register memory nobody may write for writing, as a NIC's driver does", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd = assert(dev:pd())
    local mem = ffi.C.mmap(nil, 8192, PROT_READ, MAP_PRIVATE_ANON, -1, 0)
    local mr, err = pd:reg(mem, 8192, verbs.ACCESS_ALL)
    assert.is_nil(mr)
    assert.matches("^EFAULT: .*not all mapped writable", err)
    ffi.C.munmap(mem, 8192)
    pd:free(); dev:close()
  end)
end)

-- The memfd behind the newest registration of this process: its
-- allocated bytes (st_blocks), through /proc/self/fd.
local function memfds()
  local pid = ffi.C.getpid()
  local out = {}
  local ls = io.popen("ls -l /proc/" .. pid .. "/fd 2>/dev/null")
  for line in ls:lines() do
    local fd = line:match(" (%d+) %-> /memfd:tbrt%-mr")
    if fd then out[#out + 1] = tonumber(fd) end
  end
  ls:close()
  return out
end

local function allocated(fd)
  local f = io.popen(string.format("stat -L -c %%b:%%B /proc/%d/fd/%d", ffi.C.getpid(), fd))
  local blocks, unit = f:read("*a"):match("(%d+):(%d+)")
  f:close()
  return tonumber(blocks) * tonumber(unit)
end

describe("soft device, registration", function()
  it("gives untouched memory a backing that allocates nothing, and keeps what was written " ..
     "through registration and deregistration", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd = assert(dev:pd())
    local len = 64 * 1024 * 1024
    local mem = ffi.cast("uint8_t *", ffi.C.mmap(nil, len, PROT_RW, MAP_PRIVATE_ANON, -1, 0))
    mem[12345] = 42                         -- one page touched before
    local before = {}
    for _, fd in ipairs(memfds()) do before[fd] = true end
    local mr = assert(pd:reg(mem, len, verbs.ACCESS_ALL))
    local fresh
    for _, fd in ipairs(memfds()) do if not before[fd] then fresh = fd end end
    assert.is_not_nil(fresh, "a memfd backs the region")
    assert.is_true(allocated(fresh) <= 64 * 1024, "allocated " .. allocated(fresh))
    assert.equal(42, mem[12345])
    mem[len - 1] = 7                        -- written while registered
    assert(mr:dereg())
    assert.equal(42, mem[12345])
    assert.equal(7, mem[len - 1])
    assert.equal(0, mem[len / 2])
    ffi.C.munmap(mem, len)
    pd:free(); dev:close()
  end)

  -- (two buffers side by side on a heap share a page: LuaJIT's, malloc's)
  it("keeps every byte when a second registration shares a page with a backing and merges " ..
     "with it, and when both go", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd = assert(dev:pd())
    local ps, pages = 4096, 8
    local len = ps * pages
    local mem = ffi.cast("uint8_t *", ffi.C.mmap(nil, len, PROT_RW, MAP_PRIVATE_ANON, -1, 0))
    for i = 0, len - 1 do mem[i] = (i * 7 + 3) % 251 end
    local function intact(when)
      for i = 0, len - 1 do
        if mem[i] ~= (i * 7 + 3) % 251 then
          error(string.format("%s: byte %d (page %d) is %d, was %d", when, i, math.floor(i / ps),
            mem[i], (i * 7 + 3) % 251), 2)
        end
      end
    end
    -- pages 0..2, then 2..5: page 2 is both's; the first backing's pages
    -- are not touched between the two
    local a = assert(pd:reg(mem, 2 * ps + 100, verbs.ACCESS_ALL))
    local b = assert(pd:reg(mem + 2 * ps + 200, 3 * ps, verbs.ACCESS_ALL))
    intact("after the second registration")
    assert(a:dereg())
    intact("after the first deregistration")
    assert(b:dereg())
    intact("after both")
    ffi.C.munmap(mem, len)
    pd:free(); dev:close()
  end)
end)

describe("soft device, registration over a backing", function()
  it("keeps what reached a backing's pages through another mapping when a larger " ..
     "registration takes them in", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd = assert(dev:pd())
    local len = 2 * 1024 * 1024
    local mem = ffi.cast("uint8_t *", ffi.C.mmap(nil, len, PROT_RW, MAP_PRIVATE_ANON, -1, 0))
    local before = {}
    for _, fd in ipairs(memfds()) do before[fd] = true end
    local a = assert(pd:reg(mem, len / 2, verbs.ACCESS_ALL))
    local fresh
    for _, fd in ipairs(memfds()) do if not before[fd] then fresh = fd end end
    assert.is_not_nil(fresh, "a memfd backs the region")
    -- a peer's write: into the memfd, never through our page tables, so
    -- /proc/self/pagemap calls that page not present
    local off = 300 * 1024
    local f = assert(io.open(string.format("/proc/%d/fd/%d", ffi.C.getpid(), fresh), "r+b"))
    assert(f:seek("set", off))
    assert(f:write("\99"))
    f:close()
    -- a registration reaching past the backing swaps the union in anew
    local b = assert(pd:reg(mem, len * 3 / 4, verbs.ACCESS_ALL))
    assert.equal(99, mem[off], "the peer's byte survived the new backing")
    assert(b:dereg())
    assert(a:dereg())
    assert.equal(99, mem[off], "and going back to private pages")
    ffi.C.munmap(mem, len)
    pd:free(); dev:close()
  end)
end)

describe("soft device, how long registered memory is held", function()
  -- a NIC pins registered pages: an owner that unmaps them and maps new
  -- memory there gets memory the old region never reaches again
  it("holds a registered buffer until its region goes, even with no other reference left " ..
     "(the device's or the region's)", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd = assert(dev:pd())
    local seen = setmetatable({}, { __mode = "v" })
    local function reg()
      local buf = ffi.new("uint8_t[?]", 8192)
      seen.buf = buf
      return assert(pd:reg(buf, 8192)).m        -- only the C handle kept
    end
    local h = reg()
    collectgarbage(); collectgarbage()
    assert.is_not_nil(seen.buf, "the buffer lives while its region is registered")
    assert.equal(0, core.C.tbrt_mr_dereg(h))    -- through C: Lua still holds it
    local mr2 = assert(pd:reg(ffi.new("uint8_t[64]"), 64))
    assert(mr2:dereg())
    pd:free()
    dev:close()
    collectgarbage(); collectgarbage()
    assert.is_nil(seen.buf, "closing the device let it go")
  end)

  it("leaves what was mapped over registered memory alone when the region goes, and gives " ..
     "a registration of it a backing a peer's WRITE reaches", function()
    local p = V.pair{ personality = "linux-rc", type = "RC" }
    local len = 64 * 1024
    local mem = ffi.C.mmap(nil, len, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
    local old = assert(p.pd:reg(mem, len, verbs.ACCESS_ALL))
    ffi.fill(mem, len, 0x11)
    ffi.C.munmap(mem, len)
    local MAP_FIXED_NOREPLACE = 0x100000
    local again = ffi.C.mmap(mem, len, PROT_RW, MAP_PRIVATE_ANON + MAP_FIXED_NOREPLACE, -1, 0)
    assert.equal(ffi.cast("uintptr_t", mem), ffi.cast("uintptr_t", again),
      "the address came back (nothing else took it meanwhile)")
    local m = ffi.cast("uint8_t *", again)
    ffi.fill(m, len, 0x5a)
    local new = assert(p.pd:reg(m, len, verbs.ACCESS_ALL))
    for i = 0, 255 do p.abuf[i] = i end
    assert(p.a:post_send{ mr = p.amr, len = 256, opcode = "RDMA_WRITE", rkey = new.rkey,
      raddr = new.addr + 4096 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    assert.equal(200, m[4096 + 200], "the WRITE reached the memory mapped there now")
    assert(old:dereg())
    assert.equal(0x5a, m[0], "the old region's pages were not put back over the new memory")
    assert.equal(200, m[4096 + 200])
    assert(new:dereg())
    assert.equal(0x5a, m[len - 1])
    assert.equal(200, m[4096 + 200], "and the new region's pages went back private, kept")
    ffi.C.munmap(m, len)
    V.close(p)
  end)
end)

describe("soft device, a small inline WRITE to an empty queue (run at post)", function()
  local p
  after_each(function()
    if p then
      p.dev:set_port(p.port, nil)       -- (a port's state is the fabric's)
      V.close(p)
      p = nil
    end
  end)

  local function direct(q) return p.dev:stats(q.q.qp_num).direct_writes end
  local function write(len, off, o)
    o = o or {}
    return p.a:post_send{ mr = p.amr, len = len, opcode = "RDMA_WRITE", inline = o.inline ~= false,
      rkey = o.rkey or p.bmr.rkey, raddr = p.bmr.addr + off, wr_id = o.wr_id }
  end

  it("places the bytes and completes it as a run would, and still looks at the peer every " ..
     "64th send", function()
    p = V.pair{ personality = "linux-rc", type = "RC", inline = 64 }
    ffi.fill(p.bbuf, 512, 0xee)
    local N = 200
    for i = 1, N do
      V.fill(p.abuf, 0, 40, i)
      assert(write(40, 64, { wr_id = i }))
      local wc = assert(p.cq_a:wait(1))[1]
      assert.equal("IBV_WC_SUCCESS", wc.status)
      assert.equal(i, wc.wr_id)
      assert.equal("RDMA_WRITE", wc.opcode)
      assert.is_nil(V.first_bad(p.bbuf, 64, 40, i), "send " .. i)
    end
    for i = 0, 63 do assert.equal(0xee, p.bbuf[i]) end
    for i = 104, 511 do assert.equal(0xee, p.bbuf[i]) end
    -- the first (the peer not looked up yet) and each 64th (its liveness
    -- look) take the ordinary path
    local d = direct(p.a)
    assert.is_true(d >= N - N / 64 - 2 and d < N, "direct_writes " .. d .. " of " .. N)
    assert.equal(0, direct(p.b))
  end)

  it("leaves what it cannot vouch for to the ordinary path: not inline, a bad rkey (which " ..
     "fails as before), a port down", function()
    p = V.pair{ personality = "linux-rc", type = "RC", inline = 64 }
    assert(write(16, 0)); assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    local d = direct(p.a)
    assert(write(16, 0, { inline = false }))
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    assert.equal(d, direct(p.a), "a WRITE not inline")
    assert(write(16, 0, { rkey = p.bmr.rkey + 1 }))
    local wc = assert(p.cq_a:wait(1))[1]
    assert.equal("IBV_WC_REM_ACCESS_ERR", wc.status)
    assert.equal(d, direct(p.a), "a bad rkey")
    V.close(p)
    p = V.pair{ personality = "linux-rc", type = "RC", inline = 64, timeout = 1, retry_cnt = 1 }
    assert(write(16, 0)); assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    assert(write(16, 0)); assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    d = direct(p.a)
    assert.is_true(d > 0, "an inline WRITE to an idle queue never ran at post")
    assert(p.dev:set_port(p.port, "down"))
    p.abuf[0] = 0x77
    assert(write(16, 0))
    wc = assert(p.cq_a:wait(2))[1]
    assert.equal("IBV_WC_RETRY_EXC_ERR", wc.status)
    assert.equal(d, direct(p.a), "a port down")
    assert.are_not.equal(0x77, p.bbuf[0], "a WRITE over a port that is down placed its bytes")
    assert(p.dev:set_port(p.port, nil))
  end)

  it("keeps a WRITE behind a send that waits (RC order): it runs after it, the ordinary way",
    function()
    p = V.pair{ personality = "linux-rc", type = "RC", inline = 64, min_rnr_timer = 1 }
    ffi.fill(p.bbuf, 512, 0)
    V.fill(p.abuf, 0, 64, 3)
    -- no receive at b: the SEND waits on its RNR timer
    assert(p.a:post_send{ mr = p.amr, len = 64, offset = 0, wr_id = 1 })
    V.fill(p.abuf, 256, 32, 9)
    assert(p.a:post_send{ mr = p.amr, offset = 256, len = 32, opcode = "RDMA_WRITE",
      inline = true, rkey = p.bmr.rkey, raddr = p.bmr.addr + 256, wr_id = 2 })
    assert.equal(0, direct(p.a))
    assert.equal(0, p.bbuf[256], "the WRITE passed the SEND before it")
    assert(p.b:post_recv{ mr = p.bmr, len = 128, wr_id = 5 })
    local got = {}
    while #got < 2 do
      for _, wc in ipairs(assert(p.cq_a:wait(1))) do got[#got + 1] = wc end
    end
    assert.equal(1, got[1].wr_id); assert.equal("IBV_WC_SUCCESS", got[1].status)
    assert.equal(2, got[2].wr_id); assert.equal("IBV_WC_SUCCESS", got[2].status)
    assert.is_nil(V.first_bad(p.bbuf, 0, 64, 3))
    assert.is_nil(V.first_bad(p.bbuf, 256, 32, 9))
  end)

  it("runs the WRITEs of a list at post too, one by one, each completed in order", function()
    -- (one work request alone takes the device's own fast way to the wire;
    -- a list goes the general way, which finds each one runnable there)
    p = V.pair{ personality = "linux-rc", type = "RC", inline = 64 }
    assert(write(8, 0)); assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    local d = direct(p.a)
    local sge = ffi.new("struct ibv_sge[3]")
    local wr = ffi.new("struct ibv_send_wr[3]")
    for i = 0, 2 do
      V.fill(p.abuf, 64 * i, 48, 20 + i)
      sge[i].addr, sge[i].length, sge[i].lkey = p.amr.addr + 64 * i, 48, p.amr.lkey
      wr[i].wr_id, wr[i].sg_list, wr[i].num_sge = 100 + i, sge + i, 1
      wr[i].opcode = verbs.OPCODE.RDMA_WRITE
      wr[i].send_flags = bit.bor(C.IBV_SEND_SIGNALED, C.IBV_SEND_INLINE)
      wr[i].wr.rdma.rkey, wr[i].wr.rdma.remote_addr = p.bmr.rkey, p.bmr.addr + 128 + 64 * i
      if i < 2 then wr[i].next = wr + i + 1 end
    end
    assert.equal(0, C.tbrt_post_send(p.a.q, wr, nil))
    local got = {}
    while #got < 3 do
      for _, wc in ipairs(assert(p.cq_a:wait(1))) do got[#got + 1] = wc end
    end
    for i = 0, 2 do
      assert.equal(100 + i, got[i + 1].wr_id)
      assert.equal("IBV_WC_SUCCESS", got[i + 1].status)
      assert.is_nil(V.first_bad(p.bbuf, 128 + 64 * i, 48, 20 + i), "WRITE " .. i)
    end
    assert.equal(d + 3, direct(p.a), "the list's WRITEs did not run at post")
  end)

  it("takes a WRITE alone by the rules of any post: too much inline data refused, one " ..
     "posted to a QP in ERR flushed", function()
    p = V.pair{ personality = "linux-rc", type = "RC", inline = 64 }
    local ok, err = write(65, 0)
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*post_send: 65 inline bytes, max_inline_data 64$", err)
    assert.equal(0, direct(p.a))
    assert(p.a:modify{ state = "ERR" })
    ok, err = write(16, 0)
    assert.is_true(ok, tostring(err))       -- (posted to ERR: flushed)
    local wc = assert(p.cq_a:wait(1))[1]
    assert.equal("IBV_WC_WR_FLUSH_ERR", wc.status)
    assert.equal(0, direct(p.a))
  end)
end)

describe("a link's small frames and its waiter", function()
  it("posts frames that fit the QP's inline data inline, every byte checked", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc" })
    local msg = L.pattern(8)
    for _ = 1, 10 do
      assert.equal(8, a:send(msg, 8)); assert(a:flush())
      local got = assert(b:recv(8))
      assert.is_nil(L.check(ffi.cast("const uint8_t *", got), 8))
    end
    assert.equal(10, a:stats().inline_sends)
    local big = L.pattern(1000)
    assert.equal(1000, a:send(big, 1000)); assert(a:flush())
    assert.is_nil(L.check(ffi.cast("const uint8_t *", assert(b:recv(1000))), 1000))
    assert.equal(10, a:stats().inline_sends, "a 1016-byte frame is not inline")
    a:close(); b:close()
  end))

  it("gives a drained stride back when it next finds nothing, never more than a batch late",
    L.async(function()
    -- (SENDs only: small frames would go eager, into no stride at all)
    local a, b = L.pair({ device = "soft", personality = "linux-rc", eager = false })
    local nbuf = b:info().nbuf
    local batch = math.min(8, math.floor(nbuf / 4) + 1)
    assert.is_true(batch > 1, "nbuf " .. nbuf .. " defers nothing")
    assert.equal(nbuf, b:stats().recv_posted)
    assert.equal(1, a:send("x", 1)); assert(a:flush())
    assert.equal("x", assert(b:recv(1)))
    -- read: its stride is not posted between the completion and the reader
    assert.equal(nbuf - 1, b:stats().recv_posted)
    -- a look that finds nothing gives it back
    assert.is_nil(b:recv_some(1, 0))
    assert.equal(nbuf, b:stats().recv_posted)
    -- a reader that always finds more is never more than a batch short
    local n = nbuf - 1
    for i = 1, n do assert.equal(1, a:send(string.char(i), 1)); assert(a:flush()) end
    local most = 0
    for i = 1, n do
      assert.equal(string.char(i), assert(b:recv(1)))
      -- strides read and not yet posted: not the device's, not unread
      local late = nbuf - b:stats().recv_posted - (n - i)
      most = math.max(most, late)
    end
    assert.is_true(most < batch, most .. " strides were late, the batch is " .. batch)
    assert.is_true(most > 0, "every stride went back at once")
    a:close(); b:close()
  end))

  it("keeps looking 2 ms while the peer is awake, 50 us once it sleeps, opts.spin when set",
    L.async(function()
      local a, b = L.pair({ device = "soft", personality = "linux-rc" })
      -- a message each way: each end has met its peer
      assert(a:send("x")); assert(a:flush()); assert(b:recv(1))
      assert(b:send("y")); assert(b:flush()); assert(a:recv(1))
      C.tbrt_link_idle(b._l)                -- b says where it waits
      assert.equal(2e-3, C.tbrt_link_idle(a._l))
      -- b's completion queue armed: it sleeps (arm says 1 while it finds work first)
      local armed
      for _ = 1, 10 do armed = C.tbrt_link_arm(b._l); if armed == 0 then break end end
      assert.equal(0, armed)
      assert.equal(50e-6, C.tbrt_link_idle(a._l))
      a:settimeouts(nil, nil, 0.01)
      assert.equal(0.01, C.tbrt_link_idle(a._l))
      a:close(); b:close()
    end))
end)
