"""Derived expressions -> Python source: each breakdown term as a plain function.

The core derives a workload's terms with sympy; this module prints them once as
Python that needs neither sympy nor numpy, so that ``costcalc.compiled`` can cache the
source and a later start evaluates the same expressions without deriving them again.

The printed code is exact: a term is printed as ``(integer polynomial) // D`` with D
the common denominator of its coefficients, ceilings and floors as integer divisions,
``Min``/``Max`` through helpers, a sum over tiles as a ``range`` loop. The same
function takes Python ints (one point) or numpy arrays (a sweep) where the term is a
polynomial; a term that is not (``VECTOR`` false) is evaluated point by point.
For each polynomial term a ``<name>__bound`` function gives, in floats, the sum of the
absolute values of its monomials: an upper bound of every intermediate of the integer
evaluation, which tells ``compiled`` when int64 is safe and when exact Python ints
(object arrays) are needed.
"""
from __future__ import annotations

from typing import Callable

import sympy as sp
from sympy.printing.pycode import PythonCodePrinter

from . import symbols as s
from . import vocab
from .core import workloads as w
from .core.breakdown import LINEAR_PARTS, Breakdown
from .core.linear import block_params, p_lin

# A recipe is ``kind`` with (arch, convention, logits): which core function to print.
KINDS: dict[str, Callable[[str, str, str], Breakdown | dict]] = {
    "prefill": lambda a, c, l: w.prefill(a, c, l),
    "chunk": lambda a, c, l: w.forward(a, c, l, past=s.T, new=s.C),
    "decode": lambda a, c, l: w.decode_step(a, c),
    "decode_phase": lambda a, c, l: w.decode_phase(a, c),
    "train": lambda a, c, l: w.train_step(a, c),
    "p_lin": lambda a, c, l: {"p_lin": p_lin(a)},
    "params": lambda a, c, l: block_params(a),
}

HELPERS = '''
def _pick(numpy_name, builtin):
    def pick(*xs):
        if any(hasattr(x, "__array__") for x in xs):   # arrays: numpy.minimum / numpy.maximum
            import functools
            import numpy
            return functools.reduce(getattr(numpy, numpy_name), xs)
        return builtin(xs)
    return pick


_min = _pick("minimum", min)
_max = _pick("maximum", max)


def _cdiv(a, b):
    return -((-a) // b)
'''


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
        return "_min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Max(self, expr) -> str:
        return "_max(" + ", ".join(self._print(a) for a in expr.args) + ")"

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
    if expr.has(sp.Sum, sp.ceiling, sp.floor, sp.Piecewise):
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


def parts(kind: str, arch: str, convention: str, logits: str) -> tuple[dict[str, sp.Expr], dict[str, tuple[str, ...]]]:
    """The independent terms of a recipe and its output columns (sums of terms)."""
    if kind not in KINDS:
        raise ValueError(f"unknown recipe kind {kind!r}; expected one of {', '.join(KINDS)}")
    built = KINDS[kind](arch, convention, logits)
    if isinstance(built, Breakdown):
        terms = dict(built.terms)
        outputs = {}
        for name, expr in built.all_terms().items():
            if name in terms:
                outputs[name] = (name,)
            elif name == "linear":
                outputs[name] = tuple(n for n in built.names if n in LINEAR_PARTS)
            else:
                outputs[name] = built.names
        return terms, outputs
    return dict(built), {name: (name,) for name in built}


def source(kind: str, arch: str, convention: str, logits: str, stamp: str = "") -> str:
    """The Python module for one recipe."""
    terms, outputs = parts(kind, arch, convention, logits)
    printer = ExactPrinter({"fully_qualified_modules": False, "standard": "python3"})
    lines = [f"# generated by costcalc.codegen: {kind} arch={arch} convention={convention} "
             f"logits={logits} {stamp}".rstrip(), "# do not edit: regenerated when the core changes", HELPERS]
    vector, polys = {}, {}
    for name, expr in terms.items():
        args = _args(expr)
        lines.append(f"def {name}({args}**_):\n    return {printer.exact(expr)}\n")
        bound = bound_expr(expr)
        vector[name] = bound is not None
        if bound is not None:
            lines.append(f"def {name}__bound({_args(bound)}**_):\n    return {_float_code(bound)}\n")
            if not expr.has(sp.Min, sp.Max):
                polys[name] = polynomial(expr)
    lines.append(f"TERMS = {tuple(terms)!r}")
    lines.append(f"OUTPUTS = {outputs!r}")
    lines.append(f"VECTOR = {vector!r}")
    lines.append(f"POLY = {polys!r}")
    lines.append(f"ARGS = {tuple(sorted({a for e in terms.values() for a in _names(e)}, key=_order))!r}")
    return "\n".join(lines) + "\n"


def _names(expr: sp.Expr) -> list[str]:
    return [x.name for x in expr.free_symbols]  # a Sum's index is bound, not free


def _order(name: str) -> int:
    return vocab.ORDER.index(name) if name in vocab.ORDER else len(vocab.ORDER)


def _args(expr: sp.Expr) -> str:
    names = sorted(_names(expr), key=_order)
    return "".join(f"{n}, " for n in names)


def _float_code(expr: sp.Expr) -> str:
    """Float evaluation of a non-negative polynomial bound (values passed as floats)."""
    return sp.pycode(expr, fully_qualified_modules=False)
