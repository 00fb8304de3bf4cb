-- tbrt/matrix/support.lua - what this tbrt can do that a matrix may ask
-- for and that is still being built: the soft device's UDP wire (soft
-- devices in other hosts or namespaces) and fault injection. Probed from
-- the library itself, never assumed: a cell that needs a missing one fails
-- with the reason given here, and specs skip with it.
--
--   local ok, why = support.soft_udp_wire()
--   local how, why = support.faults()      -- "method" | "option" | nil, why
local M = {}

M.NO_WIRE = "the soft device has no UDP wire yet"
M.NO_FAULTS = "no fault injection yet"

local function accepts(opts)
  local link = require("tbrt.link")
  local ok, err = pcall(link.check_opts, opts)
  return ok, err
end

-- True when soft devices can reach other hosts and namespaces (issue 10's
-- wire = "udp" | "auto" link option), else false and the reason.
function M.soft_udp_wire()
  if accepts({ wire = "udp" }) then return true end
  local env = os.getenv("TBRT_SOFT_WIRE")
  if env == "udp" or env == "auto" then return true end      -- the wire chosen for every link
  return false, M.NO_WIRE .. " (tbrt.link knows no `wire` option)"
end

-- How faults are set on a link: "method" (link:faults{...} after set-up),
-- "option" (a `faults` link option), or nil and the reason.
function M.faults()
  local link = require("tbrt.link")
  if type(link.Link.faults) == "function" then return "method" end
  if accepts({ faults = { drop = 0 } }) then return "option" end
  return nil, M.NO_FAULTS .. " (links have no faults method and no `faults` option)"
end

-- Is a fault table all zero (nothing to inject)?
function M.no_faults(faults)
  for _, v in pairs(faults or {}) do
    if not (v == 0 or v == "0" or v == false or v == "") then return false end
  end
  return true
end

return M
