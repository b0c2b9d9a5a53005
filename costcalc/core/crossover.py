"""Where attention FLOPs equal block linear FLOPs, solved symbolically for one block kind.

Both are FLOPs crossovers for one sequence with the LM head left out -- not time
crossovers: attention can dominate latency far earlier through KV-cache bandwidth.

- ``decode_t_equal``: the chapter's T_equal. A decode step reading K keys costs
  ``2 P_lin`` linear and ``4 L d_q K`` attention; they are equal at
  ``K = P_lin / (2 L d_q)``. The step's own key is one of the K, so the cache holds
  ``T_equal - 1`` tokens before that step.
- ``prefill_crossover``: the prompt length S where prefill attention equals prefill linear,
  under a given convention.

These are the formulas ``costcalc formula crossover`` prints and the ``formula`` column of a
uniform model's crossover rows; the numbers of a model (layer groups, windows) are solved
from the compiled terms by ``costcalc.crossover``.
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .. import symbols as s
from ..blocks import Block
from ..vocab import Convention
from .workloads import decode, prefill


def _positive_root(equation: sp.Eq, unknown: sp.Symbol) -> sp.Expr:
    roots = [r for r in sp.solve(equation, unknown) if r != 0]
    if len(roots) != 1:
        raise ArithmeticError(f"expected one non-zero root for {unknown}, got {roots}")
    return sp.factor(roots[0])


@lru_cache(maxsize=None)
def decode_t_equal(block: Block) -> sp.Expr:
    """Keys read per decode step at which attention equals linear FLOPs (B = 1)."""
    step = decode(block).map(lambda e: e.subs(s.B, 1))
    # a decode step is written in T cached tokens; the step reads K = T + 1 keys.
    attention = step.terms["attention"].subs(s.T, s.K - 1)
    return _positive_root(sp.Eq(step.linear, attention), s.K)


@lru_cache(maxsize=None)
def prefill_crossover(block: Block, convention: Convention) -> sp.Expr:
    """Prompt length at which prefill attention equals prefill linear FLOPs (B = 1)."""
    pre = prefill(block, convention).map(lambda e: e.subs(s.B, 1))
    return _positive_root(sp.Eq(pre.linear, pre.terms["attention"]), s.S)


def formulas(block: Block) -> dict[str, str]:
    """The crossovers of a block kind without a window, as text (a window, a chunk or a sparse
    layer's top-k makes them piecewise; a block without softmax attention has none)."""
    if block.attention in ("window", "chunk") or block.sparse or block.v4 or not block.attends:
        return {}
    return {"decode_t_equal": str(decode_t_equal(block)),
            **{f"prefill_{c.value}": str(prefill_crossover(block, c)) for c in (Convention.causal, Convention.full)}}
