"""Ranges of lengths and batch sizes as the command line writes them, and their product.

A value is a comma list of items; an item is

- a number: ``4096``, ``128k``, ``1M`` (k = 1024, M = 1024^2, G = 1024^3: token counts
  are powers of two in this field, "128k context" is 131072), or in scientific notation when
  it is a whole number: ``1e3`` is 1000, ``1.5e3`` 1500 (``1e-3`` and ``1.5`` are errors);
- an arithmetic range ``start:stop`` or ``start:stop:step`` (stop included when the
  steps land on it; step 1 by default): ``1k:8k:1k``;
- a geometric range ``start:stop:xF`` (multiply by the integer F >= 2): ``1k:1M:x2``.

Items concatenate in order (``512,1k:4k:x2`` is 512, 1024, 2048, 4096).
"""
from __future__ import annotations

import itertools
import re
from typing import Sequence

from .errors import CostcalcError

SUFFIX = {"": 1, "k": 1024, "K": 1024, "m": 1024**2, "M": 1024**2, "g": 1024**3, "G": 1024**3}
MAX_ROWS = 10_000_000     # rows one command may build (presets x conventions x points), checked before any
MAX_VALUE = 2**40         # a trillion tokens: anything larger is a typo
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)(?:[eE]([-+]?\d+))?([kKmMgG]?)")
MAX_EXPONENT = 40         # 1e40 is past any count here; a larger exponent is not worked out


def number(text: str, option: str) -> int:
    """``"128k"`` -> 131072, ``"1e3"`` -> 1000; at most ``MAX_VALUE``."""
    value = whole(text, option)
    if value > MAX_VALUE:
        raise CostcalcError(f"{option}: {text.strip()!r} is too large (at most {MAX_VALUE:,})")
    return value


def whole(text: str, option: str) -> int:
    """A whole number as the command line writes it: digits with an optional binary suffix
    (``128k``), a decimal point or an exponent where the value is still whole (``1.5k``,
    ``1e3``, ``1.5e3``); anything else is an error naming the text."""
    match = _NUMBER.fullmatch(text.strip())
    if not match:
        raise CostcalcError(f"{option}: {text.strip()!r} is not a number (e.g. 4096, 128k, 1M, 1e3)")
    digits, exponent, suffix = match.groups()
    if exponent is not None and abs(int(exponent)) > MAX_EXPONENT:
        raise CostcalcError(f"{option}: {text.strip()!r} is out of range (an exponent of at most {MAX_EXPONENT})")
    return _value(digits, int(exponent or 0), suffix, text, option)


def _value(digits: str, exponent: int, suffix: str, text: str, option: str) -> int:
    if digits.startswith("-"):
        return -_value(digits[1:], exponent, suffix, text, option)
    whole_part, _, frac = digits.partition(".")
    numerator = int(whole_part + frac) * SUFFIX[suffix] * 10 ** max(exponent, 0)
    denominator = 10 ** (len(frac) + max(-exponent, 0))
    if numerator % denominator:
        raise CostcalcError(f"{option}: {text.strip()!r} is not a whole number")
    return numerator // denominator


def parse(text: str | None, option: str, minimum: int = 1) -> Sequence[int]:
    """The values a range text stands for, in order; each checked against ``minimum``."""
    if text is None:
        return []
    out: list[Sequence[int]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise CostcalcError(f"{option}: empty item in {text!r}")
        values = _item(item, option)
        first, last = (values[0], values[-1]) if len(values) else (None, None)
        low = min(first, last) if first is not None else None
        if low is not None and low < minimum:
            kind = "positive" if minimum == 1 else f">= {minimum}"
            raise CostcalcError(f"{option}: {low} is not {kind}")
        out.append(values)
    count = sum(map(len, out))
    if count > MAX_ROWS:         # any axis longer than the row cap makes a table over it: refused unbuilt
        raise CostcalcError(f"{option}: {text!r} is {count:,} values; at most {MAX_ROWS:,} rows are built")
    if len(out) == 1:
        return out[0]
    return list(itertools.chain.from_iterable(out))


def _item(item: str, option: str) -> Sequence[int]:
    parts = item.split(":")
    if len(parts) == 1:
        return [number(parts[0], option)]
    if len(parts) > 3:
        raise CostcalcError(f"{option}: {item!r} has too many ':' (start:stop or start:stop:step)")
    start, stop = number(parts[0], option), number(parts[1], option)
    if stop < start:
        raise CostcalcError(f"{option}: range {item!r} ends before it starts")
    step = parts[2].strip() if len(parts) == 3 else "1"
    if step[:1] in ("x", "*"):
        factor = number(step[1:], option)
        if factor < 2:
            raise CostcalcError(f"{option}: geometric factor in {item!r} must be at least 2")
        if start < 1:
            raise CostcalcError(f"{option}: a geometric range cannot start at {start}")
        values, value = [], start
        while value <= stop:
            values.append(value)
            value *= factor
        return values
    size = number(step, option)
    if size < 1:
        raise CostcalcError(f"{option}: step in {item!r} must be positive")
    return range(start, stop + 1, size)


def check_rows(n: int, what: str) -> None:
    """Refuse to build more than ``MAX_ROWS`` rows, before building any."""
    if n > MAX_ROWS:
        raise CostcalcError(f"{what} has {n:,} rows; at most {MAX_ROWS:,} are built (split it, or narrow "
                            f"the ranges)")


def grid(**axes: Sequence[int]) -> dict[str, Sequence[int]]:
    """The product of the axes (the first outermost) as equal-length columns.

    Small grids come back as lists; large ones as numpy int64 arrays, built without a
    Python loop over the points.
    """
    sizes = [len(values) for values in axes.values()]
    total = 1
    for size in sizes:
        total *= size
    check_rows(total, "the sweep")
    if total <= 4096:
        combos = list(itertools.product(*axes.values()))
        return {name: [c[i] for c in combos] for i, name in enumerate(axes)}
    import numpy as np

    arrays = [np.asarray(values, dtype=np.int64) for values in axes.values()]
    mesh = np.meshgrid(*arrays, indexing="ij")
    return {name: m.reshape(-1) for name, m in zip(axes, mesh)}
