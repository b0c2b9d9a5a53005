"""Derived expressions -> a recipe as data: each breakdown term as printed arithmetic.

The core derives a workload's terms with sympy; this module prints them once as
expression text in a small grammar of Python arithmetic that needs neither sympy nor
numpy, with the tables that say how terms make outputs (``recipe``). ``costcalc.compiled``
caches that data (JSON, never code), checks each expression against the grammar and
compiles it, so a later start evaluates the same expressions without deriving them again.

The printed text is exact: a term is printed as ``(integer polynomial) // D`` with D
the common denominator of its coefficients, ceilings and floors as integer divisions,
``Min``/``Max``/ceiling through the helpers ``_min``/``_max``/``_cdiv`` (defined in
``compiled``, not in the cache), a sum over tiles as ``sum(... for t in range(...))``. The
same function takes Python ints (one point) or numpy arrays (a sweep) where the term is a
polynomial; a term that is not (``vector`` false) is evaluated point by point.
For each polynomial term a ``bound`` expression gives, in floats, the sum of the
absolute values of its monomials: an upper bound of every intermediate of the integer
evaluation, which tells ``compiled`` when int64 is safe and when exact Python ints
(object arrays) are needed.
"""
from __future__ import annotations

from typing import Callable

import sympy as sp
from sympy.printing.pycode import PythonCodePrinter

from . import vocab
from .vocab import Convention, Logits, ident
from .blocks import Block
from .core.breakdown import Breakdown
from .core import traffic
from .core.linear import block_params, matrices, once_params, p_lin
from .core.mixers import Cached
from .core.registry import WORKLOADS


def _crossover_formulas(block: Block, convention: str, logits: str) -> dict[str, str]:
    """The crossovers of a block kind as formulas (text), for rows of a uniform model."""
    from .core import crossover

    return crossover.formulas(block)


# A recipe is a compiled workload, or one of these, at (block, convention, logits).
RECIPES: dict[str, Callable[[Block, str, str], "Breakdown | dict"]] = {
    **{name: w.build for name, w in WORKLOADS.items() if w.compiled},
    **{f"{name}.bytes": (lambda n: lambda b, c, l: traffic.build(n, b, c, l))(name)
       for name, w in WORKLOADS.items() if w.traffic},
    "p_lin": lambda b, c, l: {"p_lin": p_lin(b), **once_params(b)},
    "params": lambda b, c, l: block_params(b),
    "matrices": lambda b, c, l: matrices(b),
}
CONSTANTS: dict[str, Callable[[Block, str, str], dict[str, str]]] = {"crossover": _crossover_formulas}


class ExactPrinter(PythonCodePrinter):
    """Python for integer-valued expressions, with no float anywhere."""

    def _print_Integer(self, expr) -> str:
        return str(int(expr))

    def _print_Rational(self, expr) -> str:
        raise ValueError(f"a bare rational {expr} cannot be printed exactly; print its term with exact()")

    def _print_Float(self, expr) -> str:
        raise ValueError(f"a float {expr} in a FLOPs expression")

    def _print_Pow(self, expr, rational=False) -> str:
        base, exp = expr.args
        if not (exp.is_Integer and exp > 0):
            raise ValueError(f"power {expr} is not a positive integer power")
        return f"{self.parenthesize(base, 100)}**{int(exp)}"

    def _print_Min(self, expr) -> str:
        return "_min(" + ", ".join(self._argument(a) for a in expr.args) + ")"

    def _print_Max(self, expr) -> str:
        return "_max(" + ", ".join(self._argument(a) for a in expr.args) + ")"

    def _argument(self, expr) -> str:
        """An argument of Min or Max: as ``exact`` prints a term where it holds a fraction (DeepSeek-V4's
        csa keys read in a prefill, R_c f (f - 1) / 2: integer-valued, not integer-coefficient), else as is."""
        if any(not r.is_Integer for r in expr.atoms(sp.Rational)):
            return self.exact(expr)
        return self._print(expr)

    def _print_Cached(self, expr) -> str:
        return f"_min({self._print(expr.args[0])}, 1)"

    def _print_ceiling(self, expr) -> str:
        num, den = _fraction(expr.args[0])
        return f"_cdiv({self._print(num)}, {self._print(den)})"

    def _print_floor(self, expr) -> str:
        num, den = _fraction(expr.args[0])
        return f"(({self._print(num)}) // ({self._print(den)}))"

    def _print_Sum(self, expr) -> str:
        body, (var, lo, hi) = expr.function, expr.limits[0]
        if len(expr.limits) != 1:
            raise ValueError("only single sums are printed")
        return (f"sum({self.exact(body)} for {self._print(var)} in "
                f"range({self._print(lo)}, {self._print(hi)} + 1))")

    def exact(self, expr: sp.Expr) -> str:
        """``expr`` (integer-valued at integer points) as ``(numerator) // D``."""
        if expr.has(sp.Sum) and not expr.is_Add and not expr.is_Mul:
            return self._print(expr)
        num, den = _fraction(expr)
        text = self._print(num)
        if den.free_symbols:     # a size over a size (DeepSeek-V4's o_a_proj: h_q d_h / G_o per group)
            return f"(({text}) // ({self._print(den)}))"
        return text if den == 1 else f"(({text}) // {int(den)})"


