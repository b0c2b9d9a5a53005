"""One verification run: build the decoder, run the chosen workloads, count, time, compare."""
from __future__ import annotations

from typing import Sequence

import torch

from costcalc import calc, notes
from costcalc.errors import CostcalcError
from costcalc.spec import ModelSpec
from . import build, toy as toy_checks, workloads as wl
from .harness import Outcome, attention_time_ratio, matmul_peak, run_jobs, set_peak

# Tiles the attention kernels really use, for the causal-vs-full time prediction:
# torch's CPU flash kernel (k tile 512; q tile 256/64/32 by length, which does not change
# the ratio when it divides 512) and a FlashAttention-2 style 128 x 128 tile on CUDA.
KERNEL_TILE = {"cpu": (64, 512), "cuda": (128, 128)}


def jobs_for(spec: ModelSpec, names: Sequence[str], seqs: Sequence[int], batch: int, tile, device,
             mla: str = "auto"):
    jobs = []
    for name in names:
        for seq in seqs:
            if name == "prefill":
                jobs.append(wl.prefill(spec, seq, batch, tile, device, mla))
            elif name == "varlen":
                lengths = [max(1, seq // 8), max(1, seq // 2), max(1, seq // 4)]
                jobs += [wl.varlen(spec, lengths, padded, tile, device, mla) for padded in (True, False)]
            elif name == "chunk":
                jobs.append(wl.chunk(spec, max(1, seq // 4), seq, batch, tile, device, mla))
            elif name == "chunked":
                jobs.append(wl.chunked(spec, seq, max(1, (seq + 2) // 3), batch, tile, device, mla))
            elif name == "decode":
                jobs.append(wl.decode(spec, seq, batch, tile, device, mla))
            elif name == "generate":
                jobs.append(wl.generate(spec, max(1, seq // 4), 4, batch, tile, device, mla))
            else:
                raise CostcalcError(f"unknown workload {name!r}; expected some of {', '.join(wl.WORKLOADS)}")
    return jobs


def verify(spec: ModelSpec, device: str = "auto", dtype: str = "float32", layers: int | None = None,
           vocab: int | None = None, workloads: Sequence[str] = wl.WORKLOADS, seqs: Sequence[int] = (64,),
           batch: int = 1, tile: tuple[int, int] = (16, 16), repeats: int = 1, peak_n: int | None = None,
           attention_lengths: Sequence[int] = (), show_progress: bool = True, mla: str = "auto") -> Outcome:
    calc.mla_form("prefill", mla)      # a bad --mla is an error before any weight is built
    dev = build.resolve_device(device)
    if spec.name == "toy" and layers is None and vocab is None:
        model = build.toy(dtype=build.resolve_dtype(dtype if dtype != "float32" else "float64", dev), device=dev)
        checked = spec
    else:
        torch_dtype = build.resolve_dtype(dtype, dev)
        model = build.from_spec(spec, layers, vocab, torch_dtype, dev)
        checked = spec.with_sizes(**{k: v for k, v in (("L", layers), ("V", vocab)) if v is not None})
    torch_dtype = model.lm_head.weight.dtype
    jobs = jobs_for(checked, workloads, seqs, batch, tile, dev, mla)
    outcome = run_jobs(model, jobs, checked.name, tile, dev, repeats, show_progress)
    # The peak is measured after the workloads, on a warm device (a cold CPU core under-reports it).
    peak = matmul_peak(torch_dtype, dev, peak_n or (8192 if dev.type == "cuda" else 2048)) if repeats else None
    if outcome.timings:
        outcome.extras.append(notes.TIMING)
    if peak:
        set_peak(outcome.timings, peak)
        outcome.extras.append(f"measured {torch_dtype} GEMM peak on {dev.type}: {peak / 1e12:.3f} TFLOP/s")
    if "generate" in workloads:
        outcome.extras += generation_check(model, checked, seqs, batch, dev, mla)
    if spec.name == "toy" and layers is None and vocab is None:
        outcome.extras += toy_checks.tutorial_table(model)
    if attention_lengths and repeats:
        ktile = KERNEL_TILE[dev.type]
        outcome.attention = attention_time_ratio(checked["h_q"], checked["d_h"], attention_lengths,
                                                 torch_dtype, dev, repeats, ktile)
    return outcome


TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3, torch.bfloat16: 0.25, torch.float16: 0.1}


def generation_check(model, spec: ModelSpec, seqs, batch: int, device, mla: str = "auto") -> list[str]:
    """Cached greedy generation against full recomputation at every step."""
    lines = []
    tol = TOLERANCE[model.lm_head.weight.dtype]
    with torch.no_grad():
        for seq in seqs:
            prompt = wl._tokens(batch, max(1, seq // 4), spec["V"], 5, device)
            tokens, steps = wl.greedy(model, prompt, 4, mla)
            gap = wl.recompute_gap(model, tokens, steps, prompt.shape[1])
            verdict = "within" if gap <= tol else "OUTSIDE"
            lines.append(f"generate S={prompt.shape[1]} N=4: cached vs recomputed logits, max |diff| = "
                         f"{gap:.3g} ({verdict} tolerance {tol:g} for {model.lm_head.weight.dtype})")
            if gap > tol:
                raise CostcalcError(lines[-1])
    return lines
