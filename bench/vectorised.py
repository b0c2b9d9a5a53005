"""The vectorised sweep against per-point evaluation, same expressions, same exact integers.

Three ways to get a prefill breakdown at many lengths:
  substitute  sympy ``xreplace`` of every term at every point (what a naive tool does);
  scalar      the cached generated code called once per point with Python ints;
  vectorised  the generated code over whole arrays (``costcalc.calc.table``).

    python bench/vectorised.py [--preset llama-3.1-405b] [--batch 64] [--points 200000]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from costcalc import calc, presets  # noqa: E402
from costcalc import symbols as s  # noqa: E402
from costcalc.core import workloads as w  # noqa: E402
from costcalc.evaluate import Query  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama-3.1-405b")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--sympy-points", type=int, default=2_000, help="points for the (slow) substitution")
    args = ap.parse_args()
    spec = presets.load(args.preset)
    seq = np.arange(1, args.points + 1)

    t0 = time.perf_counter()
    table = calc.table(spec, "prefill", "causal", "last", None, batch=np.full(args.points, args.batch), seq=seq)
    vector = time.perf_counter() - t0

    (_, recipe), = Query(spec, "prefill").recipes()   # a uniform model: one group
    base = {**spec.numbers(), "B": args.batch}
    t0 = time.perf_counter()
    scalar_totals = [recipe.evaluate({**base, "S": q}, ["total"])["total"] for q in range(1, args.points + 1)]
    scalar = time.perf_counter() - t0

    bd = w.prefill(spec.groups[0].block)
    values = {**spec.values(), s.B: args.batch}
    m = args.sympy_points
    t0 = time.perf_counter()
    sym_totals = [bd.evaluate({**values, s.S: q})["total"] for q in range(1, m + 1)]
    sympy_per_point = (time.perf_counter() - t0) / m

    assert table["total_flops"] == scalar_totals
    assert table["total_flops"][:m] == sym_totals
    n = args.points
    print(f"{args.preset} prefill, batch {args.batch}, {n:,} lengths; all three agree exactly "
          f"(max total {max(table['total_flops']):.3e}, past 2^63: {max(table['total_flops']) > 2**63})")
    print(f"  vectorised  {vector:8.3f} s   {vector / n * 1e6:8.3f} us/point")
    print(f"  scalar      {scalar:8.3f} s   {scalar / n * 1e6:8.3f} us/point   {scalar / vector:6.1f}x the vectorised time")
    print(f"  substitute  {sympy_per_point * n:8.1f} s   {sympy_per_point * 1e6:8.1f} us/point   "
          f"{sympy_per_point * n / vector:6.0f}x  (measured on {m:,} points, scaled)")


if __name__ == "__main__":
    main()
