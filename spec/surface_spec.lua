-- surface_spec.lua - the Lua surface matches what the docs say: every name
-- help() describes exists on the object it describes, the REPL's helpers
-- and modules are there (and tbrt.X is the module help() names as
-- tbrt.X), and every Lua name, C name, environment variable and file the
-- README mentions exists.
local tbrt = require("tbrt")
local task = require("tbrt.task")
local verbs = require("tbrt.verbs")
local help_text = require("tbrt.repl.help_text")
local play = require("tbrt.repl.play")
local core = require("tbrt.ffi")
local H = require("helpers")

-- Where each kind help() describes keeps its functions.
local KIND_TABLE = {
  tbrt = function() return tbrt end,
  link = function() return require("tbrt.link").Link end,
  server = function() return tbrt.Server end,
  peer = function() return play.Peer end,
  verbs = function() return verbs end,
  device = function() return verbs.Dev end,
  pd = function() return verbs.PD end,
  cq = function() return verbs.CQ end,
  qp = function() return verbs.QP end,
  mr = function() return verbs.MR end,
  task = function() return task.Task end,
  ["task module"] = function() return task end,
  channel = function() return task.Channel end,
}

local function read(path) return assert(H.read_file(H.root .. "/" .. path), path) end

local README = read("README.md")

