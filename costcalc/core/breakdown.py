"""A breakdown: the FLOPs of one workload by operator, each charged to a term.

Operators are the projections of ``core.linear`` by name (``q_proj``, ``experts.up_proj``,
...), ``attention`` and ``lm_head``; terms are ``costcalc.vocab.TERMS``, and the sums
``linear`` (the block linear parts) and ``total`` are ``vocab.SUMS``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import sympy as sp

from ..vocab import LINEAR_PARTS, SUMS, TERMS, TERM_ORDER
from .attention import expand

_TERMS = tuple(t.name for t in TERMS)


@dataclass(frozen=True)
class Breakdown:
    operators: Mapping[str, sp.Expr]                 # operator -> FLOPs
    term_of: Mapping[str, str] = field(default_factory=dict)   # operator -> term (default: its own name)

    def __post_init__(self) -> None:
        unknown = {self.term(op) for op in self.operators} - set(_TERMS)
        if unknown:
            raise ValueError(f"unknown breakdown terms: {sorted(unknown)}")

    def term(self, operator: str) -> str:
        return self.term_of.get(operator, operator)

    @property
    def terms(self) -> dict[str, sp.Expr]:
        """FLOPs per term, in term order (only the terms this workload has)."""
        out: dict[str, sp.Expr] = {}
        for op, expr in self.operators.items():
            out[self.term(op)] = out.get(self.term(op), sp.Integer(0)) + expr
        return {t: expand(out[t]) for t in _TERMS if t in out}

    @property
    def linear(self) -> sp.Expr:
        return sp.Add(*(e for t, e in self.terms.items() if t in LINEAR_PARTS))

    @property
    def total(self) -> sp.Expr:
        return sp.Add(*self.operators.values())

    def parts(self) -> dict[str, tuple[str, ...]]:
        """Each output column (terms, ``linear``, ``total``) as the operators it sums."""
        out = {t: tuple(op for op in self.operators if self.term(op) == t) for t in self.terms}
        for name, members in SUMS.items():
            out[name] = tuple(op for op in self.operators if self.term(op) in members)
        return {name: out[name] for name in TERM_ORDER if name in out and out[name]}

    def all_terms(self) -> dict[str, sp.Expr]:
        """The linear parts, ``linear``, then attention and LM head, then ``total``."""
        terms = self.terms
        return {name: sp.Add(*(self.operators[op] for op in ops)) if name not in terms else terms[name]
                for name, ops in self.parts().items()}

    def map(self, fn: Callable[[sp.Expr], sp.Expr]) -> "Breakdown":
        return Breakdown({op: expand(fn(e)) for op, e in self.operators.items()}, self.term_of)

    def expanded(self) -> "Breakdown":
        """Every operator's closed form expanded (sums over tiles and window splits kept)."""
        return self.map(lambda e: e)

    def __add__(self, other: "Breakdown") -> "Breakdown":
        zero = sp.Integer(0)
        names = list(self.operators) + [op for op in other.operators if op not in self.operators]
        return Breakdown({op: expand(self.operators.get(op, zero) + other.operators.get(op, zero)) for op in names},
                         {**self.term_of, **other.term_of})

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
