-- summary_spec.lua - the test summary of scripts/check.sh: each run says
-- which it is (the sanitizer run or the normal one) at its start and on its
-- last line, summary.lua prints one line per run by name, and the very
-- last line stays exactly "N passed, N failed, N skipped".
local uv = require("luv")
local H = require("helpers")

local SUMMARY = H.root .. "/spec/support/summary.lua"

local function lines(text)
  local out = {}
  for l in text:gmatch("[^\n]+") do out[#out + 1] = l end
  return out
end

describe("the test summary", function()
  local dir
  before_each(function()
    dir = H.tmpdir()
    assert(uv.fs_mkdir(dir .. "/build-asan", 448))
    assert(uv.fs_mkdir(dir .. "/build", 448))
  end)
  after_each(function() H.rmtree(dir) end)

  it("names the sanitizer run and the normal run, then the total as the last line", function()
    H.write_file(dir .. "/build-asan/spec-summary", "3 0 1 sanitizer run (ASan+UBSan, build-asan)\n")
    H.write_file(dir .. "/build/spec-summary", "4 0 1 normal run (build)\n")
    local r = H.run(H.tbrt, { SUMMARY, dir .. "/build-asan/spec-summary", dir .. "/build/spec-summary" })
    assert.equal(0, r.code, H.describe(r))
    assert.same({
      "summary: sanitizer run (ASan+UBSan, build-asan): 3 passed, 0 failed, 1 skipped",
      "summary: normal run (build): 4 passed, 0 failed, 1 skipped",
      "7 passed, 0 failed, 2 skipped",
    }, lines(r.stdout))
  end)

  it("names a run by its build directory when its file does not, and counts a missing one", function()
    H.write_file(dir .. "/build-asan/spec-summary", "3 1 0\n")
    local r = H.run(H.tbrt, { SUMMARY, dir .. "/build-asan/spec-summary", dir .. "/build/spec-summary" })
    assert.equal(1, r.code, H.describe(r))
    local l = lines(r.stdout)
    assert.equal("summary: sanitizer run (ASan+UBSan, build-asan): 3 passed, 1 failed, 0 skipped", l[1])
    assert.matches("^summary: normal run %(build%): .*/build/spec%-summary missing: that spec run did not finish", l[2])
    assert.equal("3 passed, 2 failed, 0 skipped", l[3])
    assert.equal(3, #l)
  end)

  it("has each spec run say which it is, at its start and on its last line", function()
    H.write_file(dir .. "/tiny_spec.lua", [[
describe("tiny", function()
  it("passes", function() end)
  it("fails", function() error("boom") end)
end)
]])
    local file = dir .. "/summary"
    local r = H.run(H.tbrt, { H.root .. "/spec/support/run.lua", "--summary-file=" .. file,
      dir .. "/tiny_spec.lua" }, { cwd = H.root, env = { TBRT_SPEC_LABEL = "sanitizer run (test)" },
      timeout = 60 })
    assert.equal(1, r.code, H.describe(r))
    local l = lines(r.stdout)
    assert.equal("== sanitizer run (test) ==", l[1])
    assert.equal("sanitizer run (test): 1 passed, 1 failed, 0 skipped", l[#l])
    assert.equal("1 1 0 sanitizer run (test)\n", H.read_file(file))
    -- check.sh gives its two runs their names
    local check = assert(H.read_file(H.root .. "/scripts/check.sh"))
    assert.matches('TBRT_SPEC_LABEL="sanitizer run %(ASan%+UBSan, build%-asan%)" make [^\n]*test%-asan', check)
    assert.matches('TBRT_SPEC_LABEL="normal run %(build%)" make [^\n]* test', check)
    assert.matches("\nexec luajit spec/support/summary%.lua build%-asan/spec%-summary build/spec%-summary\n", check)
  end)
end)

describe("a spec run's own soft fabric", function()
  -- (the private directory where soft fabrics keep their registries, as
  -- spec/support/run.lua finds it)
  local function shm_names()
    local dir = os.getenv("TBRT_SHM_DIR") or ("/dev/shm/tbrt-" .. uv.getuid())
    local names, it = {}, uv.fs_scandir(dir)
    while it do
      local name = uv.fs_scandir_next(it)
      if not name then break end
      names[name] = true
    end
    return names
  end

  it("goes with the run when a spec failed, as when all passed", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/soft_fails_spec.lua", [[
local L = require("links")
describe("a link", function()
  it("is made on the soft device, then a check fails", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc" })
    a:close(); b:close()
    assert.is_true(false, "on purpose")
  end))
end)
]])
    local before = shm_names()
    -- (a fabric of its own: not this run's, which children inherit)
    local r = H.run(H.tbrt, { H.root .. "/spec/support/run.lua", dir .. "/soft_fails_spec.lua" },
      { cwd = H.root, env = { TBRT_SOFT_FABRIC = false }, timeout = 60 })
    H.rmtree(dir)
    assert.equal(1, r.code, H.describe(r))
    assert.matches("on purpose", r.stdout, 1, true)
    for name in pairs(shm_names()) do
      if name:match("^spec%-") then
        assert.is_true(before[name], name .. " was left behind by a run that failed")
      end
    end
  end)
end)
