"""spec_twin: PyTorch's twin of scripts/bench/spec_bench.lua: plain and speculative greedy decoding.

    python3 scripts/bench/spec_twin.py [--quick] [--json FILE] [--device cuda|cpu] [--batches 1,8]
                                       [--budget S] [--eager]

The model is examples/gpt.lua's GPT-2-small shape (12 layers, hidden 768, 12
heads, vocab 50257, f32, TF32 off) as torch_twins.py's decode twin writes it:
static KV caches (module buffers, written with index_copy_ at computed
rows), attention over the whole cache with a mask, so one graph serves every
position.  Random weights (torch seed 0, torch_twins.py's init) whose layers
past the draft's get their output projections scaled by --upper, as
spec_bench.lua does, so that the draft (the target's first --draft-layers
layers with its final layernorm and tied head, its own caches) agrees most
of the time.  Each forward takes R tokens a sequence and a start position per
sequence, so a batch's sequences accept different counts.

  plain  the target's one-token step under torch.compile(mode="reduce-overhead"),
         the next token fed back on the device; the tokens read once at the end
  host   speculative: the draft's passes (one of 2 tokens, k - 1 of one) and the
         target's verify over k + 1 tokens are reduce-overhead functions; the
         acceptance is on the host (the proposals and the target's argmax read
         with one .cpu() a step, the next positions and tokens copied back)

Each mode generates once untimed (compiles, warm-up, recording), then --runs
times timed: tokens/s (batch x tokens over the synced wall time) and host
µs a token (the host's time in the step calls, host reads included, over
batch x tokens): medians.  `agree`: the fraction of host's tokens equal to
plain's (PyTorch's verify over k + 1 rows need not round as its one-row step
does, so a near tie may differ).  No end token: every sequence generates
--tokens tokens.  Without torch it prints a note and exits 0; the JSON is
rewritten after every batch.  --eager measures without torch.compile (to try
the script's logic on a machine without a GPU: --quick --device cpu --eager).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

FULL = dict(layers=12, hidden=768, heads=12, vocab=50257, ctx=256, draft_layers=2, k=4, upper=0.05,
            tokens=128, prompt=8, batches=[1, 8], runs=5)
QUICK = dict(layers=4, hidden=32, heads=4, vocab=97, ctx=64, draft_layers=1, k=4, upper=0.05,
             tokens=24, prompt=4, batches=[1, 2], runs=2)


def build(torch, c: dict, dev: str):
    """The weights (a list of per-layer dicts and the shared ones), torch_twins.py's
    init, with the upper layers' output projections (and their biases) scaled."""
    D, V, T, L = c["hidden"], c["vocab"], c["ctx"], c["layers"]
    torch.manual_seed(0)

    def w(*shape, s=0.0, shift=0.0):
        return (torch.randn(*shape, device=dev) * s + shift) if s else torch.full(shape, shift, device=dev)

    std, proj, fc = 1 / math.sqrt(D), 1 / math.sqrt(2 * L * D), 1 / math.sqrt(8 * L * D)
    layers = []
    for l in range(L):
        a = c["upper"] if l >= c["draft_layers"] else 1.0
        layers.append(dict(ln1_g=w(D, shift=1.0), ln1_b=w(D), wqkv=w(D, 3 * D, s=std), bqkv=w(3 * D),
                           wproj=w(D, D, s=proj) * a, bproj=w(D) * a, ln2_g=w(D, shift=1.0), ln2_b=w(D),
                           wfc=w(D, 4 * D, s=std), bfc=w(4 * D), wout=w(4 * D, D, s=fc) * a, bout=w(D) * a))
    shared = dict(wte=w(V, D, s=0.02), wpe=w(T, D, s=0.01), lnf_g=w(D, shift=1.0), lnf_b=w(D))
    return layers, shared