-- The README's `code` spans (what it names), fenced blocks (indented 4) included.
local function code_spans(text)
  local out = {}
  for span in text:gmatch("`([^`\n]+)`") do out[#out + 1] = span end
  for line in text:gmatch("\n    ([^\n]+)") do out[#out + 1] = line end
  return out
end

-- A paragraph of the README starting with `start`.
local function paragraph(text, start)
  local at = assert(text:find(start, 1, true), "README: no paragraph starting " .. start)
  return text:sub(at):match("^(.-)\n\n") or text:sub(at)
end

local function is_function(v) return type(v) == "function" end

describe("the documented Lua surface", function()
  it("has every function help() describes, on the object it describes", function()
    for name, kind in pairs(help_text.KINDS) do
      local get = KIND_TABLE[name]
      assert.is_not_nil(get, "help() kind '" .. name .. "' has no table here: add it to KIND_TABLE")
      local t = get()
      for _, e in ipairs(kind.entries) do
        local fn = e[1]:match("^([%a_][%w_]*)")
        assert.is_true(is_function(t[fn]), string.format("help(%s) names %s, which is not there", name, e[1]))
      end
    end
  end)

  it("gives the REPL the helpers and modules help() lists, tbrt.X being the tbrt.X module", function()
    local env = {}
    assert.is_nil(play.install(env))
    for _, item in ipairs(help_text.OVERVIEW) do
      if type(item) == "table" then
        local fn = item[1]:match("^([%a_][%w_]*)")
        assert.is_true(is_function(env[fn]), "help() lists " .. item[1])
      end
    end
    local modules
    for _, item in ipairs(help_text.OVERVIEW) do
      if type(item) == "string" and item:find("^Modules:") then modules = item end
    end
    assert.is_not_nil(modules, "help() names the modules")
    local n = 0
    local list = assert(modules:match("^Modules:%s*(.-)%.%s"), modules)
    for item in list:gmatch("[^,]+") do
      local global, mod = item:match("^%s*([%a_][%w_]*)%s*%(([%w_.]+)%)%s*$")
      if not global then global = item:match("^%s*([%a_][%w_]*)%s*$") mod = global end
      assert.is_not_nil(global, "Modules: item '" .. item .. "'")
      do
        n = n + 1
        local m = mod == "luv" and require("luv") or require(mod)
        assert.equal(m, env[global], "the REPL's " .. global .. " is " .. mod)
        local field = mod:match("^tbrt%.([%a_][%w_]*)$")
        if field then assert.equal(m, tbrt[field], "require('tbrt')." .. field .. " is " .. mod) end
      end
    end
    assert.is_true(n >= 3, modules)
    assert.equal(tbrt, env.tbrt)
    assert.equal(verbs, tbrt.verbs)
  end)

  it("has every tbrt.X and link/device method the README names", function()
    local seen = {}
    for _, span in ipairs(code_spans(README)) do
      for pre, name in span:gmatch("([%w_/]?)tbrt%.([%a_][%w_]*)") do
        -- files (tbrt.h, tbrt.pc, lua/tbrt/...) are not Lua names
        if pre == "" and name ~= "h" and name ~= "pc" then
          seen["tbrt." .. name] = true
          assert.is_not_nil(tbrt[name], "README names tbrt." .. name .. ", which require('tbrt') lacks")
        end
      end
      for obj, name in span:gmatch("([%a_][%w_]*):([%a_][%w_]*)%(") do
        local t = ({ l = require("tbrt.link").Link, link = require("tbrt.link").Link,
          srv = tbrt.Server, dev = (name == "cmd") and require("tbrt.mlx5").Dev or verbs.Dev })[obj]
        if t then
          seen[obj .. ":" .. name] = true
          assert.is_true(is_function(t[name]), "README names " .. obj .. ":" .. name)
        end
      end
    end
    for _, must in ipairs({ "tbrt.verbs", "tbrt.connect", "tbrt.probe", "link:activate", "dev:set_port",
        "dev:cmd" }) do
      assert.is_true(seen[must], "the walk found " .. must)
    end
    -- the cosocket paragraph lists link methods
    local p = paragraph(README, "Links have the cosocket shape:")
    local n = 0
    for name in p:gmatch("`([%a_][%w_]*)%(") do
      n = n + 1
      assert.is_true(is_function(require("tbrt.link").Link[name]), "README: link method " .. name)
    end
    assert.is_true(n >= 8, p)
    -- and the REPL's helpers
    local env = {}
    play.install(env)
    p = paragraph(README, "In the REPL each line runs as a task")
    local helpers = p:match("Helpers:(.*)$")
    assert.is_not_nil(helpers, p)
    for name in helpers:gmatch("`([%a_][%w_]*)[{(]") do
      assert.is_true(is_function(env[name]), "README: REPL helper " .. name)
    end
  end)

  it("has every C name, environment variable and file the README names", function()
    local sources = {}
    local pipe = io.popen("cd " .. H.root .. " && find core lua bindings scripts -type f \\( -name '*.c' -o " ..
      "-name '*.h' -o -name '*.lua' \\) 2>/dev/null")
    for path in pipe:lines() do sources[#sources + 1] = read(path) end
    pipe:close()
    local all = table.concat(sources, "\n")
    local spans = code_spans(README)
    local checked = { c = 0, env = 0, file = 0 }
    for _, span in ipairs(spans) do
      -- (not files: ~/.tbrt_history)
      for name in span:gsub("[~%w_/]*%.tbrt_[%w_]+", ""):gmatch("%f[%w_](tbrt_[%a_][%w_]*)") do
        if not name:match("^tbrt_bench") then
          checked.c = checked.c + 1
          local ok_sym = pcall(function() return core.C[name] end)
          local ok_type = pcall(core.ffi.typeof, name)
          assert.is_true(ok_sym or ok_type, "README names " .. name .. ", not in the C API (tbrt.h)")
        end
      end
      for name in span:gmatch("%f[%w_](TBRT_[A-Z0-9_]+)%f[^%w_<]") do
        checked.env = checked.env + 1
        -- named where it is read (some are built: "TBRT_SOFT_%s" + "PORTS")
        local suffix = name:match("^TBRT_SOFT_(.+)$")
        assert.is_true(all:find('"' .. name .. '"', 1, true) ~= nil or (suffix ~= nil and
          all:find('"TBRT_SOFT_%s"', 1, true) ~= nil and all:find('"' .. suffix .. '"', 1, true) ~= nil),
          "README names " .. name .. ", which nothing reads")
      end
    end
    -- paths: `dir/file.ext` and `dir/` spans that look like the tree's
    for _, span in ipairs(spans) do
      local path = span:match("^([%w_%-]+/[%w_%-/%.]*)$")
      if path then
        if not path:find("^build") then
          checked.file = checked.file + 1
          local f = io.open(H.root .. "/" .. path:gsub("/$", ""))
          assert.is_not_nil(f, "README names " .. path .. ", which is not in the tree")
          if f then f:close() end
        end
      end
    end
    assert.is_true(checked.c >= 3 and checked.env >= 5 and checked.file >= 2,
      string.format("walked %d C names, %d variables, %d files", checked.c, checked.env, checked.file))
  end)
end)
