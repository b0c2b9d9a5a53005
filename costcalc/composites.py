"""The composite workloads, assembled from compiled ones (``costcalc.calc`` offers them):
a packed or padded variable-length batch (prefills summed), a generation (a prefill and the
decode phase, with its rates on a device), and a chunk schedule (a cached prefill per chunk,
evaluated over arrays, beside the unchunked pass)."""
from __future__ import annotations

from typing import Any, Sequence

from . import evaluate
from .errors import CostcalcError
from .evaluate import SMALL, Query, Table, add, ints
from .ranges import check_rows
from .rows import as_rows as rows
from .vocab import Logits

Row = dict[str, Any]


def _traffic(query: Query, points: dict[str, list[int]], flops: list[int]) -> Table:
    from .roofline import row_columns   # bytes and time load only when asked for

    return row_columns(query, points, flops)


def intensity(flops: int, moved: int):
    from .roofline import intensity as ratio

    return ratio(flops, moved)


def _bound(compute_s: float, memory_s: float):
    from .roofline import bound

    return bound(compute_s, memory_s)


def varlen(query: Query, lengths: Sequence[int], padded: bool = False) -> Row:
    """A batch of prompts of different lengths, packed (sums) or padded to the longest; with
    the query's dtypes or device, the bytes and times of its forwards, summed."""
    if not lengths:
        raise CostcalcError("lengths must list at least one prompt length")
    lengths = [evaluate.positive("each of lengths", n) for n in lengths]
    own, query = query.workload.name, query.but(workload=query.workload.runs)
    points = {"batch": [len(lengths)], "seq": [max(lengths)]} if padded else \
        {"batch": [1] * len(lengths), "seq": lengths}
    each = evaluate.table(query, **points)
    row: Row = {"preset": query.spec.name, "workload": own, **query.labels(), "batch": len(lengths),
                "lengths": ",".join(map(str, lengths)), "padded": padded, "logits": query.logits.value}
    row.update({k: sum(v) for k, v in each.items() if k.endswith("_flops")})
    if query.traffic:
        moved = _traffic(query, {"B": points["batch"], "S": points["seq"]}, each["total_flops"])
        row.update({k: sum(v) for k, v in moved.items() if k.endswith(("_bytes", "time_s"))})
    return row


def generation(query: Query, batch: Sequence[int], seq: Sequence[int], new_tokens: Sequence[int]) -> Table:
    """Generations at every point of equal-length columns: three rows per point
    (``prefill``, ``decode`` = the N-1 steps, ``total``). With the query's dtypes or device,
    bytes and times; with a device, the total rows give ``ttft_s`` (the prefill), ``tpot_s``
    (a decode step on average), and ``tokens_per_s`` per sequence and for the batch."""
    n = evaluate.check_inputs(query.workload, {"batch": batch, "seq": seq, "new_tokens": new_tokens})
    prefill, phase = (query.but(workload=name) for name in query.workload.phases)
    first = evaluate.table(prefill, batch=batch, seq=seq)
    steps = evaluate.table(phase, batch=batch, seq=seq, new_tokens=new_tokens)
    # a term may be zero, so absent, in one phase only (Gated DeltaNet's steps: no scan product)
    flops = [k for k in dict.fromkeys([*first, *steps]) if k.endswith("_flops")]
    out: Table = {"preset": [query.spec.name] * (3 * n), "workload": [query.workload.name] * (3 * n)}
    labels = prefill.labels()
    if query.spec.has_mla:
        a, b = prefill.form.value, phase.form.value
        labels["mla"] = [a, b, a if a == b else f"{a}+{b}"] * n
    out.update({k: v if isinstance(v, list) else [v] * (3 * n) for k, v in labels.items()})
    out["phase"] = ["prefill", "decode", "total"] * n
    for key in ("batch", "seq"):
        out[key] = _repeat(first[key], 3)
    out["new_tokens"] = _repeat(ints(new_tokens, n), 3)
    out["logits"] = _repeat(first["logits"], 3)
    for key in flops:
        column = [0] * (3 * n)
        a, b = first.get(key, [0] * n), steps.get(key, [0] * n)
        column[0::3], column[1::3] = a, b
        column[2::3] = add([a, b])
        out[key] = column
    if query.traffic:
        out.update(_generation_traffic(query, first, steps, ints(new_tokens, n)))
    if not query.options.layout.single:
        out.update(_generation_layout(prefill, phase, first, ints(new_tokens, n)))
        out = _beside(out)
    return out


