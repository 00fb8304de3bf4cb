-- tbrt/mlx5/trace.lua - read a Linux mlx5_core command dump (dynamic debug
-- "dump command NAME(0xOP) INPUT/OUTPUT" lines followed by "OFF: w w w w"
-- hex lines), or tbrt's own trace in the same format, back into commands.
--
-- Pure Lua (no FFI), so the build-time table generator can use it too.
-- Layout of a dump (cmd-layout.md): bytes 0x000-0x03f are the 64-byte queue
-- entry; every following 0x240 bytes is one 576-byte mailbox block (512 data
-- bytes, then next pointer at 0x230, block number 0x238, token 0x23d).
local M = {}

local ENTRY_SIZE = 64         -- struct mlx5_cmd_layout
local BLOCK_SIZE = 0x240      -- struct mlx5_cmd_prot_block (576 bytes)
local BLOCK_DATA = 512        -- MLX5_CMD_DATA_BLOCK_SIZE
local INLINE = 16             -- command bytes carried in the entry itself

local function be32(s, i) -- i: 0-based byte offset
  local a, b, c, d = s:byte(i + 1, i + 4)
  return ((a * 256 + b) * 256 + c) * 256 + d
end
M.be32 = be32

local function be64(s, i)
  return be32(s, i) * 4294967296 + be32(s, i + 4)
end

-- Split one dump's bytes into the entry and its blocks.
local function split(bytes)
  local entry = bytes:sub(1, ENTRY_SIZE)
  local blocks = {}
  local off = ENTRY_SIZE
  while off + BLOCK_SIZE <= #bytes do
    local b = bytes:sub(off + 1, off + BLOCK_SIZE)
    blocks[#blocks + 1] = {
      data = b:sub(1, BLOCK_DATA),
      next = be64(b, 0x230),
      block_num = be32(b, 0x238),
      token = b:byte(0x23d + 1),
      ctrl_sig = b:byte(0x23e + 1),
      sig = b:byte(0x23f + 1),
    }
    off = off + BLOCK_SIZE
  end
  return entry, blocks
end

