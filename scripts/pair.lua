-- pair.lua - two ends of a link, messages from 1 B to 16 MiB both ways,
-- every byte checked; prints one-way latency per iteration (min, typical,
-- mean, p99, p99.9, max, stdev), bandwidth and message rate each way.
--
--   tbrt scripts/pair.lua                      both ends here (two processes),
--                                              soft device, apple-uc
--   tbrt scripts/pair.lua --listen 7000        one end: answers, until a peer completed
--   tbrt scripts/pair.lua --connect host:7000  the other end: measures, prints
--
-- `--help` lists the options. The options that describe the link are in
-- LINK_ARGS: both ends take them, and the answering end this script starts
-- for itself gets them as they were given. Errors are printed once: when
-- both ends run here, the answering end's are shown only when they are the
-- cause (this end saw the other go away) and never twice.
local argparse = require("argparse")
local cjson = require("cjson")
local uv = require("luv")
local tbrt = require("tbrt")
local perf = require("tbrt.perf")
local report = require("tbrt.perf.report")
local listener = require("tbrt.perf.listener")

local PROG = "pair.lua"
local CHILD_PREFIX = "pair.lua (answering end): "

---------------------------------------------------------------------------
-- Options: each value checked where it is parsed, with the option's name.

local function whole(name, lo, hi)
  return function(s)
    local v = tonumber(s)
    if not v or v % 1 ~= 0 or v < lo or v > hi then
      return nil, string.format("%s: expected a whole number from %d to %d, got '%s'", name, lo, hi, s)
    end
    return v
  end
end

local function seconds(name)
  return function(s)
    local v = tonumber(s)
    if not v or v ~= v or v <= 0 or v == math.huge then
      return nil, string.format("%s: expected seconds > 0, got '%s'", name, s)
    end
    return v
  end
end

local function bytes(name)
  return function(s)
    local v, why = perf.parse_size(s)
    if not v then return nil, name .. ": " .. why end
    return v
  end
end

local function sizes(s)
  local v, why = perf.parse_sizes(s)
  if not v then return nil, "--sizes: " .. why end
  return v
end

-- [HOST:]PORT or [v6]:PORT -> { host, port }; a port alone takes default_host.
local function hostport(name, default_host, port_lo)
  return function(s)
    local host, port = s:match("^%[([^%]]*)%]:(%d+)$")
    if not host then host, port = s:match("^([^:]*):(%d+)$") end
    if not host then port = s:match("^(%d+)$") end
    port = tonumber(port)
    if not port or port < port_lo or port > 65535 then
      return nil, string.format("%s: expected %sPORT with PORT %d..65535, got '%s'", name,
        default_host == "0.0.0.0" and "[HOST:]" or "HOST:", port_lo, s)
    end
    return { host = (host and host ~= "") and host or default_host, port = port }
  end
end

local parser = argparse("tbrt scripts/pair.lua",
  "Run a link between two ends and measure it, every byte of every message checked: one-way " ..
  "latency of each iteration (min, typical, mean, p99, p99.9, max, stdev, after a warm-up), " ..
  "bandwidth and message rate each way. With neither --listen nor --connect both ends run " ..
  "here, the answering one in a child tbrt process.")
  :add_help(false):help_max_width(80):usage_max_width(80):help_description_margin(26)
parser:flag("-h --help", "Print this help and exit.")

local listen = parser:option("--listen",
  "Be the answering end, on [HOST:]PORT. PORT alone listens on every IPv4 interface " ..
  "(0.0.0.0), as perftest's server does; port 0 picks a free one (printed). Each connection " ..
  "is served in a task of its own; one that fails or stalls during setup is dropped with a " ..
  "logged reason, and the listener goes on until a peer has completed a run.")
  :argname("[HOST:]PORT"):convert(hostport("--listen", "0.0.0.0", 0))
local connect = parser:option("--connect",
  "Be the measuring end, against HOST:PORT (PORT alone: 127.0.0.1).")
  :argname("HOST:PORT"):convert(hostport("--connect", "127.0.0.1", 1))
