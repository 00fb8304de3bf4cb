-- apple_flavor_spec.lua - code written for Apple's librdma (TN3205), built
-- and run on Linux: `pkg-config --cflags --libs librdma` links it against
-- tbrt's Apple flavor (build/lib/tbrt/apple/librdma.so: no symbol versions,
-- no GID types), and `tbrt exec --apple` runs it on the soft device's
-- apple-uc personality (UC only, first ACTIVE port 2, receives after RTS,
-- frames that must match). spec/support/apple_uc/uc_pair.c is such code.
local H = require("helpers")
local X = require("programs")

local SRC = H.root .. "/spec/support/apple_uc/uc_pair.c"

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

describe("the Apple flavor", function()
  local dir, prog
  setup(function()
    dir = H.tmpdir()
    prog = dir .. "/uc_pair"
  end)
  teardown(function() H.rmtree(dir) end)

  it("links with pkg-config librdma against tbrt's librdma.so, not libibverbs", function()
    local flags, code = sh("PKG_CONFIG_PATH=" .. H.build .. "/lib/pkgconfig pkg-config --cflags " ..
      "--libs librdma")
    assert.equal(0, code, flags)
    assert.matches("%-L" .. H.build:gsub("%p", "%%%0") .. "/lib/tbrt/apple %-lrdma", flags)
    local out
    out, code = sh("cc -O1 -o " .. prog .. " " .. SRC .. " " .. flags:gsub("\n", " "))
    assert.equal(0, code, out)
    local needed = table.concat(require("tbrt.elf").needed(prog), " ")
    assert.matches("librdma%.so", needed)
    assert.is_nil(needed:find("libibverbs", 1, true))
  end)

  it("runs two processes over UC on port 2 through tbrt exec --apple, every byte checked", function()
    if not io.open(prog) then pending("the build above failed") return end
    local port = X.free_port()
    local srv, cli = X.pair({}, { port = port, port_flag = false, address = false,
      exec = { "--apple" },
      server_argv = { prog, "server", tostring(port) },
      client_argv = { prog, "client", tostring(port) } })
    local d = X.describe(srv, cli)
    assert.equal(0, srv.code, d)
    assert.equal(0, cli.code, d)
    for _, r in ipairs { srv, cli } do
      assert.matches("device softib0 port 2 gid index %d+", r.stdout, nil, d)
    end
    assert.matches("received: 16 messages of 16384 bytes, 0 bytes wrong", srv.stdout, nil, d)
    assert.matches("sent: 16 messages of 16384 bytes, 0 bytes wrong", cli.stdout, nil, d)
  end)

  it("tbrt exec --apple refuses a program linked with libibverbs, saying what to use", function()
    local r = X.exec({ "ibv_devices" }, { exec = { "--apple" } })
    assert.equal(1, r.code, H.describe(r))
    assert.matches("exec %-%-apple: /%S+/ibv_devices links libibverbs%.so%.1, not librdma", r.stderr)
    assert.matches("run a libibverbs program with %-%-personality apple%-uc", r.stderr)
  end)
end)
