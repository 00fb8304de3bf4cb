-- run.lua - run the busted specs inside the tbrt program (or plain luajit):
--   TBRT_BUILD=build build/tbrt spec/support/run.lua [--summary-file=F] [spec files...]
-- Sets the module paths for the build tree, then hands over to busted.
local root = (debug.getinfo(1, "S").source:match("^@(.*)/spec/support/run%.lua$")) or "."
local build = os.getenv("TBRT_BUILD") or (root .. "/build")
package.path = table.concat({
  root .. "/lua/?.lua", root .. "/lua/?/init.lua", root .. "/bindings/?.lua",
  build .. "/gen/?.lua", root .. "/spec/support/?.lua", package.path }, ";")

local args = {}
for _, a in ipairs(arg) do
  local f = a:match("^%-%-summary%-file=(.*)$")
  if f then
    _G.TBRT_SPEC_SUMMARY = f
  else
    args[#args + 1] = a
  end
end
for i = #arg, 1, -1 do arg[i] = nil end
for i, a in ipairs(args) do arg[i] = a end

-- Each run has a soft fabric of its own, so two runs (or a user's pair.lua)
-- on the same host never meet, and runs leave no registry behind. Child
-- processes inherit it. A run given TBRT_SOFT_FABRIC keeps that one.
local ffi = require("ffi")
ffi.cdef [[ int setenv(const char *, const char *, int); int getpid(void); ]]
local own_fabric = not os.getenv("TBRT_SOFT_FABRIC")
local fabric = "spec-" .. ffi.C.getpid()
if own_fabric then ffi.C.setenv("TBRT_SOFT_FABRIC", fabric, 1) end
-- and a UDP port of its own for the soft device's UDP wire (RoCEv2's 4791
-- stays free for real use; two runs at once do not share one)
if not os.getenv("TBRT_SOFT_UDP_PORT") then
  ffi.C.setenv("TBRT_SOFT_UDP_PORT", tostring(20000 + ffi.C.getpid() % 30000), 1)
end
local function shm_dir()
  local dir = os.getenv("TBRT_SHM_DIR") or ("/dev/shm/tbrt-" .. (os.getenv("UID") or "0"))
  local p = io.popen("id -u")
  if p then
    local uid = p:read("*l") ; p:close()
    if not os.getenv("TBRT_SHM_DIR") and uid then dir = "/dev/shm/tbrt-" .. uid end
  end
  return dir
end

local function remove_fabric()
  if not own_fabric then return end
  local dir = shm_dir()
  for _, pers in ipairs { "apple-uc", "linux-rc" } do
    os.remove(dir .. "/" .. fabric .. "-" .. pers)              -- the registry
    os.remove(dir .. "/" .. fabric .. "-" .. pers .. ".faults") -- port states
  end
end

-- and what processes that died (killed, crashed) left there: the fabrics
-- of earlier runs, the wake-up sockets of peers the specs killed. Before
-- the run and after it.
local function sweep_dead()
  local uv = require("luv")
  local dir = shm_dir()
  local it = uv.fs_scandir(dir)
  while it do
    local name = uv.fs_scandir_next(it)
    if not name then break end
    local pid = tonumber(name:match("^spec%-(%d+)%-") or name:match("^wake%-(%d+)%-"))
    if pid and pid ~= ffi.C.getpid() then
      local _, err = uv.kill(pid, 0)
      if err and err:match("ESRCH") then os.remove(dir .. "/" .. name) end
    end
  end
end
sweep_dead()

-- busted ends a run with failures by raising error() with no message when
-- it was started from a file under Lua 5.1 (its "exit" does that so the
-- caller can clean up); turn that into exit code 1, after the summary line.
-- A run that failed can also end in its own os.exit (as it does here): the
-- fabric and the dead's files go first either way.
local exit = os.exit
os.exit = function(...)
  remove_fabric()
  sweep_dead()
  return exit(...)
end
local ok, err = pcall(require("busted.runner"), { standalone = false })
os.exit = exit
remove_fabric()
sweep_dead()
if not ok then
  if err ~= nil then error(err, 0) end
  io.stdout:flush()
  os.exit(1)
end
