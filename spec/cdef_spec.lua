-- cdef_spec.lua - the generated ffi.cdef and the C library come from the
-- same header: the declarations all resolve, the layouts match what C
-- compiled, and a header changed without regenerating is caught.
local ffi = require("ffi")
local core = require("tbrt.ffi")
local H = require("helpers")

local C = core.C

local function headers()
  local list = { H.root .. "/core/include/tbrt.h" }
  local p = io.popen("ls " .. H.root .. "/core/include/*.h")
  for f in p:lines() do if not f:match("/tbrt%.h$") then list[#list + 1] = f end end
  p:close()
  return list
end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("*a")
  p:close()
  return tonumber(out:match("rc=(%d+)%s*$")), out
end

describe("generated cdef", function()
  it("was generated from the header the library was built from", function()
    local cdef = require("tbrt.cdef")
    assert.equal(cdef.header_hash, ffi.string(C.tbrt_header_hash()))
    assert.equal(C.TBRT_ABI_VERSION, C.tbrt_abi_version())
  end)

  it("resolves every function the headers declare", function()
    local names = {}
    for _, h in ipairs(headers()) do
      local f = assert(io.open(h))
      local text = f:read("*a"):match("tbrt:cdef begin %*/(.-)/%* tbrt:cdef end")
      f:close()
      for name in text:gmatch("[%w_%*]+%s+%**(tbrt_[%w_]+)%s*%(") do names[#names + 1] = name end
    end
    assert.is_true(#names > 50, "found " .. #names .. " functions")
    for _, n in ipairs(names) do
      local ok = pcall(function() return C[n] end)
      assert.is_true(ok, n .. " is declared but not exported by libtbrt")
    end
  end)

  it("has the verbs layouts C compiled", function()
    -- sizes from the compiler that built the library, by way of a tiny program
    local dir = H.tmpdir()
    local src = dir .. "/sizes.c"
    local f = assert(io.open(src, "w"))
    f:write([[
#include <stdio.h>
#include <stddef.h>
#include "tbrt.h"
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %zu\n", sizeof(struct ibv_wc), sizeof(struct ibv_send_wr),
    sizeof(struct ibv_qp_attr), sizeof(tbrt_link_opts), sizeof(tbrt_link_info),
    offsetof(struct ibv_send_wr, wr), sizeof(tbrt_devinfo));
  return 0;
}
]])
    f:close()
    local rc, out = sh(string.format("cc -I%s/core/include %s -o %s/sizes && %s/sizes", H.root, src,
      dir, dir))
    assert.equal(0, rc, out)
    local want = string.format("%d %d %d %d %d %d %d", ffi.sizeof("struct ibv_wc"),
      ffi.sizeof("struct ibv_send_wr"), ffi.sizeof("struct ibv_qp_attr"),
      ffi.sizeof("tbrt_link_opts"), ffi.sizeof("tbrt_link_info"),
      ffi.offsetof("struct ibv_send_wr", "wr"), ffi.sizeof("tbrt_devinfo"))
    assert.equal(want, out:match("^(%d[%d ]+)"))
    H.rmtree(dir)
  end)

  it("fails the build when a header changes without regenerating", function()
    local dir = H.tmpdir()
    local hs = headers()
    local copies = {}
    for i, h in ipairs(hs) do
      copies[i] = dir .. "/" .. h:match("[^/]+$")
      assert.equal(0, (sh(string.format("cp %s %s", h, copies[i]))))
    end
    local cdef = H.build .. "/gen/tbrt/cdef.lua"
    local check = string.format("luajit %s/bindings/gen_cdef.lua --check %s %s", H.root, cdef,
      table.concat(copies, " "))
    assert.equal(0, (sh(check)), "the fresh cdef passes")
    assert.equal(0, (sh(string.format("sed -i 's/int tbrt_abi_version(void);/int tbrt_abi_version(void);\\nint tbrt_new_thing(void);/' %s", copies[1]))))
    local rc, out = sh(check)
    assert.equal(1, rc)
    assert.matches("is stale: generated from headers with hash %x+, but .* now hash to %x+; run make", out)
    H.rmtree(dir)
  end)

  it("refuses to load a library built from another header", function()
    local r = H.run(H.tbrt, { "-e", [[
      local f = io.open(os.getenv("TBRT_BUILD") .. "/gen/tbrt/cdef.lua")
      local text = f:read("*a") f:close()
      package.preload["tbrt.cdef"] = function()
        local t = assert(loadstring(text))()
        t.header_hash = "0123456789abcdef"
        return t
      end
      require("tbrt.ffi")]] })
    assert.equal(1, r.code)
    assert.matches("ABI mismatch: .*libtbrt.so was built from header %x+ but the Lua cdef was generated from header 0123456789abcdef; rebuild with make", r.stderr)
  end)
end)
