"""Start-up: a single-point costcalc question against llm-analysis, whole processes, same run.

Each command is run ``--runs`` times, alternating tools so both see the same machine;
the median wall time from process start to exit is reported. costcalc runs warm (its
generated-code cache filled by one untimed run, as after any first use) and, for
reference, cold (a fresh cache: the sympy derivation included).

The peer, llm-analysis, is best installed in a venv of its own (it brings transformers):

    python3 -m venv /tmp/llmvenv && /tmp/llmvenv/bin/pip install llm-analysis
    python bench/startup.py --peer-python /tmp/llmvenv/bin/python
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COSTCALC = {
    "prefill table": ["prefill", "--preset", "llama-2-7b", "--seq", "4096"],
    "prefill json": ["prefill", "--preset", "llama-2-7b", "--seq", "4096", "--format", "json"],
    "decode table": ["decode", "--preset", "llama-2-7b", "--context", "4096"],
    "generate json": ["generate", "--preset", "llama-2-7b", "--prompt", "4096", "--new", "256", "--format", "json"],
}
PEER = ["-m", "llm_analysis.analysis", "infer", "--model_name", "NousResearch_Llama-2-7b-hf",
        "--seq_len", "4096", "--output_len", "1"]


def wall(command: list[str], env: dict, check: bool = True) -> float:
    t0 = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=check)
    return time.perf_counter() - t0


def peer_answers(peer: list[str]) -> bool:
    """llm-analysis 0.2.2 exits 2 after printing its analysis (fire cannot print the
    returned summary); what counts is that the analysis ran."""
    done = subprocess.run(peer, capture_output=True, text=True)
    return "prefill_latency" in done.stdout + done.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--peer-python", default=None, help="Python of a venv with llm-analysis installed.")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="costcalc-startup-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COSTCALC_CACHE_DIR": str(cache)}
    base = [sys.executable, "-m", "costcalc"]
    peer = [args.peer_python, *PEER] if args.peer_python else None
    if peer and not peer_answers(peer):
        sys.exit("llm-analysis did not produce its analysis; check --peer-python")
    cold = []
    for _ in range(3):
        shutil.rmtree(cache, ignore_errors=True)
        cold.append(wall(base + COSTCALC["prefill table"], env))
    for argv in COSTCALC.values():
        wall(base + argv, env)   # fill the cache for every recipe used
    times: dict[str, list[float]] = {name: [] for name in COSTCALC}
    times["llm-analysis infer"] = []
    for _ in range(args.runs):
        for name, argv in COSTCALC.items():
            times[name].append(wall(base + argv, env))
        if peer:
            times["llm-analysis infer"].append(wall(peer, os.environ.copy(), check=False))
    shutil.rmtree(cache, ignore_errors=True)
    peer_median = statistics.median(times["llm-analysis infer"]) if peer else None
    print(f"median wall time over {args.runs} runs (process start to exit), Llama-2-7B, 4096 tokens")
    for name, values in times.items():
        if not values:
            print(f"  {name:<22} not run (give --peer-python)")
            continue
        med = statistics.median(values)
        ratio = f"  {med / peer_median:.2f}x llm-analysis" if peer_median and name in COSTCALC else ""
        print(f"  {name:<22} {med:.3f} s{ratio}")
    print(f"  {'prefill table, cold':<22} {statistics.median(cold):.3f} s  (fresh cache: derived with sympy)")


if __name__ == "__main__":
    main()
