-- summary.lua - combine the summaries of the sanitizer and the normal spec
-- runs into the last line CI reads; exit 1 when anything failed or a run
-- did not finish (its summary file is missing).
--
--   luajit spec/support/summary.lua build-asan/spec-summary build/spec-summary
--
-- A summary file holds "passed failed skipped [label]" (spec/support/output.lua
-- writes it). One line per run names it ("summary: sanitizer run (ASan+UBSan,
-- build-asan): 250 passed, ..."), so the sanitizer's count can be told from
-- the normal one's; the last line is exactly "N passed, N failed, N skipped"
-- over all of them.

-- What a run is called when its file does not say: by its build directory.
local function label_of(path)
  local dir = path:match("([^/]+)/[^/]*$") or path
  if dir:find("asan", 1, true) then return "sanitizer run (ASan+UBSan, " .. dir .. ")" end
  return "normal run (" .. dir .. ")"
end

local passed, failed, skipped, lines = 0, 0, 0, {}
for _, path in ipairs(arg) do
  local f = io.open(path)
  local line = f and f:read("*l")
  if f then f:close() end
  local p, fl, s, label = (line or ""):match("^(%d+) (%d+) (%d+) ?(.*)$")
  if p then
    passed, failed, skipped = passed + p, failed + fl, skipped + s
    lines[#lines + 1] = string.format("summary: %s: %d passed, %d failed, %d skipped",
      label ~= "" and label or label_of(path), p, fl, s)
  else
    failed = failed + 1
    lines[#lines + 1] = string.format("summary: %s: %s missing: that spec run did not finish " ..
      "(build or runner failure)", label_of(path), path)
  end
end
for _, l in ipairs(lines) do print(l) end
print(string.format("%d passed, %d failed, %d skipped", passed, failed, skipped))
os.exit(failed == 0 and 0 or 1)
