-- tap.lua: busted's TAP output (busted --output=scripts/tap.lua), as scripts/test.sh reads it:
--   ok N - name                          a spec passed
--   not ok N - name                      a spec failed or raised, then "# " lines: where, and the message
--   ok N - # SKIP name: reason           a pending spec, with its name and its reason
--   1..N                                 the plan, last: a run without it crashed
-- (busted's own TAP handler writes a skip's reason alone, without the spec's name.)
local pretty = require "pl.pretty"

return function(options)
  local busted = require "busted"
  local handler = require("busted.outputHandlers.base")()
  local counter = 0

  local function out(line)
    io.write(line, "\n")
    io.flush()
  end

  local function show_failure(t)
    local message = t.message
    if message == nil then message = "Nil error"
    elseif type(message) ~= "string" then message = pretty.write(message) end
    out(("not ok %u - %s"):format(counter, t.name))
    local trace = t.element.trace
    if trace and trace.short_src then out("# " .. trace.short_src .. " @ " .. tostring(trace.currentline)) end
    out("# Failure message: " .. message:gsub("\n", "\n# "))
    if options.verbose and t.trace and t.trace.traceback then
      out("# " .. t.trace.traceback:gsub("^\n", "", 1):gsub("\n", "\n# "))
    end
  end

  handler.suiteReset = function()
    counter = 0
    return nil, true
  end

  handler.suiteEnd = function()
    out("1.." .. counter)
    return nil, true
  end

  handler.testEnd = function(_, _, status)
    counter = counter + 1
    if status == "success" then
      out(("ok %u - %s"):format(counter, handler.successes[#handler.successes].name))
    elseif status == "pending" then
      local t = handler.pendings[#handler.pendings]
      local why = t.message and t.message ~= t.name and (": " .. tostring(t.message)) or ""
      out(("ok %u - # SKIP %s%s"):format(counter, t.name, why:gsub("\n", " ")))
    elseif status == "failure" then
      show_failure(handler.failures[#handler.failures])
    elseif status == "error" then
      show_failure(handler.errors[#handler.errors])
    end
    return nil, true
  end

  -- an error outside a spec (a file that does not load, a failing describe block) counts as a failure
  handler.error = function(element)
    if element.descriptor ~= "it" then
      counter = counter + 1
      show_failure(handler.errors[#handler.errors])
    end
    return nil, true
  end

  busted.subscribe({ "suite", "reset" }, handler.suiteReset)
  busted.subscribe({ "suite", "end" }, handler.suiteEnd)
  busted.subscribe({ "test", "end" }, handler.testEnd, { predicate = handler.cancelOnPending })
  busted.subscribe({ "error" }, handler.error)
  return handler
end
