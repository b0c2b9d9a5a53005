"""The size and time of ``costcalc plan``'s whole search: a 671B MoE (DeepSeek-V3) on 8 to 64 H200
and H100, prompts of 4k and outputs of 1k, every layout x batch x weight format x speculation.

Each device's searches share one cache (``plan.search(cache=...)``): a layout of 8 devices is also a
layout (with copies) of 16, 32 and 64, evaluated once. Times are this machine's, one process, warm
code cache (the recipes derived once beforehand).

    python bench/plan.py [--preset deepseek-v3] [--devices 8,16,32,64] [--device h200,h100]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costcalc import devices, plan, presets  # noqa: E402
from costcalc.errors import CostcalcError  # noqa: E402
from costcalc.roofline import Machine, Precision  # noqa: E402


def search(spec, device: str, counts: list[int], request: plan.Request) -> list[dict]:
    """One row per device count: candidates, (layout x format x draft) evaluated and left out, seconds."""
    machine, precision = Machine(devices.load(device)), Precision()
    weights = plan.weight_choices(spec, precision, machine)
    out = []
    for n in counts:
        setup = plan.Setup(spec, precision, machine, n, weights, ("--preset", spec.name), ("--device", device))
        start = time.perf_counter()
        try:
            found = plan.search(setup, request)
        except CostcalcError as exc:        # nothing fits (DeepSeek-V3 on 8 H100: 671 GB of fp8 weights)
            out.append({"device": device, "devices": n, "candidates": 0, "evaluated": 0, "left_out": "all",
                        "front": 0, "seconds": time.perf_counter() - start, "best": None, "why": str(exc)})
            continue
        seconds = time.perf_counter() - start
        best, met = plan.chosen(found.rows, request)
        out.append({"device": device, "devices": n, "candidates": len(found.rows), "evaluated": found.evaluated,
                    "left_out": len(found.skipped), "front": sum(r["pareto"] for r in found.rows),
                    "seconds": seconds, "best": best if met else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="deepseek-v3")
    ap.add_argument("--devices", default="8,16,32,64")
    ap.add_argument("--device", default="h200,h100")
    ap.add_argument("--output", default=str(Path(__file__).resolve().parent.parent / "reports" / "plan" / "search.md"),
                    help="a Markdown report of the run ('' for none)")
    args = ap.parse_args()
    spec = presets.load(args.preset)
    request = plan.Request(4096, 1024, 2.0, 0.030)
    counts = [int(n) for n in args.devices.split(",")]
    warm = plan.Setup(spec, Precision(), Machine(devices.load("h200")), 8, (None,), ("--preset", spec.name))
    plan.search(warm, plan.Request(256, 4, 100.0, 100.0))     # every recipe derived and cached first
    rows, start = [], time.perf_counter()
    for device in args.device.split(","):
        rows += search(spec, device, counts, request)
    total = time.perf_counter() - start
    lines = [f"{spec.name}, prompts 4096, outputs 1024, ttft <= 2 s, tpot <= 30 ms (roofline timing)",
             f"{'device':8} {'devices':>7} {'candidates':>10} {'evaluated':>9} {'left out':>8} {'front':>5} "
             f"{'seconds':>8}  best meeting the targets"]
    for r in rows:
        best = r["best"]
        said = (f"{best['layout']} batch {best['batch']} {best['weight_dtype']}: "
                f"{best['tokens_per_s_per_gpu']:.0f} tok/s/gpu" if best else r.get("why", "none")[:60])
        lines.append(f"{r['device']:8} {r['devices']:>7} {r['candidates']:>10} {r['evaluated']:>9} "
                     f"{r['left_out']:>8} {r['front']:>5} {r['seconds']:>8.2f}  {said}")
    lines.append(f"all searches: {sum(r['candidates'] for r in rows)} candidates in {total:.2f} s")
    print("\n".join(lines))
    if args.output:
        import datetime
        import os

        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        text = ["# The plan search's size and time", "",
                f"`python bench/plan.py` on {stamp}: {os.cpu_count()} CPUs, load average {load:.1f} at the end "
                f"(a machine shared with other jobs: the seconds are this run's, not a bound). Each device's "
                f"searches share one cache (a layout of 8 devices is one of 16, with copies), so a row's seconds "
                f"are what that search added. 'evaluated': (layout, weight format, draft) triples timed, each "
                f"over all its batches at once; 'left out': those not valid or not fitting.", "", "```text",
                *lines, "```", ""]
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text("\n".join(text))


if __name__ == "__main__":
    main()
