-- cli_spec.lua - the tbrt command line (tbrt.cli): options before the
-- script, -i, --help/--version, `tbrt devices [-v]` against what the library
-- reports on this machine, and stdin that is not a terminal read a chunk
-- at a time.
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
    assert.matches("^usage: tbrt devices %[%-v%]\n", r.stdout)
    assert.matches("%-v, %-%-verbose", r.stdout)
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

describe("tbrt devices", function()
  local tbrt = require("tbrt")

  local function line_of(out, name)
    for l in out:gmatch("[^\n]+") do
      if l:sub(1, #name + 1) == name .. " " then return l end
    end
  end

  it("lists every device the library sees, and why an unusable one is", function()
    local r = H.run_tbrt({ "devices" })
    ok_run(r)
    local list = tbrt.devices()
    local names = {}
    for _, d in ipairs(list) do
      names[d.name] = d
      local l = line_of(r.stdout, d.name)
      assert.is_not_nil(l, d.name .. " missing from\n" .. r.stdout)
      local _, kind, pers, flavor, state = l:match("^(%S+)%s+(%S+)%s+(%S+)%s+(%S+)%s+(.*)$")
      assert.equal(d.kind, kind, l)
      assert.equal(d.personality ~= "" and d.personality or "-", pers, l)
      assert.equal(d.flavor, flavor, l)
      assert.equal(d.usable and "usable" or ("unavailable: " .. d.why), state, l)
    end
    assert.equal(#list, select(2, r.stdout:gsub("\n", "")))
    -- on this machine: both soft devices, and ibverbs with the reason
    assert.is_true(names.soft0 and names.soft0.usable, r.stdout)
    assert.is_true(names.soft1 and names.soft1.usable, r.stdout)
    assert.is_not_nil(names.ibverbs, r.stdout)
    if not names.ibverbs.usable then
      assert.matches("\nibverbs +ibverbs +%- +%a+ +unavailable: %S", "\n" .. r.stdout)
      assert.is_true(#names.ibverbs.why > 0)
    end
  end)

  -- The indented lines under a device's line (nil: no such device).
  local function block_of(out, name)
    local lines, inside = {}, nil
    for l in out:gmatch("[^\n]+") do
      if l:sub(1, 1) ~= " " then
        if inside then break end
        inside = l:sub(1, #name + 1) == name .. " " or nil
      elseif inside then
        lines[#lines + 1] = l
      end
    end
    if not inside then return nil end
    return #lines > 0 and (table.concat(lines, "\n") .. "\n") or ""
  end

  it("with -v lists the ports, their states and GIDs of each usable device", function()
    local r = H.run_tbrt({ "devices", "-v" })
    ok_run(r)
    local verbs = require("tbrt.verbs")
    for _, d in ipairs(tbrt.devices()) do
      local block = block_of(r.stdout, d.name)
      assert.is_not_nil(block, d.name .. " missing from\n" .. r.stdout)
      if d.usable then
        -- a device model makes its link-local GID from a fresh MAC each
        -- time it is opened: only GIDs that two opens agree on are compared
        local dev, again = assert(verbs.open(d.name)), assert(verbs.open(d.name))
        local attr = assert(dev:query())
        for p = 1, attr.phys_port_cnt do
          local pa = assert(dev:port(p))
          assert.matches("  port " .. p .. " " .. pa.state .. " mtu " .. pa.active_mtu .. "\n", block)
          local other = assert(again:gids(p))
          for i, g in ipairs(assert(dev:gids(p))) do
            local text = g.text == other[i].text and g.text:gsub("%p", "%%%0") or "%S+"
            assert.matches("    gid " .. g.index .. " " .. text .. (g.type and ("  " .. g.type) or "") .. "\n", block)
          end
        end
        dev:close()
        again:close()
      else
        assert.equal("", block, d.name .. " is not usable: nothing listed under it")
      end
    end
    assert.matches("\n  port 2 ACTIVE mtu %d+\n[^\n]*\n    gid 1 ::ffff:127%.0%.0%.1\n",
      "\n" .. block_of(r.stdout, "soft0"))
  end)
end)
