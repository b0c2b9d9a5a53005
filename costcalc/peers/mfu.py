"""Model FLOPs utilisation of one run under each costcalc convention and under each tool:
``MFU = FLOPs / (time x peak)``. The same run reads as a different MFU under each count; the
tool rows carry their differences from costcalc's default, so each MFU is explained term by
term (a term's share of the MFU is its FLOPs over time x peak)."""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional, Sequence

from ..errors import CostcalcError
from ..vocab import CONVENTIONS
from . import TOOLS, compare
from .base import Case, Costcalc, Setup


def seconds(case: Case, time_s: Optional[float], tokens_per_s: Optional[float]) -> float:
    """The run's time: given, or the case's tokens (``Case.tokens``) at the given rate."""
    if (time_s is None) == (tokens_per_s is None):
        raise CostcalcError("give one of --time SECONDS or --tokens-per-s N")
    value, flag = (time_s, "--time") if time_s is not None else (tokens_per_s, "--tokens-per-s")
    if not value > 0 or value == float("inf"):
        raise CostcalcError(f"{flag} must be a positive number, got {value}")
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
    default = ("causal, logits " + ("all" if case.workload == "train" else "last")
               + (", MLA auto" if case.spec.has_mla else ""))
    for convention in CONVENTIONS:
        flops = cc.total(convention=convention)
        note = "tiles of 128 x 128" if convention == "tiled" else ""
        rows.append({**base, "convention": convention, "flops": flops, "mfu": flops / (time_s * peak),
                     "peak_flops": peak, "peak_from": peak_from, "time_s": time_s, "note": note,
                     "costcalc_config": default})
    for row in compare(case, names, setup):
        flops = row["flops"]
        rows.append({**base, "tool": row["tool"], "flops": flops,
                     "mfu": None if flops is None else float(Fraction(flops)) / (time_s * peak),
                     "peak_flops": peak, "peak_from": peak_from, "time_s": time_s, "equals": row["equals"],
                     "differences": row["differences"], "note": row["note"]})
    return rows