def rates(query: Query, batch: Sequence[int], seq: Sequence[int], new_tokens: Sequence[int]) -> Table:
    """The ``total`` rows' ``ttft_s``, ``tpot_s``, ``tokens_per_s`` and ``batch_tokens_per_s`` of
    ``generation`` on a device (its ``weight_dtype`` beside them), worked out by the same functions
    without the columns a plan does not read: under a layout the layout's times alone (``generation``'s
    whole-model bytes are replaced by them there)."""
    n = evaluate.check_inputs(query.workload, {"batch": batch, "seq": seq, "new_tokens": new_tokens})
    prefill, phase = (query.but(workload=name) for name in query.workload.phases)
    first = {"batch": ints(batch, n), "seq": ints(seq, n)}
    new = ints(new_tokens, n)
    if query.options.layout.single:
        first["total_flops"] = evaluate.table(prefill, batch=batch, seq=seq)["total_flops"]
        steps = evaluate.table(phase, batch=batch, seq=seq, new_tokens=new_tokens)
        got = _generation_traffic(query, first, steps, new)
    else:
        got = _generation_layout(prefill, phase, first, new)
    out = {key: got[key][2::3] for key in ("ttft_s", "tpot_s", "tokens_per_s", "batch_tokens_per_s")}
    out["weight_dtype"] = [query.precision.labels(query.spec)["weight_dtype"]] * n
    return out


def generation_rates(batch: Sequence[int], new: Sequence[int], first: Sequence[float],
                     rest: Sequence[float]) -> dict[str, list]:
    """A generation's rates from its prefill's time ``first`` and its decode phase's ``rest`` (one a point):
    ``ttft_s`` the prefill; ``tpot_s`` the decode phase / (N - 1) (none for one token); ``tokens_per_s``
    N / (prefill + decode phase) and ``batch_tokens_per_s`` B N / it (none where no time passes) -- the one
    rule ``generate``, speculative generations and ``plan``'s search give them by."""
    totals = [f + r for f, r in zip(first, rest)]
    return {"ttft_s": list(first),
            "tpot_s": [t / (k - 1) if k > 1 else None for t, k in zip(rest, new)],
            "tokens_per_s": [k / t if t else None for k, t in zip(new, totals)],
            "batch_tokens_per_s": [b * k / t if t else None for b, k, t in zip(batch, new, totals)]}


def _generation_layout(prefill: Query, phase: Query, first: Table, new: list[int]) -> Table:
    """The layout's columns (``parallel.columns``) of the prefill rows, the decode-phase rows and
    their totals: FLOPs, bytes and times added, the collectives of both phases listed; on a device
    the total rows' rates from the layout's times (``ttft_s``: the prefill's step on the layout,
    ``tpot_s``: the decode phase's / (N-1), ``tokens_per_s``, ``batch_tokens_per_s``)."""
    from . import parallel
    from .roofline import coverages, efficiencies

    n = len(new)
    one = parallel.columns(prefill, {"B": first["batch"], "S": first["seq"]}, n)
    many = parallel.columns(phase, {"B": first["batch"], "S": first["seq"], "N": new}, n)
    out: Table = {}
    for key in dict.fromkeys([*one, *many]):   # a term may move nothing in one phase
        a, b = one.get(key, [_absent(key)] * n), many.get(key, [_absent(key)] * n)
        if key in ("flops_per_device", "replicated_flops", "comm_bytes_per_device"):
            total = [parallel.number(x + y) for x, y in zip(a, b)]
        elif key in ("stage_flops", "stage_bytes", "stage_time_s"):   # a pipeline's, stage by stage
            total = [[parallel.number(x + y) for x, y in zip(p, q)] for p, q in zip(a, b)]
        elif key.endswith("_bytes_per_device") or key.endswith("time_s"):
            total = [x + y for x, y in zip(a, b)]
        elif key.endswith("bound"):
            total = [None] * n
        elif key == "collectives":
            total = [x + y for x, y in zip(a, b)]
        elif key == "measured_coverage":     # --timing measured: the notes of both phases
            total = [coverages(x, y) for x, y in zip(a, b)]
        elif key == "replicated":
            total = [x if x == y or y == "none" else y if x == "none" else f"{x}; {y}" for x, y in zip(a, b)]
        else:
            total = a
        column = [None] * (3 * n)
        column[0::3], column[1::3], column[2::3] = a, b, total
        out[key] = column
    if "measured_coverage" in out:       # --timing measured: a total's ratios from its added times
        efficiencies(out)
    if "comm_time_s" in out:     # on a device: the step times on the layout give the rates
        out["bound"][2::3] = [_bound(c, m) for c, m in zip(out["compute_time_s"][2::3], out["memory_time_s"][2::3])]
        for key, values in generation_rates(first["batch"], new, one["time_s"], many["time_s"]).items():
            column = [None] * (3 * n)
            column[2::3] = values
            out[key] = column
    return out


