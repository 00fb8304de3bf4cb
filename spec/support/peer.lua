-- peer.lua - the other end of a two-process spec, run by the tbrt program:
--   tbrt spec/support/peer.lua MODE PORT OPTS_JSON [SIZES...]
-- MODE echo: connect, then for each size receive that many bytes, check the
--            pattern byte by byte, and send them back; print "ok" at the end.
-- MODE sink: connect, print "ready", then receive forever (until killed).
-- MODE source: connect, print "ready", then send forever (until killed).
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
elseif mode == "source" then
  print("ready")
  io.stdout:flush()
  local buf = L.pattern(2 ^ 20)
  while true do
    assert(link:send(buf, 2 ^ 20, 60))
    assert(link:flush())
  end
end
