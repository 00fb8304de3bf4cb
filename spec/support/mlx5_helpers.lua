-- mlx5_helpers.lua - spec helpers for the mlx5 driver and its device model:
-- the shared Linux trace, a brought-up model, hex text, bounded waits.
local ffi = require("ffi")
local H = require("helpers")
local mlx5 = require("tbrt.mlx5")
local trace = require("tbrt.mlx5.trace")

local M = {}

M.TRACE = H.root .. "/core/mlx5/data/linux-mlx5_core-cx4-trace.txt.gz"

local linux_cmds
-- The 42 commands of the Linux mlx5_core ConnectX-4 trace (parsed once).
function M.linux()
  linux_cmds = linux_cmds or trace.parse(trace.read(M.TRACE))
  return linux_cmds
end

-- First command of a list with this opcode (and op_mod when given).
function M.find(cmds, opcode, op_mod)
  for _, c in ipairs(cmds) do
    if c.opcode == opcode and (op_mod == nil or c.op_mod == op_mod) then return c end
  end
end

-- A model brought up (or raw), closed by the caller with M.close.
function M.model(o)
  o = o or {}
  o.model = true
  return assert(mlx5.open(o))
end

function M.hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

-- Poll fn until it returns a truthy value or timeout seconds pass.
function M.wait_for(fn, timeout)
  local deadline = H.now() + (timeout or 2)
  repeat
    local v = fn()
    if v then return v end
    ffi.C.usleep(200)
  until H.now() > deadline
  return nil
end

pcall(ffi.cdef, "int usleep(unsigned int usec);")

return M
