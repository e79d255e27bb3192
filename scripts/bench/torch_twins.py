"""torch_twins: PyTorch twins of gtlua's bench scenarios, same math and sizes, measured the same way.

    python3 scripts/bench/torch_twins.py [--quick] [--json FILE] [--budget S] [--compile-cap S] [--only NAME,...]

Scenarios (as scripts/bench/gtlua_bench.lua):
  chain     32 x relu(x @ W + b), batch 8, hidden 256
  branch    8-layer prefix, host branch (a graph break), then suffix a
            (relu(x @ W + b), layers 8..15) or suffix b (tanh(x @ W - b),
            layers 16..23), alternating a, b, a, b...
  cond      the branch scenario with its branch decided on the device: a
            one-element tensor sel (alternating 0, 1) is read with .item()
            after the prefix (a graph break in reduce-overhead), as gtlua's
            scripts/bench/cond_bench.lua does with item() (and with gt.cond)
  shapes    the chain over batch sizes 1, 2, 4, ..., 64, cycling
  grow-N    chains of N = 8, 32, 128, 512 layers (weights cycling over 32)
  decode-B  one greedy decode step of a GPT-2-small-shaped model (12 layers,
            hidden 768, 12 heads, vocab 50257, f32) with a static KV cache of
            256 positions, at batch B = 1 and 8; the position is a device
            tensor (written with index_copy_, attention over the whole cache
            with a mask), as gpt-fast does, so that graphs serve every position
Modes: eager; a hand-captured torch.cuda.CUDAGraph (for branch: one graph
for the prefix and one per suffix, replayed by host code); and
torch.compile(mode="reduce-overhead") (CUDA Graph Trees).
Figures are medians in microseconds: cpu (issue one step, no sync), step
(issue + synchronize), pipe (many steps, one synchronize, per step).

Fails soft: without torch or CUDA it prints a note, writes what it has and
exits 0.  The JSON file is rewritten after every measurement, so a run
stopped by a time limit still leaves its figures.  Compiles are capped: a
reduce-overhead compile predicted to exceed --compile-cap (from the previous
grow size) or the remaining --budget is skipped, and one that runs over is
interrupted; either is said in the output.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import signal
import statistics
import sys
import time

FULL = dict(hidden=256, batch=8, layers=32, prefix=8, suffix=8, batches=[1, 2, 4, 8, 16, 32, 64],
            grow=[8, 32, 128, 512], warm=20, reps=300, pipe=1000, min_reps=100, min_pipe=50,
            decode=dict(layers=12, hidden=768, heads=12, vocab=50257, ctx=256, batches=[1, 8]))
QUICK = dict(hidden=16, batch=4, layers=6, prefix=2, suffix=2, batches=[1, 2, 4], grow=[2, 4, 8],
             warm=2, reps=3, pipe=3, min_reps=2, min_pipe=2,
             decode=dict(layers=2, hidden=32, heads=4, vocab=97, ctx=16, batches=[1, 2]))


# -- Results -------------------------------------------------------------------

def _clean(v):
    """JSON-safe copy: NaN and infinities become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class Results:
    """Everything measured so far, saved to the JSON file after each change."""

    def __init__(self, path: str | None, quick: bool):
        self.path = path
        self.data = {"tool": "torch", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "quick": quick, "python": platform.python_version(), "device": {}, "config": {},
                     "notes": [], "scenarios": []}

    def note(self, msg: str) -> None:
        print(f"note: {msg}", flush=True)
        self.data["notes"].append(msg)
        self.save()

    def scenario(self, name: str, label: str, kernels: int, grow: int | None = None) -> dict:
        s = {"name": name, "label": label, "kernels": kernels, "modes": {}, "record": {}, "notes": []}
        if grow is not None:
            s["grow"] = grow
        self.data["scenarios"].append(s)
        return s

    def save(self) -> None:
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(_clean(self.data), f, indent=2, allow_nan=False)
            f.write("\n")
        os.replace(tmp, self.path)


# -- Time limits ---------------------------------------------------------------

