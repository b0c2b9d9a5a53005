"""Exact numbers for a model: each workload as rows (dicts) or tables (columns).

Every function takes a ``ModelSpec``, the workload's sizes and the conventions (``convention``,
``logits``, ``tile``, ``mla``), and returns rows: plain dicts with the inputs (``preset``,
``workload``, ``convention``, ``batch``, ``seq``, ...), the ``phase`` where a workload has
phases, and one ``<term>_flops`` exact ``int`` per breakdown term plus ``linear_flops`` and
``total_flops``. Compiled workloads go through ``costcalc.evaluate``; the composites
(``generate``, ``chunked``, ``varlen_prefill``) are assembled here from them.
``costcalc.frame`` turns rows into a pandas DataFrame.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from . import evaluate
from .core.registry import WORKLOADS, workload as find
from .errors import CostcalcError
from .evaluate import SMALL, Options, Table, add, ints
from .params import executed_linear_params, parameters, rule_6p
from .ranges import check_rows

if TYPE_CHECKING:   # bytes and time load only when asked for (a FLOPs answer starts faster)
    from .roofline import Machine, Precision
from .render import as_rows as rows   # a table as a list of row dicts
from .spec import ModelSpec

Row = dict[str, Any]
MAX_TRAFFIC_POINTS = 50_000   # points x layer groups of one bytes-and-time table (about 15 s)

__all__ = ["prefill", "cached_prefill", "varlen_prefill", "chunk_schedule", "chunked", "chunked_table", "decode",
           "generate", "generate_table", "train", "table", "rows", "mla_form", "parameters", "executed_linear_params",
           "rule_6p", "crossover", "tiled_fraction", "operators", "operator_terms", "WORKLOADS", "Options", "SMALL"]


def table(spec: ModelSpec, workload: str, convention: str = "causal", logits: str = "last",
          tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
          machine: Machine | None = None, window_cache: str = "whole", **inputs: Sequence[int]) -> Table:
    """Exact FLOPs of a compiled workload at every point given by equal-length input columns;
    a decode step adds its cost per output token, a training step the 6P rule beside it. With
    ``precision`` (dtypes) or ``machine`` (a device), the bytes it moves, and its time."""
    options = Options(convention, logits, tile, mla, window_cache)
    out = evaluate.table(spec, workload, options, **inputs)
    wl = find(workload)
    if wl.name == "decode":
        out["total_flops_per_token"] = list(map(int.__floordiv__, out["total_flops"], out["batch"]))
    if wl.name == "train":
        per_token = rule_6p(spec, 1, mla)
        out["rule_6p_flops"] = [per_token * b * q for b, q in zip(out["batch"], out["seq"])]
        out["ratio_to_6p"] = [round(t / r, 4) for t, r in zip(out["total_flops"], out["rule_6p_flops"])]
    if precision is not None or machine is not None:
        out.update(_traffic(spec, wl, options, (wl.logits or options.logits).value, precision, machine,
                            {i.symbol: out[i.column] for i in wl.inputs}, out["total_flops"]))
    return out


def _traffic(spec: ModelSpec, wl, options: Options, logits: str, precision: Precision | None,
             machine: Machine | None, points: dict[str, list[int]], flops: list[int]) -> Table:
    """The labels and the bytes/time columns of rows (``costcalc.roofline``)."""
    from . import roofline

    precision = precision or roofline.Precision()
    n = len(flops)
    if n * len(spec.groups) > MAX_TRAFFIC_POINTS:
        raise CostcalcError(f"bytes and time are worked out point by point (~0.3 ms a point and layer group): "
                            f"{n:,} points x {len(spec.groups)} group(s) is too many, at most "
                            f"{MAX_TRAFFIC_POINTS:,}; narrow the ranges, or drop --device and the dtypes for FLOPs")
    labels = {**({"device": machine.device.name} if machine else {}), **precision.labels(spec)}
    if machine is not None and (machine.compute_efficiency, machine.memory_efficiency) != (1, 1):
        labels.update(compute_efficiency=machine.compute_efficiency, memory_efficiency=machine.memory_efficiency)
    out: Table = {key: [value] * n for key, value in labels.items()}
    out.update(roofline.columns(spec, wl, options, logits, precision, machine, points, flops))
    return out


def _one(spec: ModelSpec, workload: str, convention: str, logits: str, tile, mla: str,
         window_cache: str = "whole", **inputs: int) -> Row:
    return rows(table(spec, workload, convention, logits, tile, mla, window_cache=window_cache,
                      **{k: [v] for k, v in inputs.items()}))[0]


def operators(spec: ModelSpec, workload: str, convention: str = "causal", logits: str = "last",
              tile: tuple[int, int] | None = None, mla: str = "auto", **inputs: int) -> dict[str, int]:
    """FLOPs of each operator (the projections by name, ``attention``, ``lm_head``) of one point
    of a compiled workload, summed over the layer groups. ``logits`` may be ``none``."""
    options = Options(convention, "last" if logits == "none" else logits, tile, mla)
    return evaluate.operators(spec, workload, options, logits, **inputs)


def operator_terms(spec: ModelSpec, workload: str = "prefill", mla: str = "auto") -> dict[str, str]:
    """The term each operator of a workload is charged to."""
    return evaluate.operator_terms(spec, workload, Options(mla=mla))


def crossover(spec: ModelSpec, conventions=("causal", "full"), mla: str = "auto", precision=None,
              batch: int = 1) -> list[Row]:
    """T_equal, the prefill crossover per convention, and with dtypes the time crossover
    (``costcalc.crossover``)."""
    from . import crossover as solved

    return solved.crossover(spec, conventions, mla, precision, batch)


def tiled_fraction(seq: int, tile: tuple[int, int]):
    """Tiled / full attention of one uncached prefill of ``seq`` (``costcalc.crossover``)."""
    from . import crossover as solved

    return solved.tiled_fraction(seq, tile)


def intensity(flops: int, moved: int):
    """FLOPs per byte moved, four decimals (None where nothing moves)."""
    return round(flops / moved, 4) if moved else None


def mla_form(workload: str, mla: str) -> str:
    """The MLA form a workload runs: ``auto`` is absorbed for decode steps, naive otherwise."""
    return Options(mla=mla).form(find(workload))


# --- single steps ----------------------------------------------------------------------

def prefill(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
            logits: str = "last", tile: tuple[int, int] | None = None, mla: str = "auto",
            window_cache: str = "whole") -> Row:
    """B prompts of S tokens, no cache."""
    return _one(spec, "prefill", convention, logits, tile, mla, window_cache, batch=batch, seq=seq)


def cached_prefill(spec: ModelSpec, chunk: int, prefix: int, batch: int = 1,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> Row:
    """C new tokens per sequence over a cached prefix of T tokens."""
    return _one(spec, "cached_prefill", convention, logits, tile, mla, window_cache,
                batch=batch, chunk=chunk, prefix=prefix)


def decode(spec: ModelSpec, context: int, batch: int = 1, convention: str = "causal",
           tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> Row:
    """One decode step over T cached tokens, B sequences; also per output token."""
    return _one(spec, "decode", convention, "last", tile, mla, window_cache, batch=batch, context=context)


def train(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
          tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """Forward with logits at every position, x3 for forward + backward, beside 6P (no cache:
    the window cache does not apply)."""
    return _one(spec, "train", convention, "all", tile, mla, batch=batch, seq=seq)


# --- composites ------------------------------------------------------------------------

def varlen_prefill(spec: ModelSpec, lengths: Sequence[int], padded: bool = False,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """A batch of prompts of different lengths, packed (sums) or padded to the longest."""
    if not lengths:
        raise CostcalcError("lengths must list at least one prompt length")
    lengths = [evaluate.positive("each of lengths", n) for n in lengths]
    options = Options(convention, logits, tile, mla)
    if padded:
        one = evaluate.table(spec, "prefill", options, batch=[len(lengths)], seq=[max(lengths)])
        flops = {k: v[0] for k, v in one.items() if k.endswith("_flops")}
    else:
        each = evaluate.table(spec, "prefill", options, batch=[1] * len(lengths), seq=lengths)
        flops = {k: sum(v) for k, v in each.items() if k.endswith("_flops")}
    row: Row = {"preset": spec.name, "workload": "varlen_prefill",
                **options.labels(spec, find("prefill")), "batch": len(lengths),
                "lengths": ",".join(map(str, lengths)), "padded": padded, "logits": options.logits.value}
    row.update(flops)
    return row


def generate(spec: ModelSpec, prompt: int, new: int, batch: int = 1,
             convention: str = "causal", logits: str = "last",
             tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> list[Row]:
    """Prefill of S, then N-1 decode steps: ``prefill``, ``decode`` and ``total`` rows."""
    return rows(generate_table(spec, convention, logits, tile, mla, batch=[batch], seq=[prompt], new_tokens=[new],
                               window_cache=window_cache))


def generate_table(spec: ModelSpec, convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
                   machine: Machine | None = None, *, batch: Sequence[int],
                   seq: Sequence[int], new_tokens: Sequence[int], window_cache: str = "whole") -> Table:
    """Generations at every point of equal-length columns: three rows per point
    (``prefill``, ``decode`` = the N-1 steps, ``total``). With ``precision`` or ``machine``,
    bytes and times; with a machine, the total rows give ``ttft_s`` (the prefill), ``tpot_s``
    (a decode step on average), and ``tokens_per_s`` per sequence and for the batch."""
    options = Options(convention, logits, tile, mla, window_cache)
    n = evaluate.check_inputs(find("generate"), {"batch": batch, "seq": seq, "new_tokens": new_tokens})
    first = evaluate.table(spec, "prefill", options, batch=batch, seq=seq)
    steps = evaluate.table(spec, "decode_phase", options, batch=batch, seq=seq, new_tokens=new_tokens)
    flops = [k for k in first if k.endswith("_flops")]
    out: Table = {"preset": [spec.name] * (3 * n), "workload": ["generate"] * (3 * n)}
    labels = options.labels(spec, find("prefill"))
    if spec.has_mla:
        a, b = options.form(find("prefill")), options.form(find("decode_phase"))
        labels["mla"] = [a, b, a if a == b else f"{a}+{b}"] * n
    out.update({k: v if isinstance(v, list) else [v] * (3 * n) for k, v in labels.items()})
    out["phase"] = ["prefill", "decode", "total"] * n
    for key in ("batch", "seq"):
        out[key] = _repeat(first[key], 3)
    out["new_tokens"] = _repeat(ints(new_tokens, n), 3)
    out["logits"] = _repeat(first["logits"], 3)
    for key in flops:
        column = [0] * (3 * n)
        column[0::3], column[1::3] = first[key], steps[key]
        column[2::3] = add([first[key], steps[key]])
        out[key] = column
    if precision is not None or machine is not None:
        out.update(_generation_traffic(spec, options, precision, machine, first, steps, ints(new_tokens, n)))
    return out


def _generation_traffic(spec: ModelSpec, options: Options, precision, machine, first: Table, steps: Table,
                        new: list[int]) -> Table:
    """Bytes and times of the prefill rows, the decode-phase rows and their totals."""
    n = len(new)
    one = _traffic(spec, find("prefill"), options, options.logits.value, precision, machine,
                   {"B": first["batch"], "S": first["seq"]}, first["total_flops"])
    many = _traffic(spec, find("decode_phase"), options, "last", precision, machine,
                    {"B": first["batch"], "S": first["seq"], "N": new}, steps["total_flops"])
    out: Table = {}
    for key in one:
        a, b = one[key], many[key]
        if key.endswith("_bytes") or key.endswith("time_s"):
            total = add([a, b]) if key.endswith("_bytes") else [x + y for x, y in zip(a, b)]
        elif key == "intensity":
            total = [intensity(f + g, x + y) for f, g, x, y in
                     zip(first["total_flops"], steps["total_flops"], one["total_bytes"], many["total_bytes"])]
        elif key.endswith("bound"):
            total = [None] * n
        else:
            total = a
        column = [None] * (3 * n)
        column[0::3], column[1::3], column[2::3] = a, b, total
        out[key] = column
    if machine is not None:
        totals = out["time_s"][2::3]
        out["bound"][2::3] = ["memory" if m >= c else "compute" for c, m in
                              zip(out["compute_time_s"][2::3], out["memory_time_s"][2::3])]
        rows = {"ttft_s": one["time_s"],
                "tpot_s": [t / (k - 1) if k > 1 else None for t, k in zip(many["time_s"], new)],
                "tokens_per_s": [k / t if t else None for k, t in zip(new, totals)],
                "batch_tokens_per_s": [b * k / t if t else None for b, k, t in zip(first["batch"], new, totals)]}
        for key, values in rows.items():
            column = [None] * (3 * n)
            column[2::3] = values
            out[key] = column
    return out


def _repeat(values: list, times: int) -> list:
    return [v for v in values for _ in range(times)]


def chunk_schedule(seq: int, chunk: int) -> list[int]:
    """Chunk sizes of a prompt of ``seq`` tokens cut into chunks of ``chunk`` (last may be short)."""
    full, rest = _chunk_counts(seq, chunk)
    return [chunk] * full + ([rest] if rest else [])


def _chunk_counts(seq: int, chunk: int) -> tuple[int, int]:
    seq, chunk = evaluate.positive("seq", seq), evaluate.positive("chunk", chunk)
    if chunk > seq:
        raise CostcalcError(f"chunk {chunk} is larger than the prompt (seq {seq})")
    full, rest = divmod(seq, chunk)
    check_rows(full + bool(rest) + 2, f"the schedule of seq {seq} in chunks of {chunk}")
    return full, rest


def chunked(spec: ModelSpec, seq: int, chunk: int, prefix: int = 0, batch: int = 1,
            convention: str = "causal", logits: str = "last",
            tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
            machine: Machine | None = None, window_cache: str = "whole") -> list[Row]:
    """The chunk schedule of one prompt: a row per chunk, a ``total`` row, and the
    ``unchunked`` single pass over the same prefix for comparison.

    Only the final chunk produces logits (``logits=last``); with ``all`` every chunk
    produces logits for its own tokens.
    """
    return rows(chunked_table(spec, seq, chunk, prefix, batch, convention, logits, tile, mla, precision, machine,
                              window_cache))


def chunked_table(spec: ModelSpec, seq: int, chunk: int, prefix: int = 0, batch: int = 1,
                  convention: str = "causal", logits: str = "last",
                  tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
                  machine: Machine | None = None, window_cache: str = "whole") -> Table:
    """``chunked`` as columns: every chunk evaluated at once over arrays (a schedule of a
    million chunks takes seconds), then the ``total`` and ``unchunked`` rows."""
    full, rest = _chunk_counts(seq, chunk)
    options = Options(convention, logits, tile, mla, window_cache)
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise CostcalcError(f"prefix must be a non-negative integer, got {prefix!r}")
    batch = evaluate.positive("batch", batch)
    wl = find("cached_prefill")
    n = full + bool(rest)
    sizes, starts = _arange(n, chunk, 0), _arange(n, prefix, chunk)
    if rest:
        sizes[-1] = rest
    # logits last: the last chunk alone runs the LM head; all: each chunk for its own tokens
    parts = [(0, n, options.logits.value)] if options.logits.value == "all" else [(0, n - 1, "none"), (n - 1, n, "last")]
    flops: dict[str, list[int]] = {}
    for lo, hi, mode in parts:
        if hi > lo:
            got = evaluate.columns(spec, wl, options, mode, {"B": _arange(hi - lo, batch, 0),
                                                             "C": sizes[lo:hi], "T": starts[lo:hi]}, hi - lo)
            for name, column in got.items():
                flops.setdefault(name, []).extend(column)
    out: Table = {key: [value] * (n + 2) for key, value in
                  {"preset": spec.name, "workload": "chunked", **options.labels(spec, wl)}.items()}
    out["phase"] = [f"chunk {i}" for i in range(1, n + 1)] + ["total", "unchunked"]
    out["batch"], out["seq"] = [batch] * (n + 2), [seq] * (n + 2)
    out["chunk"] = ints(sizes, n) + [chunk, seq]
    out["prefix"] = ints(starts, n) + [prefix, prefix]
    out["logits"] = [options.logits.value] * (n + 2)
    single = cached_prefill(spec, seq, prefix, batch, convention, logits, tile, mla, window_cache)
    for name, column in flops.items():
        out[f"{name}_flops"] = column + [sum(column), single[f"{name}_flops"]]
    if precision is not None or machine is not None:
        moved: dict[str, list] = {}
        for lo, hi, mode in parts:
            if hi > lo:
                part = _traffic(spec, wl, options, mode, precision, machine,
                                {"B": [batch] * (hi - lo), "C": ints(sizes[lo:hi], hi - lo),
                                 "T": ints(starts[lo:hi], hi - lo)}, out["total_flops"][lo:hi])
                for key, column in part.items():
                    moved.setdefault(key, []).extend(column)
        whole = _traffic(spec, wl, options, options.logits.value, precision, machine,
                         {"B": [batch], "C": [seq], "T": [prefix]}, [single["total_flops"]])
        for key, column in moved.items():
            out[key] = column + [_sum_of(key, column, moved, out["total_flops"][:n]), whole[key][0]]
    return out


def _sum_of(key: str, column: list, moved: dict[str, list], flops: list[int]):
    """The ``total`` row's value of a bytes/time column: sums, a ratio of sums, or the label."""
    if key.endswith("_bytes") or key.endswith("time_s"):
        return sum(column)
    if key == "intensity":
        return intensity(sum(flops), sum(moved["total_bytes"]))
    if key == "bound":
        return "memory" if sum(moved["memory_time_s"]) >= sum(moved["compute_time_s"]) else "compute"
    if key.endswith("_bound"):
        return None
    return column[0]


def _arange(n: int, start: int, step: int):
    """``start, start + step, ...`` (n values): a list for few, an int64 array for many."""
    if n <= SMALL:
        return [start + i * step for i in range(n)]
    import numpy as np

    return start + step * np.arange(n, dtype=np.int64)
