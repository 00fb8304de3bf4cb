-- peer.lua - the other end of a two-process spec, run by the tbrt program:
--   tbrt spec/support/peer.lua MODE PORT OPTS_JSON [SIZES...]
-- MODE echo: connect, then for each size receive that many bytes, check the
--            pattern byte by byte, and send them back; print "ok" at the end.
-- MODE sink: connect, print "ready", then receive forever (until killed).
-- MODE source: connect, print "ready", then send forever (until killed).
-- MODE exchange: connect; for each size send that many bytes (pattern 7)
--            from registered memory, then receive as many (pattern 4) and
--            check them: both ends send before they read; print "ok" and
--            the direct sends it made at the end.
-- It connects to 127.0.0.1, or to $PEER_HOST.
local cjson = require("cjson")
local tbrt = require("tbrt")
package.path = package.path .. ";" .. arg[0]:gsub("peer%.lua$", "?.lua")
local L = require("links")

local mode, port, opts_json = arg[1], tonumber(arg[2]), arg[3]
local opts = cjson.decode(opts_json)
local link = assert(tbrt.connect(os.getenv("PEER_HOST") or "127.0.0.1", port, opts))
io.stdout:write("connected ", tostring(link), "\n")
io.stdout:flush()

if mode == "echo" then
  for i = 4, #arg do
    local n = tonumber(arg[i])
    local buf = require("ffi").new("uint8_t[?]", math.max(n, 1))
    local got, err = link:recv_into(buf, n, 30)
    if not got then error("recv " .. n .. ": " .. err) end
    local bad = L.check(buf, n, n % 251)
    if bad then error(string.format("size %d: byte %d differs", n, bad)) end
    assert(link:send(buf, n))
    assert(link:flush())
  end
  print("ok")
  assert(link:close())
elseif mode == "sink" then
  print("ready")
  io.stdout:flush()
  local buf = require("ffi").new("uint8_t[?]", 2 ^ 20)
  while true do
    local got, err = link:recv_into(buf, 2 ^ 20, 60, true)
    if not got then error(err) end
  end
elseif mode == "exchange" then
  local ffi = require("ffi")
  for i = 4, #arg do
    local n = tonumber(arg[i])
    local src, dst = L.pattern(n, 7), ffi.new("uint8_t[?]", n)
    assert(link:register(src, n))
    assert(link:send(src, n, 30))
    assert(link:flush())
    local got, err = link:recv_into(dst, n, 30)
    if not got then error("recv " .. n .. ": " .. err) end
    local bad = L.check(dst, n, 4)
    if bad then error(string.format("size %d: byte %d differs", n, bad)) end
    assert(link:unregister(src))
  end
  print("ok direct_sends " .. link:stats().direct_sends)
  assert(link:close())
elseif mode == "source" then
  print("ready")
  io.stdout:flush()
  local buf = L.pattern(2 ^ 20)
  while true do
    assert(link:send(buf, 2 ^ 20, 60))
    assert(link:flush())
  end
end