class CompileTimeout(BaseException):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raises CompileTimeout in the main thread after `seconds` (SIGALRM)."""
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(signum, frame):
        raise CompileTimeout(f"over {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def main_cpu():
    """While measuring, the calling thread on cpu BENCH_MAIN_CPU alone (run.sh:
    the quickest of the cores the process is pinned to, as gtlua_bench.lua's
    main thread); its other threads and the compile workers keep them all."""
    cpu, saved = os.environ.get("BENCH_MAIN_CPU"), None
    if cpu and cpu.isdigit() and hasattr(os, "sched_setaffinity"):
        try:
            saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {int(cpu)})
        except OSError:
            saved = None
    try:
        yield
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)


def reps_for(n: int, least: int, kernels: int) -> int:
    """Fewer reps for long chains, as gtlua_bench.lua does, but at least `least`
    (min_reps 100: with 20, grow-512's reduce-overhead median was of 20 steps,
    and it moved between 140 and 530 us from one run to the next)."""
    return max(least, min(n, n * 32 // max(kernels, 1)))


def make_decoder(torch, d: dict, B: int, dev: str):
    """The decode twin of examples/gpt.lua: a GPT-2-shaped decoder whose step
    (ids [B] int64, pos [1] int64) -> (next tokens [B], logits [B, V]) writes
    this position's K and V into static caches (module buffers) and attends
    over the whole cache with a mask (positions <= pos)."""
    nn, F = torch.nn, torch.nn.functional
    D, H, V, T, L = d["hidden"], d["heads"], d["vocab"], d["ctx"], d["layers"]
    Dh = D // H
    scale = 1 / math.sqrt(Dh)

    def w(*shape, s=0.0, shift=0.0):
        t = torch.randn(*shape, device=dev) * s + shift if s else torch.full(shape, shift, device=dev)
        return nn.Parameter(t, requires_grad=False)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            std, proj, fc = 1 / math.sqrt(D), 1 / math.sqrt(2 * L * D), 1 / math.sqrt(8 * L * D)
            self.ln1_g, self.ln1_b = w(D, shift=1.0), w(D)
            self.wqkv, self.bqkv = w(D, 3 * D, s=std), w(3 * D)
            self.wproj, self.bproj = w(D, D, s=proj), w(D)
            self.ln2_g, self.ln2_b = w(D, shift=1.0), w(D)
            self.wfc, self.bfc = w(D, 4 * D, s=std), w(4 * D)
            self.wout, self.bout = w(4 * D, D, s=fc), w(D)
            self.register_buffer("kc", torch.zeros(B, T, D, device=dev))
            self.register_buffer("vc", torch.zeros(B, T, D, device=dev))

        def forward(self, x, pos, mask):
            h = F.layer_norm(x, (D,), self.ln1_g, self.ln1_b, 1e-5)
            q, k, v = (h @ self.wqkv + self.bqkv).split(D, dim=-1)
            self.kc.index_copy_(1, pos, k.view(B, 1, D))
            self.vc.index_copy_(1, pos, v.view(B, 1, D))
            kh = self.kc.view(B, T, H, Dh).transpose(1, 2)
            vh = self.vc.view(B, T, H, Dh).transpose(1, 2)
            att = (q.view(B, H, 1, Dh) @ kh.transpose(-2, -1)) * scale
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            x = x + (att @ vh).reshape(B, D) @ self.wproj + self.bproj
            h = F.layer_norm(x, (D,), self.ln2_g, self.ln2_b, 1e-5)
            return x + F.gelu(h @ self.wfc + self.bfc, approximate="tanh") @ self.wout + self.bout

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = w(V, D, s=0.02), w(T, D, s=0.01)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf_g, self.lnf_b = w(D, shift=1.0), w(D)
            self.register_buffer("positions", torch.arange(T, device=dev))

        def forward(self, ids, pos):
            mask = self.positions <= pos
            x = self.wte[ids] + self.wpe[pos]
            for blk in self.blocks:
                x = blk(x, pos, mask)
            logits = F.layer_norm(x, (D,), self.lnf_g, self.lnf_b, 1e-5) @ self.wte.t()
            return logits.argmax(-1), logits

    torch.manual_seed(B)
    model = GPT().to(dev).eval()
    mark = getattr(torch._dynamo, "mark_static_address", None)
    if mark is not None:                      # the caches are mutated in place: keep them static inputs
        for blk in model.blocks:
            mark(blk.kc)
            mark(blk.vc)
    return model


# -- The bench -----------------------------------------------------------------

class Twins:
    def __init__(self, torch, cfg: dict, dev: str, res: Results, budget: float, cap: float):
        self.torch, self.cfg, self.dev, self.res = torch, cfg, dev, res
        self.deadline = time.perf_counter() + budget
        self.cap = cap
        self.cuda = dev == "cuda"
        self.compiles = []            # (kernels, seconds) of each grow compile so far
        self._make_model()

    # the model: weights as torch_trees.py (W = randn / sqrt(H), b = randn * 0.01)
    def _make_model(self):
        torch, c = self.torch, self.cfg
        H, L = c["hidden"], max(c["layers"], c["prefix"] + 2 * c["suffix"])
        torch.manual_seed(0)
        self.Ws = [torch.randn(H, H, device=self.dev) / H ** 0.5 for _ in range(L)]
        self.Bs = [torch.randn(H, device=self.dev) * 0.01 for _ in range(L)]
        self.x = torch.randn(c["batch"], H, device=self.dev)
        self.xs = [torch.randn(b, H, device=self.dev) for b in c["batches"]]

    def chain_fn(self, n: int):
        torch, Ws, Bs, L = self.torch, self.Ws, self.Bs, self.cfg["layers"]

        def chain(x):
            for i in range(n):
                x = torch.relu(x @ Ws[i % L] + Bs[i % L])
            return x
        return chain

    def stack_fn(self, first: int, count: int, act: str):
        torch, Ws, Bs = self.torch, self.Ws, self.Bs

        def stack(x):
            for k in range(first, first + count):
                x = torch.relu(x @ Ws[k] + Bs[k]) if act == "relu" else torch.tanh(x @ Ws[k] - Bs[k])
            return x
        return stack

    def branch_fns(self):
        c = self.cfg
        P, S = c["prefix"], c["suffix"]
        prefix, sa, sb = self.stack_fn(0, P, "relu"), self.stack_fn(P, S, "relu"), self.stack_fn(P + S, S, "tanh")
        torch = self.torch

        def branchy(x, route: int):
            h = prefix(x)
            torch._dynamo.graph_break()
            if route % 2 == 0:
                return sa(h)
            return sb(h)
        return prefix, sa, sb, branchy

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    # -- measuring --

    def measure(self, step, kernels: int) -> dict:
        with main_cpu():
            return self._measure(step, kernels)

    def _measure(self, step, kernels: int) -> dict:
        c = self.cfg
        reps, pipe = reps_for(c["reps"], c["min_reps"], kernels), reps_for(c["pipe"], c["min_pipe"], kernels)
        clock = time.perf_counter
        for i in range(c["warm"]):
            step(i)
        self.sync()
        cpu, full = [], []
        for i in range(reps):
            t0 = clock()
            step(i)
            t1 = clock()
            self.sync()
            t2 = clock()
            cpu.append((t1 - t0) * 1e6)
            full.append((t2 - t0) * 1e6)
        t0 = clock()
        for i in range(pipe):
            step(i)
        self.sync()
        p = (clock() - t0) * 1e6 / pipe
        return {"cpu_us": statistics.median(cpu), "step_us": statistics.median(full), "pipe_us": p,
                "reps": reps, "pipe_reps": pipe}

    def row(self, s: dict, mode: str, step) -> None:
        m = self.measure(step, s["kernels"])
        s["modes"][mode] = m
        self.res.save()
        print(f"{s['name']:>10s} {mode:16s} cpu {m['cpu_us']:9.1f}  step {m['step_us']:9.1f}  "
              f"pipe {m['pipe_us']:9.1f}", flush=True)

    def skip(self, s: dict, mode: str, why: str) -> None:
        s["modes"][mode] = {"skipped": why}
        s["notes"].append(f"{mode} skipped: {why}")
        self.res.note(f"{s['name']} {mode} skipped: {why}")

    # -- hand-captured graphs --

    def capture(self, fn, *args, pool=None):
        """(graph, output, capture+instantiate µs) of fn(*args) on static args."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(*args)
        torch.cuda.current_stream().wait_stream(side)
        self.sync()
        g = torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        with torch.cuda.graph(g, pool=pool):
            out = fn(*args)
        self.sync()
        return g, out, (time.perf_counter() - t0) * 1e6

    # -- reduce-overhead --

    def first_calls(self, s: dict, calls) -> bool:
        """Runs the first calls (compile + warmup + record) under the caps; False when skipped."""
        k = s["kernels"]
        room = self.left() - 10
        if room < 5:
            self.skip(s, "reduce_overhead", "time budget spent")
            return False
        limit = min(self.cap, room)
        guess = self.predict(k) if s.get("grow") else None
        if guess is not None and guess > limit:
            done = ", ".join(f"{t:.1f} s at {n}" for n, t in self.compiles[-2:])
            self.skip(s, "reduce_overhead", f"compile predicted to take {guess:.0f} s (from {done} kernels), "
                      f"over the {limit:.0f} s cap")
            return False
        t0 = time.perf_counter()
        try:
            with time_limit(limit):
                calls()
                self.sync()
        except (Exception, CompileTimeout) as e:  # dynamo may wrap the timeout in its own error
            took = time.perf_counter() - t0
            why = (f"compile interrupted after {took:.0f} s (cap {limit:.0f} s)" if took >= limit - 1
                   else f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            self.skip(s, "reduce_overhead", why)
            self.torch._dynamo.reset()
            return False
        took = time.perf_counter() - t0
        s["record"]["reduce_overhead_first_s"] = took
        if s.get("grow"):
            self.compiles.append((k, took))
        print(f"{s['name']:>10s} reduce-overhead first calls (compile + warmup + record): {took:.1f} s", flush=True)
        return True

    def predict(self, k: int) -> float | None:
        """Compile seconds for k kernels: a line through the last two grow compiles
        (proportional from one), never below the last."""
        if not self.compiles:
            return None
        k1, t1 = self.compiles[-1]
        if len(self.compiles) == 1:
            return t1 * k / k1
        k0, t0 = self.compiles[-2]
        slope = max((t1 - t0) / (k1 - k0), 0.0) if k1 != k0 else t1 / k1
        return max(t1, t1 + slope * (k - k1))

    def compiled(self, fn):
        torch = self.torch
        torch._dynamo.reset()
        return torch.compile(fn, mode="reduce-overhead", dynamic=False)

    # -- scenarios --

    def chain_like(self, s: dict, fn) -> None:
        x = self.x
        self.row(s, "eager", lambda i: fn(x))
        if self.cuda:
            static_in = x.clone()
            g, _, us = self.capture(fn, static_in)
            s["record"]["cudagraph_capture_us"] = us
            self.row(s, "cudagraph", lambda i: g.replay())
            del g
        else:
            self.skip(s, "cudagraph", "needs CUDA")
        cf = self.compiled(fn)
        if self.first_calls(s, lambda: [cf(x) for _ in range(3)]):
            self.row(s, "reduce_overhead", lambda i: cf(x))

    def chain(self) -> None:
        c = self.cfg
        s = self.res.scenario("chain", f"{c['layers']} x linear+relu, batch {c['batch']}, hidden {c['hidden']}",
                              c["layers"])
        self.chain_like(s, self.chain_fn(c["layers"]))

    def grow(self, n: int) -> None:
        s = self.res.scenario(f"grow-{n}", f"chain of {n} linear+relu layers", n, grow=n)
        self.chain_like(s, self.chain_fn(n))

    def branch(self) -> None:
        c, x = self.cfg, self.x
        s = self.res.scenario("branch", f"{c['prefix']}-layer prefix, host branch, one of two {c['suffix']}-layer "
                              "suffixes, alternating", c["prefix"] + c["suffix"])
        prefix, sa, sb, branchy = self.branch_fns()
        self.row(s, "eager", lambda i: branchy(x, i % 2))
        if self.cuda:
            pool = self.torch.cuda.graph_pool_handle()
            gp, h, u1 = self.capture(prefix, x.clone(), pool=pool)
            ga, _, u2 = self.capture(sa, h, pool=pool)
            gb, _, u3 = self.capture(sb, h, pool=pool)
            s["record"]["cudagraph_capture_us"] = u1 + u2 + u3

            def replay(i):
                gp.replay()
                (ga if i % 2 == 0 else gb).replay()
            self.row(s, "cudagraph", replay)
        else:
            self.skip(s, "cudagraph", "needs CUDA")
        cf = self.compiled(branchy)
        if self.first_calls(s, lambda: [cf(x, i % 2) for i in range(6)]):
            self.row(s, "reduce_overhead", lambda i: cf(x, i % 2))

    def cond(self) -> None:
        """cond: branch with the route read from a device tensor (.item(): a sync and a graph break)."""
        c, x, torch = self.cfg, self.x, self.torch
        s = self.res.scenario("cond", f"{c['prefix']}-layer prefix, .item() of a device flag picks one of two "
                              f"{c['suffix']}-layer suffixes, alternating", c["prefix"] + c["suffix"])
        P, S = c["prefix"], c["suffix"]
        prefix, sa, sb = self.stack_fn(0, P, "relu"), self.stack_fn(P, S, "relu"), self.stack_fn(P + S, S, "tanh")
        sels = [torch.tensor([k], device=self.dev, dtype=torch.int32) for k in (0, 1)]

        def condy(x, sel):
            h = prefix(x)
            if sel.item() != 0:              # a host sync; under torch.compile a graph break
                return sb(h)
            return sa(h)
        self.row(s, "eager", lambda i: condy(x, sels[i % 2]))
        cf = self.compiled(condy)
        if self.first_calls(s, lambda: [cf(x, sels[i % 2]) for i in range(6)]):
            self.row(s, "reduce_overhead", lambda i: cf(x, sels[i % 2]))

    def shapes(self) -> None:
        c, xs = self.cfg, self.xs
        n = len(xs)
        s = self.res.scenario("shapes", f"the chain over batch sizes {','.join(map(str, c['batches']))}, cycling",
                              c["layers"])
        fn = self.chain_fn(c["layers"])
        self.row(s, "eager", lambda i: fn(xs[i % n]))
        if self.cuda:
            pool = self.torch.cuda.graph_pool_handle()
            caps = [self.capture(fn, xi, pool=pool) for xi in xs]
            s["record"]["cudagraph_capture_us"] = statistics.median(u for _, _, u in caps)
            graphs = [g for g, _, _ in caps]
            self.row(s, "cudagraph", lambda i: graphs[i % n].replay())
        else:
            self.skip(s, "cudagraph", "needs CUDA")
        cf = self.compiled(fn)
        per_size = {}
        reserved0 = self.torch.cuda.memory_reserved() if self.cuda else 0

        def calls():
            for b, xi in zip(c["batches"], xs):
                t0 = time.perf_counter()
                for _ in range(3):
                    cf(xi)
                self.sync()
                per_size[str(b)] = time.perf_counter() - t0
        if self.first_calls(s, calls):
            s["record"]["reduce_overhead_first_s_per_size"] = per_size
            if self.cuda:
                s["record"]["reduce_overhead_reserved_growth_mib"] = \
                    (self.torch.cuda.memory_reserved() - reserved0) / 2 ** 20
            self.row(s, "reduce_overhead", lambda i: cf(xs[i % n]))

    def decode(self, B: int) -> None:
        """decode-B: the GPT decode step at batch B, the position cycling over the cache."""
        torch, d = self.torch, self.cfg["decode"]
        T = d["ctx"]
        kernels = d["layers"] * 5 + 3            # gtlua's kernels per step (examples/gpt.lua's kernels_per_step)
        s = self.res.scenario(f"decode-{B}", f"GPT decode step ({d['layers']} layers, hidden {d['hidden']}, "
                              f"vocab {d['vocab']}, KV cache {T}), batch {B}", kernels)
        s["batch"] = B
        with torch.no_grad():
            model = make_decoder(torch, d, B, self.dev)
            g = torch.Generator().manual_seed(B)
            ids = torch.randint(0, d["vocab"] - 1, (B,), generator=g).to(self.dev)
            poss = [torch.tensor([p], device=self.dev) for p in range(T)]
            self.row(s, "eager", lambda i: model(ids, poss[i % T]))
            if self.cuda:
                static_pos = poss[0].clone()
                gr, _, us = self.capture(model, ids, static_pos)
                s["record"]["cudagraph_capture_us"] = us

                def replay(i):
                    static_pos.copy_(poss[i % T])
                    gr.replay()
                self.row(s, "cudagraph", replay)
                del gr
            else:
                self.skip(s, "cudagraph", "needs CUDA")
            cf = self.compiled(model)
            if self.first_calls(s, lambda: [cf(ids, poss[i]) for i in range(3)]):
                self.row(s, "reduce_overhead", lambda i: cf(ids, poss[i % T]))
            del model, cf
        if self.cuda:
            torch.cuda.empty_cache()

    def run(self, only: str | None = None) -> None:
        steps = [("chain", self.chain), ("branch", self.branch), ("cond", self.cond), ("shapes", self.shapes)]
        steps += [(f"grow-{n}", (lambda n=n: self.grow(n))) for n in self.cfg["grow"]]
        steps += [(f"decode-{b}", (lambda b=b: self.decode(b))) for b in self.cfg["decode"]["batches"]]
        if only:
            words = only.split(",")
            steps = [(n, f) for n, f in steps
                     if any(n == w or n.startswith(w + "-") or n.startswith(w + "+") for w in words)]
        for name, fn in steps:
            if self.left() < 5:
                self.res.note(f"{name} not run: time budget spent")
                continue
            t0 = time.perf_counter()
            try:
                fn()
            except CompileTimeout:
                self.res.note(f"{name} interrupted by the compile cap outside a compile")
            except Exception as e:  # keep going: one broken mode must not lose the others
                self.res.note(f"{name} failed: {type(e).__name__}: {e}")
            print(f"torch twins: {name} done in {time.perf_counter() - t0:.1f} s", flush=True)


# -- Main ----------------------------------------------------------------------

def device_info(torch, dev: str) -> dict:
    d = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": dev,
         "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}
    if dev == "cuda":
        d["name"] = torch.cuda.get_device_name()
        cc = torch.cuda.get_device_capability()
        d["cc"] = f"{cc[0]}.{cc[1]}"
        d["cudnn"] = torch.backends.cudnn.version()
    else:
        d["name"] = platform.processor() or platform.machine()
    return d


def print_table(res: Results) -> None:
    print()
    print(f"{'scenario':12s} {'mode':16s} {'cpu_us':>9s} {'step_us':>9s} {'pipe_us':>9s}")
    for s in res.data["scenarios"]:
        for mode in ("eager", "cudagraph", "reduce_overhead"):
            m = s["modes"].get(mode)
            if m is None:
                continue
            if "skipped" in m:
                print(f"{s['name']:12s} {mode:16s} skipped: {m['skipped']}")
            else:
                print(f"{s['name']:12s} {mode:16s} {m['cpu_us']:9.1f} {m['step_us']:9.1f} {m['pipe_us']:9.1f}")
    for n in res.data["notes"]:
        print("note:", n)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI sizes: few reps, small models")
    p.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    p.add_argument("--budget", type=float, default=330, help="seconds for the whole run (default 330)")
    p.add_argument("--compile-cap", type=float, default=120,
                   help="seconds for one reduce-overhead compile (default 120)")
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (gtlua computes in plain f32)")
    p.add_argument("--only", metavar="NAME,...", help="run only these scenarios (e.g. decode, chain,grow)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: only to test this script without a GPU (no CUDA graphs)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    res = Results(args.json, args.quick)
    res.save()

    def stop(signum, frame):
        res.note(f"stopped by signal {signum} (time limit?): the figures above are all there is")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    try:
        import torch
        import torch._dynamo
    except Exception as e:
        res.note(f"no PyTorch here ({type(e).__name__}: {e}); nothing measured")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        res.note("PyTorch has no CUDA device here; nothing measured")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    cfg = QUICK if args.quick else FULL
    res.data["device"] = device_info(torch, args.device)
    res.data["config"] = dict(cfg, budget_s=args.budget, compile_cap_s=args.compile_cap)
    res.save()
    print(f"torch {torch.__version__} on {res.data['device']['name']}", flush=True)
    try:
        Twins(torch, cfg, args.device, res, args.budget, args.compile_cap).run(args.only)
    except Exception as e:
        res.note(f"stopped: {type(e).__name__}: {e}")
    print_table(res)
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
