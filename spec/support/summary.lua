-- summary.lua - combine the summaries of the sanitizer and the normal spec
-- runs into the last line CI reads; exit 1 when anything failed or a run
-- did not finish (its summary file is missing).
local passed, failed, skipped, missing = 0, 0, 0, {}
for _, path in ipairs(arg) do
  local f = io.open(path)
  local line = f and f:read("*l")
  if f then f:close() end
  local p, fl, s = (line or ""):match("^(%d+) (%d+) (%d+)")
  if p then
    passed, failed, skipped = passed + p, failed + fl, skipped + s
  else
    missing[#missing + 1] = path
    failed = failed + 1
  end
end
for _, m in ipairs(missing) do
  print("summary: " .. m .. " missing: that spec run did not finish (build or runner failure)")
end
print(string.format("%d passed, %d failed, %d skipped", passed, failed, skipped))
os.exit(failed == 0 and 0 or 1)
