"""The terminal table: readable units, shares of the total, the conventions stated beneath,
and narrowed to the terminal's width -- the breakdown's parts go first, then constants move
to a header line, then the shares, and an input that varies over the rows stays."""
from __future__ import annotations

from typing import Any, Sequence

from . import notes, units
from .core.registry import WORKLOADS
from .rows import columns
from .vocab import LINEAR_PARTS, TERMS

# Columns shown with a share of the total: the linear sum and the terms outside it.
_SHARED = ("linear_flops", *(f"{t.name}_flops" for t in TERMS if not t.linear))
_HEADER_KEYS = ("workload", "preset", "convention", "scan", "logits", "mla", "window_cache", "tile", "state_dtype")


def table(rows: Sequence[dict[str, Any]], extra_notes: Sequence[str] = (), width: int | None = None,
          md: bool = False) -> str:
    """Readable units and shares; columns constant over the rows go to a header line. With
    ``width``, the breakdown's parts are dropped (then the shares) until the table fits, and
    a note says so; notes are wrapped to the width. ``md``: the same table as Markdown
    (``markdown``)."""
    cols = columns(rows)
    constant = [c for c in _HEADER_KEYS if c in cols and len({str(r.get(c)) for r in rows}) == 1]
    header = " | ".join(f"{c} {rows[0][c]}" for c in constant)
    shown = [c for c in cols if c not in constant]
    dropped: list[str] = []
    shares = True
    lines = _grid(rows, shown, shares)
    for step in _NARROWER:
        if width is None or max(map(len, lines), default=0) <= width:
            break
        if step == "shares":
            shares = not any(c in _SHARED for c in shown)   # a table without shares has none to give up
        elif step == "constants":
            same = [c for c in shown if not _is_flops(c) and c not in _NEVER_HEADER
                    and len({str(r.get(c)) for r in rows}) == 1]
            if len(same) == len(shown):   # a table of one row
                if len(shown) > LISTED:
                    return _listing(rows[0], extra_notes, width, md)
                same = _fewest_to_fit(rows, shown, shares, width)   # from the right, while it is too wide
            header = " | ".join([header] * bool(header) + [f"{c} {_cell(rows[0], c)}" for c in same
                                                            if rows[0].get(c) is not None])   # empty: nothing to say
            shown = [c for c in shown if c not in same]
        elif step in shown and not (step in _AXES and len({r.get(step) for r in rows} - {None}) > 1):
            shown.remove(step)     # an input that varies over the rows is what the table is about: kept
            dropped.append(step.removesuffix("_flops"))
        lines = _grid(rows, shown, shares)
    while width is not None and len(shown) > 2 and max(map(len, lines), default=0) > width:
        dropped.append(shown.pop().removesuffix("_flops"))    # last resort: from the right
        lines = _grid(rows, shown, shares)
    if width is not None and len(rows) == 1 and (not shown or max(map(len, lines), default=0) > width):
        return _listing(rows[0], extra_notes, width, md)      # one row that no table fits: a field per line
    if md:
        header = header.replace(" | ", "; ")
        lines = _markdown_grid(rows, shown, shares)
    out = ([*(wrap_header(header, width) if not md else [header]), ""] if header else []) + lines
    conventions = {str(r.get("convention")) for r in rows}
    logits = {str(r.get("logits")) for r in rows if "logits" in r}
    footer = notes.footer(conventions, logits, set(cols)) if any(c.endswith("_flops") for c in cols) else []
    if dropped or not shares:
        cut = ", ".join(dropped) + (" and the shares of the total" if not shares else "")
        footer = [f"Columns left out to fit {width} characters: {cut.removeprefix(', ')} "
                  f"(--wide or -f csv shows them)."] + _formats(rows, dropped) + footer
    if md:    # a note a paragraph
        return "\n".join(out + [line for note in footer + list(extra_notes) for line in ("", note)]) + "\n"
    out += [""] + [line for note in footer + list(extra_notes) for line in wrap(note, width)]
    return "\n".join(out) + "\n"


