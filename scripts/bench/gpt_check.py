"""gpt_check: gtlua's GPT decoder (examples/gpt.lua) against PyTorch on the same weights and prompt.

    python3 scripts/bench/gpt_check.py [--bin build/gtlua] [--tiny] [--steps 32] [--batch 3]
                                       [--prompt 8] [--tol 1e-3] [--dir DIR] [--device cuda|cpu] [--spec]

1. Makes random GPT-2-small-shaped weights and a prompt with torch (seed 0)
   and writes them to DIR/gpt_weights.bin in examples/gpt.lua's format
   ("GTGPT001", 8 int32: layers, hidden, heads, vocab, ctx, eot, batch,
   prompt_len; the prompt int32 [batch, prompt_len]; every parameter f32 in
   file order, matrices {in, out}).
2. Runs `gtlua examples/decode.lua --weights FILE --dump DIR/gpt_gtlua.bin
   --steps N`: the tree (buckets 1,2,4,8,16; batch 3 is padded to 4) feeds
   the prompt one position at a time through the KV cache, then decodes N
   tokens greedily, dumping every generated step's tokens and logits.
3. Computes the same N steps in PyTorch without a cache (the full causal
   forward over the whole sequence at every step, f32, TF32 off), with the
   same end-token rule (a finished sequence keeps emitting eot).
4. Compares: for every step, max |logit difference| / max |PyTorch logit|;
   the greedy tokens must be identical.  Prints one line
       gpt_check: PASS|FAIL  max relative logit error E (tolerance T) over S steps x B sequences; tokens identical|DIFFER ...
   and exits 0 on PASS, 1 on FAIL.
5. With --spec, also runs examples/speculative.lua on the same weights and
   prompt (every mode; it checks them against gtlua's plain greedy decoder)
   and compares the tokens it dumps with PyTorch's greedy tokens.

With --hf [--dtype f32|bf16|f16], the weights come from Hugging Face
transformers instead: GPT2LMHeadModel(GPT2Config(...)) with its own random
init (torch seed 0), cast to the dtype and written by save_pretrained
(safetensors, DIR/hf/model.safetensors and config.json); gtlua runs
`decode.lua --model DIR/hf/model.safetensors --dtype DT --prompt-ids ...
--dump ...`, and the reference is transformers' own cached forward
(past_key_values, eager attention) in the same dtype, greedy with the same
end-token rule.  Tolerances by default: 1e-5 (f32), 2e-2 (bf16, f16).  A
second line compares gtlua with transformers in f32 on the same rounded
weights (gtlua's half-precision decode widens the weights and computes in
f32), for information.  Without transformers on the machine, --hf says so
and writes the checkpoint in its layout itself (this script's weights, the
Hugging Face names, a safetensors file and config.json) and compares against
this script's PyTorch forward in the dtype instead.
"""
from __future__ import annotations

import argparse
import ctypes
import math
import os
import struct
import subprocess
import sys
import time

FULL = dict(layers=12, hidden=768, heads=12, vocab=50257, ctx=1024)
TINY = dict(layers=2, hidden=32, heads=4, vocab=97, ctx=64)


def raw(t) -> bytes:
    """The bytes of a tensor as contiguous little-endian f32/i32 on the host."""
    t = t.detach().cpu().contiguous().clone()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def make_weights(torch, c: dict) -> list:
    """(name, tensor) in file order; the same init as examples/gpt.lua's random
    weights, plus random biases and layernorm parameters so that they are checked."""
    g = torch.Generator().manual_seed(0)
    D, V, T, L = c["hidden"], c["vocab"], c["ctx"], c["layers"]

    def rn(*shape, s=1.0, shift=0.0):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * s + shift

    out = [("wte", rn(V, D, s=0.02)), ("wpe", rn(T, D, s=0.01))]
    std, proj, fc = 1 / math.sqrt(D), 1 / math.sqrt(2 * L * D), 1 / math.sqrt(8 * L * D)
    for l in range(L):
        out += [(f"h{l}.ln1_g", rn(D, s=0.1, shift=1.0)), (f"h{l}.ln1_b", rn(D, s=0.02)),
                (f"h{l}.wqkv", rn(D, 3 * D, s=std)), (f"h{l}.bqkv", rn(3 * D, s=0.02)),
                (f"h{l}.wproj", rn(D, D, s=proj)), (f"h{l}.bproj", rn(D, s=0.02)),
                (f"h{l}.ln2_g", rn(D, s=0.1, shift=1.0)), (f"h{l}.ln2_b", rn(D, s=0.02)),
                (f"h{l}.wfc", rn(D, 4 * D, s=std)), (f"h{l}.bfc", rn(4 * D, s=0.02)),
                (f"h{l}.wout", rn(4 * D, D, s=fc)), (f"h{l}.bout", rn(D, s=0.02))]
    out += [("lnf_g", rn(D, s=0.1, shift=1.0)), ("lnf_b", rn(D, s=0.02))]
    return out


