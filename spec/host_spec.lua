-- host_spec.lua - the tbrt program run as a child: command line, arg, exit
-- codes, error reports, signals, the loop's lifetime, and an installed copy
-- (make install to a temporary PREFIX, then a script and a C program
-- built with pkg-config against it).
local uv = require("luv")
local H = require("helpers")

local dir   -- scripts for this file

local function script(name, text)
  return H.write_file(dir .. "/" .. name, text)
end

local function ok_run(r, code)
  assert.is_false(r.timed_out, H.describe(r))
  assert.equal(code or 0, r.code, H.describe(r))
end

describe("the tbrt program", function()
  setup(function() dir = H.tmpdir() end)
  teardown(function() H.rmtree(dir) end)

  it("runs a script with luajit's arg table and its arguments as ...", function()
    local s = script("args.lua", [[
      for i = -1, #arg do io.write("arg[", i, "]=", tostring(arg[i]), "\n") end
      io.write("...=", table.concat({ ... }, "|"), "\n")
    ]])
    local r = H.run_tbrt({ s, "a", "b c" })
    ok_run(r)
    assert.equal(table.concat({ "arg[-1]=" .. H.tbrt, "arg[0]=" .. s, "arg[1]=a", "arg[2]=b c",
      "...=a|b c", "" }, "\n"), r.stdout)
    assert.equal("", r.stderr)
  end)

  it("runs -e chunks in order before the script, and -e alone", function()
    local s = script("e.lua", "print(x, arg[-3], arg[-2], arg[-1], arg[0])")
    local r = H.run_tbrt({ "-e", "x = 1", "-ex = x + 1", s })
    ok_run(r)
    assert.equal("2\t-e\tx = 1\t-ex = x + 1\t" .. s .. "\n", r.stdout)
    r = H.run_tbrt({ "-e", "print(6 * 7)" })
    ok_run(r)
    assert.equal("42\n", r.stdout)
    r = H.run_tbrt({ "-l", "tbrt.task", "-e", "print(package.loaded['tbrt.task'] ~= nil)" })
    ok_run(r)
    assert.equal("true\n", r.stdout)
  end)

  it("reads the script from stdin with - and with no arguments", function()
    local r = H.run_tbrt({ "-", "z" }, { stdin = "print('hi', ...)" })
    ok_run(r)
    assert.equal("hi\tz\n", r.stdout)
    r = H.run_tbrt({}, { stdin = "print('no args')" })
    ok_run(r)
    assert.equal("no args\n", r.stdout)
  end)

  it("runs the script as the main task and the loop until no handle is active", function()
    local s = script("loop.lua", [[
      local uv, task = require("luv"), require("tbrt.task")
      local t = task.spawn(function() task.sleep(0.02) return "joined" end)
      print(t:join(1))
      local timer = uv.new_timer()
      timer:start(50, 0, function() print("late timer") timer:close() end)
      print("main chunk done")
    ]])
    local r = H.run_tbrt({ s })
    ok_run(r)
    assert.equal("joined\nmain chunk done\nlate timer\n", r.stdout)
  end)

  it("refuses a second uv.run from inside the running loop", function()
    local r = H.run_tbrt({ "-e", "print(pcall(require('luv').run))" })
    ok_run(r)
    assert.matches("^false\t.*uv.run: the loop is already running", r.stdout)
  end)

  it("exits with os.exit's code after flushing stdout", function()
    local r = H.run_tbrt({ "-e", "io.write('partial') os.exit(3)" })
    ok_run(r, 3)
    assert.equal("partial", r.stdout)
  end)

  it("reports an uncaught error as tbrt: message plus traceback, exit 1", function()
    local s = script("boom.lua", "print('before')\nlocal function explode() error('kaboom') end\nexplode()\n")
    local r = H.run_tbrt({ s })
    ok_run(r, 1)
    assert.equal("before\n", r.stdout)
    assert.matches("^tbrt: [^\n]*boom%.lua:2: kaboom\nstack traceback:\n", r.stderr)
    assert.matches("in function 'explode'", r.stderr)
  end)

  it("reports a script that does not compile or open without a traceback", function()
    local r = H.run_tbrt({ "-e", "this is not lua" })
    ok_run(r, 1)
    assert.matches("^tbrt: %(command line%):1: .*\n$", r.stderr)
    r = H.run_tbrt({ dir .. "/missing.lua" })
    ok_run(r, 1)
    assert.matches("^tbrt: cannot open .*missing%.lua", r.stderr)
  end)

  it("reports an error in a raw luv callback and ends there, exit 1", function()
    local s = script("cb.lua", [[
      local uv = require("luv")
      local a, b = uv.new_timer(), uv.new_timer()
      a:start(10, 0, function() error("callback broke") end)
      b:start(300, 0, function() print("still running") b:close() end)
    ]])
    local r = H.run_tbrt({ s })
    ok_run(r, 1)
    assert.equal("", r.stdout)
    assert.matches("^tbrt: [^\n]*cb%.lua:3: callback broke\nstack traceback:\n", r.stderr)
  end)

  it("reports a failed task nobody joins, exit 1", function()
    local r = H.run_tbrt({ "-e", [[
      local task = require("tbrt.task")
      task.spawn(function() error("orphan failed") end)
      task.sleep(0.2)
      print("not reached")
    ]] })
    ok_run(r, 1)
    assert.equal("", r.stdout)
    assert.matches("^tbrt: task 2 failed: [^\n]*orphan failed\nstack traceback:", r.stderr)
  end)

  it("reports a main task that waits for what nothing on the loop can bring, exit 1", function()
    local r = H.run_tbrt({ "-e", "require('tbrt.task').channel():recv()" })
    ok_run(r, 1)
    assert.matches("main task is waiting in channel recv", r.stderr)
  end)

  it("prints the usage for -h (exit 0) and for an unknown option (exit 1)", function()
    local r = H.run_tbrt({ "-h" })
    ok_run(r)
    assert.matches("^usage: tbrt", r.stdout)
    r = H.run_tbrt({ "--frobnicate" })
    ok_run(r, 1)
    assert.matches("^tbrt: unknown option '%-%-frobnicate'\nusage:", r.stderr)
  end)

  it("ends on SIGINT without a handler as luajit does (killed by it; a shell says 130)", function()
    local t0 = H.now()
    local r = H.run_tbrt({ "-e", "print('ready') io.stdout:flush() require('tbrt.task').sleep(10)" },
      { signal = "sigint", signal_when = "ready" })
    assert.is_false(r.timed_out, H.describe(r))
    assert.is_true(r.signal == 2 or r.code == 130, H.describe(r))
    assert.is_true(H.now() - t0 < 5)
  end)

  it("lets a script handle SIGINT itself", function()
    local s = script("sig.lua", [[
      local uv = require("luv")
      local sig = uv.new_signal()
      sig:start("sigint", function() print("caught") sig:close() end)
      print("ready")
      io.stdout:flush()
    ]])
    local r = H.run_tbrt({ s }, { signal = "sigint", signal_when = "ready" })
    ok_run(r)
    assert.equal("ready\ncaught\n", r.stdout)
  end)

  it("ignores SIGPIPE: a write to a closed pipe fails with EPIPE", function()
    local r = H.run_tbrt({ "-e", [[
      local uv = require("luv")
      local fds = assert(uv.pipe())
      uv.fs_close(fds.read)
      print(uv.fs_write(fds.write, "x"))
    ]] })
    ok_run(r)
    assert.matches("^nil\tEPIPE", r.stdout)
  end)

  it("finds its modules in the build tree and sets TBRT_BUILD for the bindings", function()
    local r = H.run_tbrt({ "-e", "local h = require('tbrt.host') print(h.layout, os.getenv('TBRT_BUILD'))" },
      { env = { TBRT_BUILD = false } })
    ok_run(r)
    assert.equal("build\t" .. uv.fs_realpath(H.build) .. "\n", r.stdout)
  end)
end)

