"""Run jobs: count each on one instance, time it on another that never ran under the counter,
and compare every term, convention and linear operator with the core's numbers."""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from costcalc.vocab import TERM_ORDER

from .build import twin
from .counting import CONVENTIONS, Counter
from .model import causal_mask
from .jobs import Job

# What the counter sees per convention: the linear terms do not depend on it; attention, a
# mixer's scan and conv (the recurrent form's counts under causal, the chunked form's under
# full and tiled) and so the total do.
CONVENTION_FREE = tuple(t for t in TERM_ORDER if t not in ("attention", "indexer", "scan", "conv", "total"))


def conventions_of(model) -> tuple[str, ...]:
    """The conventions a model is checked under: every one, but ``tiled`` for sparse attention
    (its selected keys are not tiles: refused by the calculator)."""
    sparse = any(lc.block.sparse for lc in getattr(getattr(model, "c", None), "layers", ()))
    return tuple(c for c in CONVENTIONS if not (sparse and c == "tiled"))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_time(fn: Callable[[], Any], setup: Callable[[], Any], device: torch.device,
                repeats: int, warmup: int = 1) -> float:
    """Median seconds of ``fn(state)`` over repeats, after warm-up; CUDA events on GPU."""
    return statistics.median(run_times(fn, setup, device, repeats, warmup))


def run_times(fn: Callable[[], Any], setup: Callable[[], Any], device: torch.device,
              repeats: int, warmup: int = 1) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn(state)``, after warm-up, synchronised."""
    times = []
    for r in range(warmup + repeats):
        state = setup()
        sync(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(state)
            end.record()
            torch.cuda.synchronize(device)
            elapsed = start.elapsed_time(end) / 1000
        else:
            t0 = time.perf_counter()
            fn(state)
            elapsed = time.perf_counter() - t0
        if r >= warmup:
            times.append(elapsed)
    return times


@dataclass
class Outcome:
    checks: list[dict] = field(default_factory=list)
    timings: list[dict] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    attention: list[dict] = field(default_factory=list)
    timed: list = field(default_factory=list)    # the jobs of the timing rows, in their order
    profile: Any = None                           # the device profile measured in the run (costcalc Device)
    title: str = ""          # the model as run: name, layers and vocabulary kept, device, dtype

    @property
    def ok(self) -> bool:
        return all(row["match"] for row in self.checks)

    @property
    def mismatches(self) -> int:
        return sum(not row["match"] for row in self.checks)

    @property
    def summary(self) -> str:
        return f"{len(self.checks)} checks, {self.mismatches} mismatches"


def progress(i: int, n: int, label: str) -> None:
    """A progress bar on a terminal's stderr; nothing where stderr is a file or a pipe (a log
    keeps only what it needs: an error stays one line)."""
    if not sys.stderr.isatty():
        return
    width = 24
    filled = width * i // n
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {i}/{n} {label:<40}")
    if i == n:
        sys.stderr.write("\n")
    sys.stderr.flush()


def run_jobs(model, jobs: Sequence[Job], preset: str, tile, device: torch.device,
             repeats: int, show_progress: bool = True, term_of: dict[str, str] | None = None) -> Outcome:
    """Count every job; time it on a twin when ``repeats``. ``peak_fraction`` stays empty
    until ``set_peak`` (the peak is measured after the workloads, on a warm device).
    ``term_of``: the term the core charges each operator to (``calc.operator_terms``)."""
    timed_model = twin(model)  # shares the weights; never runs under the counter
    out = Outcome()
    for index, job in enumerate(jobs):
        if show_progress:
            progress(index, len(jobs), f"{job.workload} {job.detail}")
        with torch.no_grad():
            state = job.setup(model)
            with Counter(model, tile) as counter:
                job.run(model, state)
            counted = counter.result()
            expected = {conv: job.expected(conv) for conv in conventions_of(model)}
            out.checks += compare(preset, job, counted, expected, job.operators(), term_of or {})
            if counted.uncounted:
                out.extras.append(uncounted_note(job, counted))
            if repeats:
                # CPU kernels need no warm-up beyond the counted run; CUDA does (allocator, autotuning).
                seconds = median_time(lambda s: job.run(timed_model, s), lambda: job.setup(timed_model),
                                      device, repeats, warmup=1 if device.type == "cuda" else 0)
                out.timings.append(timing_row(preset, job, expected, seconds))
                out.timed.append(job)
    if show_progress:
        progress(len(jobs), len(jobs), "done")
    return out


def uncounted_note(job: Job, counted) -> str:
    """What the formulas leave out of a mixer and the second counter measured (``Uncounted``)."""
    def size(form: str) -> str:
        got = counted.uncounted[form]
        scan = counted.mixers[form]["scan"] + counted.mixers[form]["conv"]
        solve = f" + {got['solve']:,} in triangular solves" if got["solve"] else ""
        share = f" ({(got['elementwise'] + got['solve']) / scan:.0%} of its counted scan and conv)" if scan else ""
        return f"{form} {got['elementwise']:,} elementwise{solve}{share}"
    return (f"{job.workload} {job.detail}: not in the formulas, measured in the mixers (FLOPs): "
            f"{'; '.join(size(f) for f in counted.uncounted)}")


def compare(preset: str, job: Job, counted, expected: dict[str, dict], operators: dict[str, int],
            term_of: dict[str, str]) -> list[dict]:
    """A row per term (and convention, where attention depends on it) and per linear operator:
    the core's FLOPs beside the counted ones."""
    rows = []

    def row(term: str, conv: str, formula: int, got: int, operator: str | None = None) -> dict:
        return {"preset": preset, "workload": job.workload, "detail": job.detail, "term": term,
                "operator": operator, "convention": conv, "tile": expected.get("tiled", {}).get("tile", ""),
                "formula_flops": formula, "counted_flops": got,
                "ratio": round(got / formula, 6) if formula else None, "match": got == formula}

    for term in TERM_ORDER:
        key = f"{term}_flops"
        if all(key not in exp for exp in expected.values()):
            continue
        for conv in (("any",) if term in CONVENTION_FREE else tuple(expected)):
            exp = expected["causal" if conv == "any" else conv]     # a zero term (a step's scan) is left out
            rows.append(row(term, conv, exp.get(key, 0), counted.term(term, "causal" if conv == "any" else conv,
                                                                      term_of)))
    for op in sorted(set(operators) | set(counted.operators)):
        formula, got = operators.get(op, 0), counted.operators.get(op, 0)
        if op not in term_of and not formula and not got:
            continue        # a module of another form that ran no product (MLA's absorbed ones, expanded)
        rows.append(row(term_of.get(op, "?"), "any", formula, got, op))
    return rows


