"""One verification run: build the decoder, run the chosen workloads, count, time, compare."""
from __future__ import annotations

from typing import Sequence

import torch

from costcalc import calc, notes
from costcalc.errors import CostcalcError
from costcalc.spec import ModelSpec
from costcalc.core.registry import workload

from . import build, jobs, toy as toy_checks
from costcalc.roofline import Machine

from . import roofline
from .harness import Outcome, attention_time_ratio, run_jobs, set_peak

# Tiles the attention kernels really use, for the causal-vs-full time prediction:
# torch's CPU flash kernel (k tile 512; q tile 256/64/32 by length, which does not change
# the ratio when it divides 512) and a FlashAttention-2 style 128 x 128 tile on CUDA.
KERNEL_TILE = {"cpu": (64, 512), "cuda": (128, 128)}
PEAK_SQUARE = {"cpu": 2048, "cuda": 8192}          # the n of the n^3 product the GEMM peak is measured on
COPY_BYTES = {"cpu": 256 << 20, "cuda": 1 << 30}   # the copy the memory bandwidth is measured on


def jobs_for(spec: ModelSpec, names: Sequence[str], seqs: Sequence[int], batch: int, tile, device,
             mla: str = "auto", window_cache: str = "whole") -> list[jobs.Job]:
    """The jobs of the named workloads (the core registry's names or aliases) at each length."""
    out = []
    cache = {"window_cache": window_cache}
    for name in workload_names(names):
        for seq in seqs:
            out += [jobs.JOBS[name](spec, *sizes, tile, device, mla, **cache) for sizes in jobs.SIZES[name](seq, batch)]
    return out


def workload_names(names: Sequence[str]) -> list[str]:
    """The registry's names of the given workloads (aliases accepted), in order, once each."""
    out = []
    for name in names:
        try:
            resolved = workload(name).name
        except ValueError:
            resolved = None
        if resolved not in jobs.JOBS:
            raise CostcalcError(f"unknown workload {name!r}; expected some of {', '.join(jobs.JOBS)}")
        if resolved not in out:
            out.append(resolved)
    return out




def verify(spec: ModelSpec, device: str = "auto", dtype: str = "float32", layers: int | None = None,
           vocab: int | None = None, workloads: Sequence[str] = tuple(jobs.JOBS), seqs: Sequence[int] = (64,),
           batch: int = 1, tile: tuple[int, int] = (16, 16), repeats: int = 1, peak_n: int | None = None,
           attention_lengths: Sequence[int] = (), show_progress: bool = True, mla: str = "auto",
           window_cache: str = "whole") -> Outcome:
    """Every check that can be made from sizes comes first (the workloads, the positions and
    memory the longest of them needs): a run that cannot finish stops before any weight is built."""
    if any(g.block.v4 for g in spec.groups):
        raise CostcalcError(f"verify: {spec.name} has DeepSeek-V4 layers; the verifier has no torch model of their "
                            f"compressors, indexer over compressed keys, grouped output or hyper-connections yet "
                            f"(tests/test_hf_deepseek_v4.py holds them to transformers' own model)")
    calc.mla_form("prefill", mla)      # a bad --mla (or window cache) is an error before any weight is built
    calc.Options(window_cache=window_cache)
    if not workloads:
        raise CostcalcError("no workload to run")
    seed_toy = is_seed_toy(spec) and layers is None and vocab is None
    checked = cut(spec, layers, vocab)
    dev = build.resolve_device(device)
    torch_dtype = build.resolve_dtype(dtype if not seed_toy or dtype != "float32" else "float64", dev)
    names = workload_names(workloads)
    todo = jobs_for(checked, names, seqs, batch, tile, dev, mla, window_cache)
    checks = generation_jobs(checked, seqs, batch) if "generate" in names else []
    if seed_toy:
        checks.append(toy_checks.job())
    positions = max(job.positions for job in todo + checks)
    weights, largest, label = build.memory_need(checked, todo + checks, torch_dtype, dev,
                                                positions if seed_toy else 0,
                                                attention_lengths if repeats else ())
    build.check_memory(weights + largest, dev, f"weights {weights / 2**30:.1f} GiB, then {label} "
                                               f"{largest / 2**30:.1f} GiB")
    if seed_toy:
        model = build.toy(dtype=torch_dtype, device=dev, positions=positions)
    else:
        model = build.from_spec(spec, layers, vocab, torch_dtype, dev)
    term_of = {**calc.operator_terms(checked, "prefill", mla), **calc.operator_terms(checked, "decode", mla)}
    outcome = run_jobs(model, todo, checked.name, tile, dev, repeats, show_progress, term_of)
    outcome.title = title(spec, checked, seed_toy, dev, torch_dtype)
    # The peak is measured after the workloads, on a warm device (a cold CPU core under-reports it).
    if repeats:
        square = peak_n or PEAK_SQUARE.get(dev.type, PEAK_SQUARE["cuda"])
        copy = COPY_BYTES.get(dev.type, COPY_BYTES["cuda"])
        widest = max(g.sizes.get(k, 0) for g in checked.groups for k in ("m", "m_e", "m_s", "d_h")) or checked["d"]
        tokens = min(max([j.passes[-1][0] * j.passes[-1][1] for j in todo] + [1]), square)
        shapes = [(square, square, square), (tokens, checked["d"], widest)]
        peak = roofline.gemm_peak(torch_dtype, dev, shapes)
        outcome.profile = roofline.profile(f"measured-{dev.type}", torch_dtype, peak,
                                           roofline.memory_bandwidth(dev, copy), dev)
        outcome.extras.append(notes.TIMING)
        set_peak(outcome.timings, peak)
        outcome.extras.append(f"measured {torch_dtype} GEMM peak on {dev.type}: {peak / 1e12:.3f} TFLOP/s (the "
                              f"fastest of {' and '.join('x'.join(map(str, s)) for s in shapes)}); memory "
                              f"bandwidth {outcome.profile.mem_bw / 1e9:.1f} GB/s (a copy of {copy >> 20} MiB)")
        if outcome.timings:
            outcome.extras += roofline.predict(outcome, Machine(outcome.profile), torch_dtype)
    if "generate" in names:
        outcome.extras += generation_check(model, checked, seqs, batch, dev, mla, window_cache)
    if seed_toy:
        outcome.extras += toy_checks.tutorial_table(model, checked)
    if attention_lengths and repeats:
        ktile = KERNEL_TILE[dev.type]
        outcome.attention = attention_time_ratio(checked["h_q"], checked["d_h"], attention_lengths,
                                                 torch_dtype, dev, repeats, ktile)
    return outcome


