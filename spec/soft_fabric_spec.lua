-- soft_fabric_spec.lua - the soft fabric's registry lives where another
-- local user cannot plant it: a private directory (0700, ours, not a link)
-- and a registry file opened without following links, created 0600 with
-- O_EXCL and checked after opening; its lock is waited for a bounded time
-- (a holder stopped while holding it). Each case builds its own directory
-- (TBRT_SHM_DIR) so the real one is never touched.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local H = require("helpers")

ffi.cdef [[
  int setenv(const char *, const char *, int);
  int unsetenv(const char *);
  int symlink(const char *, const char *);
  int chmod(const char *, unsigned);
  int chown(const char *, unsigned, unsigned);
  unsigned geteuid(void);
]]
local C = ffi.C

local function sh(cmd) return os.execute(cmd) == 0 or os.execute(cmd) == true end
local function mode_of(path)
  local p = io.popen("stat -c %a " .. path) ; local m = p:read("*l") ; p:close() ; return m
end
local function read(path)
  local f = io.open(path, "rb") ; if not f then return nil end
  local s = f:read("*a") ; f:close() ; return s
end

describe("soft fabric registry", function()
  local base, dir
  local fabric = os.getenv("TBRT_SOFT_FABRIC") or "default"
  before_each(function()
    base = H.tmpdir()
    dir = base .. "/shm"
    C.setenv("TBRT_SHM_DIR", dir, 1)
  end)
  after_each(function()
    C.unsetenv("TBRT_SHM_DIR")
    C.unsetenv("TBRT_SOFT_FABRIC")
    C.setenv("TBRT_SOFT_FABRIC", fabric, 1)
    sh("rm -rf " .. base)
  end)

  local function open_err()
    local dev, err = verbs.open("soft0", { personality = "apple-uc" })
    if dev then dev:close() end
    return dev, err
  end

  it("is created in a 0700 directory as a 0600 file", function()
    local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    dev:close()
    assert.equal("700", mode_of(dir))
    assert.equal("600", mode_of(dir .. "/" .. fabric .. "-apple-uc"))
  end)

  it("refuses a symbolic link at the registry path and leaves its target untouched", function()
    assert(sh("mkdir -m 700 " .. dir))
    local target = base .. "/victim"
    local f = assert(io.open(target, "wb")) ; f:write("precious") ; f:close()
    assert.equal(0, C.symlink(target, dir .. "/" .. fabric .. "-apple-uc"))
    local dev, err = open_err()
    assert.is_nil(dev)
    assert.matches("^EPERM: ", err)
    assert.matches(fabric .. "-apple-uc is a symbolic link: refusing to follow it", err, 1, true)
    assert.equal("precious", read(target))
  end)

  it("refuses a registry file with another mode, naming the path and the mode", function()
    assert(sh("mkdir -m 700 " .. dir))
    local reg = dir .. "/" .. fabric .. "-apple-uc"
    local f = assert(io.open(reg, "wb")) ; f:write("planted") ; f:close()
    assert.equal(0, C.chmod(reg, tonumber("666", 8)))
    local dev, err = open_err()
    assert.is_nil(dev)
    assert.matches("has mode 0666, not 0600: refusing", err, 1, true)
    assert.equal("planted", read(reg))
  end)

  it("refuses a registry file that belongs to another user, naming the owner", function()
    if C.geteuid() ~= 0 then return pending("needs root to make a file of another user") end
    assert(sh("mkdir -m 700 " .. dir))
    local reg = dir .. "/" .. fabric .. "-apple-uc"
    local f = assert(io.open(reg, "wb")) ; f:write("planted") ; f:close()
    assert.equal(0, C.chmod(reg, tonumber("600", 8)))
    assert.equal(0, C.chown(reg, 65534, 65534))
    local dev, err = open_err()
    assert.is_nil(dev)
    assert.matches("belongs to [^ ]+ %(uid 65534%), not to us", err)
    assert.equal("planted", read(reg))
  end)

  it("refuses a directory that is a symbolic link, or open to others", function()
    assert(sh("mkdir -m 700 " .. base .. "/elsewhere"))
    assert.equal(0, C.symlink(base .. "/elsewhere", dir))
    local dev, err = open_err()
    assert.is_nil(dev)
    assert.matches("is a symbolic link or not a directory: refusing", err, 1, true)
    assert(sh("rm " .. dir .. " && mkdir -m 755 " .. dir))
    dev, err = open_err()
    assert.is_nil(dev)
    assert.matches("has mode 0755, not 0700", err, 1, true)
    assert.is_nil(read(base .. "/elsewhere/" .. fabric .. "-apple-uc"))
  end)

  it("rejects a fabric name that could leave the directory", function()
    C.setenv("TBRT_SOFT_FABRIC", "../x", 1)
    local dev, err = open_err()
    assert.is_nil(dev)
    assert.matches('EINVAL: .*TBRT_SOFT_FABRIC "../x": a fabric name is', err)
  end)

  -- another process that holds the registry's lock for `secs` (killing it
  -- lets it go), once it says "held"
  local function hold_lock(path, secs)
    local h = H.spawn(H.tbrt, { H.root .. "/spec/support/hold_lock.lua", path, tostring(secs) })
    assert(h:expect("held", 10), "the holder never took the lock: " .. h:stderr())
    return h
  end
  local function registry(name)
    assert(sh("mkdir -p -m 700 " .. dir))
    local reg = dir .. "/" .. name
    local f = assert(io.open(reg, "wb")) ; f:close()
    assert.equal(0, C.chmod(reg, tonumber("600", 8)))
    return reg
  end

  it("waits a bounded time for a registry another process keeps locked, naming it", function()
    local reg = registry(fabric .. "-apple-uc")
    local h = hold_lock(reg, 30)
    C.setenv("TBRT_LOCK_TIMEOUT", "0.3", 1)
    local t0 = H.now()
    local dev, err = open_err()
    local took = H.now() - t0
    C.unsetenv("TBRT_LOCK_TIMEOUT")
    h:kill()
    h:wait(5)
    assert.is_nil(dev)
    assert.matches("lock " .. reg .. ": another process held it for 0.3 s", err, 1, true)
    assert.matches("stopped while holding it", err, 1, true)
    assert.is_true(took < 10, "the open took " .. took .. " s")
  end)

  it("takes the lock once its holder lets it go within the bound", function()
    local h = hold_lock(registry(fabric .. "-apple-uc"), 0.3)
    local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    dev:close()
    assert.equal(0, h:wait(5).code)
  end)

  it("a queue pair made while the registry stays locked fails, naming the lock", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd, cq = assert(dev:pd()), assert(dev:cq(16))
    local h = hold_lock(dir .. "/" .. fabric .. "-linux-rc", 30)
    C.setenv("TBRT_LOCK_TIMEOUT", "0.2", 1)
    local qp, err = pd:qp { type = "RC", send_cq = cq }
    C.unsetenv("TBRT_LOCK_TIMEOUT")
    h:kill()
    h:wait(5)
    assert.is_nil(qp)
    assert.matches("fabric registry: lock " .. dir .. "/" .. fabric .. "-linux-rc: another " ..
      "process held it for 0.2 s", err, 1, true)
    -- the lock free again, the device goes on
    qp = assert(pd:qp { type = "RC", send_cq = cq })
    qp:destroy()
    cq:destroy() ; pd:free() ; dev:close()
  end)

  it("keeps fabrics apart: each name has a registry of its own", function()
    for _, name in ipairs { "one", "two" } do
      C.setenv("TBRT_SOFT_FABRIC", name, 1)
      local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
      dev:close()
    end
    assert.equal("600", mode_of(dir .. "/one-linux-rc"))
    assert.equal("600", mode_of(dir .. "/two-linux-rc"))
    assert.is_nil(read(dir .. "/" .. fabric .. "-linux-rc"))
  end)
end)