parser:mutex(listen, connect)
local once = parser:flag("--once", "With --listen: stop after the first connection, whatever its outcome.")

local device = parser:option("-d --device",
  "soft, soft0, soft1, ibverbs, mlx5, tcp, auto (a real RDMA device with an ACTIVE port, " ..
  "else the software device; it says which and why) or a device name (`tbrt devices`). " ..
  "Default: $TBRT_DEVICE, else soft.")
  :argname("DEV")
local personality = parser:option("--personality",
  "Personality of a soft device: apple-uc (TN3205's rules) or linux-rc. Default for soft: " ..
  "$TBRT_SOFT_PERSONALITY, else apple-uc.")
  :argname("NAME")
local ib_port = parser:option("-i --ib-port", "Device port (default: the first ACTIVE one).")
  :argname("PORT"):convert(whole("--ib-port", 1, 255))
local gid_index = parser:option("-x --gid-index",
  "GID index (default: the GID that matches the bootstrap address).")
  :argname("N"):convert(whole("--gid-index", 0, 65535))
local nbuf = parser:option("--nbuf", "Strides per direction (16).")
  :argname("N"):convert(whole("--nbuf", 1, 1e9))
local stride = parser:option("--stride", "Bytes per stride, a multiple of 4K (128K).")
  :argname("BYTES"):convert(bytes("--stride"))
local framing = parser:option("--framing",
  "Framing: tbrt (= auto: fixed on Apple devices, variable elsewhere), fixed, variable, " ..
  "llama-apple, llama-linux (llama.cpp's transports, byte for byte).")
  :argname("NAME"):choices({ "tbrt", "auto", "fixed", "variable", "llama-apple", "llama-linux" })
local wire = parser:option("--wire",
  "Soft devices: auto (shared memory on this host, else RoCEv2 over UDP), shm or udp " ..
  "(default: $TBRT_SOFT_WIRE, else auto).")
  :choices { "auto", "shm", "udp" }
local faults_opt = parser:option("--faults",
  "Soft devices: faults on what this end sends, TBRT_FAULTS's syntax " ..
  "(drop=1%,reorder=1%,duplicate=1%,delay=200us,seed=7).")
local stats_flag = parser:flag("--stats",
  "After the run, print the link's counters (wire packets, retransmits, NAKs, drops injected...).")
local fallback = parser:flag("--fallback",
  "Fall back to TCP when the device cannot be used or the peer offers no RDMA (always with auto).")
parser:group("Ends", listen, connect, once)
parser:group("The link (both ends take these)", device, personality, ib_port, gid_index, nbuf,
  stride, framing, fallback)

local size_opt = parser:option("-s --sizes",
  "Message sizes, e.g. 1,4K,64K,16M (1 B to 16 MiB; default 1 B .. 16 MiB in 10 steps).")
  :argname("LIST"):convert(sizes)
local iters = parser:option("-n --iters",
  "Timed messages per size and test (default by size: 1000 round trips up to 256 KiB, then " ..
  "about 256 MiB worth).")
  :argname("N"):convert(whole("--iters", 1, perf.MAX_ITERS))
local warmup = parser:option("--warmup",
  "Untimed messages before the timed ones (default: a tenth of the latency iterations, " ..
  "1..100; about 4 MiB for bandwidth).")
  :argname("N"):convert(whole("--warmup", 0, perf.MAX_ITERS))
local test = parser:option("--test", "What to measure: lat, bw or both.", "both")
  :choices({ "lat", "bw", "both" }):argname("TEST")
local register = parser:flag("--register",
  "Register both ends' message buffers with the link: sends of 32 KiB or more go direct " ..
  "(the peer reads them with RDMA READs into its own registered buffer: one copy).")
local json = parser:flag("--json", "One JSON object per size instead of the table (same figures).")
local quiet = parser:flag("--quiet", "Only the table: no pair/link/why lines above it.")
parser:group("Measuring (the measuring end)", size_opt, iters, warmup, test, register, json, quiet)

local timeout = parser:option("--timeout",
  "Bound of every wait once the link is up, and of the listener's wait for a connection, seconds.", "60")
  :argname("S"):convert(seconds("--timeout"))
