-- cli_spec.lua - the tbrt command line (tbrt.cli): options before the
-- script, -i, -l, the global tbrt, --help/--version, and stdin that is not
-- a terminal read a chunk at a time. (`tbrt devices`: devices_spec.lua.)
local H = require("helpers")

local dir

local function ok_run(r, code)
  assert.is_false(r.timed_out, H.describe(r))
  assert.equal(code or 0, r.code, H.describe(r))
end

describe("tbrt reading stdin that is not a terminal", function()
  it("runs each line as it comes and prints the values of expressions", function()
    local r = H.run_tbrt({}, { stdin = "print(1+1)\n" })
    ok_run(r)
    assert.equal("2\n", r.stdout)
    r = H.run_tbrt({}, { stdin = "1+1\nx = { 1, 'a' }\nx\n'no newline at the end'" })
    ok_run(r)
    assert.equal('2\n{ 1, "a" }\n"no newline at the end"\n', r.stdout)
    assert.equal("", r.stderr)
  end)

  it("gathers multi-line chunks", function()
    local r = H.run_tbrt({}, { stdin = "function f(x)\n  return x * 2\nend\nt = {\n1,\n2 }\nprint(f(21), #t)\n" })
    ok_run(r)
    assert.equal("42\t2\n", r.stdout)
  end)

  it("reports a failed chunk, goes on, and exits 1", function()
    local r = H.run_tbrt({}, { stdin = "error('first')\nx = = 1\nprint('still here')\n" })
    ok_run(r, 1)
    assert.equal("still here\n", r.stdout)
    assert.matches("^tbrt: stdin:1: first\nstack traceback:\n", r.stderr)
    assert.matches("\ntbrt: stdin:1: unexpected symbol near '='\n", r.stderr)
    -- a chunk cut off by the end of the input is a syntax error too
    r = H.run_tbrt({}, { stdin = "print('ok')\nfunction g()\n" })
    ok_run(r, 1)
    assert.equal("ok\n", r.stdout)
    assert.matches("'end' expected", r.stderr)
  end)

  it("runs each chunk as a task and lets the loop finish what they started", function()
    local r = H.run_tbrt({}, { stdin = table.concat({
      "local t = uv.new_timer() t:start(100, 0, function() print('timer') t:close() end)",
      "task.sleep(0.02) print('slept')",
      "print('last line')", "" }, "\n") })
    ok_run(r)
    assert.equal("slept\nlast line\ntimer\n", r.stdout)
  end)

  it("runs a script first with -i, keeping its globals", function()
    local d = H.tmpdir()
    local s = H.write_file(d .. "/g.lua", "x = 41\n")
    local r = H.run_tbrt({ "-i", s }, { stdin = "x + 1\n" })
    H.rmtree(d)
    ok_run(r)
    assert.equal("42\n", r.stdout)
    r = H.run_tbrt({ "-i", "-e", "y = 'from -e'" }, { stdin = "y\n" })
    ok_run(r)
    assert.equal('"from -e"\n', r.stdout)
  end)

  it("still reads a whole script from stdin with -", function()
    local r = H.run_tbrt({ "-" }, { stdin = "local x = 1\nprint(x + 1, ...)" })
    ok_run(r)
    assert.equal("2\n", r.stdout)
  end)
end)

