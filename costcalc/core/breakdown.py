"""A breakdown: named FLOPs terms of one workload, with ``linear`` and ``total`` as sums.

Terms, in order: ``attn_proj`` (Q, K, V, O projections; MLA's down/up projections),
``ffn`` (dense SwiGLU) or ``router`` + ``experts`` (MoE) + ``shared_experts``,
``attention`` (QK^T and AV), ``lm_head``.
``linear`` is the block linear part (everything but attention and LM head).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import sympy as sp

from ..vocab import LINEAR_PARTS

ORDER = LINEAR_PARTS + ("attention", "lm_head")


@dataclass(frozen=True)
class Breakdown:
    terms: Mapping[str, sp.Expr]

    def __post_init__(self) -> None:
        unknown = set(self.terms) - set(ORDER)
        if unknown:
            raise ValueError(f"unknown breakdown terms: {sorted(unknown)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name in ORDER if name in self.terms)

    @property
    def linear(self) -> sp.Expr:
        return sp.Add(*(self.terms[n] for n in LINEAR_PARTS if n in self.terms))

    @property
    def total(self) -> sp.Expr:
        return sp.Add(*self.terms.values())

    def all_terms(self) -> dict[str, sp.Expr]:
        """The linear parts, ``linear``, then attention and LM head, then ``total``."""
        out = {n: self.terms[n] for n in self.names if n in LINEAR_PARTS}
        out["linear"] = self.linear
        out.update({n: self.terms[n] for n in self.names if n not in LINEAR_PARTS})
        out["total"] = self.total
        return out

    def map(self, fn: Callable[[sp.Expr], sp.Expr]) -> "Breakdown":
        return Breakdown({n: _expand(fn(e)) for n, e in self.terms.items()})

    def __add__(self, other: "Breakdown") -> "Breakdown":
        names = [n for n in ORDER if n in self.terms or n in other.terms]
        zero = sp.Integer(0)
        return Breakdown({n: _expand(self.terms.get(n, zero) + other.terms.get(n, zero))
                          for n in names})

    def evaluate(self, values: Mapping[sp.Symbol, int]) -> dict[str, int]:
        """Exact integer value of every term (``all_terms`` order) at the given point."""
        point = {sym: sp.Integer(v) for sym, v in values.items()}
        return {n: exact_int(e, point, n) for n, e in self.all_terms().items()}


def exact_int(expr: sp.Expr, point: Mapping[sp.Symbol, sp.Integer], name: str = "value") -> int:
    """Substitute and return a Python int; refuse anything that is not an exact integer."""
    value = sp.sympify(expr).xreplace(point)
    if not value.is_Integer and value.has(sp.Sum):  # a sum over tiles: add up its terms
        value = add_up(value)
    if not value.is_Integer:
        missing = sorted(str(x) for x in value.free_symbols)
        raise ValueError(f"{name} is not an exact integer at this point: {value}"
                         + (f" (unbound: {', '.join(missing)})" if missing else ""))
    return int(value)


def add_up(expr: sp.Expr) -> sp.Expr:
    """Every Sum with numeric limits replaced by its terms added one by one.

    Not ``Sum.doit()``: sympy 1.14 tries a closed form first and gets sums of
    ceiling/floor/Min terms wrong (a tile sum of 64 came out as 48)."""
    def terms(body, *limits):
        (index, lo, hi), = limits
        if not (lo.is_Integer and hi.is_Integer):
            return sp.Sum(body, (index, lo, hi))
        return sp.Add(*(body.xreplace({index: sp.Integer(v)}) for v in range(int(lo), int(hi) + 1)))
    return expr.replace(sp.Sum, terms)


def _expand(expr: sp.Expr) -> sp.Expr:
    """Expand closed forms; leave sums over tiles and window splits (Min/Max) as they are."""
    return expr if expr.has(sp.Sum, sp.Min, sp.Max) else sp.expand(expr)
