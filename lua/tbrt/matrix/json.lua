-- tbrt/matrix/json.lua - the one JSON codec of the matrix: a private
-- lua-cjson instance with limits fit for hostile input (messages from
-- agents on other hosts, result files from anywhere): a shallow nesting
-- bound and NaN/inf written as null (an empty table is written as {}).
local cjson = require("cjson")

local json = cjson.new()
json.decode_max_depth(24)             -- a result is never deeper than ~6
json.encode_max_depth(24)
json.encode_invalid_numbers("null")   -- a rate over 0 s must not break a line
json.decode_invalid_numbers(false)
json.encode_number_precision(14)

local M = { null = cjson.null }

-- Encode; on a value JSON cannot hold (a function, a cycle) the error
-- names what was being encoded.
function M.encode(v, what)
  local ok, s = pcall(json.encode, v)
  if not ok then error(string.format("%s: cannot encode as JSON: %s", what or "value", s), 2) end
  return s
end

-- Decode text; nil, "EPROTO: ..." on bad text (never raises).
function M.decode(s, what)
  local ok, v = pcall(json.decode, s)
  if not ok then return nil, string.format("EPROTO: %s: bad JSON: %s", what or "input", tostring(v)) end
  return v
end

-- A copy with cjson.null turned into nil (decoded nulls are lightuserdata).
function M.denull(v)
  if v == cjson.null then return nil end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.denull(x) end
  return out
end

return M
