-- gt.docs: the documentation of gtlua's public API, for gt.help(x) and the REPL's ?name.
--
--   gt.help(gt.tree)          by value: a function, a tensor, a tree, a kernel, gt.ops ...
--   gt.help("tensor:narrow")  by name: "gt.zeros", "ops.linear", "t:item", "narrow", "tree:stats"
--   gt.help()                 the list of names
--   docs.ask("step")          the REPL's ?step: a global's value if it has a doc, else the name
-- help prints the text and returns it; an unknown name prints (and returns
-- nil and) a message with close names.
local gt = require "gt"

local concat, sort, loadstring, pcall = table.concat, table.sort, loadstring, pcall
local type, pairs, ipairs, getmetatable = type, pairs, ipairs, getmetatable

local M = {}

-- -- The text --------------------------------------------------------------------

-- name -> text; the first line is the signature.
local DOC = {
  ["gt"] = [[
gt: CUDA graph trees scripted from Lua (require "gt"; preloaded by gtlua).
  tensors   gt.tensor zeros ones full randn from; t:item tolist clone copy fill view narrow static t to
  files     gt.safetensors.load save
  kernels   gt.compile gt.load; K.name(grid, block, ...); K.name:config(grid, block [, smem])
  ops       gt.ops.linear matmul transpose add mul axpby relu gelu tanh sigmoid softmax layernorm rmsnorm sum max argmax embedding
  trees     gt.tree; tree(...); tree:stats trim floor dot json report; gt.cut gt.sync
  branches  gt.cond(p, then_fn [, else_fn]), gt.loop(p, body_fn [, {max = n}]) decided on the device
  lifetimes gt.scope; t:free()
  looking   print(tree), gt.profile, gt.help
  misc      gt.backend gt.device gt.clock gt.memory gt.transfers; gt.buckets.pow2 linear; gt.bucket
gt.help("name") for one of them; gt.help() lists every name.]],

  -- tensors
  ["tensor"] = [[
tensor: a device tensor (a view: buffer, offset, shape).
  fields   t.shape (a new table, dims from 1), t.dtype ("f32"|"f16"|"bf16"|"i32"|"i64"|"u8"), t.numel
  methods  t:item() tolist() clone() copy(src) fill(v) view(shape) narrow(dim, start, len)
           static() contiguous() is_stale() dim() size([d]) t() to(dtype)
Outside a tree, memory comes from the caching allocator; inside a tree call,
from the tree's pool: outputs of a call are overwritten by the next call of
that tree (using one then raises; :clone() keeps it).]],
  ["gt.tensor"] = [[
gt.tensor(shape [, dtype = "f32"]) -> an uninitialised tensor
  shape: a table of sizes, e.g. {8, 256}; dtype: "f32", "f16", "bf16", "i32", "i64" or "u8".
  f16 and bf16 are written and read as numbers, rounded to nearest even.
  gt.tensor{8, 256}]],
  ["gt.shape"] = [[
gt.shape(shape) -> that shape checked, as a new table (t.shape gives a new table too)
  A caller may change the table it gets: no tensor's shape changes with it.
  t:size(d) and t:dim() read a tensor's sizes without making a table.]],
  ["gt.zeros"] = [[
gt.zeros(shape [, dtype = "f32"]) -> a tensor of zeros]],
  ["gt.ones"] = [[
gt.ones(shape [, dtype = "f32"]) -> a tensor of ones]],
  ["gt.full"] = [[
gt.full(shape, value [, dtype = "f32"]) -> a tensor filled with value]],
  ["gt.randn"] = [[
gt.randn(shape [, {seed =, dtype =, scale =}]) -> normal values (mean 0, sd scale or 1)
  Deterministic per seed (same values on cpu and cuda).
  gt.randn({256, 256}, {seed = 1, scale = 0.06})]],
  ["gt.from"] = [[
gt.from(table_or_nested_table_or_number [, dtype = "f32"]) -> a tensor with those values
  The nesting gives the shape: gt.from{{1, 2}, {3, 4}} is 2x2.]],
  ["tensor:item"] = [[
t:item() -> the one value of a one-element tensor, as a Lua number
  A sync point: inside a tree call it ends the segment, so Lua code after it
  may branch on the value (a data-dependent branch: a child node per path).]],
  ["tensor:tolist"] = [[
t:tolist() -> the values as a (nested) Lua table shaped like t.shape
  A sync point, like t:item().]],
  ["tensor:clone"] = [[
t:clone() -> a contiguous copy
  Outside a tree call the copy lives outside any tree pool, so it survives the
  tree's next call (which overwrites the outputs of this one).]],
  ["tensor:copy"] = [[
t:copy(src) -> t, after copying src into it
  src: a tensor of the same size and dtype, or a (nested) Lua table of values.
  A host copy is a sync point inside a tree call.]],
  ["tensor:fill"] = [[
t:fill(v) -> t, every element set to v]],
  ["tensor:view"] = [[
t:view(shape) -> a tensor over the same memory with another shape
  One size may be -1 (inferred). t must be contiguous.]],
  ["tensor:narrow"] = [[
t:narrow(dim, start, len) -> a view of len entries of dimension dim from start
  dim and start count from 1, as everywhere in Lua:
  gt.from{1, 2, 3, 4}:narrow(1, 2, 2) is {2, 3}.]],
  ["tensor:static"] = [[
t:static() -> t, marked as a weight
  In a tree a static tensor is keyed by its address: the graph reads it in
  place; a changed address updates the recorded graph (or records again).]],
  ["tensor:to"] = [[
t:to(dtype) -> t in dtype ("f32", "f16" or "bf16"): a copy made by a kernel (also in trees)
  Rounds to nearest even (NaN stays NaN, overflow is inf); t itself when it has that dtype.
  W = gt.randn({768, 768}, {seed = 1}):to("bf16"):static()]],
  ["gt.safetensors.load"] = [[
gt.safetensors.load(path [, {dtype =, names =}]) -> {name = tensor, ..., __metadata__ = {...}}
  A safetensors file (Hugging Face's checkpoints): F32, F16, BF16, I32, I64, U8, BOOL (as u8),
  F64 (as f32). dtype "f32"|"f16"|"bf16" converts every floating tensor; names (a list, a set
  or a function of the name) chooses which to load. The file is checked as the reference
  reader does; a malformed one raises naming the file and what is wrong.]],
  ["gt.safetensors.save"] = [[
gt.safetensors.save(path, {name = tensor, ...} [, metadata]) writes a safetensors file
  (metadata: strings to strings) that Python's safetensors reads: larger elements first,
  then by name, the header padded with spaces to 8 bytes.]],
  ["tensor:contiguous"] = [[
t:contiguous() -> t when contiguous, else a contiguous copy]],
  ["tensor:t"] = [[
t:t() -> the transpose of a 2-D f32 tensor, a new tensor: gt.ops.transpose(t)
  A PyTorch nn.Linear weight {out, in} becomes gt.ops.linear's W {in, out}:
  W = torch_weight:t():static(), once, outside the step.]],
  ["tensor:is_stale"] = [[
t:is_stale() -> true when a later call of the tree that returned t reused its memory]],
  ["tensor:free"] = [[
t:free(): releases t's memory now (and every view of its buffer)
  Using t (or a view) afterwards raises, naming where it was released. In a
  tree call the release takes effect in queue order: launches queued before
  the free still read t; only launches queued after it may reuse the memory.
  local nh = layer(h); h:free(); h = nh     -- a chain that keeps one layer]],
  ["gt.scope"] = [[
gt.scope(fn, ...) -> fn(...)'s results
  When fn returns, every tensor made inside it that is not among its results
  (or in a table it returns, one level deep) is released, as by t:free().
  Tensors of a tree call otherwise keep their memory until the tree's next
  call: no garbage collector decides what a recorded graph overwrites. The
  same inside and outside trees, in every mode.
  h = gt.scope(function() return gt.ops.gelu(gt.ops.linear(h, W1, b1)) end)]],
  ["tensor:dim"] = [[
t:dim() -> the number of dimensions]],
  ["tensor:size"] = [[
t:size([d]) -> the size of dimension d, or a copy of the shape table]],

  -- kernels
  ["kernel"] = [[
kernel: one __global__ function of a compiled source (from gt.compile or gt.load).
  K.name(grid, block, args...)              launch it (queued inside a tree call)
  f = K.name:config(grid, block [, smem])   a bound launcher: f(args...)
  grid, block: a positive integer or {x, y, z}. Arguments are checked against the parsed
  signature: const T* is read, T* written, scalars int unsigned long long
  int64_t size_t float double bool. tostring(K.name) shows the signature.
  K.misspelt raises, listing the kernels of the source (rawget(K, name) for a test).]],
  ["kernel:call"] = [[
K.name(grid, block, args...): launch a kernel
  grid, block: a number or {x, y, z}; args: tensors for pointer parameters,
  numbers (or booleans) for scalars. Wrong counts or types raise before
  anything is queued. Inside a tree call the launch is queued into the segment.]],
  ["kernel:config"] = [[
K.name:config(grid, block [, smem_bytes = 0]) -> f(args...), a bound launcher
  Cheaper than K.name(grid, block, ...) in a hot loop: grid, block and
  dynamic shared memory are checked once.]],
  ["gt.compile"] = [=[
gt.compile(src [, {name =, graph = true, options =}]) -> { kernel_name = kernel, ... }
  src: CUDA C++ source; one kernel object per __global__ function.
  name: the file name in messages; graph = false: the kernels never go into a
  graph (segments that launch them run eagerly, counted as skips);
  options: extra compiler options (NVRTC on cuda, the host compiler on cpu).
  A compile error raises with the compiler's log. Device code only, on both
  backends alike: a host header (<vector>, <iostream>, ...) or a std:: name
  raises (NVRTC has no C++ standard library); <cstdint>, <cmath>, <cstdio>,
  <cfloat>, <climits>, <cstddef>, <cassert>, <cstdlib>, <cstring> may be
  included for what device code has of them.
  local K = gt.compile[[ __global__ void k(float *y, int n) { ... } ]]]=],
  ["gt.load"] = [[
gt.load(path [, opts]) -> the kernels of a .cu file, as gt.compile returns them
  path: relative to the current directory, else to GTLUA_HOME (kernels/ ships
  with gtlua). Cached per path, options and source.
  local K = gt.load("kernels/elementwise.cu")]],

  -- trees
  ["gt.tree"] = [[
gt.tree(fn [, opts]) -> tree, a callable graph tree over fn
  Calling tree(...) runs fn(...) with kernel launches queued; a segment ends at
  a sync point (t:item(), t:tolist(), a host copy, gt.sync(), gt.cut()) or at
  the return. Each segment is a node keyed by its launches (kernels, grids,
  shapes; not scalar values, which are patched). A node warms up (eager),
  records a graph, then replays it; different continuations are children.
  opts:
    name            for messages and pictures (default: the variable assigned)
    warmup = 1      eager visits before recording (0: record on the first)
    max_recordings = 64   graphs the tree may hold
    on_limit = "eager"    past the limit: run new paths eagerly, "error", or "evict" (run it eagerly,
                          then the next call drops the least recently used recording so it records)
    copy_inputs = false   copy every tensor input into the pool first (what the call writes into one goes back after it)
    buckets = {dim =, sizes = [, pad =], narrow =, verify =}   pad inputs to a few sizes (?gt.buckets)
    warn_shapes = 8       warn when a tree sees more input shapes than that (false: never)
    key = function(...) return k end, patch = {i, ...}, verify = n   keyed calls
  Any other name, or a value of the wrong kind, raises naming the option.
  Outputs stay valid until the tree's next call; :clone() keeps one.
  local step = gt.tree(function(x) return gt.ops.relu(x) end, {warmup = 0})]],
  ["tree"] = [[
tree: a graph tree (from gt.tree).
  tree(...)            a call: warmup, record or replay per segment
  tree:stats()         counts, times, pool bytes, per node
  print(tree)          the tree drawn (tostring(tree))
  tree:dot([path]) tree:json([path]) tree:report(path)   pictures
  tree:advise()        launch-bound? how many shapes? what breaks graphs?
  tree:trim([keep]) tree:floor([iters]) tree:history()
  tree:warm(calls)     record each argument list's path ahead of time, largest first
  tree:counts()        calls, recorded, warmups, replays, eager, keyed_hits (numbers, cheap)
  tree.name, tree.where (file:line of gt.tree)]],
  ["tree:call"] = [[
tree(...) -> fn(...)'s results
  Runs the tree's function with launches queued and graphed per segment; see
  gt.help("gt.tree"). Returned tensors live in the tree's pool until its next call.]],
  ["tree:stats"] = [[
tree:stats() -> a plain table
  { name, where, calls, nodes, recorded, warmups, replays, eager, updates,
    fused (calls whose replayed path of several segments launched as one graph),
    skipped, skips = {[reason] = visits}, depth (levels), roots = {ids},
    pool = {reserved, in_use, high_water},                       -- bytes
    node = {[id] = {id, parent, depth, children, label, kernels, visits,
      warmups, recorded (bool), records, replays, updates, eager, skip (reason|nil),
      reusable_bytes (what freeing each tensor after its last use would save),
      record_us, instantiate_us, replay_cpu_us (mean), gpu_us (mean),
      planned_bytes, checkpoint_bytes, last_call,
      shapes ("x 8x256 f32 -> 8x256 f32": inputs -> the call's results, or the last tensor made at a cut),
      cut ("model.lua:31 item" | "gt.cut at model.lua:12" | "return": the first site),
      cuts ({{site = "model.lua:31", reason = "item", cut = "model.lua:31 item", count}}: every site),
      why ("first path" | "new branch after [3]" | "new shape 16x256 (sibling [4] has 8x256)"
           | "static W moved (linear_f32, sibling [0])"),
      shared, shared_with (a new branch: its leading launches that sibling shared_with
           begins with too, a host branch without gt.cut(); 0 and nil: none)}} }    -- ids from 0
  gpu_us: from a node's first 8 launches and one in 256 (every launch
  with gt.profile(true)).  A keyed tree also has
  keyed = {hits, misses, verified, refused = {[reason] = count}, fused}
  (fused: hits that launched a path of several segments as one graph).]],
  ["tree:advise"] = [[
tree:advise([{measure = true}]) -> { findings = {{q, title, text, advice, level}}, launch, shapes, breaks }
  Answers, from this run's numbers: (1) launch-bound? host µs to issue a step
  eagerly and by replay vs the device's µs per step, and the speed-up; (2) how
  many shapes? sizes per input dim and a bucket set with its padding; (3) what
  breaks the graphs? each cut site with its visits (gt.cond where an item()
  picks a branch), non-graphable kernels, what gt.scope would give back.
  The device time comes from the run's own launches (a node's first 8 graph
  launches and one in 256 are timed: stats().node[id].gpu_us); {measure =
  true} relaunches the last call's graphs to time them and their launch
  (gtlua --advise does at exit).  gtlua --advise model.lua prints this for
  every tree at exit; tree:report() shows it first.]],
  ["tree:warm"] = [[
tree:warm(calls) -> { paths, settled, calls, seconds }
  Records the path of each argument list in calls ahead of time, in the
  tree's one pool, the largest first (its buckets' padded sizes multiplied,
  then added; without buckets, its tensors' elements): each is called until
  it replays (a keyed tree: until a keyed hit) or warmup + 5 times; settled
  counts those that did.  The calls are calls: give inputs whose writes land
  nowhere that matters (pad slots).
  step:warm{ {4, 16}, {4, 0}, {1, 16}, {1, 0} }]],
  ["tree:trim"] = [[
tree:trim([keep = 0]) -> graphs dropped
  Frees the graphs (and their pool memory) of all but the keep most recently
  used recordings; a dropped node records again when it is visited.  The
  last call's outputs stay valid if every segment of its path replayed (or
  recorded) and keeps its graph; otherwise they read stale from then on
  (:clone() what you need first).  Inside another tree's call the memory
  goes once that call's launches queued before the trim have run (they read
  what they would have read in eager code).]],
  ["tree:history"] = [[
tree:history() -> the last calls (up to 1024), oldest first
  { call, warmups, records, replays, eager, updates, cpu_us, in_use, reserved }
  per call: its visits of each kind, host µs from start to end, pool bytes
  after it. A keyed hit (its body not run) past the first 64 calls is timed
  one in 16, the others have cpu_us nil. tree:report() charts them over calls.]],
  ["tree:floor"] = [[
tree:floor([iters = 100] [, sync_each = true] [, patch = false] [, calls]) -> cpu_us, step_us, patches
  The last call's graphs launched back to back from C with no tree logic: the
  lowest cost a call could have (a benchmark floor).  patch: each step first
  repeats the kernel-node patches the last call made (a scalar such as a
  decode position, or an input's address): what a step at a new value pays;
  patches: how many a step repeats (0 without patch).  calls: a list of
  argument lists, e.g. {{x, 1}, {x, 2}}; each is called once, and the steps
  then launch their paths in turn (each with its own patches and values), as
  a model that cycles through them would (they are calls: what the tree's
  calls before returned goes stale).  The steps change no value anyone can
  read: what the graphs write (the last call's tensors, inputs and static
  buffers its kernels write) is copied aside first and put back after, in
  device memory (else host memory) of that size.  Not inside a tree call.]],
  ["tree:dot"] = [[
tree:dot([path]) -> Graphviz text (written to path when given)
  One box per node (label, visits, replays, warmups, state, planned bytes),
  filled by replays; edges parent -> child.  dot -Tsvg tree.dot > tree.svg]],
  ["tree:json"] = [[
tree:json([path]) -> JSON text of tree:stats() (written to path when given)
  Same field names as stats(); "node" is an array ordered by id (0-based ids,
  as JSON indices are); nil values are null. Fields: lua/gt/report.lua.]],
  ["tree:report"] = [[
tree:report(path) -> HTML text, written to path
  One self-contained page (no network, no scripts): the tree as SVG (colour
  by replays, border by state, hover for numbers), charts of visits, host and
  device µs and pool memory per node and over calls, and a table of nodes.
  gtlua --report=out.html model.lua writes one for every tree at exit.]],
  ["tree:tostring"] = [[
print(tree), tostring(tree) -> the tree drawn for a terminal
  A header (calls, nodes, recorded, pool), then one line per node: id, label,
  visits, replays, warmups, planned bytes and its state (graph, warmup,
  eager, trimmed); colour only when stdout is a terminal (NO_COLOR turns it off).]],

  -- device-side branches
  ["gt.cond"] = [[
gt.cond(p, then_fn [, else_fn]) -> the taken body's results: then_fn() when p is nonzero, else else_fn()
  p: a one-element tensor (f32, i32, i64 or u8) that kernels write. In a tree
  call both bodies are recorded once into a conditional node of the same
  graph: no cut, no host sync, the device picks the body at replay. Outside a
  tree (and in warmups) p is read on the host and one body runs: the same
  results. Bodies launch kernels and may nest conds and loops, but must not
  read the device on the host (item, tolist, host copies, gt.cut, gt.sync
  raise). With both bodies, each returns the same number of tensors with the
  same shapes and dtypes (else an error naming what differs), and gt.cond
  returns the taken one's, as torch.cond does: new tensors (in a tree both
  bodies copy theirs into the same results). With one body nothing is
  returned (values raise): write into tensors made before the cond
  (y:copy(...)); a tensor made in a body is only valid after it if both ways
  write it. An error in a body that a pcall catches closes the cond: the call
  goes on. Without conditional nodes (a driver before CUDA 12.4, or 12.8
  for an else body; GTLUA_NO_COND=1) a tree call branches on the host: a
  sync, and a child node per way (one warning says so). See gt.cond_nodes().]],
  ["gt.loop"] = [[
gt.loop(p, body_fn [, {max = n}]): body_fn() while p is nonzero, at most n times
  p as for gt.cond, checked before each pass. The body must write p (a kernel
  that computes the condition) unless max is given; a body that never writes
  it raises. In a tree call the loop is one conditional WHILE node, the pass
  count decided on the device. Outside a tree p is read (a sync) per pass.
  The body returns nothing (values raise): it writes tensors made before the
  loop (z:copy(ops.add(z, 1))). An error in the body that a pcall catches
  ends the loop at that pass, as eager code's loop ends.]],
  ["gt.cond_nodes"] = [[
gt.cond_nodes() -> ok [, why]
  true when tree calls record gt.cond and gt.loop as conditional graph nodes
  (cpu: always; cuda: a driver with CUDA 12.8 conditional nodes); else false
  and why (they then branch on the host).]],

  -- control and information
  ["gt.cut"] = [[
gt.cut(): ends the current segment of a tree call (no-op outside one)
  The next launches form a child node: an explicit place for a host branch.]],
  ["gt.compile_counts"] = [[
gt.compile_counts() -> compiles, cache_hits (nil on the cpu backend)
  NVRTC compilations and CUBIN disk-cache hits of this process: a second run
  of a script compiles nothing.]],
  ["gt.clock"] = [[
gt.clock() -> seconds of a monotonic wall clock (for timing steps)]],
  ["gt.sync"] = [[
gt.sync(): ends the segment in a tree call, then waits for the device]],
  ["gt.profile"] = [[
gt.profile(on) -> the previous setting
  On: every graph launch of a tree is timed and waited for (CUDA events on
  cuda, wall time on cpu), filling stats().node[id].gpu_us (mean µs).  Off,
  a node's first 8 launches and one in 256 are timed by events read later,
  without waiting (gt.profile(true) also times eager and planned visits).]],
  ["gt.backend"] = [[
gt.backend() -> "cpu" | "cuda"
  Chosen by --backend=cpu|cuda|auto or GTLUA_BACKEND; auto takes cuda when a
  device is there.]],
  ["gt.device"] = [[
gt.device() -> { backend, name, cc, sms, memory, free, driver, nvrtc, compiler }
  free: the device's free bytes now (cuda; 0 on cpu): CUDA graphs' own memory
  shows only there (examples/serve.lua reports a tree's by it).]],
  ["gt.memory"] = [[
gt.memory() -> bytes of ordinary (non-tree) device memory in use]],
  ["gt.transfers"] = [[
gt.transfers() -> { reads, writes, syncs }: the host's transfers since the start
  reads   device -> host: item, tolist, a gt.cond/gt.loop p read on the host
  writes  host -> device: gt.from, t:copy(table)
  syncs   gt.sync calls
A replayed step that the device decides (gt.cond, gt.loop) adds none of them:
count a loop's with two calls around it.]],
  ["gt.help"] = [[
gt.help(x) -> the documentation text (also printed)
  x: an API value (gt.help(gt.tree), gt.help(t) for a tensor) or a name
  ("gt.zeros", "tensor:narrow", "ops.linear", "tree:stats"); no x: every name.
  In the REPL: ?name.]],

  -- ops
  ["gt.ops"] = [[
gt.ops: tensor operations over the kernel library (kernels/*.cu); each
allocates its output. f32, or f16 / bf16 (kernels/half.cu: f32 arithmetic,
one rounding per result; every tensor of a call in one dtype; not axpby).
"rows" are the last dimension.
  linear matmul transpose add mul axpby copy relu gelu tanh sigmoid softmax
  layernorm rmsnorm sum max argmax embedding]],
  ["gt.ops.linear"] = [[
gt.ops.linear(x, W [, b] [, act]) -> act(x @ W + b)
  x {..., K} (leading dims are rows), W {K, N} = {in, out}, b {N} or nil,
  act "relu" | "gelu" | "tanh" | nil. The result is {..., N}.
  W is {in, out} (x @ W), not PyTorch's nn.Linear {out, in} (x @ W^T):
  pass a PyTorch weight through gt.ops.transpose (or W:t()), once, outside
  the step. A square weight fits either way: transpose it too.]],
  ["gt.ops.matmul"] = [[
gt.ops.matmul(a, b) -> a @ b for a {M, K}, b {K, N}]],
  ["gt.ops.transpose"] = [[
gt.ops.transpose(x) -> x^T for a 2-D f32 x {R, C}: a new {C, R} tensor
  One kernel (16x16 tiles through shared memory); in a tree it is a launch
  like any op. For PyTorch's nn.Linear weights ({out, in}):
  local W = gt.ops.transpose(torch_W):static()    -- {in, out}, as linear takes it]],
  ["gt.ops.add"] = [[
gt.ops.add(a, b) -> a + b
  b: a tensor of a's shape, a vector of a's last dimension (a bias), or a number.]],
  ["gt.ops.mul"] = [[
gt.ops.mul(a, b) -> a * b elementwise; b as for gt.ops.add]],
  ["gt.ops.axpby"] = [[
gt.ops.axpby(a, x, b, y) -> y, after y = a*x + b*y in place]],
  ["gt.ops.copy"] = [[
gt.ops.copy(dst, src) -> dst, after copying src (same shape) into it]],
  ["gt.ops.relu"] = [[
gt.ops.relu(x) -> max(x, 0)]],
  ["gt.ops.gelu"] = [[
gt.ops.gelu(x) -> gelu(x) (tanh approximation)]],
  ["gt.ops.tanh"] = [[
gt.ops.tanh(x) -> tanh(x)]],
  ["gt.ops.sigmoid"] = [[
gt.ops.sigmoid(x) -> 1 / (1 + exp(-x))]],
  ["gt.ops.softmax"] = [[
gt.ops.softmax(x) -> softmax over the last dimension]],
  ["gt.ops.layernorm"] = [[
gt.ops.layernorm(x, gamma, beta [, eps = 1e-5]) over the last dimension
  gamma, beta: vectors of the last dimension.]],
  ["gt.ops.rmsnorm"] = [[
gt.ops.rmsnorm(x, w [, eps = 1e-6]) -> x / sqrt(mean(x^2) + eps) * w over the last dimension]],
  ["gt.ops.sum"] = [[
gt.ops.sum(x) -> f32 sums per row (the last dimension dropped; {1} for a vector)
  It reduces rows, not the whole tensor: x {8, 256} -> {8}; the total of a
  matrix is gt.ops.sum(gt.ops.sum(x)):item().]],
  ["gt.ops.max"] = [[
gt.ops.max(x) -> f32 maxima per row]],
  ["gt.ops.argmax"] = [[
gt.ops.argmax(x) -> i32 per row: the 0-based index of the first maximum]],
  ["gt.ops.embedding"] = [[
gt.ops.embedding(ids, table) -> rows of table
  ids: i32 of any shape, table {V, D}; the result is {ids..., D}; an id
  outside [0, V) gives a row of zeros.]],

  -- buckets
  ["gt.buckets"] = [[
gt.buckets: sizes for gt.tree's buckets option, so few recordings serve many shapes.
  gt.tree(fn, {buckets = {dim = 1, sizes = gt.buckets.pow2(64), narrow = {1}}})
  External inputs are padded along dim to the next size (with pad, 0 by
  default: pad = -math.huge before a max), the bucket's path runs on them;
  larger than the last: eager. The body sees the padded size; gt.bucket()
  gives it the real one. Results listed in narrow (positions, or a
  function(i, t, k) -> bool) are narrowed back where they have the padded
  size; without narrow every such result is, with one warning naming them.
  verify = n: every n-th padded call also runs the body unpadded, eagerly,
  and raises naming the first result that differs.
  A list of specs pads several dims or arguments (arg = i): buckets =
  {{dim = 1, sizes = ...}, {dim = 2, sizes = ...}, narrow = {...}}.
  {count = i, sizes = {0, 8, 16}, name = "chunk"} buckets number argument i
  (a count of rows): the path is its bucket's, the body sizes its tensors
  by gt.bucket("chunk"); with key, the bucket is in the key and the count
  patched. name = s names any spec for gt.bucket(s).
  gt.buckets.pow2(max), gt.buckets.linear(step, max), gt.buckets.fit(sizes, n)]],
  ["gt.bucket"] = [[
gt.bucket([dim | name]) -> real, padded
  In a call of a tree with buckets: the real size of the call's bucketed
  inputs along dim (default: the first spec's; a name: that spec's, a count
  spec's number and its bucket) and the size they are padded
  to (the same when the call pads nothing: at a bucket's size, beyond the
  last, in verify's eager run); nil outside such a call. Plain numbers: pass
  the real size to a kernel as a scalar (patched, the path stays).
  local n = gt.bucket() or x.shape[1]   -- runs eagerly too]],
  ["gt.buckets.pow2"] = [[
gt.buckets.pow2(max) -> {1, 2, 4, ..., max}]],
  ["gt.buckets.linear"] = [[
gt.buckets.linear(step, max) -> {step, 2*step, ..., max}]],
}

-- -- Names ------------------------------------------------------------------------------

-- Prefixes people type for methods, mapped to the doc's.
local OBJECT = { t = "tensor", x = "tensor", tensor = "tensor", Tensor = "tensor", tree = "tree", Tree = "tree",
                 kernel = "kernel", Kernel = "kernel" }

local function known(name) return DOC[name] and name or nil end

-- A typed name in the doc's spelling: "Tensor.narrow" -> "tensor:narrow",
-- "ops.linear" -> "gt.ops.linear", "zeros" -> "gt.zeros", "narrow" and
-- "step:narrow" -> "tensor:narrow" (a method name that only one object has).
local function canonical(name)
  name = name:match("^%s*%??%s*(.-)%s*$"):gsub("%(.*%)$", "")
  if name == "" then return nil end
  if known(name) then return name end
  local obj, meth = name:match("^gt%.(%u%l+)[.:]([%w_]+)$")
  if not obj then obj, meth = name:match("^([%w_]+)[.:]([%w_]+)$") end
  if obj then
    if meth == "__call" then meth = "call" elseif meth == "__tostring" then meth = "tostring" end
    local lib = known("gt." .. obj .. "." .. meth)          -- "safetensors.load"
    if lib then return lib end
    if OBJECT[obj] then
      local r = known(OBJECT[obj] .. ":" .. meth)
      if r then return r end
    end
    name = meth                      -- "step:stats": a method of whatever step is
  end
  local bare = name:match("^gt%.(%u%l+)$") or name
  if OBJECT[bare] then return OBJECT[bare] end
  local r = known("gt." .. name) or known("gt.ops." .. name) or known("gt.buckets." .. name:gsub("^buckets%.", ""))
  if r then return r end
  -- a bare method name: the one entry ending in it
  local hit
  for k in pairs(DOC) do
    if k:match("[.:]" .. name:gsub("%p", "%%%0") .. "$") then
      if hit then return nil end
      hit = k
    end
  end
  return hit
end

-- The name of an API value: a function of gt, gt.ops, gt.buckets or a method
-- of tensors, trees and kernels; an object by its kind.
local function name_of(v)
  if v == gt then return "gt" end
  local mt = getmetatable(v)
  if gt.is_tensor(v) then return "tensor" end
  if type(v) == "table" or type(v) == "cdata" then
    if mt == gt.Tree then return "tree" end
    if mt == gt.Kernel then return "kernel" end
  end
  local ops, buckets = package.loaded["gt.ops"], package.loaded["gt.buckets"]
  if v == ops then return "gt.ops" end
  if v == buckets then return "gt.buckets" end
  if type(v) ~= "function" then return nil end
  local places = { { gt, "gt." }, { ops, "gt.ops." }, { buckets, "gt.buckets." }, { gt.Tensor, "tensor:" },
                   { gt.Tree, "tree:" }, { gt.Kernel, "kernel:" }, { gt.safetensors, "gt.safetensors." } }
  for _, p in ipairs(places) do
    if type(p[1]) == "table" then
      for k, f in pairs(p[1]) do
        if f == v and type(k) == "string" then
          local n = p[2] .. k
          if n == "tree:__call" then n = "tree:call" elseif n == "kernel:__call" then n = "kernel:call"
          elseif n:match(":__tostring$") then n = n:gsub("__tostring$", "tostring") end
          if DOC[n] then return n end
        end
      end
    end
  end
  return nil
end

local function names()
  local out = {}
  for k in pairs(DOC) do out[#out + 1] = k end
  sort(out)
  return out
end

local function index()
  return "documented names (gt.help(\"name\") or ?name in the REPL):\n  " .. concat(names(), "  ")
end

local function suggestions(s)
  s = s:lower():gsub("^gt%.", ""):gsub("%(.*$", "")
  local out = {}
  if s == "" then return out end
  for _, k in ipairs(names()) do
    if k:lower():find(s, 1, true) then out[#out + 1] = k end
  end
  return out
end

-- -- help -----------------------------------------------------------------------------------

--- docs.text(x) -> the doc text of x (a value or a name), or nil and a message
function M.text(x)
  if x == nil then return index() end
  local name
  if type(x) == "string" then name = canonical(x) else name = name_of(x) end
  if name then return DOC[name] end
  local what = type(x) == "string" and ("'" .. x .. "'") or tostring(x)
  local msg = "no help for " .. what
  local near = type(x) == "string" and suggestions(x) or {}
  if #near > 0 then
    while #near > 8 do near[#near] = nil end
    msg = msg .. "; try: " .. concat(near, ", ")
  end
  return nil, msg
end

--- docs.help(x) -> the text, after printing it (gt.help, the REPL's ?name)
function M.help(x)
  local text, msg = M.text(x)
  io.stdout:write(text or msg, "\n")
  return text, msg
end

--- docs.ask(text): the REPL's ?text: the doc of the value a plain name path
--- evaluates to in the globals (?step for a tree, ?gt.ops.linear), else of
--- the name as typed (?tensor:narrow, ?zeros). Nothing is called.
function M.ask(text)
  text = text:match("^%s*%??%s*(.-)%s*$")
  if text == "" then return M.help() end
  if text:match("^[%a_][%w_]*[%w_.]*$") then
    local f = loadstring("return " .. text)
    local ok, v = false, nil
    if f then ok, v = pcall(f) end
    if ok and v ~= nil and name_of(v) then return M.help(v) end
  end
  return M.help(text)
end

--- docs.names() -> every documented name, sorted
M.names = names

return M
