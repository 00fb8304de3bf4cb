-- rpc_script.lua - a --script for scripts/rpc_peer.lua (rpc_peer_script_spec):
-- payloads in spec/support/links.lua's pattern keyed by size, which the
-- llama.cpp-like server checks; a reply of a given size is not compared.
local ffi = require("ffi")
local function pattern(n)
  local b = ffi.new("uint8_t[?]", n)
  for i = 0, n - 1 do b[i] = (i * 131 + n % 251) % 251 end
  return ffi.string(b, n)
end
return {
  { cmd = "GRAPH_COMPUTE", payload = pattern(1), reply = "echo" },
  { cmd = "GRAPH_COMPUTE", payload = pattern(262145), reply = "echo" },
  { cmd = 10, payload = pattern(4096), reply = 4096 },
}