-- The command stream (inline bytes, then block data) truncated to len.
local function stream(inline, blocks, len)
  local parts = { inline }
  for _, b in ipairs(blocks) do parts[#parts + 1] = b.data end
  local s = table.concat(parts)
  if #s < len then s = s .. string.rep("\0", len - #s) end
  return s:sub(1, len)
end
M.stream = stream

-- Parse text into a list of dumps {name, opcode, dir, bytes}.
function M.dumps(text)
  local list, cur, chunks = {}, nil, nil
  local function finish()
    if cur then
      local maxoff = 0
      for off in pairs(chunks) do if off > maxoff then maxoff = off end end
      local parts = {}
      for off = 0, maxoff, 16 do parts[#parts + 1] = chunks[off] or string.rep("\0", 16) end
      cur.bytes = table.concat(parts)
      list[#list + 1] = cur
    end
    cur, chunks = nil, nil
  end
  for line in text:gmatch("[^\n]*") do
    local name, op, dir = line:match("dump command (.-)%(0x(%x+)%) (%u+)%s*$")
    if name then
      finish()
      cur, chunks = { name = name, opcode = tonumber(op, 16), dir = dir }, {}
    elseif cur then
      local off, w1, w2, w3, w4 = line:match("(%x%x%x+): (%x%x%x%x%x%x%x%x) (%x%x%x%x%x%x%x%x) (%x%x%x%x%x%x%x%x) (%x%x%x%x%x%x%x%x)%s*$")
      if off then
        local b = {}
        for _, w in ipairs({ w1, w2, w3, w4 }) do
          for k = 1, 7, 2 do b[#b + 1] = string.char(tonumber(w:sub(k, k + 1), 16)) end
        end
        chunks[tonumber(off, 16)] = table.concat(b)
      end
    end
  end
  finish()
  return list
end

-- Parse text into commands: each INPUT dump paired with the next OUTPUT dump
-- of the same opcode. Fields: name, opcode, op_mod, inlen, outlen, token,
-- input/output (the command streams), in_entry/out_entry (64 bytes),
-- in_blocks/out_blocks, delivery (status_own >> 1), status, syndrome.
function M.parse(text)
  local cmds, pending = {}, {}
  for _, d in ipairs(M.dumps(text)) do
    local entry, blocks = split(d.bytes)
    if d.dir == "INPUT" then
      local c = {
        name = d.name, opcode = d.opcode,
        inlen = be32(entry, 0x04), outlen = be32(entry, 0x38),
        token = entry:byte(0x3c + 1), in_entry = entry, in_blocks = blocks,
      }
      c.input = stream(entry:sub(0x10 + 1, 0x10 + INLINE), blocks, c.inlen)
      c.op_mod = be32(c.input, 4) % 65536
      cmds[#cmds + 1] = c
      pending[d.opcode] = c
    elseif d.dir == "OUTPUT" and pending[d.opcode] then
      local c = pending[d.opcode]
      pending[d.opcode] = nil
      c.out_entry, c.out_blocks = entry, blocks
      c.output = stream(entry:sub(0x20 + 1, 0x20 + INLINE), blocks, c.outlen)
      c.delivery = math.floor(entry:byte(0x3f + 1) / 2)
      c.status = c.output:byte(1)
      c.syndrome = be32(c.output, 4)
    end
  end
  return cmds
end

-- A trace reduced to what two runs can share, for diff: the dump headers by
-- opcode ("dump command 0x104 INPUT"; Linux versions name commands
-- differently) and the hex lines, with bus addresses (entry mailbox pointers,
-- block next pointers) and the signatures over them masked as "xx".
-- Timestamps, process ids and the other log lines are dropped.
local MASK_ENTRY = { [0x08] = "11111111", [0x0c] = "11111111", [0x30] = "11111111",
  [0x34] = "11111111", [0x3c] = "00110000" } -- 1 = masked byte nibble pair, per word
local function mask_word(w, pattern)
  local out = {}
  for i = 1, 8, 2 do
    out[#out + 1] = pattern:sub(i, i) == "1" and "xx" or w:sub(i, i + 1)
  end
  return table.concat(out)
end

function M.normalize(text)
  local out = {}
  for line in text:gmatch("[^\n]*") do
    local op, dir = line:match("dump command .-%(0x(%x+)%) (%u+)%s*$")
    if op then
      out[#out + 1] = "dump command 0x" .. op .. " " .. dir
    else
      local off, rest = line:match("(%x%x%x+): (%x%x%x%x%x%x%x%x %x%x%x%x%x%x%x%x %x%x%x%x%x%x%x%x %x%x%x%x%x%x%x%x)%s*$")
      if off then
        local o = tonumber(off, 16)
        local words = {}
        for w in rest:gmatch("%x+") do words[#words + 1] = w end
        for i = 1, 4 do
          local wo = o + (i - 1) * 4
          local pat
          if wo < ENTRY_SIZE then
            pat = MASK_ENTRY[wo]
          else
            local b = (wo - ENTRY_SIZE) % BLOCK_SIZE
            if b == 0x230 or b == 0x234 then pat = "11111111" end
            if b == 0x23c then pat = "00001111" end -- ctrl_sig, sig
          end
          if pat then words[i] = mask_word(words[i], pat) end
        end
        out[#out + 1] = off .. ": " .. table.concat(words, " ")
      end
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- Read a (possibly gzipped) trace file.
function M.read(path)
  local f
  if path:match("%.gz$") then
    f = assert(io.popen("gzip -dc '" .. path:gsub("'", "'\\''") .. "'", "r"))
  else
    f = assert(io.open(path, "rb"))
  end
  local text = f:read("*a")
  f:close()
  return text
end

-- As a program: luajit lua/tbrt/mlx5/trace.lua --normalize FILE[.gz]
-- prints the normalized trace, so `diff <(... linux.gz) <(... ours)` works.
if arg and arg[0] and arg[0]:match("mlx5[_/]trace%.lua$") and arg[1] == "--normalize" and arg[2] then
  io.write(M.normalize(M.read(arg[2])))
end

return M