def _generation_traffic(query: Query, first: Table, steps: Table, new: list[int]) -> Table:
    """Bytes and times of the prefill rows, the decode-phase rows and their totals."""
    from .roofline import coverages, efficiencies

    n = len(new)
    prefill, phase = (query.but(workload=name) for name in query.workload.phases)
    one = _traffic(prefill, {"B": first["batch"], "S": first["seq"]}, first["total_flops"])
    many = _traffic(phase, {"B": first["batch"], "S": first["seq"], "N": new},
                    steps["total_flops"])
    out: Table = {}
    for key in dict.fromkeys([*one, *many]):   # a one-token generation has no decode steps: no decode terms
        a, b = one.get(key, [_absent(key)] * n), many.get(key, [_absent(key)] * n)
        if key.endswith("_bytes") or key.endswith("time_s"):
            total = add([a, b]) if key.endswith("_bytes") else [x + y for x, y in zip(a, b)]
        elif key == "intensity":
            total = [intensity(f + g, x + y) for f, g, x, y in
                     zip(first["total_flops"], steps["total_flops"], one["total_bytes"], many["total_bytes"])]
        elif key.endswith("bound"):
            total = [None] * n
        elif key == "measured_coverage":     # --timing measured: the notes of both phases
            total = [coverages(x, y) for x, y in zip(a, b)]
        else:
            total = a
        column = [None] * (3 * n)
        column[0::3], column[1::3], column[2::3] = a, b, total
        out[key] = column
    if query.machine is not None:
        efficiencies(out)         # --timing measured: a total's ratios from its added times
        out["bound"][2::3] = [_bound(c, m) for c, m in zip(out["compute_time_s"][2::3], out["memory_time_s"][2::3])]
        for key, values in generation_rates(first["batch"], new, one["time_s"], many["time_s"]).items():
            column = [None] * (3 * n)
            column[2::3] = values
            out[key] = column
    return out


def _absent(key: str):
    """A bytes/time column's value where its term moves nothing (0), else None (no bound)."""
    return 0 if key.endswith("_bytes") else 0.0 if key.endswith("time_s") else None


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


def schedule(query: Query, seq: int, chunk: int, prefix: int = 0, batch: int = 1) -> Table:
    """The chunk schedule of one prompt as columns: a row per chunk, the ``total``, and the
    ``unchunked`` single pass over the same prefix for comparison; every chunk evaluated at
    once over arrays (a schedule of a million chunks takes seconds). Only the final chunk
    produces logits (``logits=last``); with ``all`` every chunk produces logits for its own
    tokens."""
    full, rest = _chunk_counts(seq, chunk)
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise CostcalcError(f"prefix must be a non-negative integer, got {prefix!r}")
    batch = evaluate.positive("batch", batch)
    own, query = query.workload.name, query.but(workload=query.workload.runs)
    logits = query.logits
    n = full + bool(rest)
    sizes, starts = _arange(n, chunk, 0), _arange(n, prefix, chunk)
    if rest:
        sizes[-1] = rest
    # logits last: the last chunk alone runs the LM head; all: each chunk for its own tokens
    parts = [(0, n, query)] if logits == Logits.all else [(0, n - 1, query.but(logits=Logits.none)),
                                                          (n - 1, n, query)]
    flops: dict[str, list[int]] = {}
    for lo, hi, part in parts:
        if hi > lo:
            got = evaluate.columns(part, {"B": _arange(hi - lo, batch, 0), "C": sizes[lo:hi], "T": starts[lo:hi]},
                                   hi - lo)
            for name, column in got.items():
                flops.setdefault(name, []).extend(column)
    out: Table = {key: [value] * (n + 2) for key, value in
                  {"preset": query.spec.name, "workload": own, **query.labels()}.items()}
    out["phase"] = [f"chunk {i}" for i in range(1, n + 1)] + ["total", "unchunked"]
    out["batch"], out["seq"] = [batch] * (n + 2), [seq] * (n + 2)
    out["chunk"] = ints(sizes, n) + [chunk, seq]
    out["prefix"] = ints(starts, n) + [prefix, prefix]
    out["logits"] = [logits.value] * (n + 2)
    single = rows(evaluate.table(query, batch=[batch], chunk=[seq], prefix=[prefix]))[0]
    for name, column in flops.items():
        out[f"{name}_flops"] = column + [sum(column), single[f"{name}_flops"]]
    if query.traffic:
        out.update(_schedule_traffic(query, parts, out, single))
    if not query.options.layout.single:
        out.update(_schedule_layout(query, parts, out))
        out = _beside(out)
    return out


def _beside(table: Table) -> Table:
    from .parallel import beside

    return beside(table)