def write_weights(path: str, c: dict, eot: int, prompt, weights) -> None:
    B, P = prompt.shape
    with open(path, "wb") as f:
        f.write(b"GTGPT001")
        f.write(struct.pack("<8i", c["layers"], c["hidden"], c["heads"], c["vocab"], c["ctx"], eot, B, P))
        f.write(raw(prompt.int()))
        for _, t in weights:
            f.write(raw(t.float()))


def read_dump(torch, path: str):
    """(tokens [S, B] int64, logits [S, B, V] f32) from decode.lua --dump."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"GTLOG001":
        raise ValueError(f"{path}: not a GTLOG001 file")
    S, B, V = struct.unpack("<3i", data[8:20])
    toks, logits, off = [], [], 20
    for _ in range(S):
        toks.append(list(struct.unpack(f"<{B}i", data[off:off + 4 * B])))
        off += 4 * B
        n = B * V * 4
        logits.append(torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.float32).view(B, V))
        off += n
    return torch.tensor(toks, dtype=torch.int64), torch.stack(logits) if logits else torch.zeros(0, B, V)


def forward(torch, W: dict, c: dict, ids):
    """Logits [B, S, V] of the full causal forward (no cache)."""
    F = torch.nn.functional
    B, S = ids.shape
    D, H = c["hidden"], c["heads"]
    Dh = D // H
    x = W["wte"][ids] + W["wpe"][:S]
    mask = torch.ones(S, S, dtype=torch.bool, device=ids.device).tril()
    for l in range(c["layers"]):
        p = f"h{l}."
        h = F.layer_norm(x, (D,), W[p + "ln1_g"], W[p + "ln1_b"], 1e-5)
        qkv = h @ W[p + "wqkv"] + W[p + "bqkv"]
        q, k, v = (t.view(B, S, H, Dh).transpose(1, 2) for t in qkv.split(D, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(Dh)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, D)
        x = x + y @ W[p + "wproj"] + W[p + "bproj"]
        h = F.layer_norm(x, (D,), W[p + "ln2_g"], W[p + "ln2_b"], 1e-5)
        x = x + F.gelu(h @ W[p + "wfc"] + W[p + "bfc"], approximate="tanh") @ W[p + "wout"] + W[p + "bout"]
    x = F.layer_norm(x, (D,), W["lnf_g"], W["lnf_b"], 1e-5)
    return x @ W["wte"].t()


def reference(torch, W: dict, c: dict, prompt, steps: int, eot: int):
    """Greedy decoding in PyTorch: (tokens [S, B], logits [S, B, V])."""
    seq = prompt.clone()
    done = torch.zeros(seq.shape[0], dtype=torch.bool, device=seq.device)
    toks, logits = [], []
    for _ in range(steps):
        lg = forward(torch, W, c, seq)[:, -1]
        nxt = lg.argmax(-1)
        tok = torch.where(done, torch.full_like(nxt, eot), nxt)
        done = done | (nxt == eot)
        toks.append(tok.cpu())
        logits.append(lg.float().cpu())
        seq = torch.cat([seq, tok[:, None]], dim=1)
    return torch.stack(toks), torch.stack(logits)


def read_tokens(torch, path: str):
    """tokens [S, B] int64 from speculative.lua --dump (GTTOK001)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"GTTOK001":
        raise ValueError(f"{path}: not a GTTOK001 file")
    S, B = struct.unpack("<2i", data[8:16])
    return torch.tensor(struct.unpack(f"<{S * B}i", data[16:16 + 4 * S * B]), dtype=torch.int64).view(S, B)


