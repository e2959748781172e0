"""Measure a CUDA GPU with a minimal reference engine in PyTorch: the physics the cost model assumes.

Run on a machine with a CUDA GPU and PyTorch (neither is a dependency of the toolkit):
``python tests/benchmarks/gpu_reference_engine.py OUT_DIR``. It writes ``OUT_DIR/gpu_reference.json``:

- ``hardware``: device-to-device copy bandwidth (bytes read + written), a read-only reduction's
  bandwidth, and the bf16 tensor rate of an 8192^3 matrix product;
- ``decode``: one decode step of a Llama-3.1-8B-shaped model (random bf16 weights; 32 layers, hidden
  4096, 32 query and 8 KV heads of 128, MLP 14336, vocabulary 128256) for ``B`` sequences each
  holding ``C`` KV tokens, captured as one CUDA graph (as serving engines run decode), median of
  repeated replays, with two attention kernels (PyTorch's flash SDPA, and two batched GEMMs that
  split a long context better at small batches; ``median_ms`` is the faster, as an engine picks its
  kernel per shape); also one step at B=1 run eagerly, to show the launch overhead a graph removes;
- ``prefill``: one prompt of ``P`` tokens alone through the same model (flash attention, causal),
  logits of the last position only, eager and (up to 2048 tokens) as one CUDA graph;
- ``mixed``: ``B`` decodes at 2048 tokens of context beside one prompt chunk, as chunked prefill
  runs them.

The engine does what a serving engine's step does (fused QKV, GQA attention over the KV cache, gated
MLP, final norm and logits, greedy sampling) without a scheduler, paging or rotary embeddings, so its
times are a floor that a real engine's step approaches. ``bench_gpu.py`` compares them with the cost
model.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB = 4096, 32, 32, 8, 128, 14336, 128256
MAX_KV_TOKENS = 524_288  # 64 GiB of bf16 KV for this shape: B x C never exceeds it
DECODE_CASES = [(b, c) for c in (512, 2048, 8192) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b * c <= MAX_KV_TOKENS]
PREFILL_TOKENS = (128, 512, 1024, 2048, 4096, 8192)
DEV = "cuda"
BF16 = torch.bfloat16


def _events_ms(fn, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def _summary(times: list[float]) -> dict:
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "repeats": len(times)}


def hardware() -> dict:
    elems = 2**31  # 4 GiB of bf16
    a = torch.empty(elems, dtype=BF16, device=DEV).normal_()
    b = torch.empty_like(a)
    copy = _summary(_events_ms(lambda: b.copy_(a), 3, 10))
    read = _summary(_events_ms(lambda: a.sum(dtype=torch.float32), 3, 10))
    n = 8192
    x = torch.randn(n, n, dtype=BF16, device=DEV)
    y = torch.randn(n, n, dtype=BF16, device=DEV)
    gemm = _summary(_events_ms(lambda: x @ y, 3, 10))
    try:
        one = torch.ones((), device=DEV)
        x8, y8 = x.to(torch.float8_e4m3fn), y.t().contiguous().t().to(torch.float8_e4m3fn)
        fp8 = _summary(_events_ms(lambda: torch._scaled_mm(x8, y8, one, one, out_dtype=BF16), 3, 10))
    except Exception as exc:  # an older PyTorch or GPU without fp8 GEMMs
        fp8 = {"error": repr(exc)}
    nbytes = elems * 2
    return {
        "copy_gb_s": 2 * nbytes / copy["median_ms"] / 1e6,
        "read_gb_s": nbytes / read["median_ms"] / 1e6,
        "bf16_gemm_tflops": 2 * n**3 / gemm["median_ms"] / 1e9,
        "fp8_gemm_tflops": 2 * n**3 / fp8["median_ms"] / 1e9 if "median_ms" in fp8 else None,
        "fp8_gemm": fp8,
        "copy": copy,
        "read": read,
        "gemm": gemm,
    }


class Engine:
    """Random bf16 weights of a Llama-3.1-8B-shaped model and a KV cache of MAX_KV_TOKENS tokens."""

    def __init__(self) -> None:
        def w(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, dtype=BF16, device=DEV).normal_(0, 0.02)

        self.embed = w(VOCAB, HIDDEN)
        self.lm_head = w(HIDDEN, VOCAB)
        self.norm_f = torch.ones(HIDDEN, dtype=BF16, device=DEV)
        qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM
        self.layers = [
            {
                "n1": torch.ones(HIDDEN, dtype=BF16, device=DEV),
                "n2": torch.ones(HIDDEN, dtype=BF16, device=DEV),
                "qkv": w(HIDDEN, qkv),
                "o": w(HEADS * HEAD_DIM, HIDDEN),
                "gu": w(HIDDEN, 2 * MLP),
                "d": w(MLP, HIDDEN),
                "k": torch.zeros(MAX_KV_TOKENS * KV_HEADS * HEAD_DIM, dtype=BF16, device=DEV),
                "v": torch.zeros(MAX_KV_TOKENS * KV_HEADS * HEAD_DIM, dtype=BF16, device=DEV),
            }
            for _ in range(LAYERS)
        ]
        self.weight_bytes = sum(t.numel() * 2 for t in [self.embed, self.lm_head, self.norm_f]) + sum(
            t.numel() * 2 for layer in self.layers for key, t in layer.items() if key not in ("k", "v")
        )

    def _attend_decode(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, attention: str) -> torch.Tensor:
        batch = q.shape[0]
        # the query heads sharing one KV head attend as rows of one (non-causal) query block
        qh = q.view(batch, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
        if attention == "sdpa":
            out = F.scaled_dot_product_attention(qh, kc, vc)
        else:  # two batched GEMMs, which cuBLAS splits along the context when the batch is small
            scores = (qh @ kc.transpose(-1, -2)).float() * HEAD_DIM**-0.5
            out = torch.softmax(scores, dim=-1).to(BF16) @ vc
        return out.reshape(batch, HEADS * HEAD_DIM)

    def _attend_prompt(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n, rep = q.shape[0], HEADS // KV_HEADS
        qh = q.reshape(1, n, HEADS, HEAD_DIM).transpose(1, 2)
        kh = k.reshape(1, n, KV_HEADS, HEAD_DIM).transpose(1, 2).repeat_interleave(rep, dim=1)
        vh = v.reshape(1, n, KV_HEADS, HEAD_DIM).transpose(1, 2).repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        return out.transpose(1, 2).reshape(n, HEADS * HEAD_DIM)

    def step(self, tokens: torch.Tensor, batch: int, context: int, attention: str = "sdpa") -> torch.Tensor:
        """One engine step: ``batch`` sequences decode a token at position ``context - 1`` (the first
        ``batch`` of ``tokens``) and one new prompt (the rest of ``tokens``) is prefilled."""
        prompt = tokens.shape[0] - batch
        kv = batch * KV_HEADS * context * HEAD_DIM
        x = self.embed[tokens]
        for layer in self.layers:
            h = F.rms_norm(x, (HIDDEN,), layer["n1"], 1e-5)
            q, k, v = (h @ layer["qkv"]).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
            parts = []
            if batch:
                kc = layer["k"][:kv].view(batch, KV_HEADS, context, HEAD_DIM)
                vc = layer["v"][:kv].view(batch, KV_HEADS, context, HEAD_DIM)
                kc[:, :, context - 1] = k[:batch].view(batch, KV_HEADS, HEAD_DIM)
                vc[:, :, context - 1] = v[:batch].view(batch, KV_HEADS, HEAD_DIM)
                parts.append(self._attend_decode(q[:batch], kc, vc, attention))
            if prompt:
                layer["k"][kv : kv + prompt * KV_HEADS * HEAD_DIM].copy_(k[batch:].reshape(-1))
                layer["v"][kv : kv + prompt * KV_HEADS * HEAD_DIM].copy_(v[batch:].reshape(-1))
                parts.append(self._attend_prompt(q[batch:], k[batch:], v[batch:]))
            x = x + (torch.cat(parts) if len(parts) > 1 else parts[0]) @ layer["o"]
            h = F.rms_norm(x, (HIDDEN,), layer["n2"], 1e-5)
            g, u = (h @ layer["gu"]).chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ layer["d"]
        # logits of every decoding sequence and of the prompt's last position only
        rows = x if not prompt else torch.cat([x[:batch], x[-1:]])
        return (F.rms_norm(rows, (HIDDEN,), self.norm_f, 1e-5) @ self.lm_head).argmax(dim=-1)


def _graph_ms(fn, repeats: int) -> list[float]:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = _events_ms(graph.replay, 3, repeats)
    del graph
    torch.cuda.empty_cache()
    return times


def decode_cases(engine: Engine) -> list[dict]:
    rows = []
    for batch, context in DECODE_CASES:
        tokens = torch.randint(0, VOCAB, (batch,), device=DEV)
        row = {"decode_seqs": batch, "context_tokens": context, "kv_tokens": batch * context}
        for attention in ("sdpa", "gemm"):
            times = _graph_ms(lambda: engine.step(tokens, batch, context, attention), 30)
            row[f"{attention}_ms"] = statistics.median(times)
        row["median_ms"] = min(row["sdpa_ms"], row["gemm_ms"])
        rows.append(row)
        print(f"decode B={batch} C={context}: sdpa {row['sdpa_ms']:.3f} gemm {row['gemm_ms']:.3f} ms", flush=True)
    tokens = torch.randint(0, VOCAB, (1,), device=DEV)
    eager = _summary(_events_ms(lambda: engine.step(tokens, 1, 512), 3, 30))
    rows.append({"decode_seqs": 1, "context_tokens": 512, "kv_tokens": 512, "eager": True, **eager})
    print(f"decode B=1 C=512 eager: {eager['median_ms']:.3f} ms", flush=True)
    return rows


def prefill_cases(engine: Engine) -> list[dict]:
    rows = []
    for n in PREFILL_TOKENS:
        tokens = torch.randint(0, VOCAB, (n,), device=DEV)
        row = {"prefill_tokens": n, **_summary(_events_ms(lambda: engine.step(tokens, 0, 1), 2, 7))}
        if n <= 2048:
            row["graph_ms"] = statistics.median(_graph_ms(lambda: engine.step(tokens, 0, 1), 10))
        rows.append(row)
        print(
            f"prefill P={n}: eager {row['median_ms']:.3f} graph {row.get('graph_ms', float('nan')):.3f} ms", flush=True
        )
    return rows


def mixed_cases(engine: Engine) -> list[dict]:
    """Decodes at 2048 tokens of context beside one prompt chunk, as chunked prefill runs them."""
    rows = []
    for batch in (16, 64):
        for chunk in (256, 512, 2048):
            tokens = torch.randint(0, VOCAB, (batch + chunk,), device=DEV)
            times = _graph_ms(lambda: engine.step(tokens, batch, 2048, "gemm"), 15)
            rows.append({"decode_seqs": batch, "context_tokens": 2048, "prefill_tokens": chunk, **_summary(times)})
            print(f"mixed B={batch} P={chunk}: {rows[-1]['median_ms']:.3f} ms", flush=True)
    return rows


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    result: dict = {
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": props.name,
        "memory_gib": props.total_memory / 2**30,
        "multiprocessors": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "engine": "tests/benchmarks/gpu_reference_engine.py: PyTorch eager ops, decode as one CUDA graph",
        "model_shape": {
            "hidden": HIDDEN,
            "layers": LAYERS,
            "heads": HEADS,
            "kv_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "mlp": MLP,
            "vocab": VOCAB,
            "dtype": "bf16",
        },
    }
    path = out / "gpu_reference.json"
    for name, fn in (("hardware", hardware),):
        result[name] = fn()
        print(name, json.dumps(result[name])[:300], flush=True)
        path.write_text(json.dumps(result, indent=1))
    engine = Engine()
    result["weight_bytes"] = engine.weight_bytes
    for name, fn in (("prefill", prefill_cases), ("decode", decode_cases), ("mixed", mixed_cases)):
        try:
            result[name] = fn(engine)
        except Exception as exc:  # keep what was measured; say what failed
            result[name + "_error"] = repr(exc)
            print(name, "failed:", repr(exc), flush=True)
        path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