def _schedule_layout(query: Query, parts: list, out: Table) -> Table:
    """The layout's columns (``parallel.columns``) of each chunk, their ``total`` (FLOPs, bytes and
    times added, the same collectives' counts added) and the ``unchunked`` pass."""
    from . import parallel

    batch, seq, prefix = out["batch"][0], out["seq"][0], out["prefix"][-1]
    chunks: dict[str, list] = {}
    for lo, hi, part in parts:
        if hi > lo:
            got = parallel.columns(part, {"B": [batch] * (hi - lo), "C": out["chunk"][lo:hi],
                                          "T": out["prefix"][lo:hi]}, hi - lo)
            for key in dict.fromkeys([*chunks, *got]):     # chunks without logits have no lm_head_bound
                chunks.setdefault(key, [_absent(key)] * lo).extend(got.get(key, [_absent(key)] * (hi - lo)))
    whole = parallel.columns(query, {"B": [batch], "C": [seq], "T": [prefix]}, 1)
    table = {key: column + [_layout_total(key, column, chunks), whole.get(key, [None])[0]]
             for key, column in chunks.items()}
    if "measured_coverage" in table:       # --timing measured: the total's notes and ratios from its added times
        from .roofline import coverages, efficiencies

        table["measured_coverage"][-2] = coverages(*chunks["measured_coverage"])
        efficiencies(table)
    return table


def _layout_total(key: str, column: list, chunks: dict[str, list]):
    """The ``total`` row's value of a layout column over the chunks."""
    from . import parallel

    if key in ("flops_per_device", "replicated_flops", "comm_bytes_per_device"):
        return parallel.number(sum(column))
    if key in ("stage_flops", "stage_bytes", "stage_time_s"):    # a pipeline's (--pp), stage by stage
        return [parallel.number(sum(values)) for values in zip(*column)]
    if key.endswith("_bytes_per_device") or key.endswith("time_s"):
        return sum(column)
    if key == "bound":
        return _bound(sum(chunks["compute_time_s"]), sum(chunks["memory_time_s"]))
    if key.endswith("_bound"):
        return None
    if key == "replicated":
        named = dict.fromkeys(n for cell in column for n in cell.split(", ") if n != "none")
        return ", ".join(named) or "none"
    if key == "collectives":     # the same collective of every chunk: its counts added
        merged: dict[tuple, dict] = {}
        for cell in column:
            for c in cell:
                same = merged.setdefault((c.get("stage"), c["op"], c["where"], c["bytes"]), {**c, "count": 0})
                same["count"] += c["count"]
        return list(merged.values())
    return column[0]


def _schedule_traffic(query: Query, parts: list, out: Table, single: Row) -> Table:
    """Bytes and times of each chunk (``parts``: the chunks and the query each runs), their
    ``total`` and the ``unchunked`` pass."""
    n = len(out["phase"]) - 2
    batch, seq, prefix = out["batch"][0], out["seq"][0], out["prefix"][-1]
    moved: dict[str, list] = {}
    for lo, hi, part in parts:
        if hi > lo:
            got = _traffic(part, {"B": [batch] * (hi - lo), "C": out["chunk"][lo:hi], "T": out["prefix"][lo:hi]},
                           out["total_flops"][lo:hi])
            for key in dict.fromkeys([*moved, *got]):     # chunks without logits have no lm_head_bound
                moved.setdefault(key, [_absent(key)] * lo).extend(got.get(key, [_absent(key)] * (hi - lo)))
    whole = _traffic(query, {"B": [batch], "C": [seq], "T": [prefix]}, [single["total_flops"]])
    table = {key: column + [_sum_of(key, column, moved, out["total_flops"][:n]), whole.get(key, [None])[0]]
             for key, column in moved.items()}
    if "measured_coverage" in table:       # --timing measured: the total's ratios from its added times
        from .roofline import coverages, efficiencies

        table["measured_coverage"][n] = coverages(*moved["measured_coverage"])
        efficiencies(table)
    return table


def _sum_of(key: str, column: list, moved: dict[str, list], flops: list[int]):
    """The ``total`` row's value of a bytes/time column: sums, a ratio of sums, or the label."""
    if key.endswith("_bytes") or key.endswith("time_s"):
        return sum(column)
    if key == "intensity":
        return intensity(sum(flops), sum(moved["total_bytes"]))
    if key == "bound":
        return _bound(sum(moved["compute_time_s"]), sum(moved["memory_time_s"]))
    if key.endswith("_bound"):
        return None
    return column[0]


def _arange(n: int, start: int, step: int):
    """``start, start + step, ...`` (n values): a list for few, an int64 array for many."""
    if n <= SMALL:
        return [start + i * step for i in range(n)]
    import numpy as np

    return start + step * np.arange(n, dtype=np.int64)