def make_model(torch, c: dict, layers: list, shared: dict, nl: int, B: int, dev: str):
    """A decoder of the first nl layers at batch B with caches of its own:
    forward(ids [B, R] int64, start [B] int64) -> argmax [B, R]; row j of
    sequence b is at position start[b] + j."""
    nn, F = torch.nn, torch.nn.functional
    D, H, T = c["hidden"], c["heads"], c["ctx"]
    Dh = D // H
    scale = 1 / math.sqrt(Dh)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.ParameterDict({k: nn.Parameter(v, requires_grad=False) for k, v in shared.items()})
            self.lw = nn.ModuleList()
            for l in range(nl):
                m = nn.Module()
                for k, v in layers[l].items():
                    setattr(m, k, nn.Parameter(v, requires_grad=False))
                m.register_buffer("kc", torch.zeros(B * T, D, device=dev))
                m.register_buffer("vc", torch.zeros(B * T, D, device=dev))
                self.lw.append(m)
            self.register_buffer("tpos", torch.arange(T, device=dev))
            self.register_buffer("rows", torch.arange(B, device=dev) * T)

        def forward(self, ids, start):
            R = ids.shape[1]
            pos = start[:, None] + self.tpos[:R][None, :]                 # [B, R]
            flat = (self.rows[:, None] + pos).reshape(-1)                 # cache rows [B*R]
            mask = (self.tpos[None, None, :] <= pos[:, :, None])[:, None]  # [B, 1, R, T]
            x = self.p["wte"][ids] + self.p["wpe"][pos]
            for m in self.lw:
                h = F.layer_norm(x, (D,), m.ln1_g, m.ln1_b, 1e-5)
                q, k, v = (h @ m.wqkv + m.bqkv).split(D, dim=-1)
                m.kc.index_copy_(0, flat, k.reshape(B * R, D))
                m.vc.index_copy_(0, flat, v.reshape(B * R, D))
                kh = m.kc.view(B, T, H, Dh).transpose(1, 2)
                vh = m.vc.view(B, T, H, Dh).transpose(1, 2)
                att = (q.view(B, R, H, Dh).transpose(1, 2) @ kh.transpose(-2, -1)) * scale
                att = att.masked_fill(~mask, float("-inf")).softmax(-1)
                x = x + (att @ vh).transpose(1, 2).reshape(B, R, D) @ m.wproj + m.bproj
                h = F.layer_norm(x, (D,), m.ln2_g, m.ln2_b, 1e-5)
                x = x + F.gelu(h @ m.wfc + m.bfc, approximate="tanh") @ m.wout + m.bout
            logits = F.layer_norm(x, (D,), self.p["lnf_g"], self.p["lnf_b"], 1e-5) @ self.p["wte"].t()
            return logits.argmax(-1)

    model = Decoder().to(dev).eval()
    mark = getattr(torch._dynamo, "mark_static_address", None)
    if mark is not None:                      # the caches are mutated in place: keep them static inputs
        for m in model.lw:
            mark(m.kc)
            mark(m.vc)
    return model


class Runner:
    def __init__(self, torch, c: dict, dev: str, compiled: bool):
        self.torch, self.c, self.dev, self.compiled = torch, c, dev, compiled
        self.cuda = dev == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def compile(self, model):
        if not self.compiled:
            return model
        return self.torch.compile(model, mode="reduce-overhead", dynamic=False)

    def call(self, fn, *args):
        """fn(*args) as a new cudagraph step (its output cloned: a later replay overwrites it)."""
        if self.compiled:
            self.torch.compiler.cudagraph_mark_step_begin()
        return fn(*args).clone()

    def prefill(self, target, draft, prompt):
        """Both caches filled with the prompt's first P - 1 tokens (eagerly)."""
        start = self.torch.zeros(prompt.shape[0], dtype=self.torch.int64, device=self.dev)
        with self.torch.no_grad():
            target(prompt[:, :-1], start)
            draft(prompt[:, :-1], start)

    def plain(self, ft, prompt, N: int):
        """N greedy tokens with the target's one-token step: (tokens [B][N], host seconds)."""
        torch, P = self.torch, prompt.shape[1]
        cur = prompt[:, -1:].clone()
        pos = torch.full((prompt.shape[0],), P - 1, dtype=torch.int64, device=self.dev)
        hist = torch.zeros(prompt.shape[0], N, dtype=torch.int64, device=self.dev)
        host, clock = 0.0, time.perf_counter
        with torch.no_grad():
            for i in range(N):
                t0 = clock()
                cur = self.call(ft, cur, pos)
                hist[:, i] = cur[:, 0]
                pos = pos + 1
                host += clock() - t0
        return hist.tolist(), host

    def speculative(self, ft, fd, prompt, N: int):
        """N tokens a sequence, speculative with the acceptance on the host:
        (tokens, host seconds, accepted, sequence steps, emitted, steps)."""
        torch, k, B, P = self.torch, self.c["k"], prompt.shape[0], prompt.shape[1]
        rows = prompt.tolist()
        prev, cur, pos = [r[-2] for r in rows], [r[-1] for r in rows], [P - 1] * B
        out = [[] for _ in range(B)]
        accepted = seq_steps = emitted = steps = 0
        host, clock = 0.0, time.perf_counter
        with torch.no_grad():
            while any(len(o) < N for o in out):
                t0 = clock()
                start = torch.tensor(pos, dtype=torch.int64, device=self.dev)
                two = torch.tensor([[p, q] for p, q in zip(prev, cur)], dtype=torch.int64, device=self.dev)
                props = [self.call(fd, two, start - 1)[:, 1:].contiguous()]     # d_1
                for i in range(1, k):
                    props.append(self.call(fd, props[-1], start + i))           # d_{i+1}
                cand = torch.cat([two[:, 1:]] + props, dim=1)                   # cur, d_1 .. d_k
                tv = self.call(ft, cand, start)                                  # t_0 .. t_k
                both = torch.cat([cand[:, 1:], tv], dim=1).cpu().tolist()      # one read a step
                steps += 1
                for b in range(B):
                    if len(out[b]) >= N:
                        continue
                    d, t = both[b][:k], both[b][k:]
                    n = 0
                    while n < k and d[n] == t[n]:
                        n += 1
                    out[b].extend(t[:n + 1][:N - len(out[b])])
                    prev[b], cur[b], pos[b] = (d[n - 1] if n else cur[b]), t[n], pos[b] + n + 1
                    accepted, seq_steps, emitted = accepted + n, seq_steps + 1, emitted + n + 1
                host += clock() - t0
        return out, host, accepted, seq_steps, emitted, steps

    def timed(self, runs: int, B: int, N: int, gen):
        """gen() once untimed, then runs times: the medians and the last result."""
        gen()
        rates, hosts, r = [], [], None
        for _ in range(runs):
            self.sync()
            t0 = time.perf_counter()
            r = gen()
            self.sync()
            secs = time.perf_counter() - t0
            rates.append(B * N / secs)
            hosts.append(r[1] * 1e6 / (B * N))
        return {"tokens_s": statistics.median(rates), "host_us_token": statistics.median(hosts)}, r

    def batch(self, layers, shared, B: int) -> dict:
        torch, c = self.torch, self.c
        N, P = c["tokens"], c["prompt"]
        assert P + N + 2 * c["k"] + 1 <= c["ctx"], "spec_twin: prompt + tokens + 2k beyond the context"
        g = torch.Generator().manual_seed(1000 + B)
        prompt = torch.randint(0, c["vocab"] - 1, (B, P), generator=g, dtype=torch.int64).to(self.dev)
        target = make_model(torch, c, layers, shared, c["layers"], B, self.dev)
        draft = make_model(torch, c, layers, shared, c["draft_layers"], B, self.dev)
        torch._dynamo.reset()
        ft, fd = self.compile(target), self.compile(draft)
        s = {"name": f"spec-{B}", "batch": B, "modes": {}}

        def plain():
            self.prefill(target, draft, prompt)
            return self.plain(ft, prompt, N)

        s["modes"]["plain"], ref = self.timed(c["runs"], B, N, plain)

        def spec():
            self.prefill(target, draft, prompt)
            return self.speculative(ft, fd, prompt, N)

        row, r = self.timed(c["runs"], B, N, spec)
        toks, _, accepted, seq_steps, emitted, steps = r
        same = sum(1 for b in range(B) for i in range(N) if toks[b][i] == ref[0][b][i])
        row.update(acceptance=accepted / max(1, seq_steps * c["k"]), tokens_per_step=emitted / max(1, seq_steps),
                   steps=steps, reads_per_step=1.0, agree=same / (B * N))
        s["modes"]["host"] = row
        s["acceptance"] = row["acceptance"]
        return s


