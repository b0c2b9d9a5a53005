"""A model's FLOPs crossovers, solved exactly from its compiled terms.

Attention minus the block linear layers of one sequence (B = 1, no LM head) is, as a function
of the length, a polynomial of degree at most two on each piece between the windows of the
model's layer groups (a window's keys stop growing at W). Each group's gap is fitted exactly
(rational coefficients, from its compiled recipe at three integer lengths of the piece) on
each side of its window, the groups are added piece by piece, and the first root at or above
length 1 is solved in closed form: a rational, or ``p + q sqrt(m)``. None of it needs sympy.

- ``decode_t_equal``: keys read by a decode step (K = T + 1) where attention equals linear;
- ``prefill_attention_equals_linear``: the prompt length S where they are equal, per convention.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Iterable, Optional, Sequence

from . import compiled
from .core.registry import workload
from .errors import CostcalcError
from .evaluate import Options
from .spec import Group, ModelSpec

Poly = tuple[Fraction, Fraction, Fraction]        # c0 + c1 x + c2 x^2
FOREVER = math.inf


def crossover(spec: ModelSpec, conventions: Iterable[str] = ("causal", "full"), mla: str = "auto",
              precision=None, batch: int = 1) -> list[dict]:
    """T_equal for decode and the prefill length where attention equals linear, exactly.

    Over a model's layer groups: attention and linear summed over the groups, each at its
    own layer count. Sliding windows make attention piecewise; where it never catches up
    with the linear layers the answer is ``never``. With ``precision`` (dtypes), the decode
    row also gives ``t_equal_time``: the keys at which a step of ``batch`` sequences reads as
    many K/V bytes as weight bytes (``time_root``)."""
    rows = [_row(spec, "decode_t_equal", Options("causal", mla=mla), "decode")]
    if precision is not None:
        root = time_root(spec, precision, batch, mla)
        rows[0]["t_equal"] = rows[0]["tokens"]
        rows[0]["batch"] = batch
        rows[0]["t_equal_time"] = None if root is None else round(root.value(), 2)
        rows[0]["t_equal_time_exact"] = "never" if root is None else (
            root.text() if len(root.text()) <= 40 else f"{root.value():.6f} (a rational: expected routing)")
    for convention in conventions:
        options = Options(convention, mla=mla)
        if options.convention == "tiled":
            raise CostcalcError("crossover: the tiled convention has no closed form; use causal or full")
        rows.append(_row(spec, "prefill_attention_equals_linear", options, "prefill"))
    return rows


def _row(spec: ModelSpec, quantity: str, options: Options, name: str) -> dict:
    wl = workload(name)
    root = first_root(spec, options, name)
    row: dict[str, Any] = {"preset": spec.name, "workload": "crossover", "quantity": quantity,
                           "convention": options.convention.value}
    if spec.has_mla:
        row["mla"] = options.form(wl)
    row.update(exact="never", tokens=None) if root is None else row.update(exact=root.text(),
                                                                           tokens=round(root.value(), 2))
    if quantity == "decode_t_equal":   # keys read by the step = cached context + its own key
        row["context_exact"] = "never" if root is None else root.shift(-1).text()
        row["context"] = None if root is None else round(root.value() - 1, 2)
    row["formula"] = _formula(spec, options, quantity)
    return row


def _formula(spec: ModelSpec, options: Options, quantity: str) -> str:
    if not spec.uniform or spec.windows:
        return "piecewise over layer groups"
    block = spec.groups[0].block.with_form(options.form(workload("decode" if quantity == "decode_t_equal"
                                                                  else "prefill")))
    texts = compiled.get("crossover", block.key, "causal", "last").constants
    return texts["decode_t_equal" if quantity == "decode_t_equal" else f"prefill_{options.convention.value}"]


# --- the gap, fitted piece by piece -------------------------------------------------------------

def first_root(spec: ModelSpec, options: Options, name: str) -> Optional["Root"]:
    """The first length >= 1 where attention - linear of workload ``name`` (decode: keys read)
    reaches 0, or None."""
    windowed = options.convention == "causal" or name == "decode"
    form = options.form(workload(name))

    def gap_of(index: int, group: Group):
        recipe = compiled.get(name, group.block.with_form(form).key, options.convention.value, "last")
        base = {**group.numbers(), **options.values(), "B": 1}

        def gap(x: int) -> int:
            got = recipe.evaluate({**base, "T": x - 1} if name == "decode" else {**base, "S": x}, ["attention", "linear"])
            return got["attention"] - got["linear"]
        return gap

    return solve(spec, gap_of, windowed)


def time_root(spec: ModelSpec, precision, batch: int, mla: str = "auto") -> Optional["Root"]:
    """Keys read by a decode step of ``batch`` sequences at which reading the K/V cache moves as
    many bytes as reading the weights (LM head included) -- the time crossover of a memory-bound
    step, whatever the device."""
    from .roofline import experts_touched

    form = Options(mla=mla).form(workload("decode"))

    def gap_of(index: int, group: Group):
        recipe = compiled.get("decode.bytes", group.block.with_form(form).key)
        names = [n for n in recipe.outputs if n.endswith(".weight") and (index == 0 or not n.startswith("lm_head"))]
        base = {**group.numbers(), "B": batch}
        touched = experts_touched(group.sizes["E"], group.sizes["k"], batch, precision.routing) \
            if group.block.ffn == "moe" else 1
        weights = sum(v * (touched if n.startswith("experts.") else 1)
                      for n, v in recipe.evaluate({**base, "T": 0}, names).items()) * precision.bits("weight")

        def gap(keys: int) -> Fraction:
            kv = recipe.evaluate({**base, "T": keys - 1}, ["attention.kv_read"])["attention.kv_read"]
            return kv * precision.bits("kv") - weights
        return gap

    return solve(spec, gap_of, True)


def solve(spec: ModelSpec, gap_of, windowed: bool) -> Optional["Root"]:
    """The first root >= 1 of the sum over groups of ``gap_of(index, group)``, each a
    polynomial of degree <= 2 on either side of its window (when ``windowed``)."""
    cuts = sorted({w for w in spec.windows if w > 1}) if windowed else []
    edges = [1] + cuts + [FOREVER]
    pieces = [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]
    fits = [_group_fits(group, gap_of(i, group), windowed) for i, group in enumerate(spec.groups)]
    for lo, hi in pieces:
        total = _add([_branch(fit, lo, hi) for fit in fits])
        for root in _roots(total):
            if root.at_least(lo) and (hi == FOREVER or root.at_most(hi)):
                return root
    return None


def _group_fits(group: Group, gap, windowed: bool) -> list[tuple[float, float, Poly]]:
    """A group's gap as (lo, hi, polynomial) pieces: one, or two split at its window."""
    window = group.sizes.get("W") if group.block.attention == "window" else None
    if window is None or not windowed:
        return [(1, FOREVER, _fit(gap, [1, 2, 3]))]
    below = _fit(gap, [x for x in (1, 2, 3) if x <= window] or [1])
    return [(1, window, below), (window, FOREVER, _fit(gap, [window, window + 1, window + 2]))]


def _branch(fit: list[tuple[float, float, Poly]], lo: float, hi: float) -> Poly:
    for a, b, poly in fit:
        if a <= lo and hi <= b:
            return poly
    raise AssertionError(f"no piece of a group covers [{lo}, {hi}]")


def _fit(f, xs: Sequence[int]) -> Poly:
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


def _add(polys: list[Poly]) -> Poly:
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


def _roots(poly: Poly) -> list[Root]:
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


def tiled_fraction(seq: int, tile: tuple[int, int]) -> Fraction:
    """Tiled / full attention of one uncached prefill of ``seq``: what a tile kernel saves."""
    from .evaluate import positive

    ones = {"L": 1, "d": 1, "h_q": 1, "h_kv": 1, "d_h": 1, "m": 1, "V": 1, "d_q": 1, "d_kv": 1, "B": 1,
            "S": positive("seq", seq), "b_q": tile[0], "b_k": tile[1]}   # the ratio does not depend on sizes
    tiled = compiled.get("prefill", "gqa.dense", "tiled", "last").evaluate(ones, ["attention"])["attention"]
    full = compiled.get("prefill", "gqa.dense", "full", "last").evaluate(ones, ["attention"])["attention"]
    return Fraction(tiled, full)
