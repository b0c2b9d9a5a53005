"""A 1,000,000-point prefill sweep to CSV: costcalc against the obvious hand-written loop.

The loop is what a user would write instead of the tool: the closed forms of the cost
model typed by hand for a dense model, a ``for`` over the lengths, ``csv.writer`` per row,
writing the same columns costcalc writes. Both runs write a file; the files must be equal.

    python bench/sweep_csv.py [--preset llama-3.1-405b] [--batch 64] [--points 1000000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import csv
import filecmp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def hand_loop(path: str, name: str, sizes: dict, batch: int, points: int) -> None:
    """The hand-written alternative: closed forms typed in, one row at a time."""
    L, d, m, V = sizes["L"], sizes["d"], sizes["m"], sizes["V"]
    d_q, d_kv = sizes["h_q"] * sizes["d_h"], sizes["h_kv"] * sizes["d_h"]
    proj = 4 * L * d * (d_q + d_kv) * batch      # x S
    ffn = 6 * L * d * m * batch                   # x S
    att = 2 * L * d_q * batch                     # x S (S + 1)
    head = 2 * d * V * batch
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["preset", "workload", "convention", "batch", "seq", "logits", "attn_proj_flops",
                    "ffn_flops", "linear_flops", "attention_flops", "lm_head_flops", "total_flops"])
        for s in range(1, points + 1):
            a, f_ = proj * s, ffn * s
            lin = a + f_
            at = att * s * (s + 1)
            w.writerow([name, "prefill", "causal", batch, s, "last", a, f_, lin, at, head, lin + at + head])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama-3.1-405b")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from costcalc import presets

    spec = presets.load(args.preset)
    tmp = Path(tempfile.mkdtemp(prefix="costcalc-bench-"))
    ours, theirs = tmp / "costcalc.csv", tmp / "loop.csv"
    command = [sys.executable, "-m", "costcalc", "prefill", "--preset", args.preset, "--seq",
               f"1:{args.points}", "--batch", str(args.batch), "--output", str(ours)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, check=True, env=env, capture_output=True)   # warm the code cache
    tool, loop = [], []
    for _ in range(args.repeats):   # alternate, so both see the same machine
        t0 = time.perf_counter()
        subprocess.run(command, check=True, env=env, capture_output=True)
        tool.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hand_loop(str(theirs), spec.name, spec.sizes, args.batch, args.points)
        loop.append(time.perf_counter() - t0)
    same = filecmp.cmp(ours, theirs, shallow=False)
    t, l = statistics.median(tool), statistics.median(loop)
    print(f"{args.points:,} points, {args.preset}, batch {args.batch}, {ours.stat().st_size / 1e6:.0f} MB")
    print(f"costcalc (whole process, from start): median {t:.2f} s  {[round(x, 2) for x in tool]}")
    print(f"hand loop + csv.writer (in process):  median {l:.2f} s  {[round(x, 2) for x in loop]}")
    print(f"ratio costcalc / loop: {t / l:.2f}   files identical: {same}")
    ours.unlink(), theirs.unlink(), tmp.rmdir()
    if not same:
        sys.exit("the two files differ")


if __name__ == "__main__":
    main()
