"""Rows or columns -> the four output formats, and a pandas DataFrame.

Output comes as rows (a list of dicts) or as a table (a dict of equal-length columns,
what a sweep produces). CSV and JSON carry every column with exact integers, written by
the standard library (the same text pandas writes for CSV, the same records for JSON), so
that a calculation never pays for importing pandas and a million-row sweep streams out at
the speed of ``csv.writer``; ``frame`` uses pandas (an object column keeps Python ints past
2^63). The terminal table and Markdown -- the same table for a reader: units, shares, the
columns an 80-character table keeps (``--wide``: all), the notes -- are ``costcalc.terminal``'s.
"""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Mapping, Sequence, Union

from .rows import Rows, Table, as_rows, columns, length   # the shapes, defined below the calculator

FORMATS = ("table", "csv", "markdown", "json")
SUFFIXES = {".csv": "csv", ".md": "markdown", ".markdown": "markdown", ".json": "json",
            ".txt": "table"}


class Columns(dict):
    """A table (name -> column) that knows which of its columns have missing cells."""

    def __init__(self, *args: Any, with_gaps: set[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.with_gaps = None if with_gaps is None else set(with_gaps)   # None: not known, look


def as_table(data: Union[Rows, Table]) -> Table:
    """Columns of ``data``: a table as is; rows by the union of their keys (missing: None)."""
    if isinstance(data, Mapping):
        return data
    cols = columns(data)
    return {c: [row.get(c) for row in data] for c in cols}


def frame(data: Union[Rows, Table]):
    """A DataFrame of rows or columns; every column is ``object`` so integers stay exact."""
    import pandas as pd

    cols = as_table(data)
    return pd.DataFrame({name: pd.Series(list(values), dtype=object) for name, values in cols.items()},
                        columns=list(cols))


def write(data: Union[Rows, Table], fmt: str, handle, extra_notes: Sequence[str] = (),
          width: int | None = None) -> None:
    """Render straight into an open text file (CSV and JSON stream; the rest is rendered whole)."""
    if fmt == "csv":
        write_csv(data, handle)
    elif fmt == "json":
        write_json(data, handle)
    else:
        handle.write(render(data, fmt, extra_notes, width))


def render(data: Union[Rows, Table], fmt: str, extra_notes: Sequence[str] = (), width: int | None = None) -> str:
    """The whole text of one format; ``width`` limits a table (columns dropped to fit)."""
    from .printable import escape     # text for a reader: a file's control characters shown, not obeyed

    if fmt == "table":
        from .terminal import table

        return escape(table(as_rows(data), extra_notes, width), lines=True)
    if fmt == "markdown":
        from .terminal import markdown

        return escape(markdown(as_rows(data), extra_notes, width), lines=True)
    if fmt in ("csv", "json"):
        buffer = io.StringIO()
        write(data, fmt, buffer)
        return buffer.getvalue()
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def write_json(data: Union[Rows, Table], handle) -> None:
    """One JSON array of records, every record with every column: the text of
    ``json.dumps(records, indent=2)``, written a record at a time."""
    cols = as_table(data)
    names = list(cols)
    handle.write("[")
    for index, values in enumerate(zip(*cols.values(), strict=True)):
        try:
            record = json.dumps(dict(zip(names, values)), indent=2, allow_nan=False).replace("\n", "\n  ")
        except ValueError:   # NaN or infinity, which JSON cannot hold: the inputs' ranges should have stopped it
            from .errors import CostcalcError

            bad = [n for n, v in zip(names, values) if isinstance(v, float) and not math.isfinite(v)]
            raise CostcalcError(f"internal error: row {index + 1} has a value that is not a finite number "
                                f"({', '.join(bad) or 'nested'}); JSON cannot hold it") from None
        handle.write(("\n  " if index == 0 else ",\n  ") + record)
    handle.write("\n]\n" if names and length(cols) else "]\n")


def write_csv(data: Union[Rows, Table], handle) -> None:
    """CSV as pandas writes it (header, minimal quoting, empty for None), column-wise."""
    writer = csv.writer(handle, lineterminator="\n")
    if isinstance(data, Mapping):
        _write_columns(data, handle, writer)
        return
    cols = columns(data)
    for cells in [cols, *(["" if (v := row.get(c)) is None else v for c in cols] for row in data)]:
        handle.write(",".join(map(_field, cells)) + "\n")


CHUNK = 1 << 16   # rows formatted per block: bounded memory for million-row sweeps


def _write_columns(data: Table, handle, writer) -> None:
    """Columns to CSV a block of rows at a time, with one ``%`` template per block: a
    column constant over the block is written into the template once, the others are
    ``%s`` fields (numbers never need quoting; text goes through the csv module's
    quoting). The same bytes as ``csv.writer``, several times faster."""
    writer.writerow(data)
    gaps = getattr(data, "with_gaps", None)   # the columns known to hold None, if known
    n = length(data)
    for start in range(0, n, CHUNK):
        fields, varying = [], []
        for name, col in data.items():
            part = col[start:start + CHUNK]
            if (name in gaps) if gaps is not None else (None in part):
                part = ["" if v is None else v for v in part]
            if any(isinstance(v, (list, dict)) for v in part):   # a list cell (collectives) as its JSON text
                part = [json.dumps(v, separators=(",", ":")) if isinstance(v, (list, dict)) else v for v in part]
            if part.count(part[0]) == len(part):
                fields.append(_cell_text(part[0]).replace("%", "%%"))
            else:
                fields.append("%s")
                varying.append(_texts(part) if isinstance(part[0], str) else part)
        template = ",".join(fields)
        if varying:
            handle.write("\n".join(map(template.__mod__, zip(*varying))))
        else:
            handle.write("\n".join([template.replace("%%", "%")] * len(part)))
        handle.write("\n")


def _cell_text(value: Any) -> str:
    text = str(value)
    return _quote(text) if isinstance(value, str) and _needs_quote(text) else text


def _field(value: Any) -> str:
    """A cell's CSV text as ``csv.writer`` writes it, except that a bare ``\\r`` is quoted too; a
    list (collectives) as its JSON text."""
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)
    return _quote(text) if _needs_quote(text) else text


def _needs_quote(text: str) -> bool:
    return any(c in text for c in ',"\r\n') or text != text.strip()


def _texts(values: Sequence[str]) -> list[str]:
    """Text cells, quoted where the csv module would quote them."""
    needs = {t for t in set(values) if _needs_quote(str(t))}
    if not needs:
        return list(values)
    quoted = {t: _quote(str(t)) for t in needs}
    return [quoted.get(t, t) for t in values]


def _quote(text: str) -> str:
    """One field as the csv module quotes it, and a field holding ``\\n`` or ``\\r`` always
    (``csv.writer`` with an empty line terminator leaves those bare before Python 3.13)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow([text])
    quoted = buffer.getvalue()
    if ("\n" in text or "\r" in text) and not quoted.startswith('"'):
        quoted = '"' + text.replace('"', '""') + '"'
    return quoted
