"""Rows and tables, the two shapes results come in: rows (a list of dicts) or a table (a
dict of equal-length columns, what a sweep produces). No dependencies: the calculator, the
renderers and the terminal table all read them."""
from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

Rows = Sequence[Mapping[str, Any]]
Table = Mapping[str, Sequence[Any]]


def as_rows(data: Union[Rows, Table]) -> list[dict[str, Any]]:
    """A table as a list of row dicts (rows as they are)."""
    if not isinstance(data, Mapping):
        return list(data)
    names = list(data)
    return [dict(zip(names, values)) for values in zip(*data.values(), strict=True)]


def length(data: Union[Rows, Table]) -> int:
    if isinstance(data, Mapping):
        return len(next(iter(data.values()), []))
    return len(data)


def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Union of the rows' keys, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)
