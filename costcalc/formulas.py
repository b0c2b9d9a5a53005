"""The symbolic formula of each workload, ready to print: per term, readable and LaTeX.

Linear terms that are a multiple of the executed parameters P_lin print as
``<multiple>*P_lin``; everything else is factored.
"""
from __future__ import annotations

from typing import Any, Callable

import sympy as sp

from . import symbols as s
from .core import crossover as cx
from .core import workloads as w
from .core.breakdown import Breakdown
from .core.linear import p_lin
from .errors import CostcalcError
from .vocab import FORMULAS

n_chunks = sp.Symbol("n", integer=True, positive=True)   # chunks in a uniform schedule
S_i = sp.IndexedBase("S", integer=True, positive=True)[s.i]  # length of sequence i


def _one_of_varlen(arch: str, convention: str, logits: str) -> Breakdown:
    """Sequence i of a packed variable-length batch: a B=1 prefill of S_i tokens.
    The batch is the sum over i = 1..B (``formula_rows`` wraps each term in that Sum)."""
    return w.prefill(arch, convention, logits).map(lambda e: e.subs(s.B, 1).subs(s.S, S_i))


BUILDERS: dict[str, Callable[[str, str, str], Breakdown]] = {
    "prefill": lambda a, c, l: w.prefill(a, c, l),
    "cached-prefill": lambda a, c, l: w.cached_prefill(a, c, l),
    "varlen": _one_of_varlen,
    "chunked": lambda a, c, l: w.uniform_chunks(a, c, n_chunks),
    "decode": lambda a, c, l: w.decode_step(a, c),
    "generate": lambda a, c, l: w.generation(a, c, l),
    "train": lambda a, c, l: w.train_step(a, c),
}
WORKLOADS = {name: (FORMULAS[name], build) for name, build in BUILDERS.items()}


def pretty(expr: sp.Expr, arch: str) -> sp.Expr:
    """``expr`` as a multiple of P_lin when it is one, else factored."""
    ratio = sp.cancel(expr / p_lin(arch))
    if ratio.free_symbols <= {s.B, s.S, s.C, s.N, s.T, n_chunks} | S_i.free_symbols:
        return sp.factor(ratio) * s.P_lin
    return sp.factor(expr)


def formula_rows(workload: str, arch: str, convention: str, logits: str) -> list[dict[str, Any]]:
    """One row per term: ``term``, ``formula`` (text) and ``latex``."""
    base = {"workload": workload, "arch": arch}
    if workload == "crossover":
        terms = {"decode_t_equal": cx.decode_t_equal(arch),
                 f"prefill_crossover_{convention}": cx.prefill_crossover(arch, convention)}
        return [{**base, "convention": convention, "term": "P_lin", **_texts(p_lin(arch))}] + [
            {**base, "convention": convention, "term": name, **_texts(e)} for name, e in terms.items()]
    if workload not in WORKLOADS:
        raise CostcalcError(f"unknown workload {workload!r}; expected one of "
                            f"{', '.join(list(WORKLOADS) + ['crossover'])}")
    breakdown = WORKLOADS[workload][1](arch, convention, logits)
    rows = [{**base, "convention": convention, "logits": logits, "term": "P_lin", **_texts(p_lin(arch))}]
    parts = breakdown.all_terms()
    shown = {name: pretty(e, arch) for name, e in parts.items() if name != "total"}
    total_parts = [shown["linear"]] + [shown[n] for n in parts if n in ("attention", "lm_head")]
    shown["total"] = sp.Add(*total_parts, evaluate=False)
    if workload == "varlen":
        shown = {name: sp.Sum(e, (s.i, 1, s.B)) for name, e in shown.items()}
    for name, expr in shown.items():
        rows.append({**base, "convention": convention, "logits": logits, "term": name, **_texts(expr)})
    return rows


def describe(workload: str) -> str:
    return FORMULAS[workload]


def _texts(expr: sp.Expr) -> dict[str, str]:
    return {"formula": sp.sstr(expr), "latex": sp.latex(expr)}
