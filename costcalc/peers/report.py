"""The terminal text of ``compare`` and ``mfu``: a block per tool, its differences one per
line with their exact sizes (or MFU points), within a width; and the flat rows CSV and
Markdown carry (differences joined into one cell)."""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

from .. import units
from ..terminal import wrap

LEFT = 20          # tool column


def number(value: Any) -> str:
    """Exact counts with separators; floats as the tool prints them."""
    if isinstance(value, Fraction):
        return f"{value.numerator:,}/{value.denominator:,}"
    if isinstance(value, int):
        return f"{value:,}"
    return repr(value)


def signed(value: Any) -> str:
    if isinstance(value, Fraction):
        return ("+" if value >= 0 else "-") + number(abs(value))
    return f"{value:+,}"


def _wrap(text: str, width: int, indent: str = "  ", more: str = "    ") -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more,
                         break_on_hyphens=False) or [indent]


def _line(left: str, right: str, width: int, indent: str = "  ") -> list[str]:
    """``left`` then ``right`` flush right at ``width``; ``left`` wraps when both do not fit."""
    room = width - len(right) - 1
    lines = _wrap(left, max(room, 30), indent, indent + "  ")
    if len(lines[-1]) <= room:
        lines[-1] = lines[-1].ljust(room) + " " + right
    else:
        lines.append(right.rjust(width))
    return lines


def header(row: dict, extra: str = "") -> str:
    keys = [k for k in ("batch", "seq", "context", "new_tokens") if k in row]
    return " | ".join([f"{row['workload']}", f"preset {row['preset']}", *(f"{k} {row[k]}" for k in keys)]
                      + ([extra] if extra else []))


def compare_text(rows: Sequence[dict], width: int = 80) -> str:
    first = rows[0]
    out = [f"compare {header(first)}",
           *_wrap(f"costcalc default: {first['costcalc_flops']:,} FLOP ({units.flops(first['costcalc_flops'])}; "
                  f"{first['costcalc_config']})", width, "", "  "), ""]
    cannot = []
    for row in rows:
        if row["flops"] is None and "convention" in row:     # the tiled sum of a very long prefill
            out += _wrap(f"{name:<{LEFT}}{row['note']}", width, indent="", more=" " * LEFT)
            continue
        if row["flops"] is None:
            cannot.append(row)
            continue
        left = f"{row['tool']:<{LEFT}}{number(row['reported'])} {row['reported_unit']}"
        out += _line(left, f"x{row['ratio']:.4f}", width, indent="")
        if row["equals"]:
            out.append(f"  = costcalc {row['equals']}")
        for diff in row["differences"]:
            out += _line(diff["term"], signed(diff["flops"]), width)
    if cannot:
        out += ["", "Cannot answer:"]
        for row in cannot:
            out += _wrap(f"{row['tool']}: {row['note'].removeprefix('cannot answer: ')}", width)
    out += [""] + wrap("x = the tool's number over costcalc's default. Each tool's differences add up exactly: "
                       "costcalc default + differences = the tool's number (a MAC count as the tool gives it). "
                       "Setups, notes and sources: -f json; the conventions: docs/conventions.md.", width)
    return "\n".join(out) + "\n"


def mfu_text(rows: Sequence[dict], width: int = 80) -> str:
    first = rows[0]
    peak, time_s = first["peak_flops"], first["time_s"]
    scale = time_s * peak
    out = [f"mfu {header(first)}",
           f"time {time_s:.6g} s | peak {units.flops(peak, 'FLOP/s')}"
           + (f" ({first['peak_from']})" if first.get("peak_from") else ""), ""]
    cannot = []
    for row in rows:
        name = f"costcalc {row['convention']}" if "convention" in row else row["tool"]
        if row["flops"] is None and "convention" in row:     # the tiled sum of a very long prefill
            out += _wrap(f"{name:<{LEFT}}{row['note']}", width, indent="", more=" " * LEFT)
            continue
        if row["flops"] is None:
            cannot.append(row)
            continue
        out += _line(f"{name:<{LEFT}}{units.flops(float(Fraction(row['flops'])))}", f"MFU {row['mfu']:.2%}", width,
                     indent="")
        if row.get("equals"):
            out.append(f"  = costcalc {row['equals']}")
        for diff in row.get("differences", ()):
            out += _line(diff["term"], f"{points(float(Fraction(diff['flops'])) / scale * 100)} pts", width)
    if cannot:
        out += [""] + wrap("Cannot answer: " + ", ".join(r["tool"] for r in cannot) + " (compare says why).", width)
    above = [r for r in rows if r.get("mfu") is not None and r["mfu"] > 1]
    if above:
        out += [""] + wrap(f"MFU above 100% ({', '.join(_name(r) for r in above)}): the time is below what the "
                           f"peak allows for these FLOPs -- a wrong time or peak, or a count above the work done.",
                           width)
    out += [""] + wrap(f"MFU = FLOPs / (time x peak). A tool's terms are its differences from costcalc's default "
                       f"({first.get('costcalc_config', 'causal')}), in MFU points.", width)
    return "\n".join(out) + "\n"


def _name(row: dict) -> str:
    return f"costcalc {row['convention']}" if "convention" in row else row["tool"]


def points(value: float) -> str:
    """MFU points: two decimals, or two significant digits below 0.01."""
    return f"{value:+.2f}" if value == 0 or abs(value) >= 0.01 else f"{value:+.1e}"


def flat(rows: Sequence[dict]) -> list[dict]:
    """Rows for CSV and Markdown: differences as one cell ``term +n; term -n``."""
    out = []
    for row in rows:
        row = dict(row)
        if "differences" in row:
            row["differences"] = "; ".join(f"{d['term']} {signed(d['flops'])}" for d in row["differences"])
        if row.get("reported") is not None:      # as the tool prints it, not reformatted
            row["reported"] = repr(row["reported"])
        out.append({k: (str(v) if isinstance(v, Fraction) else v) for k, v in row.items()})
    return out


def jsonable(rows: Sequence[dict]) -> list[dict]:
    """Rows for JSON: exact ints stay ints; a count that is not whole becomes a float."""
    def fix(v):
        if isinstance(v, Fraction):
            return float(v)
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        return v
    return [fix(r) for r in rows]