def device_info(torch, dev: str) -> dict:
    d = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": dev,
         "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}
    if dev == "cuda":
        d["name"] = torch.cuda.get_device_name()
    else:
        d["name"] = platform.processor() or platform.machine()
    return d


def save(path: str | None, res: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(res, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the CI-sized model and run")
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"])
    ap.add_argument("--batches", default=None, help="batch sizes, e.g. 1,8")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds: batches not started by then are skipped")
    ap.add_argument("--eager", action="store_true", help="no torch.compile (tries the logic only)")
    a = ap.parse_args(argv)
    c = dict(QUICK if a.quick else FULL)
    if a.batches:
        c["batches"] = [int(x) for x in a.batches.split(",")]
    res = {"tool": "torch", "quick": a.quick, "config": c, "scenarios": [], "notes": []}
    try:
        import torch
    except Exception as e:  # fail soft, as torch_twins.py
        res["notes"].append(f"no torch: {type(e).__name__}: {e}")
        print(f"spec_twin: skipped: no torch here ({e})")
        save(a.json, res)
        return 0
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    res["device"] = device_info(torch, dev)
    res["compiled"] = not a.eager
    run = Runner(torch, c, dev, compiled=not a.eager)
    layers, shared = build(torch, c, dev)
    deadline = time.perf_counter() + a.budget
    cpu = os.environ.get("BENCH_MAIN_CPU")          # run.sh's quickest core, as torch_twins.py's main_cpu
    if cpu and cpu.isdigit() and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {int(cpu)})
        except OSError:
            pass
    for B in c["batches"]:
        if time.perf_counter() > deadline:
            res["notes"].append(f"batch {B} not run: time budget spent")
            continue
        t0 = time.perf_counter()
        try:
            s = run.batch(layers, shared, B)
        except Exception as e:  # keep going: one failing batch must not lose the others
            res["notes"].append(f"batch {B} failed: {type(e).__name__}: {e}")
            print(f"spec_twin: batch {B} failed: {type(e).__name__}: {e}", flush=True)
            continue
        res["scenarios"].append(s)
        save(a.json, res)
        for mode in ("plain", "host"):
            m = s["modes"][mode]
            extra = (f"  acceptance {m['acceptance']:.2f}, {m['tokens_per_step']:.2f} tokens a step, "
                     f"{100 * m['agree']:.0f}% = plain") if mode == "host" else ""
            print(f"spec_twin batch {B:2d} {mode:6s} {m['tokens_s']:10.1f} tokens/s  {m['host_us_token']:8.2f} "
                  f"host us/token{extra}", flush=True)
        print(f"spec_twin: batch {B} done in {time.perf_counter() - t0:.1f} s", flush=True)
    save(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
