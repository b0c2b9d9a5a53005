"""Rows -> a pandas DataFrame, and the four output formats.

CSV, Markdown and JSON carry every column with exact integers (an object column keeps
Python ints past 2^63). The terminal table shows readable units and shares of the total
and states the conventions.
"""
from __future__ import annotations

from typing import Any, Sequence

from . import notes, units

FORMATS = ("table", "csv", "markdown", "json")
SUFFIXES = {".csv": "csv", ".md": "markdown", ".markdown": "markdown", ".json": "json",
            ".txt": "table"}
_SHARED = ("linear_flops", "attention_flops", "lm_head_flops")  # columns shown with a share
_HEADER_KEYS = ("workload", "preset", "convention", "logits")


def columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Union of the rows' keys, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def frame(rows: Sequence[dict[str, Any]]):
    """A DataFrame of the rows; every column is ``object`` so integers stay exact."""
    import pandas as pd

    cols = columns(rows)
    return pd.DataFrame([[row.get(c) for c in cols] for row in rows], columns=cols, dtype=object)


def render(rows: Sequence[dict[str, Any]], fmt: str, extra_notes: Sequence[str] = ()) -> str:
    if fmt == "table":
        return table(rows, extra_notes)
    df = frame(rows)
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "markdown":
        return df.to_markdown(index=False) + "\n"
    if fmt == "json":
        return df.to_json(orient="records", indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def table(rows: Sequence[dict[str, Any]], extra_notes: Sequence[str] = ()) -> str:
    cols = columns(rows)
    constant = [c for c in _HEADER_KEYS if c in cols and len({str(r.get(c)) for r in rows}) == 1]
    header = " | ".join(f"{c} {rows[0][c]}" for c in constant)
    shown = [c for c in cols if c not in constant]
    cells = [[_cell(row, c) for c in shown] for row in rows]
    titles = [c.removesuffix("_flops") for c in shown]
    widths = [max(len(t), *(len(r[i]) for r in cells)) for i, t in enumerate(titles)]
    right = [c.endswith("_flops") or c in ("batch", "seq", "context", "prefix", "chunk", "new_tokens")
             for c in shown]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w)
                         for v, w, r in zip(values, widths, right)).rstrip()

    out = [header, "", line(titles), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    conventions = {str(r.get("convention")) for r in rows}
    logits = {str(r.get("logits")) for r in rows if "logits" in r}
    footer = notes.footer(conventions, logits) if any(c.endswith("_flops") for c in cols) else []
    out += [""] + footer + list(extra_notes)
    return "\n".join(out) + "\n"


def _cell(row: dict[str, Any], col: str) -> str:
    value = row.get(col)
    if value is None:
        return ""
    if col.endswith("_flops") and isinstance(value, int):
        text = units.flops(value)
        if col in _SHARED and row.get("total_flops"):
            text += f" {units.share(value, row['total_flops']):>5}"
        return text
    return str(value)
