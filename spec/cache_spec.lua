-- The kernel cache holds code gtlua runs (cpu: shared objects, cuda: CUBINs), so it
-- must be private: directories of this user only, entries checked before loading.
-- The specs run gtlua as a subprocess on the backend of this process; they run as
-- root here, so "another user" is uid 65534 (nobody).
local gt = require "gt"
local support = require "spec.support"
local shq = support.shq

local backend = gt.backend()
local sub = backend == "cuda" and "cuda" or "cpu"          -- the backend's directory in the cache
local ext = backend == "cuda" and "%.cubin$" or "%.so$"

local function src(value, tag)
  return ("// cache_spec %s\n__global__ void k(float *y) { y[threadIdx.x] = %s.0f; }\n"):format(tag or "", value)
end

-- Runs a kernel that writes value in a new process -> its output ("v,v,v,v"), stderr,
-- and (cuda) NVRTC compiles and cache hits.  env: a prefix for env(1).
local function run(env, value, tag)
  local script = ([[
local K = gt.compile(%q)
local K2 = gt.compile(%q)   -- a second compile: still one warning
local y = gt.zeros{ 4 }
K.k(1, 4, y)
local c, h = gt.compile_counts()
io.write(table.concat(y:tolist(), ","), " ", tostring(c), " ", tostring(h))]]):format(src(value, tag), src(value, (tag or "") .. "b"))
  local status, out, err = support.gtlua("--backend=" .. backend .. " -e " .. shq(script), { env = env })
  assert.are.equal(0, status, err)
  local vals, c, h = out:match("^(%S+) (%S+) (%S+)$")
  return vals, err, tonumber(c), tonumber(h)
end

-- Runs a shell command; true when it exited 0 (Lua 5.1 and 5.2+ os.execute alike).
local function ok(cmd)
  local r = os.execute(cmd)
  return r == true or r == 0
end

local function sh(cmd)
  local p = io.popen(cmd)
  local s = p:read("*a")
  p:close()
  return (s:gsub("%s+$", ""))
end

local uid = sh("id -u")
local root = uid == "0"     -- "owned by another user" needs chown
local function mode_owner(path) return sh("stat -c '%a %u' " .. shq(path)) end
local function files(dir) return sh("ls -A " .. shq(dir) .. " 2>/dev/null") end