local setup_timeout = parser:option("--setup-timeout",
  "Bound of a connection's setup (caps exchange, probe, activation), seconds.",
  tostring(listener.SETUP_TIMEOUT)):argname("S"):convert(seconds("--setup-timeout"))
parser:group("Bounds", timeout, setup_timeout)
parser:flag("--child"):hidden(true)   -- the answering end started by this script

parser:epilog([[
Latency is one way: half of each round trip, every iteration timed (in us).
Bandwidth is GB/s (10^9 bytes/s) and million messages/s; -> is what this end
sends, <- what it receives. Both ends must ask for the same kind of link:
an explicit RDMA device facing a peer that offers none fails (use
--fallback or --device auto to accept TCP). Exit status: 0 when every size
was measured (the listener: when a peer completed), 1 otherwise.]])

-- The options that describe the link, as the child end gets them.
local LINK_ARGS = {
  { "device", "--device" }, { "personality", "--personality" }, { "ib_port", "--ib-port" },
  { "gid_index", "--gid-index" }, { "nbuf", "--nbuf" }, { "stride", "--stride" },
  { "framing", "--framing" }, { "timeout", "--timeout" }, { "setup_timeout", "--setup-timeout" },
  { "fallback", "--fallback", flag = true }, { "wire", "--wire" }, { "faults", "--faults" },
}

local function usage_error(msg)
  io.stderr:write(PROG, ": ", msg, "\n(tbrt scripts/pair.lua --help lists the options)\n")
  os.exit(1)
end

local ok_parse, args = parser:pparse(arg)
if not ok_parse then usage_error(args) end
if args.help then
  print(parser:get_help())
  os.exit(0)
end

---------------------------------------------------------------------------
-- What the options mean together.

local env_device = os.getenv("TBRT_DEVICE")
if env_device == "" then env_device = nil end
local dev = args.device or env_device or "soft"
local dev_from = args.device and "" or env_device and " (from TBRT_DEVICE)" or ""

-- The kind of the device asked for: soft, ibverbs, mlx5, tcp, auto, or
-- nil for a name tbrt does not know (the probe will say so).
local function device_kind(name)
  if name == "soft" or name == "ibverbs" or name == "mlx5" or name == "tcp" or name == "auto" then
    return name
  end
  for _, d in ipairs(tbrt.devices()) do
    if d.name == name then return d.kind end
  end
end
local kind = device_kind(dev)

if args.personality and kind and kind ~= "soft" and kind ~= "auto" then
  usage_error(string.format("--personality applies to the soft devices; --device %s%s is %s",
    dev, dev_from, kind == "tcp" and "plain TCP" or ("an " .. kind .. " device")))
end
if kind == "tcp" then
  for _, o in ipairs { { "ib_port", "--ib-port" }, { "gid_index", "--gid-index" },
      { "nbuf", "--nbuf" }, { "stride", "--stride" }, { "framing", "--framing" } } do
    if args[o[1]] then
      usage_error(string.format("%s applies to RDMA devices; --device tcp%s has none", o[2], dev_from))
    end
  end
