"""Where a command's rows go: the one emit path (a format from --format or the file's suffix,
caps on terminal tables, atomic files, "wrote N rows"), and the tables of several
presets or conventions merged into one."""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence, Union

import typer

from .. import outputs
from ..errors import CostcalcError
from ..render import SUFFIXES, Columns, length, write
from ..vocab import TERM_ORDER
from .options import Format, warn

MAX_TABLE_ROWS = 10_000   # a terminal table or Markdown longer than this is refused
TABLE_WIDTH = 80          # the default table drops columns to fit this many characters


def interleave(tables: Sequence[Mapping[str, Sequence[Any]]], block: int = 1) -> Columns:
    """Tables over the same points, merged point by point: ``block`` rows of the first,
    then of the second, ... (conventions side by side for every point)."""
    merged = concat(tables)
    if len(tables) == 1:
        return merged
    n = len(next(iter(tables[0].values())))
    k = len(tables)
    order = [t * n + p * block + r for p in range(n // block) for t in range(k) for r in range(block)]
    return Columns({name: [col[i] for i in order] for name, col in merged.items()}, with_gaps=merged.with_gaps)


def concat(tables: Sequence[Mapping[str, Sequence[Any]]]) -> Columns:
    """Tables one after another; a column missing from some is None there.
    (A plain dict is a table from ``calc``: it has no missing cells.)"""
    if len(tables) == 1:
        return Columns(tables[0], with_gaps=getattr(tables[0], "with_gaps", None))
    names: dict[str, None] = {}
    for t in tables:
        names.update(dict.fromkeys(t))
    out = Columns({name: [] for name in _ordered(list(names))}, with_gaps=set())
    for t in tables:
        known = getattr(t, "with_gaps", None)       # a plain table may hold None anywhere: look
        if known is None or out.with_gaps is None:
            out.with_gaps = None
        else:
            out.with_gaps |= known
        n = len(next(iter(t.values()), []))
        for name in names:
            if name in t:
                out[name].extend(t[name])
            else:
                out[name].extend([None] * n)
                if out.with_gaps is not None:
                    out.with_gaps.add(name)
    return out


class Out(NamedTuple):
    """Where a command's rows go and how: --format, --output, --wide."""
    fmt: Optional[Format] = None
    output: Optional[str] = None
    wide: bool = False


def emit_listing(items: Sequence[Any], shapes: tuple, fmt: Optional[Format], output: Optional[str],
                 wide: bool = False) -> None:
    """A list of built-in things (presets, devices): a readable line each in a table or
    Markdown (``shapes[0]``), every field in CSV or JSON (``shapes[1]``)."""
    compact, full = shapes
    shape = compact if output_format(fmt, outputs.target(output)) in ("table", "markdown") else full
    emit([shape(item) for item in items], fmt, output, wide=wide)


def emit(rows: Union[Sequence[dict[str, Any]], Mapping[str, Sequence[Any]]], fmt: Optional[Format],
         output: Optional[str], notes: Sequence[str] = (), wide: bool = False) -> None:
    """Render rows (or columns) with the shared writer of each format (``emit_to``)."""
    emit_to(rows, Out(fmt, output, wide), notes)


def emit_to(rows: Union[Sequence[dict[str, Any]], Mapping[str, Sequence[Any]]], out: Out,
            notes: Sequence[str] = (), own=None) -> None:
    """Render rows (or columns) to standard output or ``--output`` (never half a file, never
    replacing what is not a regular file). Tables and Markdown are refused past
    ``MAX_TABLE_ROWS`` rows; CSV and JSON are not (their rows are built whole first: the
    row cap of ``ranges`` bounds them). ``own(format, width)``: a command's own writer for a
    format (a function of the handle), or None for the shared one."""
    fmt, output, wide = out
    dest = outputs.target(output)
    chosen = output_format(fmt, dest)
    count = length(rows)
    if chosen in ("table", "markdown") and count > MAX_TABLE_ROWS:
        raise CostcalcError(f"{count:,} rows are too many for a {chosen} (at most {MAX_TABLE_ROWS:,}); "
                            f"write them with -f csv -o FILE or -f json -o FILE")
    if wide and chosen not in ("table", "markdown"):
        warn(f"--wide does nothing with {chosen} (only tables and Markdown are narrowed)")
    width = None if wide else TABLE_WIDTH
    writer = own(chosen, width) if own is not None else None
    outputs.write(dest, writer or (lambda handle: write(rows, chosen, handle, notes, width)))
    if dest.kind != "stdout":
        typer.echo(f"wrote {count} row{'' if count == 1 else 's'} ({chosen}) to {dest.printed}", err=True)


def output_format(fmt: Optional[Format], dest: outputs.Target) -> str:
    """The format asked for, else the one the file's suffix names, else a table; a format
    that contradicts the suffix is written as asked, with a warning."""
    by_suffix = SUFFIXES.get(dest.suffix)
    if fmt is None:
        if by_suffix is None and dest.kind == "file" and dest.suffix:
            warn(f"{dest.shown!r}: {dest.suffix} names no format ({', '.join(SUFFIXES)}); writing a table "
                 f"(give --format)")
        return by_suffix or "table"
    if by_suffix and by_suffix != fmt.value:
        warn(f"--format {fmt.value} but {dest.shown!r} ends in {dest.suffix}; writing {fmt.value}")
    return fmt.value


def write_fields(output: Optional[str], row: Mapping[str, Any], show=lambda key, value: str(value)) -> None:
    """One thing's fields, a ``key  value`` line each, long values wrapped under themselves to
    the table width (a URL is never broken)."""
    import textwrap

    from ..printable import escape

    pad = max(len(escape(key)) for key in row)
    room = max(20, TABLE_WIDTH - pad - 2)
    lines = []
    for key, value in row.items():
        text = escape(show(key, value))     # a file's text, shown: never a control character
        parts = textwrap.wrap(text, room, break_long_words=False, break_on_hyphens=False) or [""]
        lines += [f"{escape(key):<{pad}}  {parts[0]}"] + [" " * (pad + 2) + part for part in parts[1:]]
    write_text(output, "\n".join(lines) + "\n")


def write_text(output: Optional[str], text: str, option: str = "--output") -> None:
    """Write a whole text to standard output or a file (atomically; streams in place)."""
    outputs.write_text(outputs.target(output, option), text)


def _ordered(names: list[str]) -> list[str]:
    """Breakdown columns of several tables (dense and MoE) in the one term order."""
    terms = [f"{t}_flops" for t in TERM_ORDER if f"{t}_flops" in names]
    if not terms:
        return names
    at = min(names.index(t) for t in terms)
    rest = [n for n in names if n not in terms]
    return [n for n in rest if names.index(n) < at] + terms + [n for n in rest if names.index(n) > at]
