-- tbrt/cli/exec.lua - `tbrt exec`: run an unmodified verbs program (perftest,
-- the ibv_*_pingpong tools, UCX, your own) on tbrt's soft device.
--
--   tbrt exec [--personality P] [--devices N] [--wire W] [--faults F]
--             [--apple] [--debug] -- PROGRAM [ARGS...]
--
-- tbrt replaces itself with PROGRAM (execvp: same pid, signals and exit
-- status are the program's), with tbrt's own libraries first on
-- LD_LIBRARY_PATH: libibverbs.so.1 (bindings/verbs) and the libmlx5,
-- libefa and librdmacm stand-ins beside it, or with --apple the Apple
-- flavor (librdma.so: no symbol versions, no GID types; personality
-- apple-uc) for programs linked with `pkg-config --libs librdma`. The soft
-- device is configured through the environment the library reads:
-- TBRT_VERBS_PERSONALITY, TBRT_VERBS_DEVICES (and TBRT_SOFT_DEVICES, so
-- there are that many soft devices under them). Options stop at "--" or
-- at the program's name.
--
-- --wire and --faults go to the device as TBRT_SOFT_WIRE and TBRT_FAULTS.
-- This soft device has the shared-memory wire only and no fault injection
-- between device and wire yet (DEVICE_HAS below): they are passed on, with
-- a note saying so, and take effect once the device reads them.
--
-- A sanitizer build's library needs the sanitizer runtime first in the
-- process: when this tbrt runs with ASan, it is preloaded into PROGRAM.
local argparse = require("argparse")
local ffi = require("ffi")

local M = {}

M.USAGE = "usage: tbrt exec [--personality P] [--devices N] [--wire W] [--faults F] " ..
  "[--apple] [--debug] -- PROGRAM [ARGS...]"

local PERSONALITIES = { ["linux-rc"] = true, ["apple-uc"] = true }
local MAX_DEVICES = 16 -- VB_MAX_DEVICES in bindings/verbs/verbs_lib.h
local WIRES = { shm = true, udp = true, auto = true }
-- What the soft device of this build reads of them (see the header).
local DEVICE_HAS = { wire = { shm = true, udp = true, auto = true }, faults = true }

-- The options, as data; value: the argument's name.
M.OPTIONS = {
  { "--personality", value = "P", help = "soft device personality: linux-rc (default) or apple-uc" },
  { "--devices", value = "N", help = "how many devices (softib0..softib<N-1>), 1.." .. MAX_DEVICES .. " (1)" },
  { "--wire", value = "W", help = "the soft device's wire: auto (default: shared memory on this host, else RoCEv2 over UDP), shm or udp" },
  { "--faults", value = "F", help = "faults between device and wire (TBRT_FAULTS), passed to the device" },
  { "--apple", help = "the Apple flavor: librdma.so (unversioned, untyped GIDs), apple-uc" },
  { "--debug", help = "TBRT_DEBUG=1: the library explains every failure on stderr" },
  { "-h --help", help = "print this help and exit" },
}

local TAKES_VALUE = {}
for _, o in ipairs(M.OPTIONS) do
  if o.value then TAKES_VALUE[o[1]] = true end
end

local function build()
  local p = argparse("tbrt exec", "Run an unmodified verbs program on tbrt's soft device, " ..
    "with tbrt's libibverbs first on the library path.")
    :usage(M.USAGE):add_help(false)
    :epilog("The program's exit status is tbrt exec's. Environment: TBRT_SOFT_FABRIC names " ..
      "the fabric (both ends must share it), TBRT_VERBS_LIBDIR the library directory.")
  for _, o in ipairs(M.OPTIONS) do
    local name = o[1]:match("%-%-([%w-]+)$")
    if o.value then
      p:option(o[1], o.help):argname(o.value)
    else
      p:flag(o[1], o.help):target(name)
    end
  end
  return p
end

function M.help() return build():get_help() end

-- argv[1] is "exec". The words up to "--" or the program go to argparse.
-- Returns the plan, or nil and a message naming what was wrong.
function M.parse(argv)
  local n = argv.n or #argv
  local words, i = {}, 2
  while i <= n do
    local a = argv[i]
    if a == "--" then i = i + 1 break end
    if a:sub(1, 1) ~= "-" then break end
    words[#words + 1] = a
    if TAKES_VALUE[a] and i < n then
      words[#words + 1] = argv[i + 1]
      i = i + 1
    end
    i = i + 1
  end
  local ok, r = build():pparse(words)
  if not ok then return nil, "exec: " .. r end
  local plan = { command = "exec", help = r.help, pre = {} }
  if r.help then return plan end
  plan.apple = r.apple or false
  plan.debug = r.debug or false
  plan.personality = r.personality or (plan.apple and "apple-uc" or "linux-rc")
  if not PERSONALITIES[plan.personality] then
    return nil, string.format("exec: --personality %s: not one of linux-rc, apple-uc",
      plan.personality)
  end
  plan.devices = 1
  if r.devices then
    local d = tonumber(r.devices)
    if not d or d ~= math.floor(d) or d < 1 or d > MAX_DEVICES then
      return nil, string.format("exec: --devices %s: a whole number 1..%d", r.devices, MAX_DEVICES)
    end
    plan.devices = d
  end
  if r.wire and not WIRES[r.wire] then
    return nil, string.format("exec: --wire %s: not one of auto, shm, udp", r.wire)
  end
  plan.wire, plan.faults = r.wire, r.faults
  if i > n then return nil, "exec: no program to run\n" .. M.USAGE end
  plan.program = argv[i]
  plan.args = { unpack(argv, i, n) }
  return plan
end

ffi.cdef [[
  int setenv(const char *name, const char *value, int overwrite);
  int execvp(const char *file, char *const argv[]);
  char *strerror(int errnum);
]]

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- Where tbrt's libraries are: $TBRT_VERBS_LIBDIR, else beside this tbrt
-- (build tree: BUILD/lib/tbrt/<flavor>; installed: PREFIX/lib/tbrt/<flavor>).
function M.libdir(apple)
  local flavor = apple and "apple" or "verbs"
  local env = os.getenv("TBRT_VERBS_LIBDIR")
  if env and env ~= "" then return env end
  local host = package.loaded["tbrt.host"] or {}
  if host.layout == "installed" then return host.prefix .. "/lib/tbrt/" .. flavor end
  if host.exe_dir then return host.exe_dir .. "/lib/tbrt/" .. flavor end
  return nil
end

-- The ASan runtime this process runs with, if any: a library built with
-- ASan cannot load into a process unless that runtime came first.
local function asan_runtime()
  local f = io.open("/proc/self/maps")
  if not f then return nil end
  local found
  for line in f:lines() do
    found = line:match("(/%S+/libasan%.so[%.%d]*)$")
    if found then break end
  end
  f:close()
  return found
end

local function setenv(k, v) ffi.C.setenv(k, v, 1) end

-- The program's file: as given when it has a slash, else found on PATH.
local function find_program(name)
  if name:find("/", 1, true) then return name end
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    if exists(dir .. "/" .. name) then return dir .. "/" .. name end
  end
  return nil
end



-- The environment plan.program will see: { {name, value} ... } and the
-- notes to print. Separate from run() so specs can check it.
function M.environment(plan)
  local dir = M.libdir(plan.apple)
  if not dir then return nil, "exec: cannot tell where tbrt's libraries are; set TBRT_VERBS_LIBDIR" end
  local lib = dir .. (plan.apple and "/librdma.so" or "/libibverbs.so.1")
  if not exists(lib) then
    return nil, string.format("exec: %s is not there (build it with make, or install with " ..
      "make install; TBRT_VERBS_LIBDIR names another directory)", lib)
  end
  local env, notes = {}, {}
  local old = os.getenv("LD_LIBRARY_PATH")
  env[#env + 1] = { "LD_LIBRARY_PATH", dir .. (old and old ~= "" and (":" .. old) or "") }
  env[#env + 1] = { "TBRT_VERBS_PERSONALITY", plan.personality }
  env[#env + 1] = { "TBRT_VERBS_DEVICES", tostring(plan.devices) }
  local soft = tonumber(os.getenv("TBRT_SOFT_DEVICES") or "") or 2
  env[#env + 1] = { "TBRT_SOFT_DEVICES", tostring(math.max(soft, plan.devices)) }
  if plan.debug then env[#env + 1] = { "TBRT_DEBUG", "1" } end
  if plan.wire then
    env[#env + 1] = { "TBRT_SOFT_WIRE", plan.wire }
    if not DEVICE_HAS.wire[plan.wire] then
      notes[#notes + 1] = string.format("--wire %s: passed on as TBRT_SOFT_WIRE=%s, but this " ..
        "soft device has the shared-memory wire only: the program runs over shared memory", plan.wire,
        plan.wire)
    end
  end
  if plan.faults then
    env[#env + 1] = { "TBRT_FAULTS", plan.faults }
    if not DEVICE_HAS.faults then
      notes[#notes + 1] = string.format("--faults %s: passed on as TBRT_FAULTS, but this soft " ..
        "device injects no faults between device and wire yet: it has no effect", plan.faults)
    end
  end
  local asan = asan_runtime()
  if asan then
    local pre = os.getenv("LD_PRELOAD")
    env[#env + 1] = { "LD_PRELOAD", asan .. (pre and pre ~= "" and (":" .. pre) or "") }
  end
  return env, notes
end

-- Replace this process with the program; returns an exit code only when
-- that fails (127: not found, 126: not runnable, as a shell says).
function M.run(plan)
  if plan.help then
    print(M.help())
    return 0
  end
  if plan.apple then
    -- the Apple flavor is a library of its own name: a libibverbs program
    -- would load the system's libibverbs beside it and never reach tbrt
    local file = find_program(plan.program)
    local libs = file and require("tbrt.elf").needed(file)
    local set = {}
    for _, l in ipairs(libs or {}) do set[l] = true end
    if set["libibverbs.so.1"] and not set["librdma.so"] then
      io.stderr:write(string.format("tbrt: exec --apple: %s links libibverbs.so.1, not librdma: " ..
        "the Apple flavor is for programs built against Apple's librdma (pkg-config --libs " ..
        "librdma); run a libibverbs program with --personality apple-uc\n", file))
      return 1
    end
  end
  local env, notes = M.environment(plan)
  if not env then
    io.stderr:write("tbrt: ", notes, "\n")
    return 1
  end
  for _, note in ipairs(notes) do io.stderr:write("tbrt exec: note: ", note, "\n") end
  for _, kv in ipairs(env) do setenv(kv[1], kv[2]) end
  local argv = ffi.new("char *[?]", #plan.args + 1)
  local keep = {}
  for k, a in ipairs(plan.args) do
    keep[k] = ffi.new("char[?]", #a + 1, a)
    argv[k - 1] = keep[k]
  end
  argv[#plan.args] = nil
  io.stdout:flush()
  io.stderr:flush()
  ffi.C.execvp(plan.program, argv)
  local e = ffi.errno()
  io.stderr:write(string.format("tbrt exec: %s: %s\n", plan.program, ffi.string(ffi.C.strerror(e))))
  return e == 2 and 127 or 126 -- ENOENT
end

return M
