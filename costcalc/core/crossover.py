"""Where attention FLOPs equal block linear FLOPs, solved from the derived terms.

Both are FLOPs crossovers for one sequence with the LM head left out -- not time
crossovers: attention can dominate latency far earlier through KV-cache bandwidth.

- ``decode_t_equal``: the chapter's T_equal. A decode step reading K keys costs
  ``2 P_lin`` linear and ``4 L d_q K`` attention; they are equal at
  ``K = P_lin / (2 L d_q)``. The step's own key is one of the K, so the cache holds
  ``T_equal - 1`` tokens before that step.
- ``prefill``: the prompt length S where prefill attention equals prefill linear,
  under a given convention.
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .. import symbols as s
from .workloads import decode_step, prefill


def _positive_root(equation: sp.Eq, unknown: sp.Symbol) -> sp.Expr:
    roots = [r for r in sp.solve(equation, unknown) if r != 0]
    if len(roots) != 1:
        raise ArithmeticError(f"expected one non-zero root for {unknown}, got {roots}")
    return sp.factor(roots[0])


@lru_cache(maxsize=None)
def decode_t_equal(arch: str) -> sp.Expr:
    """Keys read per decode step at which attention equals linear FLOPs (B = 1)."""
    step = decode_step(arch).map(lambda e: e.subs(s.B, 1))
    keys = sp.Symbol("K", integer=True, positive=True)
    # decode_step is written in T cached tokens; the step reads K = T + 1 keys.
    attention = step.terms["attention"].subs(s.T, keys - 1)
    return _positive_root(sp.Eq(step.linear, attention), keys)


@lru_cache(maxsize=None)
def prefill_crossover(arch: str, convention: str) -> sp.Expr:
    """Prompt length at which prefill attention equals prefill linear FLOPs (B = 1)."""
    pre = prefill(arch, convention).map(lambda e: e.subs(s.B, 1))
    return _positive_root(sp.Eq(pre.linear, pre.terms["attention"]), s.S)


def first_crossing(gap: sp.Expr, x: sp.Symbol, lowest: int = 1) -> sp.Expr | None:
    """The smallest x >= ``lowest`` where ``gap`` (attention - linear) reaches 0, or None.

    ``gap`` may hold Min/Max (sliding windows): the x axis is cut where any Min/Max
    switches argument; on each piece the Min/Max are resolved and the polynomial solved
    exactly. None means the two never meet (e.g. every layer windowed, and the windows too
    small for attention to catch up with the linear layers).
    """
    real = sp.Dummy("x", real=True)      # the root need not be an integer: drop x's assumptions
    gap = gap.xreplace({x: real})
    x = real
    cuts = set()
    for atom in gap.atoms(sp.Min, sp.Max):
        for a in atom.args:
            for b in atom.args:
                if a is not b:
                    cuts |= {r for r in sp.solve(sp.Eq(a, b), x) if r.is_real and r > lowest}
    edges = [sp.Integer(lowest)] + sorted(cuts) + [sp.oo]
    for lo, hi in zip(edges, edges[1:]):
        probe = (lo + hi) / 2 if hi != sp.oo else lo + 1
        piece = _resolve(gap, x, probe)
        for root in sorted(r for r in sp.solve(sp.Eq(piece, 0), x) if r.is_real):
            if lo <= root <= hi:
                return sp.nsimplify(root) if root.is_Rational else root
    return None


def _resolve(expr: sp.Expr, x: sp.Symbol, at: sp.Expr) -> sp.Expr:
    """``expr`` with each Min/Max replaced by the argument it takes at x = ``at``."""
    def pick(kind):
        def choose(*args):
            values = [float(a.subs(x, at)) for a in args]
            best = min(values) if kind is sp.Min else max(values)
            return args[values.index(best)]
        return choose
    return expr.replace(sp.Min, pick(sp.Min)).replace(sp.Max, pick(sp.Max))


def decode_gap(arch: str) -> tuple[sp.Expr, sp.Symbol]:
    """Attention - linear of one decode step (B = 1, no LM head) in K = keys read."""
    step = decode_step(arch).map(lambda e: e.subs(s.B, 1))
    keys = sp.Symbol("K", integer=True, positive=True)
    return step.terms["attention"].subs(s.T, keys - 1) - step.linear, keys


def prefill_gap(arch: str, convention: str) -> sp.Expr:
    """Attention - linear of a prefill of S (B = 1, no LM head)."""
    pre = prefill(arch, convention).map(lambda e: e.subs(s.B, 1))
    return pre.terms["attention"] - pre.linear
