"""The symbolic formula of each workload, ready to print: per term, readable and LaTeX.

Linear terms that are a multiple of the executed parameters P_lin print as
``<multiple>*P_lin``; everything else is factored.
"""
from __future__ import annotations

from typing import Any

import sympy as sp

from . import symbols as s
from .blocks import Block, parse
from .core import crossover as cx
from .core.linear import p_lin
from .core.registry import WORKLOADS, workload
from .errors import CostcalcError
from .vocab import SUMS, Convention, Logits

TOPICS = {**{name: w.summary for name, w in WORKLOADS.items() if name != "decode_phase"},
          "crossover": "where attention FLOPs equal linear FLOPs"}


def pretty(expr: sp.Expr, block: Block) -> sp.Expr:
    """``expr`` as a multiple of P_lin when it is one, else factored."""
    ratio = sp.cancel(expr / p_lin(block))
    if ratio.free_symbols <= {s.B, s.S, s.C, s.N, s.T, s.n_chunks} | s.S_i.free_symbols:
        return sp.factor(ratio) * s.P_lin
    return sp.factor(expr)


def resolve(topic: str) -> str:
    """A formula topic by name or alias (``cached-prefill`` is ``cached_prefill``)."""
    if topic == "crossover":
        return topic
    try:
        name = workload(topic).name
    except ValueError:
        name = None
    if name not in TOPICS:
        raise CostcalcError(f"unknown workload {topic!r}; expected one of {', '.join(TOPICS)}")
    return name


def formula_rows(topic: str, arch: str, convention: str, logits: str) -> list[dict[str, Any]]:
    """One row per term: ``term``, ``formula`` (text) and ``latex`` (the names parsed here: the
    core takes values)."""
    name, block, kind = resolve(topic), parse(arch), Convention(convention)
    base = {"workload": name, "arch": arch}
    first = {**base, "convention": convention, "term": "P_lin", **_texts(p_lin(block))}
    if name == "crossover":
        if not block.attends:         # no softmax attention: nothing catches up with the linear layers
            never = {"formula": "never (no softmax attention)", "latex": r"\text{never (no softmax attention)}"}
            return [first] + [{**base, "convention": convention, "term": t, **never}
                              for t in ("decode_t_equal", f"prefill_crossover_{convention}")]
        terms = {"decode_t_equal": cx.decode_t_equal(block),
                 f"prefill_crossover_{convention}": cx.prefill_crossover(block, kind)}
        return [first] + [{**base, "convention": convention, "term": t, **_texts(e)} for t, e in terms.items()]
    fixed = WORKLOADS[name].logits          # a decode step: the last position; training: all
    logits = fixed.value if fixed is not None else logits
    breakdown = WORKLOADS[name].build(block, kind, Logits(logits))
    parts = breakdown.all_terms()
    shown = {term: pretty(e, block) for term, e in parts.items() if term != "total"}
    total_parts = [shown["linear"]] + [shown[n] for n in parts if n in SUMS["total"] and n not in SUMS["linear"]]
    shown["total"] = sp.Add(*total_parts, evaluate=False)
    if name == "varlen_prefill":
        shown = {term: sp.Sum(e, (s.i, 1, s.B)) for term, e in shown.items()}
    rows = [{**base, "convention": convention, "logits": logits, "term": "P_lin", **_texts(p_lin(block))}]
    for term, expr in shown.items():
        rows.append({**base, "convention": convention, "logits": logits, "term": term, **_texts(expr)})
    return rows


def describe(topic: str) -> str:
    return TOPICS[resolve(topic)]


def _texts(expr: sp.Expr) -> dict[str, str]:
    return {"formula": sp.sstr(expr), "latex": sp.latex(expr)}