def spec_check(torch, a, wpath: str, t_tok) -> bool:
    """speculative.lua's tokens (host, device and loop modes; it checks them
    against gtlua's plain greedy decoder itself) against PyTorch's greedy tokens."""
    spath = os.path.join(a.dir, "spec_tokens.bin")
    cmd = [a.bin, "examples/speculative.lua", "--weights", wpath, "--dump", spath, "--tokens", str(a.steps)]
    print("gpt_check: running " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout, end="", flush=True)
    if r.returncode != 0:
        print(f"gpt_check: FAIL  speculative.lua exited with status {r.returncode}")
        return False
    s_tok = read_tokens(torch, spath)
    same = tuple(s_tok.shape) == tuple(t_tok.shape) and bool(torch.equal(s_tok, t_tok.cpu()))
    print(f"gpt_check: speculative {'PASS' if same else 'FAIL'}  its tokens (every mode) "
          f"{'identical to' if same else 'DIFFER from'} PyTorch's greedy tokens over {a.steps} steps")
    return same


def hf_model(torch, c: dict, dtype, path: str):
    """A random GPT2LMHeadModel of config c in dtype, saved to path (a directory); the model."""
    import transformers
    cfg = transformers.GPT2Config(n_layer=c["layers"], n_embd=c["hidden"], n_head=c["heads"], vocab_size=c["vocab"],
                                  n_positions=c["ctx"], eos_token_id=c["vocab"] - 1, bos_token_id=c["vocab"] - 1)
    cfg._attn_implementation = "eager"              # (no fused attention kernel: the plain formula)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval().to(dtype)
    model.save_pretrained(path, safe_serialization=True)
    return model


HF_NAMES = {"ln1_g": "ln_1.weight", "ln1_b": "ln_1.bias", "wqkv": "attn.c_attn.weight", "bqkv": "attn.c_attn.bias",
            "wproj": "attn.c_proj.weight", "bproj": "attn.c_proj.bias", "ln2_g": "ln_2.weight", "ln2_b": "ln_2.bias",
            "wfc": "mlp.c_fc.weight", "bfc": "mlp.c_fc.bias", "wout": "mlp.c_proj.weight", "bout": "mlp.c_proj.bias"}
ST_DTYPE = {"torch.float32": "F32", "torch.bfloat16": "BF16", "torch.float16": "F16"}


def write_safetensors(path: str, tensors: dict) -> None:
    """tensors {name: torch tensor} as a safetensors file (names sorted, header padded to 8 bytes)."""
    import json
    head, blobs, at = {}, [], 0
    for name in sorted(tensors):
        b = raw(tensors[name])
        head[name] = {"dtype": ST_DTYPE[str(tensors[name].dtype)], "shape": list(tensors[name].shape),
                      "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)


def hf_layout(torch, c: dict, dtype, path: str) -> dict:
    """make_weights in the Hugging Face layout and dtype, written to path/model.safetensors (and config.json);
    the weights by this script's names."""
    import json
    W = dict(make_weights(torch, c))
    out = {"transformer.wte.weight": W["wte"], "transformer.wpe.weight": W["wpe"],
           "transformer.ln_f.weight": W["lnf_g"], "transformer.ln_f.bias": W["lnf_b"]}
    for l in range(c["layers"]):
        for k, hf in HF_NAMES.items():
            out[f"transformer.h.{l}.{hf}"] = W[f"h{l}.{k}"]
    os.makedirs(path, exist_ok=True)
    write_safetensors(os.path.join(path, "model.safetensors"), {k: v.to(dtype) for k, v in out.items()})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"n_head": c["heads"], "n_layer": c["layers"], "eos_token_id": c["vocab"] - 1}, f)
    return {k: v.to(dtype) for k, v in W.items()}


def hf_reference(torch, model, prompt, steps: int, eot: int):
    """Greedy decoding with transformers' cached forward: (tokens [S, B], logits [S, B, V] f32)."""
    toks, logits = [], []
    done = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    out = model(input_ids=prompt, use_cache=True)
    for i in range(steps):
        lg = out.logits[:, -1].float()
        nxt = lg.argmax(-1)
        tok = torch.where(done, torch.full_like(nxt, eot), nxt)
        done = done | (nxt == eot)
        toks.append(tok.cpu())
        logits.append(lg.cpu())
        if i + 1 < steps:
            out = model(input_ids=tok[:, None], past_key_values=out.past_key_values, use_cache=True)
    return torch.stack(toks), torch.stack(logits)