def timing_row(preset: str, job: Job, expected: dict[str, dict], seconds: float) -> dict:
    row = {"preset": preset, "workload": job.workload, "detail": job.detail, "time_s": float(f"{seconds:.4g}")}
    for conv in ("causal", "full"):
        row[f"tflops_per_s_{conv}"] = float(f"{expected[conv]['total_flops'] / seconds / 1e12:.4g}")
    row["tflops_per_s"] = row["tflops_per_s_causal"]
    row["peak_fraction"] = None
    return row


def set_peak(rows: list[dict], peak: float) -> None:
    """Fill ``peak_fraction`` of timing rows once the peak is known."""
    for row in rows:
        row["peak_fraction"] = round(row["tflops_per_s"] * 1e12 / peak, 4)


def attention_time_ratio(h_q: int, d_h: int, lengths: Sequence[int], dtype, device, repeats: int,
                         kernel_tile: tuple[int, int]) -> list[dict]:
    """Time SDPA with is_causal=True against no mask (full) and set the ratio beside the tile model."""
    from costcalc.calc import attention_fraction

    rows = []
    for n in lengths:
        q = torch.randn(1, h_q, n, d_h, device=device).to(dtype)
        with torch.no_grad():
            causal = median_time(lambda _: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True),
                                 lambda: None, device, repeats, warmup=2)
            full = median_time(lambda _: torch.nn.functional.scaled_dot_product_attention(q, q, q),
                               lambda: None, device, repeats, warmup=2)
        rows.append({"seq": n, "causal_s": float(f"{causal:.4g}"), "full_s": float(f"{full:.4g}"),
                     "measured_ratio": round(causal / full, 3),
                     "tile_model_ratio": round(float(attention_fraction(n, "tiled", kernel_tile)), 3),
                     "triangle_ratio": round(float(attention_fraction(n, "causal")), 3),
                     "kernel_tile": f"{kernel_tile[0]}x{kernel_tile[1]}"})
    return rows
