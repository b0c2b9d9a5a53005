"""Readable numbers: FLOPs with SI prefixes and four significant digits, parameter counts."""
from __future__ import annotations

_PREFIXES = ("", "K", "M", "G", "T", "P", "E", "Z", "Y")


def flops(value: int | float, unit: str = "FLOP", short: bool = False) -> str:
    """``15_470_000_000_000`` -> ``'15.47 TFLOP'`` (four significant digits; ``short``: up to
    three, trailing zeros dropped, for axis ticks); past the largest prefix ``'2.621e+29 FLOP'``."""
    if value == 0:
        return f"0 {unit}"
    scaled, step = float(value), 0
    while abs(scaled) >= 999.95 and step < len(_PREFIXES) - 1:
        scaled /= 1000
        step += 1
    if abs(scaled) >= 999.95:       # beyond Y: scientific, never "262144 YFLOP"
        return f"{float(value):.{2 if short else 3}e} {unit}"
    if short:
        return f"{scaled:.3g} {_PREFIXES[step]}{unit}"
    if step == 0:
        return f"{value:.4g} {unit}" if isinstance(value, float) else f"{int(value)} {unit}"
    digits = 4 - len(str(int(abs(scaled))))  # 4 significant digits
    return f"{scaled:.{max(digits, 0)}f} {_PREFIXES[step]}{unit}"


def nbytes(value: int | float) -> str:
    """``15_009_316_864`` -> ``'15.01 GB'`` (decimal prefixes, as device datasheets state memory)."""
    return flops(value, "B")


def seconds(value: float, short: bool = False) -> str:
    """``0.004642`` -> ``'4.643 ms'``; four significant digits (``short``: up to three,
    trailing zeros dropped, for axis ticks: ``'3.5 ms'``, ``'500 us'``)."""
    if value == 0:
        return "0 s"
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(value) >= scale * 0.99995 or unit == "ns":
            scaled = value / scale
            if short:
                return f"{scaled:.3g} {unit}"
            digits = max(4 - len(str(int(abs(scaled)))), 0)
            return f"{scaled:.{digits}f} {unit}"
    return f"{value:.4g} s"


def params(count: int) -> str:
    """A parameter count in the unit that reads: ``8.03B``, ``141.20M``, ``1.23K``, ``512``."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= scale:
            return f"{count / scale:.2f}{suffix}"
    return f"{count:,}"


def share(part: int, whole: int) -> str:
    """Percentage of ``whole``, three significant digits at most."""
    if whole == 0:
        return "-"
    pct = 100 * part / whole
    if pct == 0:
        return "0%"
    if pct < 0.01:
        return "<0.01%"
    if pct >= 10:
        if pct == int(pct):
            return f"{pct:.0f}%"
        return ">99.9%" if pct > 99.95 else f"{pct:.1f}%"     # never 100% for less than the whole
    if pct >= 1:
        return f"{pct:.1f}%"
    return f"{pct:.2g}%"
