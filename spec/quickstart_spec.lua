-- quickstart_spec.lua - the README's C quick start, as a new user meets it:
-- `make install` to a fresh prefix, the README's hello.c built with
-- pkg-config alone, two C ends talking, a C end meeting a Lua end (both
-- directions: the default caps exchange is the same), a C end and a Lua tcp
-- end staying on TCP and saying so, and the helpers' bounded failures.
-- Runs under the normal build only: the sanitizer build's library needs
-- sanitizer flags to link against, which no user passes.
local ffi = require("ffi")
local cjson = require("cjson")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local H = require("helpers")
local L = require("links")

local C = require("tbrt.ffi").C

-- The README's complete C program: the indented block that starts with
-- "/* hello.c".
local function readme_example()
  local text = assert(H.read_file(H.root .. "/README.md"))
  local lines, out, inside = {}, {}, false
  for line in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  for _, line in ipairs(lines) do
    if not inside and line:match("^    /%* hello%.c ") then inside = true end
    if inside then
      if line ~= "" and not line:match("^    ") then break end
      out[#out + 1] = line:sub(5)
    end
  end
  assert(#out > 10, "README.md has no hello.c example")
  while out[#out] == "" do out[#out] = nil end
  return table.concat(out, "\n") .. "\n"
end

-- (under the sanitizer build these are not registered at all: the normal
-- build's run covers them, and a skip would count as a hardware skip)
local describe_c = os.getenv("TBRT_ASAN") and function() end or describe

describe_c("the C quick start", function()
  local dir, hello, env

  setup(L.async(function()
    dir = H.tmpdir()
    local prefix = dir .. "/prefix"
    local r = H.run("/usr/bin/make", { "-s", "--no-print-directory", "install", "PREFIX=" .. prefix,
      "BUILD=" .. H.build }, { cwd = H.root, timeout = 180 })
    assert(r.code == 0, "make install: " .. H.describe(r))
    assert(not r.stdout:match("ldconfig"), "a private prefix must not run ldconfig")
    H.write_file(dir .. "/hello.c", readme_example())
    -- exactly the README's commands: pkg-config for the flags, LD_LIBRARY_PATH
    -- (the README's other choice is -rpath) for a prefix not on the linker's path
    env = { PKG_CONFIG_PATH = prefix .. "/lib/pkgconfig", LD_LIBRARY_PATH = prefix .. "/lib",
      TBRT_LIB = false, TBRT_BUILD = false }
    r = H.run("/bin/sh", { "-c", "cc -Wall -Wextra -Werror hello.c $(pkg-config --cflags --libs tbrt) -o hello" },
      { cwd = dir, env = env, timeout = 60 })
    assert(r.code == 0, "building the README's hello.c: " .. H.describe(r))
    hello = dir .. "/hello"
  end))

  teardown(function() if dir then H.rmtree(dir) end end)

  -- Start `hello listen 0`; returns the handle and the port it printed.
  local function listener()
    local p = L.spawn(hello, { "listen", 0 }, env)
    assert(p:expect("listening on port", 10), "listener: " .. p:stdout())
    local port = tonumber(p:stdout():match("listening on port (%d+)"))
    return p, port
  end

  it("builds with pkg-config and links two C ends", L.async(function()
    local srv, port = listener()
    local c = L.spawn(hello, { "connect", "127.0.0.1", port }, env)
    local rc, rs = c:wait(20), srv:wait(20)
    assert.equal(0, rc.code, H.describe(rc))
    assert.equal(0, rs.code, H.describe(rs))
    assert.matches("link %d+ over soft%d\ngot hello\n$", rc.stdout)
    assert.matches("echoed hello\n$", rs.stdout)
  end))

  it("meets a Lua end: C connects, Lua accepts", L.async(function()
    local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "soft" }))
    local c = L.spawn(hello, { "connect", "127.0.0.1", srv.port }, env)
    local l = assert(srv:accept(10))
    srv:close()
    assert.equal("hello", assert(l:recv(5, 10)))
    assert(l:send("hello")) ; assert(l:flush())
    local r = c:wait(20)
    assert.equal(0, r.code, H.describe(r))
    assert.matches("got hello\n$", r.stdout)
    assert.equal("soft", l:info().kind)
    l:close()
  end))

  it("meets a Lua end: Lua connects, C accepts", L.async(function()
    local p, port = listener()
    local l = assert(tbrt.connect("127.0.0.1", port, { device = "soft" }))
    assert(l:send("hello")) ; assert(l:flush())
    assert.equal("hello", assert(l:recv(5, 10)))
    local r = p:wait(20)
    assert.equal(0, r.code, H.describe(r))
    assert.matches("echoed hello\n$", r.stdout)
    l:close()
  end))

  it("stays on TCP with a peer that has no RDMA, and says so", L.async(function()
    local p, port = listener()
    local l = assert(tbrt.connect("127.0.0.1", port, { device = "tcp" }))
    assert(l:send("hello")) ; assert(l:flush())
    assert.equal("hello", assert(l:recv(5, 10)))
    local r = p:wait(20)
    assert.equal(0, r.code, H.describe(r))
    assert.matches("link %d+ over tcp: peer has no RDMA: staying on TCP\n", r.stdout)
    l:close()
  end))
end)

describe("tbrt_link_connect / listen / accept", function()
  local err = ffi.new("tbrt_error")

  it("fail with the step and what to check, within their bounds", L.async(function()
    -- nobody listening: refused, with the hint
    local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "soft" }))
    local port = srv.port
    srv:close()
    assert.is_true(C.tbrt_link_connect("127.0.0.1", port, nil, err) == nil)
    assert.equal("ECONNREFUSED", ffi.string(C.tbrt_errname(err.code)))
    assert.matches("^connect 127%.0%.0%.1:%d+: .*is the other end listening%?", ffi.string(err.msg))
    assert.is_true(C.tbrt_link_connect("no-such-host.invalid", 7000, nil, err) == nil)
    assert.matches("cannot resolve", ffi.string(err.msg))
    assert.is_true(C.tbrt_link_connect("127.0.0.1", 70000, nil, err) == nil)
    assert.equal("EINVAL", ffi.string(C.tbrt_errname(err.code)))

    -- a listener nobody connects to: accept is bounded
    local o = ffi.new("tbrt_link_opts")
    C.tbrt_link_opts_init(o)
    o.device, o.timeout = "soft", 0.5
    local s = C.tbrt_link_listen("127.0.0.1", 0, o, err)
    assert.is_true(s ~= nil, ffi.string(err.msg))
    local t0 = H.now()
    assert.is_true(C.tbrt_link_accept(s, 0.2, err) == nil)
    assert.is_true(H.now() - t0 < 2)
    assert.matches("^accept on 127%.0%.0%.1:%d+: nobody connected within 0%.2 s$", ffi.string(err.msg))

    -- a peer that connects but never runs the exchange: the caps step says so
    local port2 = C.tbrt_listener_port(s)
    local peer = assert(require("tbrt.sock").connect("127.0.0.1", port2, 5))
    t0 = H.now()
    local l = C.tbrt_link_accept(s, 2, err)
    assert.is_true(l == nil)
    assert.is_true(H.now() - t0 < 3, "bounded by opts.timeout")
    assert.equal("ETIMEDOUT", ffi.string(C.tbrt_errname(err.code)))
    assert.matches("caps exchange: 0 of 24 bytes from the peer within 0%.5 s: is the other end " ..
      "accepting", ffi.string(err.msg))
    peer:close()
    C.tbrt_listener_close(s)
  end))

  it("fall back to TCP when no RDMA device works here, unless no_fallback", L.async(function()
    local o = ffi.new("tbrt_link_opts")
    C.tbrt_link_opts_init(o)
    o.device, o.timeout = "no-such-device", 5
    local s = C.tbrt_link_listen("127.0.0.1", 0, o, err)
    assert.is_true(s ~= nil, ffi.string(err.msg))
    -- the other end, a Lua one with RDMA, in a process of its own (accept blocks this one)
    local peer = L.spawn_peer({ "echo", C.tbrt_listener_port(s), cjson.encode({ device = "soft" }) },
      { TBRT_DEBUG = "1" })
    local l = C.tbrt_link_accept(s, 5, err)
    assert.is_true(l ~= nil, ffi.string(err.msg))
    local info = ffi.new("tbrt_link_info")
    C.tbrt_link_info_get(l, info)
    assert.equal("tcp", ffi.string(info.kind))
    assert.matches("^no usable RDMA device here: staying on TCP %(link %d+: probe: no device named " ..
      "\"no%-such%-device\"", ffi.string(info.fallback))
    local r = peer:wait(10)
    assert.equal(0, r.code, H.describe(r))
    assert.matches("tbrt: link %d+: peer has no RDMA: staying on TCP\n", r.stderr)
    assert.matches("connected <link %d+ tcp", r.stdout)
    C.tbrt_link_free(l)
    C.tbrt_listener_close(s)

    o.no_fallback = 1
    s = C.tbrt_link_listen("127.0.0.1", 0, o, err)
    peer = L.spawn_peer({ "echo", C.tbrt_listener_port(s), cjson.encode({ device = "soft", timeout = 5 }) })
    assert.is_true(C.tbrt_link_accept(s, 5, err) == nil)
    assert.equal("ENODEV", ffi.string(C.tbrt_errname(err.code)))
    assert.matches("no device named \"no%-such%-device\"", ffi.string(err.msg))
    r = peer:wait(10)
    assert.is_true(r.code ~= 0, "the Lua end fails too")
    C.tbrt_listener_close(s)
  end))
end)
