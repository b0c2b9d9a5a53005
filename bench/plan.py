"""The size and time of ``costcalc plan``'s whole search: a 671B MoE (DeepSeek-V3) on 8 to 64 H200
and H100, prompts of 4k and outputs of 1k, every layout x batch x weight format x speculation.

Each search starts from nothing of its own (``plan.search`` builds its memo, ``steptimes.Search``, anew)
and runs as the CLI runs it, on every CPU (``forked``) once it is large; the code cache is warm (the
recipes derived once beforehand, as after any first use) and so are the module-level memos of the
searches before it in this run (a model's weight plans and device shards: the 8-device search's are
the 16-device search's too). The first row of each device is the coldest. The machine's speed at the
time is printed beside (a pure-Python loop of 10^7 squares), since the host is shared.

    python bench/plan.py [--preset deepseek-v3] [--devices 8,16,32,64] [--device h200,h100]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costcalc import devices, forked, plan, presets  # noqa: E402
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


FRESH = """
import sys, time
from costcalc import devices, plan, presets
from costcalc.roofline import Machine, Precision
spec, machine, precision = presets.load(sys.argv[1]), Machine(devices.load(sys.argv[2])), Precision()
setup = plan.Setup(spec, precision, machine, int(sys.argv[3]), plan.weight_choices(spec, precision, machine),
                   ("--preset", spec.name))
start = time.perf_counter()
plan.search(setup, plan.Request(4096, 1024, 2.0, 0.030))
print(time.perf_counter() - start)
"""


def fresh(preset: str, device: str, count: int) -> tuple[float, float]:
    """(the search's seconds, the ``costcalc plan`` command's wall seconds), each in a new process."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    env = {**__import__("os").environ, "PYTHONPATH": str(root)}
    got = subprocess.run([sys.executable, "-c", FRESH, preset, device, str(count)], capture_output=True, text=True,
                         env=env, check=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "costcalc", "plan", "-p", preset, "--device", device, "--devices",
                    str(count), "--isl", "4096", "--osl", "1024", "--ttft", "2s", "--tpot", "30ms", "-f", "json"],
                   capture_output=True, env=env, check=True)
    return float(got.stdout.split()[-1]), time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="deepseek-v3")
    ap.add_argument("--devices", default="8,16,32,64")
    ap.add_argument("--device", default="h200,h100")
    ap.add_argument("--output", default=str(Path(__file__).resolve().parent.parent / "reports" / "plan" / "search.md"),
                    help="a Markdown report of the run ('' for none)")
    args = ap.parse_args()
    clock = time.perf_counter()
    sum(i * i for i in range(10 ** 7))
    loop = time.perf_counter() - clock
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
    lines.append(f"all searches: {sum(r['candidates'] for r in rows)} candidates in {total:.2f} s; "
                 f"{forked.cpus()} CPUs; the machine's speed: 10^7 squares in {loop:.2f} s")
    most = max(int(n) for n in args.devices.split(","))
    first = args.device.split(",")[0]
    runs = sorted(fresh(args.preset, first, most) for _ in range(3))      # the median of three, by search time
    alone, wall = runs[1]
    lines.append(f"{spec.name} on {most} {first} alone in a fresh process (only the code cache warm), the median of "
                 f"three: the search {alone:.2f} s (all three {', '.join(f'{a:.2f}' for a, _ in runs)}); the whole "
                 f"command (`costcalc plan`, Python's start and imports included) {wall:.2f} s")
    print("\n".join(lines))
    if args.output:
        import datetime
        import os

        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        text = ["# The plan search's size and time", "",
                f"`python bench/plan.py` on {stamp}: {os.cpu_count()} CPUs, load average {load:.1f} at the end "
                f"(a machine shared with other jobs: the seconds are this run's, not a bound). Each search "
                f"builds its own memo and runs as the CLI does (every CPU once it holds {plan.FORK_FROM} "
                f"triples or more); the code cache and the weight plans of the searches before it are warm. "
                f"'evaluated': (layout, weight format, draft) triples timed, all their batches at once; "
                f"'left out': those not valid or not fitting.", "", "```text",
                *lines, "```", ""]
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text("\n".join(text))


if __name__ == "__main__":
    main()
