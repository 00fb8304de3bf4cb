-- cmd_exec_spec.lua - `tbrt exec` (lua/tbrt/cli/exec.lua): the options, as
-- checked data; the environment the program gets (tbrt's libraries first on
-- LD_LIBRARY_PATH, the soft device's settings, --wire and --faults passed
-- on with a note while the device does not read them); the program
-- replacing tbrt (its exit status, its stdin and stdout); and every bad
-- command line named.
local H = require("helpers")

local function exec(args, opts)
  local a = { "exec" }
  for _, w in ipairs(args) do a[#a + 1] = w end
  return H.run_tbrt(a, opts)
end

-- The environment the program sees, as NAME=value lines.
local function env_of(opts)
  local args = {}
  for _, w in ipairs(opts or {}) do args[#args + 1] = w end
  args[#args + 1] = "--"
  args[#args + 1] = "sh"
  args[#args + 1] = "-c"
  args[#args + 1] = "env | grep -E '^(LD_LIBRARY_PATH|LD_PRELOAD|TBRT_[A-Z_]+)=' | sort"
  local r = exec(args)
  assert.equal(0, r.code, H.describe(r))
  local e = {}
  for k, v in r.stdout:gmatch("([%w_]+)=([^\n]*)") do e[k] = v end
  return e, r
end

describe("tbrt exec", function()
  it("puts tbrt's libibverbs first on the library path, linux-rc and one device by default", function()
    local e, r = env_of({})
    assert.equal(H.build .. "/lib/tbrt/verbs", e.LD_LIBRARY_PATH:match("^[^:]+"))
    assert.equal("linux-rc", e.TBRT_VERBS_PERSONALITY)
    assert.equal("1", e.TBRT_VERBS_DEVICES)
    assert.is_nil(e.TBRT_SOFT_WIRE)
    assert.equal("", r.stderr)
    if os.getenv("TBRT_ASAN") then
      assert.matches("libasan%.so", e.LD_PRELOAD)   -- the sanitized library needs it first
    end
  end)

  it("passes the personality, the device count (and enough soft devices), --debug", function()
    local e = env_of({ "--personality", "apple-uc", "--devices", "5", "--debug" })
    assert.equal("apple-uc", e.TBRT_VERBS_PERSONALITY)
    assert.equal("5", e.TBRT_VERBS_DEVICES)
    assert.equal("5", e.TBRT_SOFT_DEVICES)
    assert.equal("1", e.TBRT_DEBUG)
  end)

  it("--apple: the Apple flavor's directory and apple-uc", function()
    local e = env_of({ "--apple" })
    assert.equal(H.build .. "/lib/tbrt/apple", e.LD_LIBRARY_PATH:match("^[^:]+"))
    assert.equal("apple-uc", e.TBRT_VERBS_PERSONALITY)
  end)

  it("passes --wire and --faults on to the device", function()
    local e, r = env_of({ "--wire", "udp", "--faults", "drop=1%" })
    assert.equal("udp", e.TBRT_SOFT_WIRE)
    assert.equal("drop=1%", e.TBRT_FAULTS)
    assert.equal("", r.stderr)                  -- the device reads both: nothing to say
    e, r = env_of({ "--wire", "shm" })
    assert.equal("shm", e.TBRT_SOFT_WIRE)
    assert.equal("", r.stderr)                  -- the wire it has: nothing to say
  end)

  it("becomes the program: its exit status, stdin and stdout", function()
    local r = exec({ "--", "sh", "-c", "read x; echo got $x; exit 7" }, { stdin = "hello\n" })
    assert.equal(7, r.code)
    assert.equal("got hello\n", r.stdout)
    r = exec({ "true" })                       -- options stop at the program's name
    assert.equal(0, r.code, H.describe(r))
  end)

  it("names what is wrong with a command line", function()
    local cases = {
      { { "--devices", "0", "--", "true" }, "exec: %-%-devices 0: a whole number 1%.%.16" },
      { { "--devices", "x", "--", "true" }, "exec: %-%-devices x: a whole number 1%.%.16" },
      { { "--personality", "mlx5", "--", "true" }, "exec: %-%-personality mlx5: not one of linux%-rc, apple%-uc" },
      { { "--wire", "tcp", "--", "true" }, "exec: %-%-wire tcp: not one of" },
      { { "--frobnicate", "--", "true" }, "exec: unknown option '%-%-frobnicate'" },
      { {}, "exec: no program to run" },
    }
    for _, c in ipairs(cases) do
      local r = exec(c[1])
      assert.equal(1, r.code, H.describe(r))
      assert.matches(c[2], r.stderr)
    end
    local r = exec({ "--", "/nonexistent/prog" })
    assert.equal(127, r.code)
    assert.matches("tbrt exec: /nonexistent/prog: No such file or directory", r.stderr)
  end)

  it("says where the library should be when it is not there", function()
    local r = exec({ "--", "true" }, { env = { TBRT_VERBS_LIBDIR = "/nonexistent/dir" } })
    assert.equal(1, r.code)
    assert.matches("exec: /nonexistent/dir/libibverbs%.so%.1 is not there %(build it with make", r.stderr)
  end)

  it("--help lists the options", function()
    local r = exec({ "--help" })
    assert.equal(0, r.code, H.describe(r))
    for _, o in ipairs { "--personality P", "--devices N", "--wire W", "--faults F", "--apple", "--debug" } do
      assert(r.stdout:find(o, 1, true), o)
    end
  end)
end)

describe("tbrt exec after make install", function()
  local prefix
  local clean_env = { TBRT_BUILD = false, TBRT_LIB = false, LUA_PATH = false, MAKEFLAGS = false,
    MAKELEVEL = false, MFLAGS = false, TBRT_VERBS_LIBDIR = false }

  setup(function()
    prefix = H.tmpdir()
    local r = H.run("/usr/bin/make", { "-C", H.root, "-o", "all", "install", "BUILD=" .. H.build,
      "PREFIX=" .. prefix }, { env = clean_env, timeout = 60 })
    assert(r.code == 0 and not r.timed_out, "make install failed: " .. H.describe(r))
  end)
  teardown(function() H.rmtree(prefix) end)

  it("installs the libraries under PREFIX/lib/tbrt/ and runs a program on them", function()
    if not require("programs").have("ibv_devices") then pending("ibverbs-utils not installed") return end
    for _, f in ipairs { "verbs/libibverbs.so.1", "verbs/librdmacm.so.1", "verbs/libmlx5.so.1",
      "verbs/libefa.so.1", "apple/librdma.so" } do
      assert(io.open(prefix .. "/lib/tbrt/" .. f), f .. " not installed")
    end
    local pc = H.read_file(prefix .. "/lib/pkgconfig/librdma.pc")
    assert.matches("prefix=" .. prefix:gsub("%p", "%%%0") .. "\n", pc)
    local r = H.run(prefix .. "/bin/tbrt", { "exec", "--", "sh", "-c",
      "echo $LD_LIBRARY_PATH; ibv_devices" }, { env = clean_env, cwd = "/" })
    assert.equal(0, r.code, H.describe(r))
    assert.equal(prefix .. "/lib/tbrt/verbs", r.stdout:match("^[^:\n]+"))
    assert.matches("softib0%s+0254420000000000", r.stdout)
  end)
end)
