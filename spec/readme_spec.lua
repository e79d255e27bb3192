-- readme_spec.lua - the README's first model runs and prints the tree the README
-- shows; the files it links to are in the repository; the first hour's answers are there.
local S = require "spec.support"
local gtlua, slurp, spit = S.gtlua, S.slurp, S.spit

local readme = slurp("README.md", true)

describe("README", function()
  it("its first model (a custom kernel, a branch, a tree) prints the tree shown under it", function()
    local code, shown = readme:match("```lua\n(.-)```\n\n```\n(.-)```")
    assert.truthy(code and code:find("gt.compile", 1, true) and code:find("gt.tree", 1, true))
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. S.shq(dir))
    spit(dir .. "/model.lua", code)
    local status, out, err = gtlua("model.lua", { cd = dir, env = "-u GTLUA_NO_GT GTLUA_BACKEND=cpu" })
    os.execute("rm -rf " .. S.shq(dir))
    assert.equal(0, status, err)
    assert.equal(shown, out)
  end)

  it("the first model comes before the 60th line", function()
    local n, at = 0, nil
    for line in readme:gmatch("([^\n]*)\n") do
      n = n + 1
      if line:find("gt.tree(function", 1, true) then at = n break end
    end
    assert.truthy(at and at < 60, tostring(at))
  end)

  it("links only to files in the repository", function()
    for target in readme:gmatch("%]%(([^)#]+)[^)]*%)") do
      if not target:find("^https?:") then
        assert.truthy(io.open(target), target .. " is linked from README.md but not in the repository")
      end
    end
    assert.falsy(readme:find("shared folder", 1, true))
    assert.falsy(readme:find("../shared", 1, true))
    assert.truthy(readme:find("docs/DESIGN.md", 1, true))
  end)

  it("answers the first hour: W {in, out}, per-row sum, --busted, make install, GTLUA_HOME", function()
    for _, s in ipairs { "{in, out}", "reduce each row", "gtlua --busted my_spec.lua", "make install", "GTLUA_HOME" } do
      assert.truthy(readme:find(s, 1, true), s)
    end
  end)
end)