end
if args.once and not args.listen then usage_error("--once applies to --listen") end
if args.listen and not args.child then
  local ignored = {}
  for _, o in ipairs { { "sizes", "--sizes" }, { "iters", "--iters" }, { "warmup", "--warmup" },
      { "json", "--json" } } do
    if args[o[1]] then ignored[#ignored + 1] = o[2] end
  end
  if args.test ~= "both" then ignored[#ignored + 1] = "--test" end
  if #ignored > 0 then
    io.stderr:write(string.format("%s: note: %s only matter%s on the measuring end; this end " ..
      "serves whatever it is asked\n", PROG, table.concat(ignored, ", "), #ignored == 1 and "s" or ""))
  end
end

local opts = { device = dev, timeout = args.timeout, fallback = args.fallback or dev == "auto" }
if args.personality then
  opts.personality = args.personality
elseif dev == "soft" and not os.getenv("TBRT_SOFT_PERSONALITY") then
  opts.personality = "apple-uc"
end
opts.nbuf, opts.stride, opts.port, opts.gid_index = args.nbuf, args.stride, args.ib_port, args.gid_index
opts.framing = args.framing
opts.wire, opts.faults = args.wire, args.faults

---------------------------------------------------------------------------
-- Reporting.

local child                      -- the answering end, when both run here
local child_err                  -- its error line, without the prefix

local function say(...)
  if not args.quiet and not args.json then print(...) end
end

-- Did this end fail because the other one went away (so the other's error
-- is the cause)?
local function peer_went_away(msg)
  return msg:find("^EOF:") or msg:find("^ECONNRESET:") or msg:find("^EPIPE:") or
    msg:find("the peer failed to activate", 1, true) or msg:find("peer closed", 1, true)
end

local function die(msg)
  if child then child.finish() end
  if msg == nil and not child_err then msg = "the answering end failed without saying why" end
  local text
  if args.child then
    text = CHILD_PREFIX .. msg
  elseif child_err and (msg == nil or peer_went_away(msg)) then
    text = CHILD_PREFIX .. child_err
  else
    text = PROG .. ": " .. msg
  end
  io.stdout:flush()
  io.stderr:write(text, "\n")
  io.stderr:flush()
  os.exit(1)
end

local function describe(l)
  local i = l:info()
  local what = i.kind == "tcp" and "tcp" or
    string.format("%s%s port %d GID[%d] qpn 0x%x -> 0x%x, %s framing, %s, %d x %d B strides",
      i.device, i.personality ~= "" and (" " .. i.personality) or "", i.port, i.gid_index,
      i.qpn, i.peer_qpn, i.framing, i.qp_type, i.nbuf, i.stride)
  say("link: " .. what)
  if l.fallback_why then
    say("why:  fell back to TCP: " .. l.fallback_why)
  else
    say("why:  " .. i.why_device)
  end
  if l.peer_no_rdma then
    io.stderr:write(PROG, ": peer has no RDMA: staying on TCP\n")
  end
end

---------------------------------------------------------------------------
-- The two ends.

local function run_listener(where)
  local log = function(text)
    if not args.child and not (args.quiet and text:find(": done: ")) then
      io.stderr:write(PROG, ": ", text, "\n")
    end
  end
  local ok, err = listener.run {
    host = where.host, port = where.port, opts = opts, setup_timeout = args.setup_timeout,
    timeout = args.timeout, accept_timeout = args.timeout, once = args.once or args.child,
    log = log,
    on_listening = function(host, port)
      print(string.format("listening on %s:%d%s", host, port,
        host == "0.0.0.0" and " (every IPv4 interface)" or ""))
      io.stdout:flush()
    end,
  }
  if not ok then
    -- with --once the connection's log line has said why already
    if args.once and not args.child and not err:find("^ETIMEDOUT: accept") then os.exit(1) end
    die(err)
  end
end

local function measure(host, port)
  -- setting up is bounded as on the listener; the data waits by --timeout
  local setup = {}
  for k, v in pairs(opts) do setup[k] = v end
  setup.timeout, setup.connect_timeout = args.setup_timeout, args.setup_timeout
  local l, err = tbrt.connect(host, port, setup)
  if not l then die(err) end
  l:settimeouts(args.timeout)
  describe(l)
  -- warm up (JIT, page faults, caches) so the first row measures the link
  local wok, werr = pcall(perf.measure, l, 64, { iters = 500, warmup = 0, timeout = args.timeout })
  if not wok then die("warm-up: " .. tostring(werr)) end
  local list = args.sizes or perf.DEFAULT_SIZES
  local function one(n, test)
    local ok, row = pcall(perf.measure, l, n, { iters = args.iters, warmup = args.warmup,
      timeout = args.timeout, lat_only = test == "lat", bw_only = test == "bw",
      register = args.register })
    if not ok then die(string.format("%s messages: %s", perf.human(n), tostring(row))) end
    return row
  end
  if args.json then
    -- one object per size, both tests in it
    for _, n in ipairs(list) do
      local row = one(n, args.test)
      local i = l:info()
      row.device, row.personality, row.kind = i.device, i.personality, i.kind
      print(cjson.encode(row))
      io.stdout:flush()
    end
  else
    -- a table per test: latency over every size, then bandwidth
    local tests = args.test == "both" and { "lat", "bw" } or { args.test }
    for k, t in ipairs(tests) do
      if k > 1 then print("") end
      for _, line in ipairs(report.header(t)) do print(line) end
      for _, n in ipairs(list) do
        print(report.row(one(n, t), t))
        io.stdout:flush()
      end
    end
  end
  perf.done(l)
  if args.stats then
    local st = l:stats()
    if args.json then
      print(cjson.encode({ stats = st }))
    else
      local keys = {}
      for k in pairs(st) do keys[#keys + 1] = k end
      table.sort(keys)
      local parts = {}
      for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(st[k]) end
      print("stats: " .. table.concat(parts, " "))
    end
  end
  l:close()
end

-- The answering end in a child tbrt process: its stdout says the port,
-- its error line comes back to die(); anything else it writes is passed on.
local function start_child()
  local child_args = { arg[0], "--listen", "127.0.0.1:0", "--child" }
  for _, a in ipairs(LINK_ARGS) do
    local v = a[1] == "device" and dev or args[a[1]]
    if a.flag then
      if v then child_args[#child_args + 1] = a[2] end
    elseif v ~= nil then
      child_args[#child_args + 1] = a[2]
      child_args[#child_args + 1] = tostring(v)
    end
  end
  if opts.personality and not args.personality then
    child_args[#child_args + 1] = "--personality"
    child_args[#child_args + 1] = opts.personality
  end
  local out, err_pipe = uv.new_pipe(false), uv.new_pipe(false)
  local c = { done = false, open = 2 }
  local proc = uv.spawn(uv.exepath(), { args = child_args, stdio = { nil, out, err_pipe } },
    function(code, signal) c.done, c.code, c.signal = true, code, signal end)
  if not proc then die("cannot start the answering end (" .. uv.exepath() .. ")") end
  local obuf, ebuf = "", ""
  out:read_start(function(_, data)
    if data then
      obuf = obuf .. data
      c.port = c.port or tonumber(obuf:match("listening on [^\n]*:(%d+)"))
    else
      out:close()
      c.open = c.open - 1
    end
  end)
  err_pipe:read_start(function(_, data)
    if data then ebuf = ebuf .. data end
    for line in ebuf:gmatch("([^\n]*)\n") do
      if line:sub(1, #CHILD_PREFIX) == CHILD_PREFIX then
        child_err = line:sub(#CHILD_PREFIX + 1)
      else
        io.stderr:write(line, "\n")
      end
    end
    ebuf = ebuf:match("[^\n]*$")
    if not data then
      if ebuf ~= "" then io.stderr:write(ebuf, "\n") end
      err_pipe:close()
      c.open = c.open - 1
    end
  end)
  -- let the other end finish and say its part, bounded
  function c.finish()
    if not tbrt.task.wait(function() return c.done and c.open == 0 end, 5) then
      proc:kill("sigkill")
      tbrt.task.wait(function() return c.done end, 2)
    end
    if not proc:is_closing() then proc:close() end
  end
  return c
end

if args.listen then
  run_listener(args.listen)
elseif args.connect then
  measure(args.connect.host, args.connect.port)
else
  child = start_child()
  -- an ASan build starts slowly
  local ok = tbrt.task.wait(function() return child.port or child.done end, 20)
  if not ok or not child.port then
    if not child.done then die("the answering end did not start listening within 20 s") end
    die(nil)
  end
  say(string.format("pair: two processes on 127.0.0.1:%d, device %s%s%s", child.port, dev, dev_from,
    opts.personality and (" (" .. opts.personality .. ")") or ""))
  measure("127.0.0.1", child.port)
  child.finish()
  local c = child
  child = nil
  if c.code ~= 0 then
    die(child_err and nil or string.format("the answering end failed (exit %s%s)", tostring(c.code),
      (c.signal or 0) ~= 0 and (", signal " .. c.signal) or ""))
  end
end
