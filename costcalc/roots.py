"""Exact polynomial pieces and their roots, for the crossovers (``costcalc.crossover``): a
polynomial of degree at most two fitted exactly through integer points, and its real roots as a
rational or ``p + q sqrt(m)``. None of it needs sympy."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

Poly = tuple[Fraction, Fraction, Fraction]        # c0 + c1 x + c2 x^2
FOREVER = math.inf


def fit(f, xs: Sequence[int]) -> Poly:
    """The polynomial of degree < len(xs) through (x, f(x)), exactly (Lagrange)."""
    ys = [Fraction(f(x)) for x in xs]
    coeffs = [Fraction(0)] * 3
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        basis = [Fraction(1)]                       # prod over j != i of (x - xj) / (xi - xj)
        for j, xj in enumerate(xs):
            if j != i:
                basis = [(basis[k - 1] if k else 0) - xj * (basis[k] if k < len(basis) else 0)
                         for k in range(len(basis) + 1)]
                basis = [c / (xi - xj) for c in basis]
        for k, c in enumerate(basis):
            coeffs[k] += yi * c
    return (coeffs[0], coeffs[1], coeffs[2])


def add(polys: list[Poly]) -> Poly:
    return tuple(sum(p[k] for p in polys) for k in range(3))   # type: ignore[return-value]


# --- exact roots ------------------------------------------------------------------------------

class Root:
    """``p + q sqrt(m)`` with rational p, q and a square-free-ish integer m (m = 1: rational)."""

    def __init__(self, p: Fraction, q: Fraction = Fraction(0), m: int = 1) -> None:
        if m == 1:
            p, q = p + q, Fraction(0)
        self.p, self.q, self.m = p, q, m

    def value(self) -> float:
        return float(self.p) + float(self.q) * math.sqrt(self.m)

    def rounded(self) -> "int | float":
        """The value for tables: the integer where the root is one, else two decimals."""
        if self.q == 0 and Fraction(self.p).denominator == 1:
            return int(self.p)
        return round(self.value(), 2)

    def shift(self, by: int) -> "Root":
        return Root(self.p + by, self.q, self.m)

    def _sign_minus(self, x: Fraction) -> int:
        """The sign of self - x, exactly."""
        u, v = self.p - x, self.q
        if v == 0:
            return (u > 0) - (u < 0)
        if u == 0 or (u > 0) == (v > 0):
            return 1 if (v > 0 if u == 0 else u > 0) else -1
        return (1 if v > 0 else -1) * ((v * v * self.m > u * u) - (v * v * self.m < u * u))

    def at_least(self, x: float) -> bool:
        return self._sign_minus(Fraction(x)) >= 0

    def at_most(self, x: float) -> bool:
        return self._sign_minus(Fraction(x)) <= 0

    def text(self) -> str:
        """As sympy prints it: ``53247``, ``4357656/305``, ``318079/2 + sqrt(101195201281)/2``."""
        if self.q == 0:
            return str(self.p)
        num, den = abs(self.q.numerator), self.q.denominator
        term = ("" if num == 1 else f"{num}*") + f"sqrt({self.m})" + ("" if den == 1 else f"/{den}")
        if self.p == 0:
            return term if self.q > 0 else f"-{term}"
        return f"{self.p} {'+' if self.q > 0 else '-'} {term}"


def roots(poly: Poly) -> list[Root]:
    """Real roots of c0 + c1 x + c2 x^2, smallest first."""
    c0, c1, c2 = poly
    if c2 == 0:
        return [] if c1 == 0 else [Root(-c0 / c1)]
    disc = c1 * c1 - 4 * c2 * c0
    if disc < 0:
        return []
    square, rest = _split_square(disc.numerator * disc.denominator)     # disc = square^2 * rest / den^2
    p = -c1 / (2 * c2)
    q = Fraction(square, disc.denominator) / (2 * c2)
    pair = [Root(p, -abs(q), rest), Root(p, abs(q), rest)]
    return pair if q != 0 else pair[:1]


def _split_square(n: int) -> tuple[int, int]:
    """n = f^2 * m with the square factors of primes below 2^15 (and a square cofactor) in f."""
    f, m = 1, n
    prime = 2
    while prime < 2**15 and prime * prime <= m:
        while m % (prime * prime) == 0:
            m //= prime * prime
            f *= prime
        prime += 1 if prime == 2 else 2
    root = math.isqrt(m)
    if root * root == m:
        return f * root, 1
    return f, m
