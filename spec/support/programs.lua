-- programs.lua - running unmodified verbs programs (Debian's ibverbs-utils,
-- perftest, rdmacm-utils) through `tbrt exec`, alone or as a server and a
-- client on loopback, for spec/verbs_programs_spec.lua. Every wait is
-- bounded; the server is given the time to listen (its TCP port is watched
-- in /proc/net/tcp, so no probe connection disturbs it) before the client
-- starts.
--
--   local X = require("programs")
--   local r = X.exec({ "ibv_devinfo", "-v" })                -- one program
--   local srv, cli = X.pair({ "ibv_rc_pingpong", "-g", "3" })  -- both ends
local uv = require("luv")
local task = require("tbrt.task")
local H = require("helpers")

local X = {}

-- Bound on one program, and on a server getting to listen.
X.TIMEOUT = os.getenv("TBRT_ASAN") and 60 or 30
X.LISTEN_TIMEOUT = 15

-- Is the program installed (scripts/deps.sh installs them)?
function X.have(prog)
  for dir in (os.getenv("PATH") or "/usr/bin"):gmatch("[^:]+") do
    local f = io.open(dir .. "/" .. prog)
    if f then f:close() return true end
  end
  return false
end

-- A TCP port nobody listens on right now (the kernel's pick).
function X.free_port()
  local s = uv.new_tcp()
  assert(s:bind("127.0.0.1", 0))
  local port = s:getsockname().port
  s:close()
  return port
end

-- Does a socket listen on this TCP port (IPv4 or IPv6)? With pid: in that
-- process's network namespace.
function X.listening(port, pid)
  local hex = string.format(":%04X ", port)
  local net = pid and ("/proc/" .. pid .. "/net/") or "/proc/net/"
  for _, file in ipairs { net .. "tcp", net .. "tcp6" } do
    local f = io.open(file)
    if f then
      for line in f:lines() do
        -- sl local_address rem_address st: st 0A is LISTEN
        local loc, st = line:match("^%s*%d+:%s+(%S+)%s+%S+%s+(%x%x)")
        if loc and st == "0A" and (loc .. " "):find(hex, 1, true) then
          f:close()
          return true
        end
      end
      f:close()
    end
  end
  return false
end

-- The words `tbrt exec` gets: opts.exec (its options), "--", argv.
local function exec_args(argv, opts)
  local a = { "exec" }
  for _, w in ipairs(opts.exec or {}) do a[#a + 1] = w end
  a[#a + 1] = "--"
  for _, w in ipairs(argv) do a[#a + 1] = w end
  return a
end

-- On the sanitizer build the programs get ASan too (tbrt exec preloads
-- it): with the suppressions of asan_programs.supp (why: see there).
local function environment(env)
  if not os.getenv("TBRT_ASAN") then return env end
  local e = {}
  for k, v in pairs(env or {}) do e[k] = v end
  e.ASAN_OPTIONS = (os.getenv("ASAN_OPTIONS") or "") .. ":suppressions=" .. H.root ..
    "/spec/support/asan_programs.supp"
  return e
end

-- One program through tbrt exec: H.run's result.
function X.exec(argv, opts)
  opts = opts or {}
  return H.run_tbrt(exec_args(argv, opts), { env = environment(opts.env),
    timeout = opts.timeout or X.TIMEOUT })
end

-- argv as a server (with "-p PORT" added: opts.port_flag names another
-- flag, false none) and as a client (the same, then opts.client_extra, then
-- the address unless opts.address is false), or opts.server_argv and
-- opts.client_argv; the client starts once the server listens. Returns
-- both results.
function X.pair(argv, opts)
  opts = opts or {}
  local port = opts.port or X.free_port()
  X.last_port = port
  local function with_port(list)
    local a = {}
    for _, w in ipairs(list) do a[#a + 1] = w end
    if opts.port_flag ~= false then
      a[#a + 1] = opts.port_flag or "-p"
      a[#a + 1] = tostring(port)
    end
    return a
  end
  local srv_argv = with_port(opts.server_argv or argv)
  local cli_argv = with_port(opts.client_argv or argv)
  for _, w in ipairs(opts.client_extra or {}) do cli_argv[#cli_argv + 1] = w end
  if opts.address ~= false then cli_argv[#cli_argv + 1] = opts.address or "127.0.0.1" end
  local srv, cli
  task.run(function()
    local ts = task.spawn(function() return X.exec(srv_argv, opts) end)
    local function over() local s = ts:status() return s == "done" or s == "failed" or s == "canceled" end
    local deadline = H.now() + X.LISTEN_TIMEOUT
    while not X.listening(port) and not over() and H.now() < deadline do task.sleep(0.02) end
    if X.listening(port) and not over() then
      cli = X.exec(cli_argv, opts)
    else
      cli = { code = -1, stdout = "", stderr = "the server never listened on port " .. port,
        timed_out = false }
    end
    srv = ts:join(X.TIMEOUT + 10)
  end)
  return srv, cli
end

-- Both ends' output, for assertion messages.
function X.describe(srv, cli)
  return "=== server\n" .. H.describe(srv or {}) .. "\n=== client\n" .. H.describe(cli or {})
end

-- needle is in haystack, or fail showing it.
function X.contains(haystack, needle, what)
  assert(haystack:find(needle, 1, true), string.format("%s: %q not found in\n%s", what or "output",
    needle, haystack))
end

-- Both ends finished in time with status 0; returns their output.
function X.ok_pair(srv, cli)
  local assert = require("luassert")    -- busted's, as the specs' global
  local d = X.describe(srv, cli)
  assert(srv and cli, d)
  assert.is_false(srv.timed_out, d)
  assert.is_false(cli.timed_out, d)
  assert.equal(0, srv.code, d)
  assert.equal(0, cli.code, d)
  return d
end

-- perftest's result row under its "#bytes" header: the numbers of the row.
function X.perftest_row(out)
  local row = out:match("#bytes[^\n]*\n%s*(%d[^\n]*)")
  if not row then return nil end
  local nums = {}
  for n in row:gmatch("[%d.]+") do nums[#nums + 1] = tonumber(n) end
  return nums
end

return X
