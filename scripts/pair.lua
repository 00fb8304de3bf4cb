-- pair.lua - two ends of a link, messages from 1 B to 16 MiB both ways,
-- every byte checked; prints size, messages, GB/s each way and one-way
-- latency.
--
--   tbrt scripts/pair.lua                          both ends here (two processes),
--                                                  soft device, apple-uc
--   tbrt scripts/pair.lua --listen 0.0.0.0:7000    one end (answers)
--   tbrt scripts/pair.lua --connect host:7000      the other end (measures, prints)
--   options: --device soft|ibverbs|mlx5|tcp|auto  --personality apple-uc|linux-rc
--            --sizes 1,4K,16M  --iters N  --json  --nbuf N --stride BYTES --timeout S
--            --framing tbrt|fixed|variable|llama-apple|llama-linux
local argparse = require("argparse")
local cjson = require("cjson")
local uv = require("luv")
local tbrt = require("tbrt")
local perf = require("tbrt.perf")

local parser = argparse("tbrt scripts/pair.lua",
  "Run a link between two ends and measure it (every byte checked).")
parser:mutex(
  parser:option("--listen", "Run the answering end on [HOST:]PORT."):argname("[HOST:]PORT"),
  parser:option("--connect", "Run the measuring end against HOST:PORT."):argname("HOST:PORT")
)
parser:option("--device", "Device: soft, soft0, ibverbs, mlx5, tcp, auto, or a device name.",
  "soft")
parser:option("--personality", "Soft device personality (apple-uc, linux-rc).")
parser:option("--framing", "Framing: tbrt (auto), fixed, variable, llama-apple, llama-linux.")
  :choices({ "tbrt", "auto", "fixed", "variable", "llama-apple", "llama-linux" })
parser:option("--sizes", "Message sizes, e.g. 1,4K,64K,16M.")
parser:option("--iters", "Messages per size and test (default: by size)."):convert(tonumber)
parser:option("--test", "What to measure: lat, bw or both.", "both"):choices({ "lat", "bw", "both" })
parser:option("--nbuf", "Strides per direction."):convert(tonumber)
parser:option("--stride", "Bytes per stride."):convert(tonumber)
parser:option("--timeout", "Bound of every wait, seconds.", "60"):convert(tonumber)
parser:flag("--json", "One JSON object per row instead of the table.")
parser:flag("--fallback", "Fall back to TCP when the device cannot be used (always with auto).")
parser:flag("--quiet", "No header lines.")
parser:flag("--child"):hidden(true)   -- the answering end started by this script

local args = parser:parse(arg)

local on_die                    -- set while a child end runs: wait for it first

local function die(msg)
  if on_die then on_die() end
  io.stderr:write(args.child and "pair.lua (answering end): " or "pair.lua: ", msg, "\n")
  io.stderr:flush()
  os.exit(1)
end

local sizes = perf.DEFAULT_SIZES
if args.sizes then sizes = assert(perf.parse_sizes(args.sizes)) end

local opts = { device = args.device, timeout = args.timeout,
  fallback = args.fallback or args.device == "auto" }
if args.personality then opts.personality = args.personality
elseif opts.device == "soft" and not os.getenv("TBRT_SOFT_PERSONALITY") then
  opts.personality = "apple-uc"
end
if args.nbuf then opts.nbuf = args.nbuf end
if args.framing then opts.framing = args.framing end
if args.stride then opts.stride = args.stride end

local function hostport(s, default_host)
  local host, port = s:match("^%[?([^%]]*)%]?:(%d+)$")
  if not host then host, port = default_host, s:match("^(%d+)$") end
  if not port then die("expected [HOST:]PORT, got " .. s) end
  return host ~= "" and host or default_host, tonumber(port)
end

local function say(...)
  if not args.quiet and not args.json then print(...) end
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
end

-- The answering end: accept one link and serve it.
local function listen(spec)
  local host, port = hostport(spec, "0.0.0.0")
  local srv, err = tbrt.listen(host, port, opts)
  if not srv then die(err) end
  print(string.format("listening on %s:%d", host, srv.port))
  io.stdout:flush()
  local l, aerr = srv:accept(args.timeout)
  srv:close()
  if not l then die(aerr) end
  local ok, serr = perf.serve(l, args.timeout)
  l:close()
  if not ok then die(serr) end
end

-- The measuring end.
local function measure(host, port)
  local l, err = tbrt.connect(host, port, opts)
  if not l then die(err) end
  describe(l)
  -- warm up (JIT, page faults, caches) so the first row measures the link
  local wok, werr = pcall(perf.measure, l, 64, { iters = 500, timeout = args.timeout })
  if not wok then die("warm-up: " .. tostring(werr)) end
  say(perf.format_header())
  local rows = {}
  for _, n in ipairs(sizes) do
    local ok, row = pcall(perf.measure, l, n, { iters = args.iters, timeout = args.timeout,
      lat_only = args.test == "lat", bw_only = args.test == "bw" })
    if not ok then die(string.format("%d-byte messages: %s", n, tostring(row))) end
    rows[#rows + 1] = row
    if args.json then
      local i = l:info()
      row.device, row.personality, row.kind = i.device, i.personality, i.kind
      print(cjson.encode(row))
    else
      say(perf.format_row(row))
    end
    io.stdout:flush()
  end
  perf.done(l)
  l:close()
  return rows
end

if args.listen then
  listen(args.listen)
elseif args.connect then
  measure(hostport(args.connect, "127.0.0.1"))
else
  -- both ends: the answering one in a child tbrt process
  local exe = uv.exepath()
  local child_args = { arg[0], "--listen", "127.0.0.1:0", "--device", opts.device,
    "--timeout", tostring(args.timeout) }
  if opts.fallback then child_args[#child_args + 1] = "--fallback" end
  child_args[#child_args + 1] = "--child"
  if opts.personality then
    child_args[#child_args + 1] = "--personality"
    child_args[#child_args + 1] = opts.personality
  end
  if args.nbuf then child_args[#child_args + 1] = "--nbuf"; child_args[#child_args + 1] = tostring(args.nbuf) end
  if args.framing then child_args[#child_args + 1] = "--framing"; child_args[#child_args + 1] = args.framing end
  if args.stride then child_args[#child_args + 1] = "--stride"; child_args[#child_args + 1] = tostring(args.stride) end
  local out = uv.new_pipe(false)
  local port, child_done, child_code
  local child = uv.spawn(exe, { args = child_args, stdio = { nil, out, 2 } }, function(code)
    child_done, child_code = true, code
  end)
  if not child then die("cannot start the other end") end
  local buf = ""
  out:read_start(function(e, data)
    if data then
      buf = buf .. data
      port = port or tonumber(buf:match("listening on [^:]+:(%d+)"))
    else
      out:close()
    end
  end)
  on_die = function()
    -- let the other end say its part first, bounded
    if not tbrt.task.wait(function() return child_done end, 3) then child:kill("sigkill") end
  end
  local ok = tbrt.task.wait(function() return port or child_done end, 20)
  if not ok or not port then
    child:kill("sigkill")
    die("the other end did not start listening")
  end
  say(string.format("pair: two processes on 127.0.0.1:%d, device %s%s", port, opts.device,
    opts.personality and (" (" .. opts.personality .. ")") or ""))
  measure("127.0.0.1", port)
  tbrt.task.wait(function() return child_done end, 20)
  if not child:is_closing() then child:close() end
  if child_code ~= 0 then die("the other end failed (exit " .. tostring(child_code) .. ")") end
end
