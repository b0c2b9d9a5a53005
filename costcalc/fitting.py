"""No time without fit: whether the weights and the KV cache a timed row holds fit on its device.

Every row that prints a time for a device (prefill, a cached prefill, a chunk, a decode step, a
generation's phases) gets ``fits``: the bytes ``costcalc.memory`` counts -- resident weights in the
row's weight format, the KV cache (and recurrent states) of the row's batch at the context held
*after* the step, in its KV dtype, with the rolling window cache serving stacks keep (memory's
default: a sliding-window layer holds min(T, W) tokens) -- within the device's memory less
``vocab.MEMORY_RESERVE``. Under a layout, one device's (``memory.per_device``: each pipeline
stage's, the fullest decides). The context held after the step:

- prefill of S: S; a cached prefill (or a chunk) of C over T: T + C;
- a decode step over T cached tokens: T + 1 (its own key is written);
- a generation of S then N - 1 decode steps: S after the prefill, S + N - 1 after the decode phase
  (the ``total`` row's too).

``max_batch``: the largest batch whose row fits at a context (``--batch max``), memory's
``max_batch`` checked against ``holds`` at that batch and the next (a multiple of the
data-parallel replicas under a layout).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from .errors import CostcalcError
from .evaluate import Options, Query
from .layout import Layout
from .vocab import MEMORY_RESERVE as RESERVE, WindowCache


def memory_query(query: Query) -> Query:
    """The question ``memory`` answers for a row's query: a decode step's cache (its MLA form), the
    rolling window cache, the row's draft and dtypes on its device."""
    from .roofline import Precision

    options = Options(mla=query.options.mla, window_cache=WindowCache.rolling, draft=query.options.draft,
                      draft_model=query.options.draft_model, draft_tp=query.options.draft_tp)
    return Query(query.spec, "decode", options, query.precision or Precision(), query.machine)


def usable(query: Query, reserve: float = RESERVE) -> int:
    """The bytes of the device a model may hold: its memory less the reserve (memory's rule)."""
    return math.floor(query.machine.device.mem_bytes * (1 - reserve))


def held(query: Query, batch: int, context: int, layout: Optional[Layout] = None, one: Any = None) -> Optional[int]:
    """Bytes the fullest device holds: weights + KV cache (+ states) of ``batch`` sequences of
    ``context`` tokens (``memory``'s count; ``layout``: the query's own unless given; ``one``: its
    ``memory.shard``, where worked out already). None where memory does not model the layout (e.g.
    sequence parallelism, a draft under a pipeline)."""
    from . import memory

    mq = memory_query(query)
    layout = query.options.layout if layout is None else layout
    if layout.single:
        return (memory.weight_bytes(mq) + memory.kv_cache_bytes(mq, batch, context)
                + memory.state_bytes(mq, batch))
    try:
        memory.check(query.spec, layout, mq.options, batch)
    except CostcalcError:
        return None
    stages = memory.per_device(mq, layout, memory.Held(batch, context, usable(query)), one, limits=False)
    return max(st["total_bytes"] for st in stages)


def fits(query: Query, batch: int, context: int, one: Any = None) -> Optional[bool]:
    """Whether ``held`` fits in ``usable`` (None: not modelled under the layout)."""
    total = held(query, batch, context, one=one)
    return None if total is None else total <= usable(query)


def column(query: Query, batch: Sequence[int], context: Sequence[int]) -> list[Optional[bool]]:
    """``fits`` at every point (batch, context held), worked out once per distinct point."""
    seen: dict[tuple[int, int], Optional[bool]] = {}
    out = []
    for b, t in zip(batch, context):
        key = (int(b), int(t))
        if key not in seen:
            seen[key] = fits(query, *key)
        out.append(seen[key])
    return out


def increasing(query: Query, batch: int, context: Sequence[int]) -> list[Optional[bool]]:
    """``column`` over contexts that never decrease at one batch (a chunk schedule's): the cache
    only grows, so the rows fit up to the first that does not, found by bisection."""
    n = len(context)
    if n == 0:
        return []
    last = fits(query, batch, int(context[-1]))
    if last is None or last:
        return [last] * n
    lo, hi = 0, n - 1          # the first index that does not fit lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(query, batch, int(context[mid])):
            lo = mid + 1
        else:
            hi = mid
    return [True] * lo + [False] * (n - lo)


def max_batch(query: Query, context: int) -> int:
    """The largest batch whose weights and cache fit at ``context`` tokens held (0: not even one
    sequence, or one replica's, fits): memory's ``max_batch``, then checked with ``fits`` (a step of
    the data-parallel replicas ``dp`` times the micro-batches under a layout)."""
    from . import memory

    layout = query.options.layout
    step = layout.dp * (query.options.micro_batches or 1)   # every replica's micro-batches whole
    mq = memory_query(query)
    memory.check(query.spec, layout, mq.options, step)     # where ``held`` is None: the reason, as memory says it
    one = None if layout.single else memory.shard(mq, layout)      # one device's matrices and caches, once
    guess = memory.max_batch(mq, context, RESERVE, layout, one)    # memory.fit's, without the rest of its row
    guess -= guess % step
    while guess > 0 and not fits(query, guess, context, one):
        guess -= step
    while fits(query, guess + step, context, one):
        guess += step
    return guess


def insert_after(table: dict[str, list], anchor: str, new: dict[str, list]) -> dict[str, list]:
    """``table`` with the ``new`` columns right after ``anchor`` (at the end where it is absent)."""
    if anchor not in table:
        return {**table, **new}
    out: dict[str, list] = {}
    for key, values in table.items():
        if key in new:
            continue
        out[key] = values
        if key == anchor:
            out.update(new)
    return out


def warning(rows: Sequence[dict[str, Any]], limit: int = 4) -> Optional[str]:
    """One line naming the rows whose weights and cache do not fit (None where every row fits)."""
    short = list(dict.fromkeys(_name(r) for r in rows if r.get("fits") is False))
    if not short:
        return None
    device = rows[0].get("device")
    more = f" and {len(short) - limit} more" if len(short) > limit else ""
    return (f"does not fit on {device} (weights + KV cache over {1 - RESERVE:.0%} of its memory, "
            f"fits false): {'; '.join(short[:limit])}{more}")


def _name(row: dict[str, Any]) -> str:
    parts = [str(row.get("preset"))]
    if row.get("layout"):
        parts.append(str(row["layout"]))
    if row.get("phase"):
        parts.append(str(row["phase"]))
    parts += [f"{k} {row[k]}" for k in ("batch", "seq", "context", "chunk", "prefix", "new_tokens")
              if row.get(k) is not None]
    return " ".join(parts)
