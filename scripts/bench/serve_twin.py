"""serve_twin: the PyTorch twin of examples/serve.lua: the same seeded workload, the same
scheduler (continuous batching, chunked prefill, a paged KV cache with preemption by
recompute), a GPT-2-shaped model in PyTorch over a paged cache, run eagerly and with
torch.compile(mode="reduce-overhead") on padded sizes; the same JSON metrics.

    python3 scripts/bench/serve_twin.py [--tiny] [--requests 256] [--rate 40] [--prompt 32:256]
        [--output 32:256] [--seed 1] [--trace FILE] [--decode 0,1,2,4,8,16,24,32] [--chunk 0,16,32,64]
        [--context 256,512,1024] [--budget N] [--block 16] [--blocks 2048] [--clock wall|steps] [--dt 0.01]
        [--modes eager,reduce_overhead] [--warm] [--dtype f32|bf16|f16] [--json FILE] [--dry]

The workload and the scheduler are examples/serve.lua's, line for line (workload(),
pick_decodes(), pick_chunk(), append()); the end token is ignored (a request ends at its
output length, as serve.lua --ignore-eot), so with other weights the twin runs the same
batches on the steps clock.  A step's rows are padded as gtlua pads them: decodes to the
next --decode size, the chunk to the next --chunk size; attention gathers each row's keys
through the block table up to the step's longest context padded to the next --context
size (the one shape PyTorch adds: its attention is dense over those positions, masked).
Pad rows write their K and V to a trash slot and attend to position 0; their outputs are
ignored.  reduce-overhead compiles with dynamic shapes and at least 2 rows of each kind (no
size 0 or 1, which dynamo specializes: one compile serves every size; CUDA graph trees
record a graph per padded shape); --warm runs every padded shape first.
Figures per mode: output tokens/s, requests/s, TTFT and TPOT p50/p90/p99, step latency
p50/p99, steps that met a new padded shape and their latency.  Fails soft without torch or
CUDA: a note in the JSON, exit 0.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

TINY = dict(layers=2, hidden=32, heads=4, vocab=97, ctx=64, eot=96)
FULL = dict(layers=12, hidden=768, heads=12, vocab=50257, ctx=1024, eot=50256)


# -- The workload (examples/serve.lua's workload()) ------------------------------------

def rng(seed: int):
    """MINSTD: exact in doubles, so Lua and Python draw the same numbers."""
    x = seed % 2147483646 + 1

    def nxt() -> float:
        nonlocal x
        x = (x * 48271) % 2147483647
        return x / 2147483647
    return nxt


def rng_range(s: str):
    a, b = s.split(":")
    return int(a), int(b)


def workload(o, cfg: dict) -> list:
    u = rng(o.seed)
    pmin, pmax = rng_range(o.prompt)
    omin, omax = rng_range(o.output)
    reqs = []

    def tokens(n):
        p = []
        for _ in range(n):
            i = math.floor(u() * (cfg["vocab"] - 1))
            p.append(0 if i == cfg["eot"] else i)
        return p

    def add(t, P, O):
        P = max(1, min(P, cfg["ctx"] - 1))
        O = max(1, min(O, cfg["ctx"] - P))
        reqs.append(dict(id=len(reqs) + 1, arrival=t, prompt=tokens(P), max_out=O))

    if o.trace:
        with open(o.trace) as f:
            for line in f:
                w = line.split()
                if len(w) >= 3 and not line.lstrip().startswith("#"):
                    add(float(w[0]), int(w[1]), int(w[2]))
        return reqs
    t = 0.0
    for _ in range(o.requests):
        t = t - math.log(1 - u()) / o.rate
        P = pmin + math.floor(u() * (pmax - pmin + 1))
        O = omin + math.floor(u() * (omax - omin + 1))
        add(t, P, O)
    return reqs


def fit(sizes, n):
    for s in sizes:
        if s >= n:
            return s
    return None


# -- The KV blocks and the scheduler (examples/serve.lua's) --------------------------------

class Cache:
    def __init__(self, blocks: int, bs: int, seqs: int, nbt: int):
        self.free = list(range(blocks - 1, -1, -1))
        self.rows = list(range(seqs - 1, -1, -1))
        self.bs, self.nbt = bs, nbt
        self.btab = [[0] * nbt for _ in range(seqs)]

    def need(self, r, upto):
        return math.ceil(upto / self.bs) - len(r["blocks"])

    def grow(self, r, upto):
        for _ in range(self.need(r, upto)):
            b = self.free.pop()
            r["blocks"].append(b)
            self.btab[r["row"]][len(r["blocks"]) - 1] = b

    def release(self, r):
        while r["blocks"]:
            self.free.append(r["blocks"].pop())
        if r["row"] is not None:
            self.rows.append(r["row"])
            r["row"] = None

    def slot_of(self, r, p):
        return r["blocks"][p // self.bs] * self.bs + p % self.bs


class Sched:
    def __init__(self, o, cache: Cache, reqs: list):
        self.cache, self.running, self.waiting = cache, [], []
        self.dsizes, self.csizes = o.dsizes, o.csizes
        self.cmax, self.budget = o.csizes[-1], o.budget
        self.max_running = min(o.dsizes[-1], o.seqs)
        self.steps = self.preemptions = self.done = 0
        for r in reqs:
            r.update(tokens=list(r["prompt"]), out=[], blocks=[], computed=0, preempted=0, row=None,
                     first_t=None, finish_t=None)
            self.waiting.append(r)

    def preempt(self):
        v = self.running.pop()
        self.cache.release(v)
        v["computed"] = 0
        v["preempted"] += 1
        self.waiting.insert(0, v)
        self.preemptions += 1
        return v

    def pick_decodes(self):
        dec, c, i = [], self.cache, 0
        while i < len(self.running):
            r = self.running[i]
            if r["computed"] == len(r["tokens"]) - 1:
                while c.need(r, r["computed"] + 1) > len(c.free):
                    if self.preempt() is r:
                        r = None
                        break
                if r is not None:
                    c.grow(r, r["computed"] + 1)
                    dec.append(r)
            if r is not None and i < len(self.running) and self.running[i] is r:
                i += 1
        return dec

    def pick_chunk(self, nd: int, now: float):
        c, pre = self.cache, None
        for r in self.running:
            if r["computed"] < len(r["tokens"]) - 1:
                pre = r
                break
        fresh = False
        if pre is None:
            w = self.waiting[0] if self.waiting else None
            if not (w and w["arrival"] <= now and len(self.running) < self.max_running and c.rows):
                return None, 0
            pre, fresh = w, True
        n = min(self.cmax, len(pre["tokens"]) - pre["computed"], self.budget - nd)
        if n <= 0:
            return None, 0
        blocks = math.ceil((pre["computed"] + n) / c.bs) - len(pre["blocks"])
        if blocks > len(c.free):
            return None, 0
        if fresh:
            self.waiting.pop(0)
            pre["row"] = c.rows.pop()
            self.running.append(pre)
        c.grow(pre, pre["computed"] + n)
        return pre, n

    def finish(self, r, now):
        r["finish_t"] = now
        self.running.remove(r)
        self.cache.release(r)
        self.done += 1

    def append(self, r, t, now):
        r["tokens"].append(t)
        r["out"].append(t)
        if len(r["out"]) == 1:
            r["first_t"] = now
        if len(r["out"]) >= r["max_out"]:      # (the end token is ignored: serve.lua --ignore-eot)
            self.finish(r, now)


# -- The model over a paged cache ------------------------------------------------------

def make_model(torch, c: dict, slots: int, bs: int, dev: str, dtype: str = "f32"):
    """A GPT-2-shaped decoder (examples/gpt.lua's) whose step takes the padded rows of
    decodes and one chunk and returns the greedy next token of each decode row and of
    the chunk's last row.  The KV pool is a K and a V buffer [slots + 1, D] a layer (the
    last slot: the pad rows' trash), written in place with index_copy_ as gpt-fast and
    torch_twins.py's decode write their caches."""
    nn, F = torch.nn, torch.nn.functional
    D, H, V, T, L = c["hidden"], c["heads"], c["vocab"], c["ctx"], c["layers"]
    Dh = D // H

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
            self.register_buffer("kc", torch.zeros(slots + 1, D, device=dev))
            self.register_buffer("vc", torch.zeros(slots + 1, D, device=dev))

    class Paged(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = w(V, D, s=0.02), w(T, D, s=0.01)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf_g, self.lnf_b = w(D, shift=1.0), w(D)

        def attend(self, blk, q, kidx, bt, pos):
            """q [G, H, R, Dh] of G sequences with R rows each against their keys
            0..Tp-1 read through block table rows bt [G, NBT]; pos [G, R]."""
            sl = bt[:, kidx // bs] * bs + kidx % bs                      # [G, Tp] slots
            G, Tp = sl.shape
            k = blk.kc[sl.reshape(-1)].view(G, Tp, H, Dh).transpose(1, 2)
            v = blk.vc[sl.reshape(-1)].view(G, Tp, H, Dh).transpose(1, 2)
            mask = (kidx.view(1, 1, Tp) <= pos.unsqueeze(-1)).unsqueeze(1)   # [G, 1, R, Tp]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        def forward(self, dtok, dpos, dslot, dbt, ctok, cpos, cslot, cbt, clast, kidx):
            Bp, Cp = dtok.shape[0], ctok.shape[0]
            tok, pos, slot = torch.cat([dtok, ctok]), torch.cat([dpos, cpos]), torch.cat([dslot, cslot])
            x = self.wte[tok] + self.wpe[pos]
            for blk in self.blocks:
                h = F.layer_norm(x, (D,), blk.ln1_g, blk.ln1_b, 1e-5)
                q, k, v = (h @ blk.wqkv + blk.bqkv).split(D, dim=-1)
                blk.kc.index_copy_(0, slot, k)
                blk.vc.index_copy_(0, slot, v)
                outs = []
                if Bp > 0:
                    outs.append(self.attend(blk, q[:Bp].reshape(Bp, 1, H, Dh).transpose(1, 2), kidx, dbt,
                                            dpos.view(Bp, 1)).transpose(1, 2).reshape(Bp, D))
                if Cp > 0:
                    outs.append(self.attend(blk, q[Bp:].reshape(1, Cp, H, Dh).transpose(1, 2), kidx, cbt,
                                            cpos.view(1, Cp)).transpose(1, 2).reshape(Cp, D))
                a = torch.cat(outs) if len(outs) > 1 else outs[0]
                x = x + a @ blk.wproj + blk.bproj
                h = F.layer_norm(x, (D,), blk.ln2_g, blk.ln2_b, 1e-5)
                x = x + F.gelu(h @ blk.wfc + blk.bfc, approximate="tanh") @ blk.wout + blk.bout
            rows = x[:Bp]
            if Cp > 0:
                rows = torch.cat([rows, x[Bp:].index_select(0, clast)])
            logits = F.layer_norm(rows, (D,), self.lnf_g, self.lnf_b, 1e-5) @ self.wte.t()
            return logits.argmax(-1)

    torch.manual_seed(1)
    model = Paged().to(dev).eval()
    if dtype != "f32":
        model = model.to({"bf16": torch.bfloat16, "f16": torch.float16}[dtype])
    mark = getattr(torch._dynamo, "mark_static_address", None)
    if mark is not None:                      # the pool is written in place: keep it a static input
        for blk in model.blocks:
            mark(blk.kc)
            mark(blk.vc)
    return model


# -- The loop --------------------------------------------------------------------------

class Runner:
    """One mode's serving run: the scheduler's rows into one pinned host buffer, one copy
    to the device, views of it as the step's inputs."""

    def __init__(self, torch, o, cfg: dict, model, step, dev: str):
        self.torch, self.o, self.cfg, self.model, self.step, self.dev = torch, o, cfg, model, step, dev
        self.bs, self.nbt, self.trash = o.block, math.ceil(cfg["ctx"] / o.block), o.blocks * o.block
        cap = (o.dsizes[-1] + o.csizes[-1]) * (3 + self.nbt) + self.nbt + 1
        self.host = torch.zeros(cap, dtype=torch.int64, pin_memory=(dev == "cuda"))
        self.kidx = {t: torch.arange(t, device=dev) for t in o.tsizes}
        # compiled: at least 2 rows of each kind, so no size is 0 or 1 (dynamo specializes those: one
        # compile then serves every size; a step without a chunk carries 2 pad chunk rows)
        self.least = 2 if step is not model else 0

    def inputs(self, cache: Cache, dec, pre, nc, Bp, Cp, Tp):
        h, nbt, trash = [], self.nbt, self.trash
        d_tok, d_pos, d_slot, d_bt = [0] * Bp, [0] * Bp, [trash] * Bp, [[0] * nbt for _ in range(Bp)]
        for i, r in enumerate(dec):
            p = r["computed"]
            d_tok[i], d_pos[i], d_slot[i], d_bt[i] = r["tokens"][p], p, cache.slot_of(r, p), cache.btab[r["row"]]
        c_tok, c_pos, c_slot = [0] * Cp, [0] * Cp, [trash] * Cp
        c_bt = cache.btab[pre["row"]] if pre else [0] * nbt
        for j in range(nc):
            p = pre["computed"] + j
            c_tok[j], c_pos[j], c_slot[j] = pre["tokens"][p], p, cache.slot_of(pre, p)
        parts = [d_tok, d_pos, d_slot, [b for row in d_bt for b in row], c_tok, c_pos, c_slot, c_bt, [max(nc - 1, 0)]]
        for part in parts:
            h.extend(part)
        n = len(h)
        self.host[:n] = self.torch.tensor(h, dtype=self.torch.int64)
        g = self.host[:n].to(self.dev, non_blocking=True)
        sizes = [Bp, Bp, Bp, Bp * nbt, Cp, Cp, Cp, nbt, 1]
        v, at = [], 0
        for s in sizes:
            v.append(g[at:at + s])
            at += s
        v[3] = v[3].view(Bp, nbt)
        v[7] = v[7].view(1, nbt)
        return v + [self.kidx[Tp]]

    def run_step(self, cache: Cache, dec, pre, nc, Bp, Cp, Tp) -> list:
        return self.step(*self.inputs(cache, dec, pre, nc, Bp, Cp, Tp)).tolist()

    def one_step(self, S: Sched, now: float, seen: set, lat: list, new_path: list, shapes: dict, run_n: list):
        dec = S.pick_decodes()
        pre, nc = S.pick_chunk(len(dec), now)
        nd = len(dec)
        if nd + nc == 0:
            return False
        Bp, Cp = fit(S.dsizes, nd) or nd, fit(S.csizes, nc) or nc
        shape = f"{Bp}x{Cp}"
        Bp, Cp = max(Bp, self.least), max(Cp, self.least)
        longest = max([r["computed"] + 1 for r in dec] + ([pre["computed"] + nc] if pre else [0]))
        Tp = fit(self.o.tsizes, longest) or self.o.tsizes[-1]
        t0 = time.perf_counter()
        ids = self.run_step(S.cache, dec, pre, nc, Bp, Cp, Tp)
        dt = time.perf_counter() - t0
        S.steps += 1
        lat.append(dt)
        run_n.append(len(S.running))
        key = (Bp, Cp, Tp)
        if key not in seen:
            seen.add(key)
            new_path.append(dt)
        shapes[shape] = shapes.get(shape, 0) + 1
        t = self.now_after(dt)
        for i, r in enumerate(dec):
            r["computed"] += 1
            S.append(r, ids[i], t)
        if pre:
            pre["computed"] += nc
            if pre["computed"] == len(pre["tokens"]):
                S.append(pre, ids[Bp], t)           # (the chunk's row: after the Bp decode rows, padded or not)
        return True

    def serve(self, reqs: list) -> dict:
        o = self.o
        cache = Cache(o.blocks, o.block, o.seqs, self.nbt)
        S = Sched(o, cache, reqs)
        lat, new_path, shapes, run_n, seen = [], [], {}, [], set(self.warmed)
        self.vt, self.skipped, wall0 = 0.0, 0.0, time.perf_counter()

        def now():
            return time.perf_counter() - wall0 + self.skipped if o.clock == "wall" else self.vt

        def after(dt):
            if o.clock == "wall":
                return now()
            self.vt += o.dt
            return self.vt
        self.now_after = after
        while S.done < len(reqs):
            if not self.one_step(S, now(), seen, lat, new_path, shapes, run_n):
                w = S.waiting[0]
                assert w["arrival"] > now(), "serve: nothing to run and nothing to wait for"
                if o.clock == "wall":
                    self.skipped += w["arrival"] - now()
                else:
                    self.vt = w["arrival"]
        wall = time.perf_counter() - wall0
        span = (now() - reqs[0]["arrival"]) if o.clock == "wall" else wall
        return metrics(S, reqs, lat, new_path, shapes, run_n, span, wall)

    warmed: list = []

    def warm(self):
        """Every padded shape (decodes x chunk x context) run first, largest first, on pad rows."""
        o, t0 = self.o, time.perf_counter()
        cache = Cache(o.blocks, o.block, o.seqs, self.nbt)
        keys = sorted({(max(b, self.least), max(c, self.least), t) for b in o.dsizes for c in o.csizes
                       for t in o.tsizes if b + c > 0})
        keys.sort(key=lambda k: (-(max(k[0], 1) * max(k[1], 1)), -(k[0] + k[1]), -k[2]))
        for Bp, Cp, Tp in keys:
            for _ in range(3):
                self.step(*self.inputs(cache, [], None, 0, Bp, Cp, Tp))
        if self.dev == "cuda":
            self.torch.cuda.synchronize()
        self.warmed = keys
        return len(keys), time.perf_counter() - t0


class DryRunner(Runner):
    """The scheduler alone: every token 0 (--dry; with the steps clock its steps,
    preemptions and shapes are serve.lua --ignore-eot's)."""

    def __init__(self, o, cfg: dict):
        self.o, self.cfg, self.dev, self.least = o, cfg, "none", 0
        self.bs, self.nbt, self.trash = o.block, math.ceil(cfg["ctx"] / o.block), o.blocks * o.block

    def run_step(self, cache, dec, pre, nc, Bp, Cp, Tp) -> list:
        return [0] * (Bp + (1 if Cp > 0 else 0))


def pct(t, p):
    if not t:
        return None
    s = sorted(t)
    return s[max(1, math.ceil(p / 100 * len(s))) - 1]


def metrics(S: Sched, reqs, lat, new_path, shapes, run_n, span, wall) -> dict:
    ttft = [r["first_t"] - r["arrival"] for r in reqs]
    tpot = [(r["finish_t"] - r["first_t"]) / (len(r["out"]) - 1) for r in reqs if len(r["out"]) > 1]
    ntok = sum(len(r["out"]) for r in reqs)
    return dict(requests=len(reqs), output_tokens=ntok, steps=S.steps, preemptions=S.preemptions, shapes=len(shapes),
                seconds=span, wall_seconds=wall, output_tokens_per_s=ntok / span, requests_per_s=len(reqs) / span,
                ttft_s=dict(p50=pct(ttft, 50), p90=pct(ttft, 90), p99=pct(ttft, 99)),
                tpot_s=dict(p50=pct(tpot, 50), p90=pct(tpot, 90), p99=pct(tpot, 99)),
                step_s=dict(p50=pct(lat, 50), p99=pct(lat, 99), max=pct(lat, 100)),
                new_path_steps=dict(count=len(new_path), p50_s=pct(new_path, 50), max_s=pct(new_path, 100)),
                steps_by_shape=shapes,
                running=dict(mean=sum(run_n) / len(run_n) if run_n else None, p50=pct(run_n, 50),
                             max=pct(run_n, 100)))


def show(mode: str, r: dict) -> None:
    def ms(v):
        return "-" if v is None else f"{v * 1e3:.3f} ms"
    print(f"twin {mode}: {r['requests']} requests, {r['output_tokens']} output tokens in {r['steps']} steps "
          f"({r['shapes']} shapes), {r['preemptions']} preemptions, {r['seconds']:.3f} s")
    print(f"  {r['output_tokens_per_s']:.1f} output tokens/s, {r['requests_per_s']:.2f} requests/s; running mean "
          f"{r['running']['mean'] or 0:.1f}, max {r['running']['max'] or 0}")
    print(f"  TTFT p50 {ms(r['ttft_s']['p50'])} p90 {ms(r['ttft_s']['p90'])} p99 {ms(r['ttft_s']['p99'])}; "
          f"TPOT p50 {ms(r['tpot_s']['p50'])} p90 {ms(r['tpot_s']['p90'])} p99 {ms(r['tpot_s']['p99'])}")
    print(f"  step p50 {ms(r['step_s']['p50'])} p99 {ms(r['step_s']['p99'])} max {ms(r['step_s']['max'])}; "
          f"{r['new_path_steps']['count']} steps met a new padded shape (max {ms(r['new_path_steps']['max_s'])})",
          flush=True)


# -- Main ------------------------------------------------------------------------------

def options(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--requests", type=int)
    ap.add_argument("--rate", type=float)
    ap.add_argument("--prompt")
    ap.add_argument("--output")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace")
    ap.add_argument("--decode")
    ap.add_argument("--chunk")
    ap.add_argument("--context")
    ap.add_argument("--budget", type=int)
    ap.add_argument("--block", type=int)
    ap.add_argument("--blocks", type=int)
    ap.add_argument("--clock", choices=["wall", "steps"])
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--modes", default="eager,reduce_overhead")
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32",
                    help="the model's parameters, activations and KV cache (serve.lua's bf16 keeps f32 activations)")
    ap.add_argument("--dry", action="store_true", help="the scheduler alone, no model (no torch needed)")
    o = ap.parse_args(argv)
    t = o.tiny
    o.requests = o.requests or (40 if t else 256)
    o.rate = o.rate or (20.0 if t else 40.0)
    o.prompt = o.prompt or ("4:24" if t else "32:256")
    o.output = o.output or ("4:36" if t else "32:256")
    o.dsizes = [int(v) for v in (o.decode or ("0,1,2,4,8" if t else "0,1,2,4,8,16,24,32")).split(",")]
    o.csizes = [int(v) for v in (o.chunk or ("0,4,8,16" if t else "0,16,32,64")).split(",")]
    o.tsizes = [int(v) for v in (o.context or ("64" if t else "256,512,1024")).split(",")]
    o.budget = o.budget or (o.dsizes[-1] + o.csizes[-1])
    o.block = o.block or (4 if t else 16)
    o.blocks = o.blocks or (32 if t else 2048)
    o.clock = o.clock or ("steps" if t else "wall")
    o.seqs = o.dsizes[-1] + 1
    assert o.dsizes[0] == 0 and o.csizes[0] == 0, "--decode and --chunk start at 0"
    return o


def run_mode(torch, o, cfg, mode: str, dev: str, res: dict) -> None:
    model = make_model(torch, cfg, o.blocks * o.block, o.block, dev, o.dtype)
    step = model
    if mode == "reduce_overhead":
        dyn = torch._dynamo.config
        for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                     "accumulated_recompile_limit"):
            if hasattr(dyn, name):
                setattr(dyn, name, max(getattr(dyn, name), 256))
        try:
            import torch.fx.experimental._config as fx
            if hasattr(fx, "use_duck_shape"):
                fx.use_duck_shape = False      # (equal sizes at the first call must not become one symbol)
        except ImportError:
            pass
        try:
            import torch._inductor.config as ic
            if hasattr(ic.triton, "cudagraph_dynamic_shape_warn_limit"):
                ic.triton.cudagraph_dynamic_shape_warn_limit = None   # (a graph per padded shape is the design)
        except (ImportError, AttributeError):
            pass
        torch._dynamo.reset()
        step = torch.compile(model, mode="reduce-overhead", dynamic=True)
    run = Runner(torch, o, cfg, model, step, dev)
    out = {}
    with torch.no_grad():
        if o.warm:
            t0 = time.perf_counter()
            n, secs = run.warm()
            out["warm"] = dict(shapes=n, seconds=secs)
            print(f"twin {mode}: warmed {n} padded shapes in {secs:.1f} s", flush=True)
        else:
            t0 = time.perf_counter()
            b0 = max(1, run.least)
            run.step(*run.inputs(Cache(o.blocks, o.block, o.seqs, run.nbt), [], None, 0, b0, run.least, o.tsizes[0]))
            out["first_call_s"] = time.perf_counter() - t0   # (reduce-overhead: the first compile)
        for blk in model.blocks:
            blk.kc.zero_()
            blk.vc.zero_()
        reqs = workload(o, cfg)
        r = run.serve(reqs)
    r.update(out)
    r.update(backend="torch-" + dev, mode=mode, clock=o.clock, dtype=o.dtype)
    if dev == "cuda":
        r["device_bytes"] = torch.cuda.max_memory_allocated()
    res["modes"][mode] = r
    show(mode, r)


def main(argv=None) -> int:
    o = options(sys.argv[1:] if argv is None else argv)
    cfg = TINY if o.tiny else FULL
    res = {"workload": dict(requests=o.requests, rate=o.rate, prompt=o.prompt, output=o.output, seed=o.seed,
                            trace=o.trace, decode=o.dsizes, chunk=o.csizes, context=o.tsizes, budget=o.budget,
                            block=o.block, blocks=o.blocks, clock=o.clock, ignore_eot=True, dtype=o.dtype),
           "modes": {}, "notes": []}

    def save():
        if o.json:
            with open(o.json, "w") as f:
                json.dump(res, f, indent=1, sort_keys=True)
    if o.dry:
        r = DryRunner(o, cfg).serve(workload(o, cfg))
        r.update(backend="none", mode="dry", clock=o.clock)
        res["modes"]["dry"] = r
        show("dry", r)
        save()
        return 0
    try:
        import torch
    except ImportError:
        res["notes"].append("torch is not installed: nothing measured")
        print("serve_twin: " + res["notes"][-1])
        save()
        return 0
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    res["torch"] = dict(version=torch.__version__, device=dev,
                        name=torch.cuda.get_device_name() if dev == "cuda" else "cpu")
    for mode in o.modes.split(","):
        if mode == "reduce_overhead" and dev != "cuda":
            res["notes"].append("reduce_overhead needs CUDA: not run")
            continue
        try:
            run_mode(torch, o, cfg, mode, dev, res)
        except Exception as e:  # keep the other mode's figures
            res["notes"].append(f"{mode} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            print("serve_twin: " + res["notes"][-1], flush=True)
        save()
        if dev == "cuda":
            torch.cuda.empty_cache()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