def is_seed_toy(spec: ModelSpec) -> bool:
    """The built-in toy (a file of the same name with other sizes is not it)."""
    from costcalc import presets

    return spec.name == "toy" and spec.groups == presets.load("toy").groups


def cut(spec: ModelSpec, layers: int | None, vocab: int | None) -> ModelSpec:
    """The model as run: ``layers`` of its layers (round-robin over its groups), ``vocab`` tokens."""
    if layers is not None and layers > spec["L"]:
        raise CostcalcError(f"--layers {layers}: {spec.name} has {spec['L']} layers")
    changes = {k: v for k, v in (("L", layers), ("V", vocab)) if v is not None}
    return spec.with_sizes(**changes) if changes else spec


def title(spec: ModelSpec, checked: ModelSpec, seed_toy: bool, device, dtype) -> str:
    """One line: the model as run, and where it was cut, e.g.
    ``llama-3.1-8b, 2 of 32 layers, vocabulary 1000 of 128256 | cpu float32``."""
    n, total = checked["L"], spec["L"]
    layers = f"{n} of {total} layers" if n != total else f"{n} layer{'s' * (n != 1)}"
    if len(checked.groups) > 1:
        layers += " (" + ", ".join(f"{g.count} {g.arch}" for g in checked.groups) + ")"
    vocab = f"vocabulary {checked['V']}"
    if checked["V"] < spec["V"]:
        vocab += f" of {spec['V']}"
    elif checked["V"] > spec["V"]:
        vocab += f" (the model's: {spec['V']})"
    weights = " (the seed tutorial's weights)" if seed_toy else ""
    return f"{spec.name}, {layers}, {vocab}{weights} | {device.type} {str(dtype).removeprefix('torch.')}"


def generation_jobs(spec: ModelSpec, seqs: Sequence[int], batch: int) -> list[jobs.Job]:
    """What ``generation_check`` runs, as jobs that only state their sizes (for the memory check)."""
    out = []
    for seq in seqs:
        for prompt, new, _ in jobs.SIZES["generate"](seq, batch):
            out.append(jobs.Job("generate", f"check S={prompt}", None, None, None,
                                passes=jobs.generation_passes(batch, prompt, new, recompute=True),
                                positions=prompt + new - 1, cache=prompt + new, batch=batch))
    return out


TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3, torch.bfloat16: 0.25, torch.float16: 0.1}


def generation_check(model, spec: ModelSpec, seqs, batch: int, device, mla: str = "auto",
                     window_cache: str = "whole") -> list[str]:
    """Cached greedy generation against full recomputation at every step."""
    lines = []
    tol = TOLERANCE[model.lm_head.weight.dtype]
    with torch.no_grad():
        for seq in seqs:
            prompt = jobs._tokens(batch, max(1, seq // 4), spec["V"], 5, device)
            tokens, steps = jobs.greedy(model, prompt, jobs.GENERATION_NEW, mla, window_cache)
            gap = jobs.recompute_gap(model, tokens, steps, prompt.shape[1])
            verdict = "within" if gap <= tol else "OUTSIDE"
            lines.append(f"generate S={prompt.shape[1]} N={jobs.GENERATION_NEW}: cached vs recomputed logits, max |diff| = "
                         f"{gap:.3g} ({verdict} tolerance {tol:g} for {model.lm_head.weight.dtype})")
            if gap > tol:
                raise CostcalcError(lines[-1])
    return lines
