-- tbrt/repl/history.lua - the REPL's history: the lines typed, kept in a file
-- so the next session can recall them.
--
--   local h = history.open(history.default_path(), history.MAX)
--   h:add("link:recv(5)")         -- remembered and appended to the file
--   h.lines[#h.lines]             -- the newest line
--
-- The file is one line per entry, oldest first. Each entry is appended as
-- it is typed (nothing is lost if the process is killed); the file is
-- rewritten with the newest MAX entries when it has grown to twice that.
-- A file that cannot be read or written leaves the history in memory only
-- (h.why says why): the REPL works on without it.
local M = {}

-- Entries kept: enough for weeks of prototyping, small enough to load at
-- once (readline's default HISTSIZE is 500; bash's HISTFILESIZE 500-2000).
M.MAX = 1000

local History = {}
History.__index = History

-- $TBRT_HISTORY, else ~/.tbrt_history; nil (no file) if $TBRT_HISTORY is
-- set but empty, or there is no home.
function M.default_path()
  local p = os.getenv("TBRT_HISTORY")
  if p then return p ~= "" and p or nil end
  local home = os.getenv("HOME")
  if home and home ~= "" then return home .. "/.tbrt_history" end
  return nil
end

local function write_all(path, lines, first)
  local f, err = io.open(path, "w")
  if not f then return nil, err end
  for i = first, #lines do f:write(lines[i], "\n") end
  f:close()
  return true
end

function M.open(path, max)
  local self = setmetatable({ path = path, max = max or M.MAX, lines = {} }, History)
  if not path then return self end
  local f = io.open(path, "r")
  if f then
    local all = {}
    for line in f:lines() do
      if line ~= "" then all[#all + 1] = line end
    end
    f:close()
    local first = math.max(1, #all - self.max + 1)
    for i = first, #all do self.lines[#self.lines + 1] = all[i] end
    self.in_file = #all
    if #all >= 2 * self.max then self:_compact() end
  else
    self.in_file = 0
  end
  return self
end

function History:_compact()
  local ok, err = write_all(self.path, self.lines, 1)
  if not ok then self.why = err return end
  self.in_file = #self.lines
end

-- Remember a line: not empty ones, and not the same line twice in a row.
function History:add(line)
  if line:match("^%s*$") or line:find("\n", 1, true) then return false end
  if self.lines[#self.lines] == line then return false end
  self.lines[#self.lines + 1] = line
  if #self.lines > self.max then table.remove(self.lines, 1) end
  if not self.path or self.why then return true end
  local f, err = io.open(self.path, "a")
  if not f then
    self.why = err
    return true
  end
  f:write(line, "\n")
  f:close()
  self.in_file = self.in_file + 1
  if self.in_file >= 2 * self.max then self:_compact() end
  return true
end

return M