def markdown(rows: Sequence[dict[str, Any]], extra_notes: Sequence[str] = (), width: int | None = None) -> str:
    """The terminal table as Markdown: the same columns (those a ``width``-character table
    keeps; None: every one), units, shares, header line and notes, a pipe table between them."""
    return table(rows, extra_notes, width, md=True)


def _markdown_grid(rows: Sequence[dict[str, Any]], shown: list[str], shares: bool) -> list[str]:
    """A pipe table of ``shown``: numbers right-aligned, a cell of several lines joined by <br>."""
    if not shown:
        return []

    def text(value: str) -> str:
        return value.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(values) + " |"

    right = [_is_flops(c) or c in _NUMERIC or c.endswith(("_bytes", "_s", "intensity")) for c in shown]
    return [line([text(_TITLES.get(c, c.removesuffix("_flops"))) for c in shown]),
            line(["---:" if r else "---" for r in right]),
            *(line([text(_cell(row, c, shares)) for c in shown]) for row in rows)]


# What a narrow table gives up, in order (a model's title and vocabulary in the list of presets;
# then) the linear layers' parts (their sum ``linear`` stays),
# the 6P rule, the LM head; with bytes and time, the per-term bytes, times and bounds, the smaller byte and
# time columns; then inputs that are the same on every row move to the header, the shares of
# the total go, and last the weights' bytes and the linear sum.
_NARROWER = ("formula", "title", "stage_bytes", "stage_time_s", "V", "t_equal", "t_equal_time_exact", "context_exact", "tflops_per_s_causal",
             "tflops_per_s_full", "peak_fraction", "exact",
             *(f"{t.name}_compute_bound_batch{part}" for part in ("_exact", "") for t in TERMS),
             "compute_bound_batch_exact", "compute_bound_context", *(f"{t}_flops" for t in LINEAR_PARTS),
             *(f"{t.name}_flops" for t in TERMS if not t.linear and t.name not in ("attention", "lm_head")),
             "rule_6p_flops", "lm_head_flops",
             *(f"{t.name}{part}" for part in ("_bytes", "_time_s", "_bound") for t in TERMS),
             "kv_write_bytes", "state_write_bytes", "activation_bytes", "compute_time_s", "memory_time_s", "comm_time_s", "comm_floor_time_s", "comm_efficiency", "intensity",
             "constants", "collectives", "links", "replicated", "comm_bytes_per_device", "kv_read_bytes_per_device",
             "weight_bytes_per_device", "total_bytes_per_device", "shares", "weight_bytes", "linear_flops",
             "total_flops_per_token", "tile", "mla", "scan", "logits", "attention_flops", "kv_read_bytes", "tokens_per_s",
             "state_read_bytes", "weight_dtype", "weight_dtype_source", "kv_dtype", "state_dtype", "act_dtype", "group_size", "routing", "weight_bytes_resident", "bound",
             "context", "batch")
# The workloads' inputs (batch, seq, context, ...): dropped only when constant.
_AXES = tuple(dict.fromkeys(i.column for w in WORKLOADS.values() for i in w.inputs))


def _formats(rows: Sequence[dict[str, Any]], dropped: list[str]) -> list[str]:
    """The weight formats a narrowed table left out, one line a model: which dtypes its bytes were
    counted in is never only in a column the table could not show."""
    if "weight_dtype" not in dropped:
        return []
    seen = dict.fromkeys((r.get("preset"), r.get("weight_dtype"), r.get("weight_dtype_source")) for r in rows)
    return [f"weight_dtype of {preset}: {fmt} ({source})" for preset, fmt, source in seen if fmt is not None]


def _listing(row: dict[str, Any], extra_notes: Sequence[str], width: int, md: bool = False) -> str:
    keys = [k for k in row if row[k] is not None]
    footer = notes.footer({str(row.get("convention"))}, {str(row["logits"])} if "logits" in row else set(), set(row)) \
        if any(k.endswith("_flops") for k in row) else []
    if md:    # a field a row
        cells = [{"field": k, "value": _cell(row, k, True)} for k in keys]
        return "\n".join(_markdown_grid(cells, ["field", "value"], False)
                         + [line for note in footer + list(extra_notes) for line in ("", note)]) + "\n"
    pad = max(map(len, keys))
    lines = [f"{k:<{pad}}  {_cell(row, k, True)}" for k in keys]
    return "\n".join(lines + [""] + [line for note in footer + list(extra_notes) for line in wrap(note, width)]) + "\n"


