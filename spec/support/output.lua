-- output.lua - busted output handler: one line per test (failures and skips
-- with their reason), and a last line "N passed, N failed, N skipped" that CI
-- reads. Errors count as failures; pending tests (#hw without hardware) are
-- skips, never passes. With TBRT_SPEC_LABEL set (scripts/check.sh names
-- its two runs: "sanitizer run (ASan+UBSan, build-asan)", ...) the run
-- starts with "== <label> ==", its last line is "<label>: N passed, ..."
-- and the summary file carries the label after the counts.
return function(options)
  local busted = require("busted")
  local handler = require("busted.outputHandlers.base")()
  local pretty = require("pl.pretty")
  local out = io.stdout
  local passed, failed, skipped = 0, 0, 0
  local t0 = {}
  local label = os.getenv("TBRT_SPEC_LABEL")
  if label == "" then label = nil end
  if label then
    out:write("== ", label, " ==\n")
    out:flush()
  end

  local function name(element) return handler.getFullName(element) end
  local function where(element)
    local tr = element.trace
    return tr and (tr.short_src .. ":" .. tostring(tr.currentline)) or "?"
  end
  local function msg(t)
    local m = t.message
    if m == nil then return "nil error" end
    if type(m) ~= "string" then m = pretty.write(m) end
    return m
  end

  handler.testStart = function(element)
    t0[element] = os.clock()
    return nil, true
  end

  handler.testEnd = function(element, parent, status)
    local dt = t0[element] and (os.clock() - t0[element]) or 0
    if status == "success" then
      passed = passed + 1
      out:write(string.format("ok    %s (%.2fs cpu)\n", name(element), dt))
    elseif status == "pending" then
      skipped = skipped + 1
      local p = handler.pendings[#handler.pendings]
      out:write(string.format("SKIP  %s -- %s\n", name(element), p and p.message or "pending"))
    else
      failed = failed + 1
      local list = status == "failure" and handler.failures or handler.errors
      local t = list[#list]
      out:write(string.format("FAIL  %s\n      at %s\n", name(element), where(element)))
      out:write("      " .. msg(t):gsub("\n", "\n      ") .. "\n")
      if t.trace and t.trace.traceback then
        out:write("      " .. t.trace.traceback:gsub("^\n", ""):gsub("\n", "\n      ") .. "\n")
      end
    end
    out:flush()
    return nil, true
  end

  -- errors outside any test (a spec file that does not load, a failing setup)
  handler.error = function(element, parent, message)
    if element.descriptor ~= "it" then
      failed = failed + 1
      out:write(string.format("FAIL  %s (%s)\n      %s\n", element.name or element.descriptor,
        element.descriptor, tostring(message):gsub("\n", "\n      ")))
      out:flush()
    end
    return nil, true
  end

  handler.suiteEnd = function()
    local line = string.format("%d passed, %d failed, %d skipped", passed, failed, skipped)
    local f = _G.TBRT_SPEC_SUMMARY and io.open(_G.TBRT_SPEC_SUMMARY, "w")
    if f then
      f:write(string.format("%d %d %d%s\n", passed, failed, skipped, label and (" " .. label) or ""))
      f:close()
    end
    out:write(label and (label .. ": ") or "", line, "\n")
    out:flush()
    return nil, true
  end

  busted.subscribe({ "test", "start" }, handler.testStart, { predicate = handler.cancelOnPending })
  busted.subscribe({ "test", "end" }, handler.testEnd, { predicate = handler.cancelOnPending })
  busted.subscribe({ "error" }, handler.error)
  busted.subscribe({ "failure" }, handler.error)
  busted.subscribe({ "suite", "end" }, handler.suiteEnd)
  return handler
end
