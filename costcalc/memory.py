"""Does it fit: the bytes a model and its KV cache hold on a device.

- Resident weights: every matrix (all experts, the embedding, an untied LM head) in its weight
  format (``costcalc.weights``: the model's ``dtypes`` or ``--weight-dtype``), with the scales and
  zero points the format stores.
- KV cache of B sequences of T tokens: per layer group, the tokens its cache keeps -- with
  a ``rolling`` window cache (the default here: what serving caches keep, vLLM's hybrid
  cache and Hugging Face's sliding and chunked cache layers) ``min(T, W)`` in a
  sliding-window layer (what its window reads), ``min(T, W_c)`` in a chunked one (at most one
  chunk is ever read), all T elsewhere; with a ``whole`` one all T everywhere -- times
  the K/V width per token as the decode step writes it (GQA ``2 h_kv d_h``; MLA under
  ``--mla auto`` its latent and RoPE key, ``r_kv + d_rope``, as serving stacks cache it), in
  the KV dtype; a sparse MLA layer (DeepSeek Sparse Attention) also keeps its index key of
  ``d_I`` per token, in the index dtype (``--index-dtype``: the KV dtype unless asked; fp8 with an
  fp32 scale per 128, as the reference keeps it).
- DeepSeek-V4's layers keep their window, ``min(T, W)`` keys of ``d_h`` (their own cache rolls,
  whatever ``--window-cache``), and one compressed entry per R_c tokens, ``floor(T / R_c)`` of them,
  of ``d_h`` (and a ``csa`` layer's index key of ``d_I``): what a decode step completing an entry
  writes. The compressors' buffers of the last R_c - 1 tokens are not counted.
- Recurrent states of B sequences: a linear-attention or state-space layer keeps a state of
  fixed size per sequence whatever the context (in the model's ``state_dtype`` or
  ``--state-dtype``) and its convolution window (in the KV dtype): ``state_bytes``; only the
  softmax-attention layers' cache grows with T.
- With ``--draft mtp``: the MTP modules' weights (``mtp_params``) and the KV cache of the module a
  draft runs (a layer group of its block: its own latent or K/V per token) are held too.
- ``fits`` leaves ``reserve`` of the device free (activations, workspace, fragmentation);
  ``max_batch`` at this context, ``max_context`` at this batch (what memory allows: the
  model's trained context length is not modelled), and ``devices_needed`` for weights and
  cache split evenly (an estimate: no parallelism overheads).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from .errors import CostcalcError
from .evaluate import Options, Query, positive
from .ranges import MAX_VALUE
from .spec import ModelSpec
from .vocab import WindowCache

DEFAULT_RESERVE = 0.1
SERVING = Options(window_cache="rolling")   # what a serving cache keeps: windows and chunks only theirs


def weight_bytes(query: Query) -> int:
    """Every matrix resident (all experts, the embedding, an untied LM head), each in its format
    (``weights.Plan.resident``: exact per matrix, scales and zero points included); with ``--draft mtp``
    the MTP modules too (``Plan.drafts``: they share the embedding and head)."""
    plan = query.precision.weights(query.spec)
    return round(plan.resident() + (plan.drafts() if query.draft is not None else 0))


# What a decode step writes of each cache, by traffic key: the K/V per token; per sequence
# the recurrent state (state dtype) and the convolution window (KV dtype).
# A sparse MLA layer's index key (d_I, in the KV dtype: the reference's fp8 and fp32 scale per
# 128 are not modelled) is kept per token beside its latent.
PER_TOKEN, PER_SEQUENCE = ("attention.kv_write", "indexer.kv_write"), {"scan.state_write": "state", "conv.kv_write": "kv"}


# A DeepSeek-V4 layer's compressed entry (and its index key): what the step completing one writes.
PER_ENTRY = ("compressor.kv_proj.kv_write", "indexer.kv_write")


def cache_per_token(query: Query) -> list[tuple[int, Fraction]]:
    """Per layer group: (tokens its cache keeps at most, or 0 for all; bytes per token) --
    the K/V a decode step writes per token, in the block the step runs (``Query.block``).
    (A DeepSeek-V4 layer's compressed entries, one per R_c tokens, are ``_caches``' second row.)"""
    return [(keep, per) for keep, per, _, every in _caches(query) if every == 1]


def state_bytes(query: Query, batch: int) -> int:
    """Bytes of the recurrent states and convolution windows of ``batch`` sequences."""
    return round(batch * sum(state for _, _, state, _ in _caches(query)))


def _caches(query: Query) -> list[tuple[int, Fraction, Fraction, int]]:
    """Per layer group: (tokens its KV cache keeps at most, or 0 for all; KV bytes per ``every``
    tokens; state bytes per sequence; ``every``: 1, or R_c for a DeepSeek-V4 layer's compressed
    entries, its second row)."""
    out = []
    rolling = query.options.window_cache == WindowCache.rolling
    kv = query.precision.bits("kv") / 8
    rate = {k: query.precision.key_bits(k.rsplit(".", 1)[0], query.spec) / 8 for k in PER_TOKEN + PER_ENTRY}
    for group, recipe in query.but(workload="decode").recipes("bytes"):
        present = [k for k in PER_TOKEN + tuple(PER_SEQUENCE) if recipe.name(k) in recipe.outputs]
        numbers = {**group.numbers(), "B": 1}
        got = recipe.evaluate({**numbers, "T": 1}, [recipe.name(k) for k in present]) if present else {}
        elements = {k: got[recipe.name(k)] for k in present}
        if group.block.v4:           # its own cache rolls: the window's keys, then the entries
            out.append((group.sizes["W"], elements["attention.kv_write"] * kv, Fraction(0), 1))
            entry = [k for k in PER_ENTRY if recipe.name(k) in recipe.outputs]
            if entry:                # the step at position R_c completes the first entry
                one = recipe.evaluate({**numbers, "T": group.sizes["R_c"] - 1}, [recipe.name(k) for k in entry])
                out.append((0, sum(one[recipe.name(k)] * rate[k] for k in entry), Fraction(0), group.sizes["R_c"]))
            continue
        keep = {"window": group.sizes.get("W"), "chunk": group.sizes.get("W_c")}.get(group.block.attention) or 0
        per_token = sum(elements.get(k, 0) * rate[k] for k in PER_TOKEN)   # an indexer's keys in the index dtype
        state = sum(elements.get(k, 0) * query.precision.bits(kind, query.spec) / 8 for k, kind in PER_SEQUENCE.items())
        out.append((keep if rolling else 0, per_token, state, 1))
    return out


def kv_cache_bytes(query: Query, batch: int, context: int) -> int:
    return _cache_bytes(_caches(query), batch, context)


def _cache_bytes(caches: list[tuple[int, Fraction, Fraction, int]], batch: int, context: int) -> int:
    return round(sum(batch * ((min(context, keep) if keep else context) // every) * per
                     for keep, per, _, every in caches))


def fit(query: Query, batch: int, context: int, reserve: float = DEFAULT_RESERVE) -> dict[str, Any]:
    """The ``memory`` row on the query's device, in its dtypes: resident weights, KV cache,
    whether they fit, and the limits. The query's options: the MLA form (``auto``: a decode
    step's, docs/cost-model.md, MLA) and the window cache (``rolling``, ``SERVING``'s: windows
    and chunks keep only theirs; ``whole``: every layer keeps every token)."""
    spec, device, precision = query.spec, query.machine.device, query.precision
    batch, context = positive("batch", batch), positive("context", context)
    if not 0 <= reserve < 1:
        raise CostcalcError(f"reserve must be a fraction in [0, 1), got {reserve}")
    weights = weight_bytes(query)
    per_token = _caches(query)
    states = state_bytes(query, batch)
    cache = _cache_bytes(per_token, batch, context)
    usable = math.floor(device.mem_bytes * (1 - reserve))
    per_sequence = _cache_bytes(per_token, 1, context) + state_bytes(query, 1)
    room = usable - weights
    max_batch = room // per_sequence if room > 0 and per_sequence else 0
    labels = {**({"mla": query.but(workload="decode").form.value} if spec.has_mla else {}),
              **({"window_cache": query.options.window_cache.value} if _bounded(spec) else {}),
              **({"scan": query.labels()["scan"]} if spec.has_mixers else {}),   # the conv window it holds
              **({"state_dtype": precision.state_dtype(spec).value} if spec.has_states else {}),
              **({"draft": query.options.draft.value} if query.draft is not None else {})}
    held = weights + cache + states
    row = {"preset": spec.name, "device": device.name, "batch": batch, "context": context, **labels,
           **{k: v for k, v in precision.labels(spec).items() if k in ("weight_dtype", "weight_dtype_source")},
           "kv_dtype": precision.kv.value,
           **{k: v for k, v in precision.labels(spec).items() if k == "index_dtype"}, "reserve": reserve,
           "weight_bytes_resident": weights, "kv_cache_bytes": cache,
           **({"state_bytes": states} if spec.has_mixers else {}), "total_bytes": held,
           "device_bytes": device.mem_bytes, "usable_bytes": usable, "fits": held <= usable,
           "max_batch": max_batch, "max_context": _max_context(per_token, batch, room - states),
           "devices_needed": math.ceil(held / usable) if usable else None}
    return row


def _bounded(spec: ModelSpec) -> bool:
    """Whether a rolling cache would keep fewer tokens in some layer (windows or chunks)."""
    return any(g.block.attention in ("window", "chunk") for g in spec.groups)   # V4's windows roll whatever it says


def _max_context(per_token: list[tuple[int, Fraction, Fraction, int]], batch: int, room: int):
    """The longest context whose cache for ``batch`` sequences fits in ``room`` bytes; every
    context if windows bound the cache below it ("unbounded"), 0 if not even one token fits."""
    if room <= 0 or _cache_bytes(per_token, batch, 1) > room:
        return 0
    if _cache_bytes(per_token, batch, MAX_VALUE) <= room:
        return "unbounded"
    lo, hi = 1, MAX_VALUE            # the cache grows with the context: bisect
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _cache_bytes(per_token, batch, mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo
