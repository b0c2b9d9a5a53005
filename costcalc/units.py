"""Readable FLOPs: SI prefixes, four significant digits."""
from __future__ import annotations

_PREFIXES = ("", "K", "M", "G", "T", "P", "E", "Z", "Y")


def flops(value: int | float) -> str:
    """``15_470_000_000_000`` -> ``'15.47 TFLOP'``."""
    if value == 0:
        return "0 FLOP"
    step = 0
    scaled = float(value)
    while abs(scaled) >= 999.95 and step < len(_PREFIXES) - 1:
        scaled /= 1000
        step += 1
    if step == 0:
        return f"{int(value)} FLOP"
    digits = 4 - len(str(int(abs(scaled))))  # 4 significant digits
    return f"{scaled:.{max(digits, 0)}f} {_PREFIXES[step]}FLOP"


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
        return f"{pct:.0f}%" if pct >= 99.5 or pct == int(pct) else f"{pct:.1f}%"
    return f"{pct:.2g}%"