def compare(torch, g_tok, g_logits, t_tok, t_logits, steps: int):
    """(worst relative logit error, per-step errors, tokens identical, first differing step or None, steps compared)."""
    S = min(len(g_tok), len(t_tok))
    if S == 0 or g_logits.shape[1:] != t_logits.shape[1:]:
        return None
    rel = [((g_logits[i] - t_logits[i]).abs().max() / t_logits[i].abs().max().clamp_min(1e-30)).item() for i in range(S)]
    same = S == steps and bool(torch.equal(g_tok[:S], t_tok[:S]))
    first = next((i + 1 for i in range(S) if not torch.equal(g_tok[i], t_tok[i])), None)
    return max(rel), rel, same, first, S


def main_hf(a, torch, c: dict, dev: str) -> int:
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    tol = a.tol if a.tol is not None else (1e-5 if a.dtype == "f32" else 2e-2)
    eot = c["vocab"] - 1
    hdir, dpath = os.path.join(a.dir, "hf"), os.path.join(a.dir, "gpt_gtlua_hf.bin")
    model, W = None, None
    try:
        model = hf_model(torch, c, dt, hdir)
    except ImportError as e:
        print(f"gpt_check: no transformers here ({e}): the checkpoint is written in its layout by this script and "
              "the reference is this script's PyTorch forward in the same dtype", flush=True)
        W = hf_layout(torch, c, dt, hdir)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, c["vocab"] - 1, (a.batch, a.prompt), generator=g, dtype=torch.int64)
    ids = ";".join(",".join(str(int(x)) for x in row) for row in prompt)
    cmd = [a.bin, "examples/decode.lua", "--model", os.path.join(hdir, "model.safetensors"), "--dtype", a.dtype,
           "--prompt-ids", ids, "--dump", dpath, "--steps", str(a.steps)]
    print("gpt_check: running " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout, end="", flush=True)
    if r.returncode != 0:
        print(f"gpt_check: FAIL  gtlua exited with status {r.returncode}")
        return 1
    g_tok, g_logits = read_dump(torch, dpath)
    with torch.no_grad():
        if model is not None:
            model = model.to(dev)
            t_tok, t_logits = hf_reference(torch, model, prompt.to(dev), a.steps, eot)
            f32 = model.float()                             # the same rounded weights, computed in f32
            f_tok, f_logits = hf_reference(torch, f32, prompt.to(dev), a.steps, eot)
        else:
            Wd = {k: v.to(dev) for k, v in W.items()}
            t_tok, t_logits = reference(torch, Wd, c, prompt.to(dev), a.steps, eot)
            f_tok, f_logits = reference(torch, {k: v.float() for k, v in Wd.items()}, c, prompt.to(dev), a.steps, eot)
    res, res32 = compare(torch, g_tok, g_logits, t_tok, t_logits, a.steps), compare(torch, g_tok, g_logits, f_tok, f_logits, a.steps)
    if res is None:
        print(f"gpt_check: FAIL  shapes differ: gtlua {tuple(g_logits.shape)}, transformers {tuple(t_logits.shape)}")
        return 1
    worst, rel, same, first, S = res
    print("gpt_check: relative logit error per step: " + " ".join(f"{e:.1e}" for e in rel))
    for b in range(a.batch):
        print(f"gpt_check: sequence {b + 1}: gtlua        {' '.join(str(int(x)) for x in g_tok[:S, b])}")
        print(f"gpt_check: sequence {b + 1}: reference    {' '.join(str(int(x)) for x in t_tok[:S, b])}")
    if a.dtype != "f32" and res32:
        print(f"gpt_check: against the reference in f32 on the {a.dtype}-rounded weights: max relative logit error "
              f"{res32[0]:.2e}; tokens {'identical' if res32[2] else 'DIFFER'}")
    ok = same and worst <= tol
    ref = "transformers' cached forward" if model is not None else "PyTorch (no transformers)"
    what = "tokens identical" if same else (f"tokens DIFFER (first at step {first})" if first else f"gtlua gave {S} of {a.steps} steps")
    print(f"gpt_check: {'PASS' if ok else 'FAIL'}  {a.dtype}: max relative logit error {worst:.2e} (tolerance {tol:g}) "
          f"against {ref} over {S} steps x {a.batch} sequences; {what}; "
          f"{'GPT-2 small' if not a.tiny else 'tiny'} config, reference on {dev}")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.environ.get("GTLUA_BIN", "build/gtlua"))
    ap.add_argument("--tiny", action="store_true", help="the CI-sized model instead of GPT-2 small")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--tol", type=float, default=None, help="default 1e-3; with --hf 1e-5 (f32), 2e-2 (bf16, f16)")
    ap.add_argument("--hf", action="store_true", help="a transformers-written safetensors checkpoint (see above)")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"], help="with --hf: the checkpoint's dtype")
    ap.add_argument("--dir", default="build/gpt_check", help="where the weight and dump files go (~640 MiB)")
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"], help="PyTorch's device (default: cuda if any)")
    ap.add_argument("--spec", action="store_true",
                    help="also run examples/speculative.lua on the same weights (every mode) and compare its tokens")
    a = ap.parse_args(argv)
    try:
        import torch
    except Exception as e:
        print(f"gpt_check: FAIL  no PyTorch here ({type(e).__name__}: {e})")
        return 1
    c = dict(TINY if a.tiny else FULL)
    eot = c["vocab"] - 1
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(a.dir, exist_ok=True)
    if a.hf:
        return main_hf(a, torch, c, dev)
    if a.tol is None:
        a.tol = 1e-3
    wpath, dpath = os.path.join(a.dir, "gpt_weights.bin"), os.path.join(a.dir, "gpt_gtlua.bin")

    t0 = time.perf_counter()
    weights = make_weights(torch, c)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, c["vocab"] - 1, (a.batch, a.prompt), generator=g, dtype=torch.int64)
    write_weights(wpath, c, eot, prompt, weights)
    print(f"gpt_check: wrote {wpath} ({os.path.getsize(wpath) / 2**20:.1f} MiB) in {time.perf_counter() - t0:.1f} s",
          flush=True)

    cmd = [a.bin, "examples/decode.lua", "--weights", wpath, "--dump", dpath, "--steps", str(a.steps)]
    print("gpt_check: running " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout, end="", flush=True)
    if r.returncode != 0:
        print(f"gpt_check: FAIL  gtlua exited with status {r.returncode}")
        return 1
    print(f"gpt_check: gtlua took {time.perf_counter() - t0:.1f} s", flush=True)
    g_tok, g_logits = read_dump(torch, dpath)

    W = {k: v.to(dev) for k, v in weights}
    with torch.no_grad():
        t_tok, t_logits = reference(torch, W, c, prompt.to(dev), a.steps, eot)

    S = min(len(g_tok), len(t_tok))
    if S == 0 or g_logits.shape[1:] != t_logits.shape[1:]:
        print(f"gpt_check: FAIL  shapes differ: gtlua {tuple(g_logits.shape)}, PyTorch {tuple(t_logits.shape)}")
        return 1
    rel = [((g_logits[i] - t_logits[i]).abs().max() / t_logits[i].abs().max().clamp_min(1e-30)).item() for i in range(S)]
    worst = max(rel)
    same = S == a.steps and bool(torch.equal(g_tok[:S], t_tok[:S]))
    first_diff = next((i + 1 for i in range(S) if not torch.equal(g_tok[i], t_tok[i])), None)
    print("gpt_check: relative logit error per step: " + " ".join(f"{e:.1e}" for e in rel))
    for b in range(a.batch):
        print(f"gpt_check: sequence {b + 1}: gtlua   {' '.join(str(int(x)) for x in g_tok[:S, b])}")
        print(f"gpt_check: sequence {b + 1}: PyTorch {' '.join(str(int(x)) for x in t_tok[:S, b])}")
    ok = same and worst <= a.tol
    if a.spec:
        ok = spec_check(torch, a, wpath, t_tok) and ok
    what = "tokens identical" if same else (f"tokens DIFFER (first at step {first_diff})" if first_diff
                                            else f"gtlua gave {S} of {a.steps} steps")
    print(f"gpt_check: {'PASS' if ok else 'FAIL'}  max relative logit error {worst:.2e} (tolerance {a.tol:g}) "
          f"over {S} steps x {a.batch} sequences; {what}; "
          f"{'GPT-2 small' if not a.tiny else 'tiny'} config, PyTorch on {dev}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