describe("tbrt after make install", function()
  local prefix
  -- the installed program must find its own files, not the build tree's
  local clean_env = { TBRT_BUILD = false, TBRT_LIB = false, LUA_PATH = false,
    MAKEFLAGS = false, MAKELEVEL = false, MFLAGS = false }

  setup(function()
    prefix = H.tmpdir()
    -- -o all: install what this build has; never rebuild it from here
    local r = H.run("/usr/bin/make", { "-C", H.root, "-o", "all", "install",
      "BUILD=" .. H.build, "PREFIX=" .. prefix }, { env = clean_env, timeout = 60 })
    assert(r.code == 0 and not r.timed_out, "make install failed: " .. H.describe(r))
  end)
  teardown(function() H.rmtree(prefix) end)

  it("runs a script that loads the installed library through tbrt.ffi", function()
    local r = H.run(prefix .. "/bin/tbrt", { "-e", [[
      local b = require("tbrt.ffi")
      print(require("tbrt.host").layout, b.ffi.string(b.C.tbrt_version()), b.path)
    ]] }, { env = clean_env, cwd = "/" })
    ok_run(r)
    local layout, version, path = r.stdout:match("^(%S+)\t(%S+)\t(%S+)\n$")
    assert.equal("installed", layout, H.describe(r))
    assert.matches("^%d+%.%d+%.%d+$", version)
    assert.equal(uv.fs_realpath(prefix .. "/lib/libtbrt.so"), uv.fs_realpath(path))
  end)

  it("builds and runs a C program with pkg-config --cflags --libs tbrt", function()
    local env = { PKG_CONFIG_PATH = prefix .. "/lib/pkgconfig" }
    for k, v in pairs(clean_env) do env[k] = v end
    local pc = H.run("/usr/bin/pkg-config", { "--cflags", "--libs", "tbrt" }, { env = env })
    ok_run(pc)
    assert.matches("%-I" .. prefix:gsub("%-", "%%-") .. "/include", pc.stdout)
    local src = H.write_file(prefix .. "/hello.c", [[
#include <stdio.h>
#include <tbrt.h>
int main(void) { printf("%s %d\n", tbrt_version(), tbrt_abi_version()); return 0; }
]])
    local args = { src, "-o", prefix .. "/hello" }
    for flag in pc.stdout:gmatch("%S+") do args[#args + 1] = flag end
    if os.getenv("TBRT_ASAN") then       -- the installed library is the sanitizer build
      args[#args + 1] = "-fsanitize=address,undefined"
    end
    local cc = H.run("/usr/bin/cc", args, { env = env })
    ok_run(cc)
    env.LD_LIBRARY_PATH = prefix .. "/lib"
    local r = H.run(prefix .. "/hello", {}, { env = env })
    ok_run(r)
    assert.matches("^%d+%.%d+%.%d+ %d+\n$", r.stdout)
  end)
end)
