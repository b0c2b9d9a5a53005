"""Measured time held against the roofline: the device profile measured in the run, and the
calculator's predicted time for every timed job on it.

The profile is the best the device showed: the GEMM peak in the run's dtype (the larger of a
square product and the model's widest projection at its longest prompt) and the memory
bandwidth of large copies (bytes read + written over the fastest repeat). Each job is
predicted by ``costcalc`` (``calc`` with a ``Machine`` of that profile) under the ``full``
convention, which is what the decoder executes (an explicit mask skips no tile). The
prediction is a floor: a measured time below it (5% timer noise allowed) means the byte or
FLOP model misses work the decoder does not do, and the report says so.
"""
from __future__ import annotations

import statistics
from typing import Sequence

import torch

from costcalc.devices import Device
from costcalc.roofline import Machine, Precision

from .build import meminfo
from .harness import Outcome, run_times

NOISE = 0.05        # a measured time may fall this far below its prediction before it is a bug
DTYPES = {torch.float32: "fp32", torch.float64: "fp64", torch.bfloat16: "bf16", torch.float16: "fp16"}


def memory_bandwidth(device: torch.device, nbytes: int, repeats: int = 5) -> float:
    """Bytes/s of the fastest of ``repeats`` copies of ``nbytes`` (each reads and writes them)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = min(run_times(lambda _: dst.copy_(src), lambda: None, device, repeats, warmup=2))
    return 2 * src.numel() * 4 / seconds


def gemm_peak(dtype: torch.dtype, device: torch.device, shapes: Sequence[tuple[int, int, int]],
              repeats: int = 5) -> float:
    """FLOP/s of the fastest repeat of the fastest of the given (m, k, n) products."""
    best = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        seconds = min(run_times(lambda _: a @ b, lambda: None, device, repeats, warmup=2))
        best = max(best, 2 * m * k * n / seconds)
    return best


def profile(name: str, dtype: torch.dtype, peak: float, bandwidth: float, device: torch.device) -> Device:
    """A device profile of what this run measured (``--save-profile`` writes it; ``--device-file`` reads it)."""
    memory = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else \
        (meminfo("MemTotal") or 1)
    return Device(name, {DTYPES[dtype]: peak}, bandwidth, memory, f"measured by costcalc verify on {device.type}",
                  {"note": f"measured in one verify run: the {DTYPES[dtype]} GEMM peak (the fastest repeat of "
                           f"the fastest product) and the bandwidth of large copies (read + written bytes / "
                           f"the fastest repeat); memory: the device's total"})


def precision(dtype: torch.dtype) -> Precision:
    name = DTYPES[dtype]
    return Precision(name, name, name)


def predict(outcome: Outcome, machine: Machine, dtype: torch.dtype) -> list[str]:
    """``predicted_time_s`` and ``measured_over_predicted`` on every timing row; a line per
    workload with the median and worst ratio, and the rows below the floor."""
    chosen = precision(dtype)
    for row, job in zip(outcome.timings, outcome.timed):
        predicted = job.expected("full", chosen, machine)["time_s"]
        row["predicted_time_s"] = float(f"{predicted:.4g}")
        row["measured_over_predicted"] = round(row["time_s"] / predicted, 3) if predicted else None
        row["floor"] = "holds" if row["time_s"] >= (1 - NOISE) * predicted else "BROKEN"
    lines = [f"roofline on the measured profile ({machine.device.peak_flops[DTYPES[dtype]] / 1e12:.3f} TFLOP/s, "
             f"{machine.device.mem_bw / 1e9:.1f} GB/s), full convention: measured / predicted per workload"]
    for workload in dict.fromkeys(r["workload"] for r in outcome.timings):
        ratios = [r["measured_over_predicted"] for r in outcome.timings if r["workload"] == workload]
        lines.append(f"  {workload:<16} median {statistics.median(ratios):.3f}  worst {max(ratios):.3f}  "
                     f"({len(ratios)} row{'s' * (len(ratios) != 1)})")
    broken = [r for r in outcome.timings if r["floor"] != "holds"]
    lines.append("the roofline floor holds on every row (measured >= 95% of predicted)" if not broken else
                 f"FLOOR BROKEN on {len(broken)} row(s): the byte or FLOP model misses executed work -- "
                 + "; ".join(f"{r['workload']} {r['detail']} {r['measured_over_predicted']}" for r in broken))
    return lines
