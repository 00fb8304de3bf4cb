-- rpc_peer.lua - one end of a llama.cpp ggml-rpc connection, for people who
-- build llama.cpp's RPC transports and want a scripted other end: the
-- server side of HELLO then an echo of every command, or the client side of
-- HELLO then a scripted command sequence. The RDMA link is set up as
-- llama.cpp's client and server do it (HELLO carries the caps), in
-- llama.cpp's framing byte for byte (or tbrt's own, to compare).
--
--   tbrt scripts/rpc_peer.lua --listen 0.0.0.0:50052                  the server
--   tbrt scripts/rpc_peer.lua --connect host:50052 --commands GRAPH_COMPUTE:1M,DEVICE_COUNT:0:4
--   tbrt scripts/rpc_peer.lua --connect host:50052 --script cmds.lua
--   options: --framing tbrt|llama-apple|llama-linux  --device soft|ibverbs|mlx5|auto|NAME
--            --personality apple-uc|linux-rc  --faults SPEC  --protocol 7.0.1
--            --timeout S  --fallback  --quiet
--
-- --commands: NAME[:SIZE[:REPLY]],... NAME a command name or number, SIZE
-- the payload (patterned bytes; 0, 12, 4K, 1M), REPLY "echo" (the reply
-- must be the payload, byte for byte: what --listen answers), "none" (no
-- reply), or a reply size (any bytes). --script FILE: a Lua file returning
-- { { cmd = NAME|N, size = N | payload = "bytes", reply = ... }, ... }.
-- Default: GRAPH_COMPUTE at 1 B, 4 KiB, 128 KiB, 1 MiB and 16 MiB, echoed.
local argparse = require("argparse")
local ffi = require("ffi")
local tbrt = require("tbrt")
local link = require("tbrt.link")
local ggml_rpc = require("tbrt.ggml_rpc")

local parser = argparse("tbrt scripts/rpc_peer.lua",
  "One end of a llama.cpp ggml-rpc connection: HELLO, then echo (--listen) or a script.")
parser:mutex(
  parser:option("--listen", "Serve one client on [HOST:]PORT: HELLO, then echo."):argname("[HOST:]PORT"),
  parser:option("--connect", "Be the client of HOST:PORT: HELLO, then the commands."):argname("HOST:PORT")
)
parser:option("--framing", "tbrt, llama-apple or llama-linux (default: by --personality, " ..
  "llama-apple for apple-uc, else llama-linux).")
parser:option("--device", "Device: soft, soft0, ibverbs, mlx5, tcp, auto, or a device name.", "soft")
parser:option("--personality", "Soft device personality (apple-uc, linux-rc).")
parser:option("--faults", "Fault injection for the device (where the device has it).")
parser:option("--commands", "Client: NAME[:SIZE[:REPLY]],... (see the file's header).")
parser:option("--script", "Client: a Lua file returning the command list.")
parser:option("--protocol", "The ggml-rpc version to speak, MAJOR.MINOR.PATCH.")
parser:option("--timeout", "Bound of every wait, seconds.", "60"):convert(tonumber)
parser:flag("--fallback", "Stay on TCP when the device cannot be used (always with auto).")
parser:flag("--quiet", "Only errors.")

local args = parser:parse(arg)

local function die(msg)
  io.stderr:write("rpc_peer.lua: ", msg, "\n")
  io.stderr:flush()
  os.exit(1)
end

local function say(...)
  if not args.quiet then print(...) io.stdout:flush() end
end

if not args.listen and not args.connect then die("--listen or --connect, see --help") end

local personality = args.personality
if not personality and args.device == "soft" and not os.getenv("TBRT_SOFT_PERSONALITY") then
  personality = "apple-uc"
end
local framing = args.framing or ((personality or os.getenv("TBRT_SOFT_PERSONALITY")) == "apple-uc"
  and "llama-apple" or "llama-linux")
if not ({ tbrt = 1, ["llama-apple"] = 1, ["llama-linux"] = 1 })[framing] then
  die("--framing must be tbrt, llama-apple or llama-linux, got " .. framing)
end

local proto = {}
if args.protocol then
  local a, b, c = args.protocol:match("^(%d+)%.(%d+)%.(%d+)$")
  if not a then die("--protocol must be MAJOR.MINOR.PATCH, got " .. args.protocol) end
  proto.version = { tonumber(a), tonumber(b), tonumber(c) }
end
local ok_proto, rpc = pcall(ggml_rpc.new, proto)
if not ok_proto then die(tostring(rpc)) end

local opts = { device = args.device, personality = personality, framing = framing,
  timeout = args.timeout, fallback = args.fallback or args.device == "auto" }
-- on_hello: say what came through HELLO
opts.exchange = rpc:hello_exchange(function(role, _, v)
  if role == "client" then say(string.format("hello: server speaks ggml-rpc %s", rpc:version_text(v)))
  else say("hello: a client") end
end)
if args.faults then
  -- the soft device's fault sets, TBRT_FAULTS's syntax (a link option)
  local accepted, err = pcall(link.check_opts, { faults = args.faults })
  if not accepted then die("--faults: " .. tostring(err)) end
  opts.faults = args.faults
end

