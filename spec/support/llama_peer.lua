-- llama_peer.lua - the other end of the llama.cpp compatibility specs: a
-- process that behaves like llama.cpp's ggml-rpc client or server over one
-- of its RDMA transports (llama_wire.lua), with its own HELLO written from
-- the facts (it does not use tbrt.ggml_rpc, which it is there to check):
--
--   tbrt spec/support/llama_peer.lua ROLE WIRE PORT OPTS_JSON [SIZES...]
--
-- ROLE client: connect to 127.0.0.1:PORT, probe, HELLO (cmd 14, u64 24,
--      caps), read the 28-byte reply, refuse a server whose major differs or
--      whose minor is higher, activate; then per size one command (cmd, u64
--      size, a patterned payload: each field its own send_data, then flush)
--      whose reply must be the same bytes; prints "ok SIZE" each, "done".
-- ROLE server: listen on 127.0.0.1:0 (prints "listening PORT"), accept one
--      client, read HELLO (drop the client unless cmd 14 with 24 bytes),
--      probe, reply, activate; then echo every command's payload as its
--      reply, checking the pattern; at the client's end prints "done".
-- WIRE apple | linux. OPTS_JSON: device, personality, version {3 bytes},
-- cmd (the command byte used), timeout. Errors go to stderr as
-- "llama_peer: ...", exit 1.
local cjson = require("cjson")
local ffi = require("ffi")
package.path = package.path .. ";" .. arg[0]:gsub("llama_peer%.lua$", "?.lua")
local W = require("llama_wire")

local role, wire, port, opts = arg[1], arg[2], tonumber(arg[3]), cjson.decode(arg[4])
local sizes = {}
for i = 5, #arg do sizes[#sizes + 1] = tonumber(arg[i]) end
local version = opts.version or { 7, 0, 1 }
local HELLO = 14

local function say(...)
  io.stdout:write(table.concat({ ... }, " "), "\n")
  io.stdout:flush()
end

local function die(msg)
  io.stderr:write("llama_peer: ", tostring(msg), "\n")
  io.stderr:flush()
  os.exit(1)
end

local function u64(n)
  local lo = n % 4294967296
  return W.u32(lo) .. W.u32((n - lo) / 4294967296)
end
local function rd64(s) return W.rd32(s, 1) + W.rd32(s, 5) * 4294967296 end

-- byte i = (i * 131 + seed) % 251, seed = size % 251 (spec/support/links.lua)
local function pattern(n)
  local b = ffi.new("uint8_t[?]", math.max(n, 1))
  local seed = n % 251
  for i = 0, n - 1 do b[i] = (i * 131 + seed) % 251 end
  return ffi.string(b, n)
end

local function check(s, n)
  if #s ~= n then return "got " .. #s .. " bytes" end
  local p, seed = ffi.cast("const uint8_t *", s), n % 251
  for i = 0, n - 1 do
    if p[i] ~= (i * 131 + seed) % 251 then return "byte " .. i .. " differs" end
  end
end

local function all_zero(c) return c == W.ZERO_CAPS end

local ok, err = pcall(function()
  local sock
  if role == "server" then
    local lfd, lport = W.listen()
    say("listening", lport)
    sock = W.accept(lfd, opts.timeout or 20)
  else
    sock = W.connect(port)
  end
  local t = W[wire](sock, opts)
  local timeout = opts.timeout or 20
  local peer_caps, my_caps
  if role == "client" then
    my_caps = t:probe()
    sock:send(string.char(HELLO) .. u64(24) .. my_caps)
    local size = sock:recv(8, timeout)
    if not size then die("no HELLO reply") end
    if rd64(size) ~= 28 then die("HELLO reply of " .. rd64(size) .. " bytes") end
    local rsp = assert(sock:recv(28, timeout), "HELLO reply")
    local major, minor = rsp:byte(1), rsp:byte(2)
    if major ~= version[1] or minor > version[2] then
      die(string.format("RPC server version mismatch: %d.%d.%d", rsp:byte(1, 3)))
    end
    peer_caps = rsp:sub(5)
  else
    local cmd = sock:recv(1, timeout)
    if not cmd or cmd:byte() ~= HELLO then die("Expected HELLO command") end
    local size = rd64(assert(sock:recv(8, timeout)))
    if size ~= 24 then die("HELLO request size mismatch (" .. size .. " vs 24)") end
    peer_caps = assert(sock:recv(24, timeout))
    my_caps = t:probe()
    sock:send(u64(28) .. string.char(version[1], version[2], version[3], 0) .. my_caps)
  end
  if not all_zero(peer_caps) and not all_zero(my_caps) then
    local aok, aerr = t:activate(peer_caps)
    if not aok then die("RDMA activate failed: " .. tostring(aerr)) end
  end
  say("transport", t.rdma and "RDMA" or "TCP", t.max_inline and ("inline " .. t.max_inline) or "")

  local cmd = opts.cmd or 10
  if role == "client" then
    for _, n in ipairs(sizes) do
      t:send(string.char(cmd))
      t:send(u64(n))
      if n > 0 then t:send(pattern(n)) end
      t:flush()
      local size, e1 = t:recv(8)
      if not size then die("reply to " .. n .. ": " .. e1) end
      if rd64(size) ~= n then die("reply of " .. rd64(size) .. " bytes to a command of " .. n) end
      local data, e2 = t:recv(n)
      if not data then die("reply to " .. n .. ": " .. e2) end
      local bad = check(data, n)
      if bad then die("reply to " .. n .. ": " .. bad) end
      say("ok", n)
    end
  else
    while true do
      local c, cerr = t:recv(1)
      if not c and cerr == "timeout" then die("no command within " .. timeout .. " s") end
      if not c then break end                 -- the client is gone: llama.cpp's end of a session
      local size = t:recv(8)
      if not size then die("command without a size") end
      local n = rd64(size)
      local data = n > 0 and t:recv(n) or ""
      if not data then die("command of " .. n .. " bytes cut short") end
      local bad = check(data, n)
      if bad then die("command of " .. n .. " bytes: " .. bad) end
      t:send(u64(n))
      if n > 0 then t:send(data) end
      t:flush()
      say("served", n)
    end
  end
  say("done", t.inline_sends and ("inline_sends " .. t.inline_sends) or "")
  sock:close()
end)
if not ok then die(err) end
os.exit(0)