local function remove(d) ok("rm -rf " .. shq(d)) end
-- A new empty directory of ours (mode 0700), removed after the test.
local dirs = {}
local function dir()
  local d = os.tmpname()
  os.remove(d)
  assert(ok("mkdir -m 700 " .. shq(d)))
  dirs[#dirs + 1] = d
  return d
end
local function remove_dirs()
  for _, d in ipairs(dirs) do remove(d) end
  dirs = {}
end

-- The cached entry of the backend's directory under cache (there is one).
local function entry(cache)
  local names = {}
  for name in files(cache .. "/" .. sub):gmatch("[^\n]+") do
    if name:match(ext) then names[#names + 1] = cache .. "/" .. sub .. "/" .. name end
  end
  table.sort(names)
  return names
end

local function warnings(err)
  local n = 0
  for _ in err:gmatch("warning: the kernel cache") do n = n + 1 end
  return n
end

describe("the kernel cache", function()
  after_each(remove_dirs)

  it("creates its directories (and missing parents) with mode 0700 and uses them on the next run", function()
    local cache = dir() .. "/made/by/gtlua"
    local vals, err = run("GTLUA_CACHE=" .. shq(cache), 3)
    assert.are.equal("3,3,3,3", vals)
    assert.are.equal(0, warnings(err))
    for _, p in ipairs{ cache .. "/../..", cache .. "/..", cache, cache .. "/" .. sub } do
      assert.are.equal("700 " .. uid, mode_owner(p), p)
    end
    local e = entry(cache)
    assert.are.equal(2, #e)
    local before = support.slurp(e[1], true)
    assert.are.equal("3,3,3,3", (run("GTLUA_CACHE=" .. shq(cache), 3)))
    assert.are.equal(before, support.slurp(e[1], true))  -- loaded, not rebuilt
  end)

  for _, case in pairs{
    root and { "owned by another user", "chown 65534 %s", "owned by uid 65534" } or nil,
    { "writable by others", "chmod 0703 %s", "writable by group or others" },
    { "writable by its group", "chmod 0770 %s", "writable by group or others" },
  } do
    it("refuses a directory " .. case[1] .. ": one warning naming it and GTLUA_CACHE, kernels still run, " ..
       "nothing is written to it", function()
      local cache = dir()
      ok(case[2]:format(shq(cache)))
      local vals, err = run("GTLUA_CACHE=" .. shq(cache), 5)
      assert.are.equal("5,5,5,5", vals)
      assert.are.equal(1, warnings(err), err)
      assert.matches(cache, err, 1, true)
      assert.matches(case[3], err, 1, true)
      assert.matches("GTLUA_CACHE", err, 1, true)
      assert.matches("without caching", err, 1, true)
      assert.are.equal("", files(cache))
    end)
  end

  it("refuses its backend's subdirectory when someone else can write it", function()
    local cache = dir()
    assert(ok(("mkdir -m 700 %s && %s %s"):format(shq(cache .. "/" .. sub), root and "chown 65534" or "chmod 0777",
                                                   shq(cache .. "/" .. sub))))
    local vals, err = run("GTLUA_CACHE=" .. shq(cache), 6)
    assert.are.equal("6,6,6,6", vals)
    assert.are.equal(1, warnings(err), err)
    assert.matches(cache .. "/" .. sub .. (root and " is owned by uid 65534" or " is writable by"), err, 1, true)
    assert.are.equal("", files(cache .. "/" .. sub))
  end)

  it("does not load an entry planted in a directory someone else can write", function()
    -- a valid entry of another kernel (writing 2) under the name of the kernel that writes 1
    local cache, other = dir(), dir()
    assert.are.equal("1,1,1,1", (run("GTLUA_CACHE=" .. shq(cache), 1)))
    assert.are.equal("2,2,2,2", (run("GTLUA_CACHE=" .. shq(other), 2)))
    local e, o = entry(cache), entry(other)
    for i = 1, 2 do support.spit(e[i], support.slurp(o[i], true)) end
    -- in a directory of our own the plant is used: it would run
    assert.are.equal("2,2,2,2", (run("GTLUA_CACHE=" .. shq(cache), 1)))
    ok("chmod 0777 " .. shq(cache))
    local vals, err = run("GTLUA_CACHE=" .. shq(cache), 1)
    assert.are.equal("1,1,1,1", vals)
    assert.are.equal(1, warnings(err), err)
  end)

  if root then
    it("does not load an entry someone else owns, even in a directory of ours (planted before it was private)", function()
      local cache, other = dir(), dir()
      assert.are.equal("1,1,1,1", (run("GTLUA_CACHE=" .. shq(cache), 1)))
      assert.are.equal("2,2,2,2", (run("GTLUA_CACHE=" .. shq(other), 2)))
      local e, o = entry(cache), entry(other)
      for i = 1, 2 do
        support.spit(e[i], support.slurp(o[i], true))
        assert(ok("chown 65534 " .. shq(e[i])))
      end
      local vals, err = run("GTLUA_CACHE=" .. shq(cache), 1)
      assert.are.equal("1,1,1,1", vals)
      assert.are.equal("", err)
      for i = 1, 2 do assert.are.equal(uid, mode_owner(e[i]):match("%d+$")) end   -- rebuilt
    end)
  end

  it("treats a damaged entry as a miss and rebuilds it: one changed byte, or garbage", function()
    local cache = dir()
    local env = "GTLUA_CACHE=" .. shq(cache)
    assert.are.equal("4,4,4,4", (run(env, 4)))
    local path = entry(cache)[1]
    local good = support.slurp(path, true)
    local mid = math.floor(#good / 2)
    local flipped = good:sub(1, mid) .. string.char(255 - good:byte(mid + 1)) .. good:sub(mid + 2)
    for _, bad in ipairs{ flipped, "garbage, not a kernel\n" } do
      support.spit(path, bad)
      local vals, err = run(env, 4)
      assert.are.equal("4,4,4,4", vals)
      assert.are.equal("", err)
      local now = support.slurp(path, true)
      assert.are_not.equal(bad, now)
      assert.is_true(#now > 100)
    end
  end)

  it("without HOME and XDG_CACHE_HOME is /tmp/gtlua-<uid>, per user, mode 0700", function()
    local cache = "/tmp/gtlua-" .. uid
    local env = "-u HOME -u XDG_CACHE_HOME -u GTLUA_CACHE"
    remove(cache)
    dirs[#dirs + 1] = cache   -- removed after the test
    local vals, err = run(env, 7, "per-user")
    assert.are.equal("7,7,7,7", vals)
    assert.are.equal(0, warnings(err), err)
    assert.are.equal("700 " .. uid, mode_owner(cache))
    assert.are.equal("700 " .. uid, mode_owner(cache .. "/" .. sub))
    assert.are.equal(2, #entry(cache))
    if not root then return end
    -- made first by someone else: refused
    remove(cache)
    assert(ok(("mkdir -m 777 %s && chown 65534 %s"):format(cache, cache)))
    vals, err = run(env, 7, "per-user")
    assert.are.equal("7,7,7,7", vals)
    assert.are.equal(1, warnings(err), err)
    assert.matches(cache .. " is owned by uid 65534", err, 1, true)
    assert.are.equal("", files(cache))
  end)
end)

describe("the CUBIN cache #gpu", function()
  after_each(remove_dirs)

  it("counts a damaged CUBIN as a miss: NVRTC runs again, and the next process hits the rebuilt entry", function()
    local cache = dir()
    local env = "GTLUA_CACHE=" .. shq(cache)
    local _, _, c, h = run(env, 8)
    assert.are.same({ 2, 0 }, { c, h })
    _, _, c, h = run(env, 8)
    assert.are.same({ 0, 2 }, { c, h })
    for _, path in ipairs(entry(cache)) do
      local good = support.slurp(path, true)
      local mid = math.floor(#good / 2)
      support.spit(path, good:sub(1, mid) .. string.char(255 - good:byte(mid + 1)) .. good:sub(mid + 2))
    end
    local vals, err
    vals, err, c, h = run(env, 8)
    assert.are.equal("8,8,8,8", vals)
    assert.are.equal("", err)
    assert.are.same({ 2, 0 }, { c, h })
    _, _, c, h = run(env, 8)
    assert.are.same({ 0, 2 }, { c, h })
  end)

  it("compiles every kernel again in a process whose cache is refused (no hits, no files)", function()
    local cache = dir()
    ok("chmod 0777 " .. shq(cache))
    for _ = 1, 2 do
      local vals, _, c, h = run("GTLUA_CACHE=" .. shq(cache), 9)
      assert.are.equal("9,9,9,9", vals)
      assert.are.same({ 2, 0 }, { c, h })
    end
    assert.are.equal("", files(cache))
  end)
end)
