-- tbrt/elf.lua - what an executable links: the DT_NEEDED sonames of an ELF64
-- little-endian file (tbrt exec --apple checks a program is built against
-- librdma before running it). Only that: no relocation, no versions.
local M = {}

-- The sonames an ELF64 little-endian executable needs (DT_NEEDED), or nil
-- when it is not one (a script, another format). Read with bounds: what a
-- file says about its own layout is checked against its size.
function M.needed(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local size = f:seek("end")
  local function read(off, n)
    if off < 0 or n < 0 or off + n > size then return nil end
    f:seek("set", off)
    return f:read(n)
  end
  local function u(s, at, n)
    local v = 0
    for i = n, 1, -1 do v = v * 256 + s:byte(at + i - 1) end
    return v
  end
  local result
  local h = read(0, 64)
  if h and h:sub(1, 4) == "\127ELF" and h:byte(5) == 2 and h:byte(6) == 1 then
    local phoff, phentsize, phnum = u(h, 33, 8), u(h, 55, 2), u(h, 57, 2)
    local loads, dyn = {}, nil
    for i = 0, math.min(phnum, 256) - 1 do
      local ph = read(phoff + i * phentsize, 56)
      if not ph then break end
      local ptype = u(ph, 1, 4)
      local seg = { off = u(ph, 9, 8), vaddr = u(ph, 17, 8), filesz = u(ph, 33, 8) }
      if ptype == 1 then loads[#loads + 1] = seg elseif ptype == 2 then dyn = seg end
    end
    local function file_off(vaddr)
      for _, l in ipairs(loads) do
        if vaddr >= l.vaddr and vaddr < l.vaddr + l.filesz then return l.off + vaddr - l.vaddr end
      end
    end
    local d = dyn and read(dyn.off, math.min(dyn.filesz, 65536))
    if d then
      local needed, strtab = {}, nil
      for at = 1, #d - 15, 16 do
        local tag, val = u(d, at, 8), u(d, at + 8, 8)
        if tag == 0 then break end
        if tag == 1 then needed[#needed + 1] = val elseif tag == 5 then strtab = val end
      end
      local base = strtab and file_off(strtab)
      if base then
        result = {}
        for _, o in ipairs(needed) do
          local s = read(base + o, math.min(256, size - base - o))
          result[#result + 1] = s and s:match("^[^%z]*")
        end
      end
    end
  end
  f:close()
  return result
end

return M