def wrap_header(header: str, width: int | None) -> list[str]:
    """The header's ``key value`` fields, as many to a line as fit."""
    if width is None or len(header) <= width:
        return [header]
    lines: list[str] = []
    for field in header.split(" | "):
        if lines and len(lines[-1]) + 3 + len(field) <= width:
            lines[-1] += " | " + field
        else:
            lines.append(field)
    return lines


LISTED = 10   # a single row of more columns than this that does not fit is listed a field per line


def _fewest_to_fit(rows: Sequence[dict[str, Any]], shown: list[str], shares: bool, width: int) -> list[str]:
    """The last columns of ``shown`` (never its first) whose move to the header makes it fit."""
    for n in range(1, len(shown)):
        if max(map(len, _grid(rows, shown[:-n], shares)), default=0) <= width:
            return shown[-n:]
    return shown[1:]


def _grid(rows: Sequence[dict[str, Any]], shown: list[str], shares: bool) -> list[str]:
    """The table's lines; a cell holding several lines (a model's layer groups) spans them."""
    if not shown:
        return []
    cells = [[_cell(row, c, shares).split("\n") for c in shown] for row in rows]
    titles = [_TITLES.get(c, c.removesuffix("_flops")) for c in shown]
    widths = [max(len(t), *(len(part) for r in cells for part in r[i])) for i, t in enumerate(titles)]
    right = [_is_flops(c) or c in _NUMERIC or c.endswith(("_bytes", "_s", "intensity")) for c in shown]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

    out = [line(titles), line(["-" * w for w in widths])]
    for row in cells:
        depth = max(map(len, row))
        out += [line([c[k] if k < len(c) else "" for c in row]) for k in range(depth)]
    return out


_TITLES = {"total_flops_per_token": "per_token", "total_params": "params", "active_params": "active",
           "total_bytes": "bytes", "kv_read_bytes": "kv_read", "time_s": "time", "floor_time_s": "floor",
           "ttft_s": "ttft", "tpot_s": "tpot", "tokens_per_s": "tok/s/seq", "batch_tokens_per_s": "tok/s",
           "compute_bound_batch": "compute_bound"}
_NEVER_HEADER = ("phase",)   # a single row keeps its phase in the table
_NUMERIC = (*_AXES, "ratio_to_6p")


def wrap(text: str, width: int | None) -> list[str]:
    """A note as lines of at most ``width`` characters (None: one line)."""
    if width is None or len(text) <= width:
        return [text]
    import textwrap

    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _is_flops(col: str) -> bool:
    return col.endswith("_flops") or col.endswith("_flops_per_token") or col in ("flops_per_device", "flops")


def _cell(row: dict[str, Any], col: str, shares: bool = True) -> str:
    value = row.get(col)
    if value is None:
        return ""
    if "_bytes" in col and isinstance(value, (int, float)) and not isinstance(value, bool):
        return units.nbytes(value)
    if col.endswith("_s") and not col.endswith("per_s") and isinstance(value, float):
        return units.seconds(value)
    if isinstance(value, float) and (col.endswith(("intensity", "per_s", "speedup", "break_even_acceptance"))
                                     or "_per_s_per_" in col):
        return f"{value:.4g}"
    if col == "collectives" and isinstance(value, list):   # a layout's collectives: op where x count, bytes each
        return "; ".join(f"{'stage ' + str(c['stage']) + ' ' if 'stage' in c else ''}{c['op']} {c['where']} "
                         f"x{c['count']} {units.nbytes(c['bytes'])}" for c in value)
    if col.startswith("stage_") and isinstance(value, list):   # a pipeline's per-stage values, first to last
        return "[" + ", ".join(_cell({col.removeprefix("stage_"): v}, col.removeprefix("stage_"), False)
                               for v in value) + "]"
    if _is_flops(col) and isinstance(value, int):
        text = units.flops(value)
        if shares and col in _SHARED and row.get("total_flops"):
            text += f" {units.share(value, row['total_flops']):>5}"
        return text
    return str(value)