describe("tbrt options", function()
  setup(function()
    dir = H.tmpdir()
    H.write_file(dir .. "/devices", "print('the file named devices', ...)\n")
    H.write_file(dir .. "/args.lua", "print(select('#', ...), ...)\n")
    H.write_file(dir .. "/uses_tbrt.lua", "print(tbrt.version .. ' ' .. type(tbrt.connect))\n")
  end)
  teardown(function() H.rmtree(dir) end)

  it("prints the help with every option and the devices command", function()
    for _, flag in ipairs({ "-h", "--help" }) do
      local r = H.run_tbrt({ flag })
      ok_run(r)
      assert.matches("^usage: tbrt %[options%] %[script %[args%.%.%.%]%]\n", r.stdout)
      for _, opt in ipairs({ "-e CODE", "-l NAME", "-i ", "-v, --version", "-h, --help", "devices" }) do
        assert.matches("\n   " .. opt:gsub("%p", "%%%0"), r.stdout)
      end
    end
    local r = H.run_tbrt({ "devices", "--help" })
    ok_run(r)
    assert.matches("^usage: tbrt devices %[%-v%] %[%-d DEV%] %[%-i PORT%] %[%-%-json%]\n", r.stdout)
    for _, opt in ipairs({ "-v, --verbose", "-d DEV", "--ib-dev DEV", "-i PORT", "--ib-port PORT", "--json" }) do
      assert.matches(opt:gsub("%p", "%%%0"), r.stdout)
    end
  end)

  it("prints the versions", function()
    for _, flag in ipairs({ "-v", "--version" }) do
      local r = H.run_tbrt({ flag })
      ok_run(r)
      assert.matches("^tbrt: libtbrt %d+%.%d+%.%d+ %(.-%), LuaJIT [^,]+, libuv %d+%.%d+%.%d+\n$", r.stdout)
    end
  end)

  it("leaves everything after the script to the script", function()
    local r = H.run_tbrt({ dir .. "/args.lua", "-v", "--help", "-e", "x", "devices" })
    ok_run(r)
    assert.equal("5\t-v\t--help\t-e\tx\tdevices\n", r.stdout)
  end)

  it("takes a value that starts with - after -e", function()
    local r = H.run_tbrt({ "-e", "-- a comment", "-e", "print('ran')", "-iep=1" }, { stdin = "p\n" })
    ok_run(r)
    assert.equal("ran\n1\n", r.stdout)
  end)

  it("gives -e code and scripts the library as the global tbrt, as the REPL has it", function()
    local r = H.run_tbrt({ "-e", "print(tbrt == require('tbrt'), tbrt.verbs == require('tbrt.verbs'))" })
    ok_run(r)
    assert.equal("true\ttrue\n", r.stdout)
    r = H.run_tbrt({ dir .. "/uses_tbrt.lua" })
    ok_run(r)
    assert.equal("0.1.0 function\n", r.stdout:gsub("^%d+%.%d+%.%d+", "0.1.0"))
    -- loaded when first used: -e code can still set up the loader first
    r = H.run_tbrt({ "-e", "print(package.loaded['tbrt.ffi'] == nil) print(tbrt ~= nil)" })
    ok_run(r)
    assert.equal("true\ntrue\n", r.stdout)
  end)

  it("sets the global NAME for -l NAME, as lua -l does (G=NAME names it)", function()
    local r = H.run_tbrt({ "-l", "cjson", "-l", "tbrt.verbs", "-l", "J=cjson", "-e",
      "print(cjson == require('cjson'), verbs == require('tbrt.verbs'), J == cjson)" })
    ok_run(r)
    assert.equal("true\ttrue\ttrue\n", r.stdout)
    r = H.run_tbrt({ "-l", "no_such_module_here", "-e", "print('not reached')" })
    ok_run(r, 1)
    assert.matches("^tbrt: %-l no_such_module_here: module 'no_such_module_here' not found", r.stderr)
    assert.equal("", r.stdout)
  end)

  it("runs a script named devices when asked as ./devices or after --", function()
    local r = H.run_tbrt({ "./devices", "a" }, { cwd = dir })
    ok_run(r)
    assert.equal("the file named devices\ta\n", r.stdout)
    r = H.run_tbrt({ "--", "devices", "b" }, { cwd = dir })
    ok_run(r)
    assert.equal("the file named devices\tb\n", r.stdout)
  end)

  it("refuses a bad command line with the usage, exit 1", function()
    local cases = {
      { { "--frobnicate" }, "unknown option '%-%-frobnicate'" },
      { { "-e" }, "option '%-e' requires an argument" },
      { { "devices", "extra" }, "too many arguments" },
      { { "devices", "-x" }, "unknown option '%-x'" },
    }
    for _, c in ipairs(cases) do
      local r = H.run_tbrt(c[1])
      ok_run(r, 1)
      assert.matches("^tbrt: " .. c[2] .. "[^\n]*\n.-usage: tbrt", r.stderr)
      assert.equal("", r.stdout)
    end
  end)
end)
