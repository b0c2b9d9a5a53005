"""Does it fit: the bytes a model and its KV cache hold on a device.

- Resident weights: every matrix (all experts, the embedding, an untied LM head) in the
  weight dtype, integer weights with their fp16 scales.
- KV cache of B sequences of T tokens: per layer group, the tokens its cache keeps -- all T,
  or ``min(T, W)`` in a sliding-window layer (a cache holds what its window reads), ``min(T, W_c)``
  in a chunked one (at most one chunk is ever read) -- times the
  K/V width per token (GQA ``2 h_kv d_h``; MLA its latent and RoPE key, ``r_kv + d_rope``,
  as serving stacks cache it), in the KV dtype.
- ``fits`` leaves ``reserve`` of the device free (activations, workspace, fragmentation);
  ``max_batch`` at this context, ``max_context`` at this batch, and ``devices_needed`` for
  weights and cache split evenly (an estimate: no parallelism overheads).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from . import compiled
from .devices import Device
from .errors import CostcalcError
from .evaluate import positive
from .params import parameters
from .ranges import MAX_VALUE
from .roofline import Precision
from .spec import ModelSpec

DEFAULT_RESERVE = 0.1


def weight_bytes(spec: ModelSpec, precision: Precision) -> int:
    counted = parameters(spec)
    matrices = counted["block_params"] + counted["embedding_params"] + \
        (0 if spec.tied_embeddings else counted["lm_head_params"])
    return round(matrices * precision.bits("weight") / 8)


def cache_per_token(spec: ModelSpec, precision: Precision) -> list[tuple[int, Fraction]]:
    """Per layer group: (tokens its cache keeps at most, or 0 for all; bytes per token)."""
    out = []
    for group in spec.groups:
        form = "absorbed" if group.block.attention == "mla" else "naive"
        elements = compiled.get("decode.bytes", group.block.with_form(form).key).evaluate(
            {**group.numbers(), "B": 1, "T": 1}, ["attention.kv_write"])["attention.kv_write"]
        keep = {"window": group.sizes.get("W"), "chunk": group.sizes.get("W_c")}.get(group.block.attention) or 0
        out.append((keep, elements * precision.bits("kv") / 8))
    return out


def kv_cache_bytes(spec: ModelSpec, precision: Precision, batch: int, context: int) -> int:
    return round(sum(batch * (min(context, keep) if keep else context) * per for keep, per in
                     cache_per_token(spec, precision)))


def fit(spec: ModelSpec, device: Device, precision: Precision, batch: int, context: int,
        reserve: float = DEFAULT_RESERVE) -> dict[str, Any]:
    """The ``memory`` row: resident weights, KV cache, whether they fit, and the limits."""
    batch, context = positive("batch", batch), positive("context", context)
    if not 0 <= reserve < 1:
        raise CostcalcError(f"reserve must be a fraction in [0, 1), got {reserve}")
    weights = weight_bytes(spec, precision)
    cache = kv_cache_bytes(spec, precision, batch, context)
    usable = math.floor(device.mem_bytes * (1 - reserve))
    per_sequence = kv_cache_bytes(spec, precision, 1, context)
    room = usable - weights
    max_batch = room // per_sequence if room > 0 and per_sequence else 0
    row = {"preset": spec.name, "device": device.name, "batch": batch, "context": context,
           "weight_dtype": precision.weight.value, "kv_dtype": precision.kv.value, "reserve": reserve,
           "weight_bytes_resident": weights, "kv_cache_bytes": cache, "total_bytes": weights + cache,
           "device_bytes": device.mem_bytes, "usable_bytes": usable, "fits": weights + cache <= usable,
           "max_batch": max_batch, "max_context": _max_context(spec, precision, batch, room),
           "devices_needed": math.ceil((weights + cache) / usable) if usable else None}
    return row


def _max_context(spec: ModelSpec, precision: Precision, batch: int, room: int):
    """The longest context whose cache for ``batch`` sequences fits in ``room`` bytes; every
    context if windows bound the cache below it ("unbounded"), 0 if not even one token fits."""
    if room <= 0 or kv_cache_bytes(spec, precision, batch, 1) > room:
        return 0
    if kv_cache_bytes(spec, precision, batch, MAX_VALUE) <= room:
        return "unbounded"
    lo, hi = 1, MAX_VALUE            # the cache grows with the context: bisect
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if kv_cache_bytes(spec, precision, batch, mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo
