"""Model FLOPs utilisation of one run under each costcalc convention and under each tool:
``MFU = FLOPs / (time x peak)``. The same run reads as a different MFU under each count; the
tool rows carry their differences from costcalc's default, so each MFU is explained term by
term (a term's share of the MFU is its FLOPs over time x peak)."""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional, Sequence

from ..errors import CostcalcError
from ..evaluate import MAX_TILE_STEPS, TooManyTiles
from ..vocab import CONVENTIONS, SCAN
from . import TOOLS, compare
from .base import Case, Costcalc, Setup, default_config

# A measured run: a nanosecond to 30 years; a rate of one token in 1,000 s to 10^15 tokens/s. Outside
# these the input is a typo, and a subnormal one would make the MFU infinite.
TIME_RANGE = (1e-9, 1e9)            # seconds
RATE_RANGE = (1e-3, 1e15)           # tokens per second


def seconds(case: Case, time_s: Optional[float], tokens_per_s: Optional[float]) -> float:
    """The run's time: given, or the case's tokens (``Case.tokens``) at the given rate."""
    if (time_s is None) == (tokens_per_s is None):
        raise CostcalcError("give one of --time SECONDS or --tokens-per-s N")
    value, flag, (low, high) = ((time_s, "--time", TIME_RANGE) if time_s is not None
                                else (tokens_per_s, "--tokens-per-s", RATE_RANGE))
    if not low <= value <= high:     # NaN fails too
        raise CostcalcError(f"{flag} must be between {low:g} and {high:g}, got {value}")
    return time_s if time_s is not None else case.tokens / tokens_per_s


def utilisation(case: Case, time_s: float, peak: tuple[float, str], names: Sequence[str] = TOOLS,
                setup: Setup = Setup()) -> list[dict[str, Any]]:
    """A row per costcalc convention (``convention``) and per tool (``tool``): ``flops``,
    ``mfu`` (a fraction), ``peak_flops``, ``time_s``; tool rows add ``equals`` and
    ``differences`` (as in ``compare``), rows of tools that cannot answer an ``mfu`` of None.
    ``peak``: FLOP/s, and where it comes from (a device and dtype)."""
    peak, peak_from = peak
    if not peak > 0 or peak == float("inf"):
        raise CostcalcError(f"the peak must be a positive number of FLOP/s, got {peak}")
    peak = float(peak)     # FLOP/s, whether a profile's integer or --peak
    cc = Costcalc(case)
    base = {"preset": case.spec.name, "workload": case.workload, **case.inputs()}
    rows = []
    default = default_config(case)
    for convention in CONVENTIONS:
        note = "tiles of 128 x 128" if convention == "tiled" else ""
        if case.spec.has_mixers:           # which count of a linear-attention or state-space scan
            note = ", ".join(filter(None, [note, f"scan {SCAN[convention]}"]))
        try:
            flops = cc.total(convention=convention)
        except TooManyTiles as exc:     # a long prefill: its tiles are not added up here (mfu has no --tile)
            flops = None
            note = (f"tiled not worked out: about {exc.steps:,} query tiles of 128 to add one by one "
                    f"(at most {MAX_TILE_STEPS:,})")
        rows.append({**base, "convention": convention, "flops": flops,
                     "mfu": None if flops is None else flops / (time_s * peak),
                     "peak_flops": peak, "peak_from": peak_from, "time_s": time_s, "note": note,
                     "costcalc_config": default})
    for row in compare(case, names, setup):
        flops = row["flops"]
        rows.append({**base, "tool": row["tool"], "flops": flops,
                     "mfu": None if flops is None else float(Fraction(flops)) / (time_s * peak),
                     "peak_flops": peak, "peak_from": peak_from, "time_s": time_s, "equals": row["equals"],
                     "differences": row["differences"], "note": row["note"]})
    return rows
