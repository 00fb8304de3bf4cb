-- cli_jit_spec.lua - tbrt takes LuaJIT's -j options as luajit does, so a
-- script's traces (-jv) and profile (-jp) come from inside the tbrt program,
-- with its loop and its modules; an unknown one is refused by name.
local H = require("helpers")

describe("tbrt -j", function()
  it("writes the JIT's traces with -jv=FILE", function()
    local dir = H.tmpdir()
    local file = dir .. "/traces.txt"
    local r = H.run_tbrt({ "-jv=" .. file, "-e", "local s = 0 for i = 1, 1000 do s = s + i end print(s)" })
    assert.equal(0, r.code, H.describe(r))
    assert.equal("500500\n", r.stdout)
    assert.matches("%[TRACE%s+%d+ %(command line%):1 loop%]", H.read_file(file))
    H.rmtree(dir)
  end)

  it("profiles with -jp and switches the JIT with -joff", function()
    local r = H.run_tbrt({ "-jp=f", "-e", "local s = 0 for i = 1, 3e6 do s = s + math.sin(i) end" })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("%d+%%%s+%S", r.stdout)
    r = H.run_tbrt({ "-joff", "-e", "print((jit.status()))" })
    assert.equal("false\n", r.stdout)
  end)

  it("refuses a -j it does not know, naming it", function()
    local r = H.run_tbrt({ "-jbogus", "-e", "print(1)" })
    assert.equal(1, r.code)
    assert.matches("tbrt: %-jbogus: no LuaJIT module jit.bogus with a start%(%)", r.stderr)
    assert.equal("", r.stdout)
  end)
end)
