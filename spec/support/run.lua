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

require("busted.runner")({ standalone = false })