local function size_of(s)
  local num, unit = s:match("^(%d+)([KkMmGg]?)i?[Bb]?$")
  if not num then return nil end
  return tonumber(num) * ({ [""] = 1, k = 1024, K = 1024, m = 2 ^ 20, M = 2 ^ 20, g = 2 ^ 30,
    G = 2 ^ 30 })[unit]
end

local function pattern(n, seed)
  local b = ffi.new("uint8_t[?]", math.max(n, 1))
  for i = 0, n - 1 do b[i] = (i * 131 + seed) % 251 end
  return ffi.string(b, n)
end

-- The client's command list, checked before anything connects.
local function command_list()
  local list = {}
  if args.script then
    local chunk, err = loadfile(args.script)
    if not chunk then die("--script: " .. err) end
    local ok, t = pcall(chunk)
    if not ok or type(t) ~= "table" then die("--script " .. args.script .. " must return a list") end
    list = t
  else
    for item in (args.commands or "GRAPH_COMPUTE:1,GRAPH_COMPUTE:4K,GRAPH_COMPUTE:128K," ..
      "GRAPH_COMPUTE:1M,GRAPH_COMPUTE:16M"):gmatch("[^,%s]+") do
      local name, size, reply = item:match("^([^:]+):?([^:]*):?([^:]*)$")
      local n = size ~= "" and size_of(size) or 0
      if not n then die("--commands: bad size in " .. item) end
      list[#list + 1] = { cmd = tonumber(name) or name, size = n,
        reply = reply == "" and "echo" or tonumber(reply) or size_of(reply) or reply }
    end
  end
  for i, c in ipairs(list) do
    local ok, err = pcall(rpc.command, rpc, c.cmd)
    if not ok then die(string.format("command %d: %s", i, tostring(err):gsub("^[^:]*:%d+: ", ""))) end
    if c.payload == nil then c.payload = pattern(c.size or 0, i) end
    if not (c.reply == "echo" or c.reply == "none" or type(c.reply) == "number") then
      die(string.format("command %d: reply must be echo, none or a size", i))
    end
  end
  return list
end

local function hostport(s, default_host)
  local host, port = s:match("^%[?([^%]]*)%]?:(%d+)$")
  if not host then host, port = default_host, s:match("^(%d+)$") end
  if not port then die("expected [HOST:]PORT, got " .. s) end
  return host ~= "" and host or default_host, tonumber(port)
end

local function describe(l)
  local i = l:info()
  say(i.kind == "tcp" and ("link: tcp" .. (l.fallback_why and (" (" .. l.fallback_why .. ")") or ""))
    or string.format("link: %s%s port %d, %s framing, %s, qpn 0x%x -> 0x%x", i.device,
      i.personality ~= "" and (" " .. i.personality) or "", i.port, i.framing, i.qp_type, i.qpn,
      i.peer_qpn))
end

local function serve(spec)
  local host, port = hostport(spec, "0.0.0.0")
  local srv, err = tbrt.listen(host, port, opts)
  if not srv then die(err) end
  say(string.format("listening on %s:%d", host, srv.port))
  local l, aerr = srv:accept(args.timeout)
  srv:close()
  if not l then die(aerr) end
  describe(l)
  local n, bytes = 0, 0
  while true do
    local name, payload = rpc:recv_command(l, args.timeout)
    if not name then
      if payload:match("^EOF") then break end         -- the client is done
      die(payload)
    end
    local ok, rerr = rpc:send_reply(l, payload, nil, args.timeout)
    if not ok and rerr:match("^EPIPE") then
      say(string.format("%s %d B: the client left without waiting for the echo", name, #payload))
      n, bytes = n + 1, bytes + #payload
      break
    end
    if not ok then die(rerr) end
    n, bytes = n + 1, bytes + #payload
    say(string.format("%s %d B (echoed)", name, #payload))
  end
  say(string.format("served %d commands, %d bytes", n, bytes))
  l:close()
end

local function client(spec)
  local list = command_list()
  local host, port = hostport(spec, "127.0.0.1")
  local l, err = tbrt.connect(host, port, opts)
  if not l then die(err) end
  describe(l)
  for i, c in ipairs(list) do
    local _, name = rpc:command(c.cmd)
    local t0 = tbrt.now()
    local ok, serr = rpc:send_command(l, c.cmd, c.payload, nil, args.timeout)
    if not ok then die(string.format("command %d (%s): %s", i, name, serr)) end
    local what = "sent"
    if c.reply ~= "none" then
      local reply, rerr = rpc:recv_reply(l, c.reply == "echo" and #c.payload or c.reply, args.timeout)
      if not reply then die(string.format("command %d (%s): %s", i, name, rerr)) end
      if c.reply == "echo" and reply ~= c.payload then
        local k = 1
        while reply:byte(k) == c.payload:byte(k) do k = k + 1 end
        die(string.format("command %d (%s): the echo differs at byte %d", i, name, k - 1))
      end
      what = c.reply == "echo" and "echo ok" or (#reply .. "-byte reply")
    end
    say(string.format("%s %d B: %s (%.3f ms)", name, #c.payload, what, (tbrt.now() - t0) * 1e3))
  end
  l:close()
end

if args.listen then serve(args.listen) else client(args.connect) end