def _fraction(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    num, den = sp.fraction(sp.together(expr))
    if not den.free_symbols:
        return sp.expand(num), den
    return num, den


def bound_expr(expr: sp.Expr) -> sp.Expr | None:
    """Sum of |monomials| of the integer numerator -- with each Min/Max (window splits, whose
    arguments are never negative) replaced by the sum of its arguments, an upper bound of it --
    or None where the term is not evaluated over arrays (sums over tiles, ceilings, floors)."""
    if expr.has(sp.Sum, sp.ceiling, sp.floor, sp.Piecewise, Cached):
        return None
    if expr.has(sp.Min, sp.Max):
        num, den = _fraction(expr)
        if den.free_symbols:
            return None
        wide = num.replace(sp.Min, lambda *a: sp.Add(*a)).replace(sp.Max, lambda *a: sp.Add(*a))
        return bound_expr(sp.expand(wide))
    num, den = _fraction(expr)
    if den.free_symbols:
        return None
    symbols = sorted(num.free_symbols, key=lambda x: x.name)
    if not symbols:
        return sp.Abs(num)
    poly = sp.Poly(num, *symbols)
    return sp.Add(*(abs(c) * sp.Mul(*(x**e for x, e in zip(symbols, monom)))
                    for monom, c in poly.terms()))


def polynomial(expr: sp.Expr) -> tuple[int, tuple]:
    """``expr`` as (D, ((coefficient, ((name, power), ...)), ...)): integer monomials over D."""
    num, den = _fraction(expr)
    symbols = sorted(num.free_symbols, key=lambda x: _order(x.name))
    if not symbols:
        return int(den), ((int(num), ()),)
    poly = sp.Poly(num, *symbols)
    monomials = tuple((int(c), tuple((x.name, e) for x, e in zip(symbols, monom) if e))
                      for monom, c in poly.terms())
    return int(den), monomials


def parts(recipe: str, block: Block, convention: str, logits: str
          ) -> tuple[dict[str, sp.Expr], dict[str, tuple[str, ...]], dict[str, str]]:
    """The independent expressions of a recipe (a breakdown's operators and its terms), its
    outputs (each operator, each term, ``linear`` and ``total``: sums of expressions), and its
    constants: ``text`` (formulas as text) and ``term_of`` (each operator's term)."""
    if recipe in CONSTANTS:
        return {}, {}, {"text": CONSTANTS[recipe](block, convention, logits)}
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; expected one of {', '.join(list(RECIPES) + list(CONSTANTS))}")
    built = RECIPES[recipe](block, convention, logits)
    if not isinstance(built, Breakdown):
        return {ident(k): e for k, e in built.items()}, {name: (ident(name),) for name in built}, {"text": {}}
    exprs = {ident(op): e for op, e in built.operators.items()}
    outputs = {op: (ident(op),) for op in built.operators}
    # Each term is printed whole too (its operators added and expanded): a sweep evaluates a
    # term in one pass instead of adding its operators' columns.
    sums = {name: ops for name, ops in built.parts().items() if name in vocab.SUMS}
    for name, ops in built.parts().items():
        if name in vocab.SUMS:
            continue
        if len(ops) == 1:
            outputs[name] = (ident(ops[0]),)
        else:
            exprs[f"term__{name}"] = built.terms[name]
            outputs[name] = (f"term__{name}",)
    for name, ops in sums.items():
        members = vocab.SUMS[name]
        outputs[name] = tuple(part for term in built.terms if term in members for part in outputs[term])
    return exprs, outputs, {"text": {}, "term_of": {op: built.term(op) for op in built.operators}}


def recipe(recipe: str, block: Block, convention: Convention, logits: Logits) -> dict:
    """One recipe as data: each term's parameters and expression text (``terms``; a term
    evaluated over arrays has a ``bound`` too), and the tables ``outputs``, ``vector``,
    ``poly``, ``args``, ``constants`` and ``term_of``. ``costcalc.compiled`` caches it as JSON."""
    exprs, outputs, extra = parts(recipe, block, convention, logits)
    printer = ExactPrinter({"fully_qualified_modules": False, "standard": "python3"})
    terms, vector, polys = [], {}, {}
    for name, expr in exprs.items():
        bound = bound_expr(expr)
        terms.append({"name": name, "params": _params(expr), "expr": printer.exact(expr),
                      "bound": None if bound is None else {"params": _params(bound), "expr": _float_code(bound)}})
        vector[name] = bound is not None
        if bound is not None and not expr.has(sp.Min, sp.Max):
            polys[name] = polynomial(expr)
    return {"recipe": recipe, "block": block.key, "convention": convention.value, "logits": logits.value,
            "args": sorted({a for e in exprs.values() for a in _names(e)}, key=_order),
            "terms": terms, "outputs": outputs, "vector": vector, "poly": polys,
            "constants": extra["text"], "term_of": extra.get("term_of", {})}


def _names(expr: sp.Expr) -> list[str]:
    return [x.name for x in expr.free_symbols]  # a Sum's index is bound, not free


def _order(name: str) -> int:
    return vocab.ORDER.index(name) if name in vocab.ORDER else len(vocab.ORDER)


def _params(expr: sp.Expr) -> list[str]:
    return sorted(_names(expr), key=_order)


def _float_code(expr: sp.Expr) -> str:
    """A non-negative polynomial bound as text (evaluated with values passed as floats)."""
    return sp.pycode(expr, fully_qualified_modules=False)
