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
  model's trained context length is not modelled), and ``fits_on``, the smallest layout that
  fits (``search``).
- Under a layout (``--tp``, ``--ep``, ``--pp``, ``--dp``): one device's (``per_device``, each stage's):
  its TP shards (``layout.device_spec``'s weight plan: vocabulary-parallel embedding and LM head, the
  router and MLA's down-projections whole), E/ep routed experts, its stage's layers (the embedding on
  the first stage, the LM head on the last, both with tied embeddings), the cache of its KV heads
  (h_kv/tp, one replicated head where h_kv < tp, MLA's latent whole) for its replica's B/D sequences
  (docs/cost-model.md, "Memory per device").
"""
from __future__ import annotations

import math
from fractions import Fraction
from dataclasses import dataclass, replace
from typing import Any, Iterator, Optional

from .errors import CostcalcError
from .evaluate import Options, Query, positive
from .layout import Layout, _check_group, check_draft, check_draft_tp, check_vocab, device_spec
from .ranges import MAX_VALUE
from .spec import ModelSpec
from .stages import partition, stages
from .vocab import MEMORY_RESERVE as DEFAULT_RESERVE, Draft, WindowCache

SERVING = Options(window_cache="rolling")   # what a serving cache keeps: windows and chunks only theirs


def weight_bytes(query: Query) -> int:
    """Every matrix resident (all experts, the embedding, an untied LM head), each in its format
    (``weights.Plan.resident``: exact per matrix, scales and zero points included); with ``--draft mtp``
    the MTP modules too (``Plan.drafts``: they share the embedding and head)."""
    plan = query.precision.weights(query.spec)
    return round(plan.resident() + (plan.drafts() if query.draft is not None else 0)) + _draft_model(query, weight_bytes, 0)


def _draft_model(query: Query, count: Any, none: Any) -> Any:
    """``count`` of the draft model a speculative query holds beside the target (``--draft PRESET``:
    its own weights and KV cache, in the query's dtypes), else ``none``."""
    model = query.options.draft_model
    if model is None:
        return none
    own = Options(mla=query.options.mla, window_cache=query.options.window_cache)
    return count(Query(model, "decode", own, query.precision, query.machine))


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
    return [row for rows in _group_caches(query) for row in rows] + _draft_model(query, _caches, [])


def _group_caches(query: Query) -> list[list[tuple[int, Fraction, Fraction, int]]]:
    """``_caches``' rows, a list per layer group of the model (all its ``count`` layers)."""
    out: list[list[tuple[int, Fraction, Fraction, int]]] = []
    rolling = query.options.window_cache == WindowCache.rolling
    kv = query.precision.bits("kv") / 8
    rate = {k: query.precision.key_bits(k.rsplit(".", 1)[0], query.spec) / 8 for k in PER_TOKEN + PER_ENTRY}
    for group, recipe in query.but(workload="decode").recipes("bytes"):
        present = [k for k in PER_TOKEN + tuple(PER_SEQUENCE) if recipe.name(k) in recipe.outputs]
        numbers = {**group.numbers(), "B": 1}
        got = recipe.evaluate({**numbers, "T": 1}, [recipe.name(k) for k in present]) if present else {}
        elements = {k: got[recipe.name(k)] for k in present}
        out.append([])
        if group.block.v4:           # its own cache rolls: the window's keys, then the entries
            out[-1].append((group.sizes["W"], elements["attention.kv_write"] * kv, Fraction(0), 1))
            entry = [k for k in PER_ENTRY if recipe.name(k) in recipe.outputs]
            if entry:                # the step at position R_c completes the first entry
                one = recipe.evaluate({**numbers, "T": group.sizes["R_c"] - 1}, [recipe.name(k) for k in entry])
                out[-1].append((0, sum(one[recipe.name(k)] * rate[k] for k in entry), Fraction(0), group.sizes["R_c"]))
            continue
        keep = {"window": group.sizes.get("W"), "chunk": group.sizes.get("W_c")}.get(group.block.attention) or 0
        per_token = sum(elements.get(k, 0) * rate[k] for k in PER_TOKEN)   # an indexer's keys in the index dtype
        state = sum(elements.get(k, 0) * query.precision.bits(kind, query.spec) / 8 for k, kind in PER_SEQUENCE.items())
        out[-1].append((keep if rolling else 0, per_token, state, 1))
    return out


def kv_cache_bytes(query: Query, batch: int, context: int) -> int:
    return _cache_bytes(_caches(query), batch, context)


def _cache_bytes(caches: list[tuple[int, Fraction, Fraction, int]], batch: int, context: int) -> int:
    return round(sum(batch * ((min(context, keep) if keep else context) // every) * per
                     for keep, per, _, every in caches))


def usable_bytes(device: Any, reserve: float = DEFAULT_RESERVE) -> int:
    """The bytes a device lets weights and caches hold: its memory less ``reserve`` (activations,
    workspace, fragmentation) -- the one rule ``fits`` uses everywhere."""
    return math.floor(device.mem_bytes * (1 - reserve))


def fit(query: Query, batch: int, context: int, reserve: float = DEFAULT_RESERVE,
        layout: Layout = Layout()) -> dict[str, Any]:
    """The ``memory`` row on the query's device, in its dtypes: resident weights, KV cache,
    whether they fit, and the limits. The query's options: the MLA form (``auto``: a decode
    step's, docs/cost-model.md, MLA) and the window cache (``rolling``, ``SERVING``'s: windows
    and chunks keep only theirs; ``whole``: every layer keeps every token). Under a ``layout``
    (``check``-ed) the row is one device's (``per_device``); ``fits_on`` names the smallest layout
    that fits (``search``)."""
    return answer(query, batch, context, reserve, layout)[0]


def answer(query: Query, batch: int, context: int, reserve: float = DEFAULT_RESERVE,
           layout: Layout = Layout()) -> tuple[dict[str, Any], str]:
    """``fit``'s row and the one line saying what fits (``Search.line``)."""
    spec, device, precision = query.spec, query.machine.device, query.precision
    batch, context = positive("batch", batch), positive("context", context)
    if not 0 <= reserve < 1:
        raise CostcalcError(f"reserve must be a fraction in [0, 1), got {reserve}")
    usable = usable_bytes(device, reserve)
    labels = {**({"mla": query.but(workload="decode").form.value} if spec.has_mla else {}),
              **({"window_cache": query.options.window_cache.value} if _bounded(spec) else {}),
              **({"scan": query.labels()["scan"]} if spec.has_mixers else {}),   # the conv window it holds
              **({"state_dtype": precision.state_dtype(spec).value} if spec.has_states else {}),
              **({"draft": query.labels()["draft"]} if "draft" in query.labels() else {})}
    dtypes = {**{k: v for k, v in precision.labels(spec).items() if k in ("weight_dtype", "weight_dtype_source")},
              "kv_dtype": precision.kv.value,
              **{k: v for k, v in precision.labels(spec).items() if k == "index_dtype"}, "reserve": reserve}
    if not layout.single:
        check(spec, layout, query.options, batch)
        asked = Held(batch, context, usable)
        stages_ = per_device(query, layout, asked)
        top = max(stages_, key=lambda st: st["total_bytes"])      # the device that decides the fit
        whole = weight_bytes(query) + kv_cache_bytes(query, batch, context) + state_bytes(query, batch)
        found = search(query, asked, whole <= usable, whole)
        row = {"preset": spec.name, "device": device.name, "layout": layout.label, "devices": layout.devices,
               "batch": batch, "context": context, **labels, **dtypes,
               "weight_bytes_per_device": top["weight_bytes"], "kv_cache_bytes_per_device": top["kv_cache_bytes"],
               **({"state_bytes_per_device": top.get("state_bytes", 0)} if spec.has_mixers else {}),
               "total_bytes_per_device": top["total_bytes"], "device_bytes": device.mem_bytes,
               "usable_bytes": usable, "fits": all(st["total_bytes"] <= usable for st in stages_),
               "max_batch": min(st["max_batch"] for st in stages_) * layout.dp,
               "max_context": _least(st["max_context"] for st in stages_),
               "fits_on": found.label,
               **({"stages": stages_} if layout.pp > 1 else {})}
        return row, found.line(spec.name, batch, context, device.name)
    weights = weight_bytes(query)
    per_token = _caches(query)
    states = state_bytes(query, batch)
    cache = _cache_bytes(per_token, batch, context)
    per_sequence = _cache_bytes(per_token, 1, context) + state_bytes(query, 1)
    room = usable - weights
    max_batch = room // per_sequence if room > 0 and per_sequence else 0
    held = weights + cache + states
    found = search(query, Held(batch, context, usable), held <= usable, held)
    row = {"preset": spec.name, "device": device.name, "batch": batch, "context": context, **labels, **dtypes,
           "weight_bytes_resident": weights, "kv_cache_bytes": cache,
           **({"state_bytes": states} if spec.has_mixers else {}), "total_bytes": held,
           "device_bytes": device.mem_bytes, "usable_bytes": usable, "fits": held <= usable,
           "max_batch": max_batch, "max_context": _max_context(per_token, batch, room - states),
           "fits_on": found.label}
    return row, found.line(spec.name, batch, context, device.name)


def max_batch(query: Query, context: int, reserve: float = DEFAULT_RESERVE, layout: Layout = Layout(),
              one: Optional[Shard] = None) -> int:
    """``fit``'s ``max_batch`` alone, without the row's other limits and its search for the smallest layout
    that fits: the largest batch of ``context`` tokens whose weights and caches fit in the usable bytes (under
    a ``layout``, already ``check``-ed, the fullest stage's per replica times dp; ``one``: its ``shard``)."""
    context = positive("context", context)
    usable = usable_bytes(query.machine.device, reserve)
    if layout.single:
        room = usable - weight_bytes(query)
        per_sequence = _cache_bytes(_caches(query), 1, context) + state_bytes(query, 1)
        return room // per_sequence if room > 0 and per_sequence else 0
    stages_ = per_device(query, layout, Held(layout.dp, context, usable), one, limits="batch")
    return min(st["max_batch"] for st in stages_) * layout.dp


def _least(values):
    """The smallest of some ``max_context`` values ("unbounded" above every number)."""
    values = list(values)
    numbers = [v for v in values if v != "unbounded"]
    return min(numbers) if numbers else "unbounded"


# ---------------------------------------------------------------------------------------------
# Many devices: one device's bytes under a layout, and the smallest layout that fits.

def check(spec: ModelSpec, layout: Layout, options: Options, batch: Optional[int] = None) -> None:
    """A layout for ``memory``: what ``layout.check`` requires of the model (heads, KV heads,
    widths, vocabulary and experts dividing, or the KV heads replicated; the block kinds modelled
    under parallelism: mixers and sparse layers refused by name), at most as many stages as layers,
    a draft only as ``layout.check_draft`` allows it, and the batch dividing by the data-parallel replicas.
    One error naming the problem."""
    placed = replace(options, tp=layout.tp, ep=layout.ep, pp=layout.pp, dp=layout.dp, sp=layout.sp)
    check_draft_tp(placed)
    if layout.single:
        return
    flag = layout.flags
    if layout.sp:
        raise CostcalcError(f"{flag}: sequence parallelism splits activations, which memory does not hold")
    check_draft(spec, placed, flag)
    for group in spec.groups:
        _check_group(spec, group, layout, flag)
    check_vocab(spec, layout)
    if layout.ep > 1 and not any(g.block.ffn == "moe" for g in spec.groups):
        raise CostcalcError(f"--ep {layout.ep}: {spec.name} has no MoE layers (expert parallelism splits experts)")
    partition(sum(g.count for g in spec.groups), layout.pp)
    if batch is not None and batch % layout.dp:
        raise CostcalcError(f"--dp {layout.dp}: batch {batch} does not divide by {layout.dp} (each data-parallel "
                            f"replica holds B/D of the sequences)")


@dataclass(frozen=True)
class Shard:
    """What one device of a (tp, ep) layout holds, before the stages split the layers: per layer
    group one layer's matrices (``layer``: at the tensor-parallel sizes, ``layout.device_spec``;
    the routed experts' E/ep of them; the router and every matrix without a split size whole),
    the embedding's rows V/tp (``embedding``), what the last stage holds besides its layers
    (``head``: an untied LM head's V/tp columns, and any other matrix held once; a tied one is
    the embedding itself), and per layer group one layer's caches (``caches``: ``_caches``' rows
    at the device's KV heads: h_kv/tp, one replicated head where h_kv < tp, MLA's whole latent)."""
    layer: tuple
    embedding: Fraction
    head: Fraction
    tied: bool
    caches: tuple


_SHARDS: dict = {}   # (id(spec), tp, ep, dtypes, options) -> (spec, its Shard): a search asks each (tp, ep) again


def shard(query: Query, layout: Layout) -> Shard:
    """One device's ``Shard`` of the query's model under a (tp, ep) layout (what pp and dp do not change)."""
    alone = replace(query.options, tp=1, ep=1, pp=1, dp=1, micro_batches=None)     # the rest of the question
    key = (id(query.spec), layout.tp, layout.ep, repr(query.precision), repr(alone))
    hit = _SHARDS.get(key)
    if hit is None or hit[0] is not query.spec:
        if len(_SHARDS) >= 1024:
            _SHARDS.clear()
        hit = _SHARDS[key] = (query.spec, _shard(query, layout))
    return hit[1]


def _shard(query: Query, layout: Layout) -> Shard:
    one = device_spec(query.spec, layout)
    plan = query.precision.weights(one)
    size = plan.group_size

    def matrices(ops: dict) -> Fraction:
        return sum(Fraction(n, layout.ep if op.startswith(ROUTED) else 1) * fmt.bytes(i, o, size)
                   for op, (i, o, n, fmt) in ops.items())

    rows, width, table = plan.embedding
    head = sum((fmt.bytes(i, o, size) for op, (i, o, fmt) in plan.once.items() if op != "lm_head" or not plan.tied),
               Fraction(0))
    groups = one.groups
    caches = _group_caches(Query(one, "decode", query.options, query.precision, query.machine))
    return Shard(tuple(matrices(ops) for ops in plan.groups), table.bytes(width, rows, size), head, plan.tied,
                 tuple(tuple((keep, per / g.count, state / g.count, every) for keep, per, state, every in rows_)
                       for rows_, g in zip(caches, groups)))


ROUTED = "experts."   # a routed expert's matrices (``parallel``'s prefix): E of them, E/ep a device


def stage_layers(spec: ModelSpec, pp: int) -> list[list[int]]:
    """Per stage, first to last, the layers it holds of each of the model's layer groups
    (``stages.stages``: vLLM's split)."""
    left, index, out = [g.count for g in spec.groups], 0, []
    for held in stages(spec, pp):
        counts = [0] * len(left)
        for group in held:
            while left[index] == 0:
                index += 1
            counts[index] += group.count
            left[index] -= group.count
        out.append(counts)
    return out


@dataclass(frozen=True)
class Held:
    """What each device of a layout is asked to hold: ``batch`` sequences (a replica's, B/D) of
    ``context`` tokens, in ``usable`` bytes."""
    batch: int
    context: int
    usable: int


def _stage(one: Shard, counts: list[int], ends: Fraction, asked: Held, limits: Any = True) -> dict[str, Any]:
    """One stage's device: its layers' matrices and ``ends`` (the embedding, the LM head: the
    bytes a stage holds besides its layers), the caches of its layers for ``asked``'s sequences,
    and (``limits``) its limits (``"batch"``: its largest batch only)."""
    batch, context, usable = asked.batch, asked.context, asked.usable
    weights, rows = _stage_holds(one, counts, ends)
    cache, states = _cache_bytes(rows, batch, context), round(batch * sum(r[2] for r in rows))
    if not limits:
        return {"total_bytes": weights + cache + states}
    room = usable - weights
    per_sequence = _cache_bytes(rows, 1, context) + round(sum(r[2] for r in rows))
    most = room // per_sequence if room > 0 and per_sequence else 0
    if limits == "batch":       # the largest batch alone (``max_batch``)
        return {"total_bytes": weights + cache + states, "max_batch": most}
    return {"layers": sum(counts), "weight_bytes": weights, "kv_cache_bytes": cache,
            **({"state_bytes": states} if states else {}), "total_bytes": weights + cache + states,
            "max_batch": most, "max_context": _max_context(rows, batch, room - states)}


_HOLDS: dict = {}   # (id(shard), layers, ends) -> (shard, weights, cache rows): a search asks each stage again


def _stage_holds(one: Shard, counts: list[int], ends: Fraction) -> tuple[int, list]:
    """A stage's weight bytes and the rows of its layers' caches (``_cache_bytes``'), whatever it is asked
    to hold."""
    key = (id(one), tuple(counts), ends)
    hit = _HOLDS.get(key)
    if hit is None or hit[0] is not one:
        if len(_HOLDS) >= 4096:
            _HOLDS.clear()
        weights = round(sum((n * w for n, w in zip(counts, one.layer)), Fraction(0)) + ends)
        rows = [(keep, n * per, n * state, every) for n, group in zip(counts, one.caches) if n
                for keep, per, state, every in group]
        hit = _HOLDS[key] = (one, weights, rows)
    return hit[1], hit[2]


def _with_draft(query: Query, layout: Layout, one: Shard, counts: list[list[int]]) -> tuple[Shard, list[list[int]]]:
    """A speculative query's one stage with its draft model beside the target: the draft's ``shard`` at its
    own layout (``Options.draft_layout``: the target's tp or 1) as more layer groups, its embedding and
    head (an untied one) on the same device."""
    model = query.options.draft_model
    draft = shard(Query(model, "decode", Options(mla=query.options.mla, window_cache=query.options.window_cache),
                        query.precision, query.machine),
                  replace(layout, tp=query.options.draft_tp or layout.tp, ep=1, pp=1))
    both = Shard(one.layer + draft.layer, one.embedding + draft.embedding, one.head + draft.head, one.tied,
                 one.caches + draft.caches)
    return both, [counts[0] + [g.count for g in model.groups]]


def _with_mtp(query: Query, layout: Layout, one: Shard, counts: list[list[int]]) -> tuple[Shard, list[list[int]]]:
    """A drafting query's one stage with the model's MTP modules beside its layers, at the device's sizes
    (``layout.device_spec`` shards them as a layer; their routed experts E/ep): every module's matrices
    (``Plan.drafts``' on one device) and the KV cache of the module a draft runs, as two more groups."""
    spec = device_spec(query.spec, layout)
    plan = query.precision.weights(spec)
    size = plan.group_size
    module = sum(Fraction(n, layout.ep if op.startswith(ROUTED) else 1) * fmt.bytes(i, o, size)
                 for op, (i, o, n, fmt) in (plan.draft or {}).items())
    rows = _group_caches(Query(spec, "decode", query.options, query.precision, query.machine))[len(spec.groups):]
    both = Shard(one.layer + (module, Fraction(0)), one.embedding, one.head, one.tied,
                 one.caches + ((), tuple(row for got in rows for row in got)))
    return both, [counts[0] + [plan.modules, 1]]


def per_device(query: Query, layout: Layout, asked: Held, one: Optional[Shard] = None,
               limits: Any = True) -> list[dict[str, Any]]:
    """Each pipeline stage's device (one list entry per stage, first to last) under ``layout``:
    weight, KV cache and total bytes, and (``limits``) the largest batch (per replica) and context
    it allows, for the B/D of ``asked``'s B sequences its replica holds (``one``: the layout's
    ``shard``, where worked out already). The first stage holds the embedding, the last the LM head;
    with tied embeddings and pp > 1 the last holds a copy of the table too, as vLLM loads it."""
    one = one or shard(query, layout)
    counts = stage_layers(query.spec, layout.pp)
    if query.options.draft_model is not None:       # one stage (``check_draft``): the draft model's beside
        one, counts = _with_draft(query, layout, one, counts)
    elif query.draft is not None:                    # one stage: the MTP modules beside the layers
        one, counts = _with_mtp(query, layout, one, counts)
    replica = replace(asked, batch=asked.batch // layout.dp)
    last = len(counts) - 1
    ends = [(one.embedding if i == 0 else 0) + (one.head if i == last else 0)
            + (one.embedding if i == last and one.tied and layout.pp > 1 else 0) for i in range(len(counts))]
    done: dict[tuple, dict[str, Any]] = {}      # stages alike (a pipeline's middle ones) worked out once
    out = []
    for i, c in enumerate(counts):
        key = (tuple(c), ends[i])
        if key not in done:
            done[key] = _stage(one, c, ends[i], replica, limits)
        out.append(dict(done[key]))
    return out


@dataclass(frozen=True)
class Search:
    """The smallest layout that fits (``fits``, None if none searched does), the largest one
    searched that does not (``short``), and, where none fits, the bound searched or why no layout
    of many devices could be asked."""
    fits: Optional[Layout]
    short: Optional[Layout]
    bound: str = ""

    @property
    def label(self) -> Optional[str]:
        return self.fits.label if self.fits is not None else None

    def line(self, preset: str, batch: int, context: int, device: str) -> str:
        at = f"{preset}, batch {batch}, context {context} on {device}"
        if self.fits is None:
            return f"{at}: no layout fits ({self.bound})"
        devices = f"{self.fits.devices} device{'s' if self.fits.devices > 1 else ''}"
        if self.short is None:
            return f"{at}: {self.fits.label} fits ({devices})"
        return (f"{at}: {self.fits.label} fits ({devices}), {self.short.label} does not"
                + (", nor any layout of fewer devices" if self.short.devices > 1 else ""))


def candidates(spec: ModelSpec, domain: int) -> Iterator[Layout]:
    """The layouts ``search`` tries, in its order: by devices n = tp x pp from 1 up to
    ``domain`` x L; at each n the most tensor parallel first (tp a divisor of n, at most the
    scale-up ``domain``), then pipeline; for a model with MoE layers ep 1, then ep = tp. Data
    parallelism is not searched (a replica must hold the whole batch's model)."""
    layers = sum(g.count for g in spec.groups)
    moe = any(g.block.ffn == "moe" for g in spec.groups)
    for n in range(1, domain * layers + 1):
        for tp in range(min(n, domain), 0, -1):
            if n % tp or n // tp > layers:
                continue
            for ep in ((1, tp) if moe and tp > 1 else (1,)):
                yield Layout(tp=tp, ep=ep, pp=n // tp)


def search(query: Query, asked: Held, single: Optional[bool] = None, held: Optional[int] = None) -> Search:
    """The smallest valid layout (``check`` passes) whose every device holds what it is ``asked``,
    trying ``candidates`` in order; ``single``: whether one device fits (the row's own answer, which
    a draft's weights may change), else worked out. ``held``: the whole model's bytes on one device
    (its row's ``total_bytes``): no layout of fewer than ``held / usable`` devices fits (a device
    holds at least its share: shards add up to the whole, replicas, a tied table and the scales of a
    block format's partial blocks only add; a device's three rounded sums lose under 2 bytes), so
    those are checked, not weighed."""
    usable = asked.usable
    spec, device = query.spec, query.machine.device
    domain = device.scale_up.domain if device.scale_up is not None and device.scale_up.domain else 1
    layers = sum(g.count for g in spec.groups)
    shards: dict[tuple[int, int], Shard] = {}
    short, refused = None, None
    for layout in candidates(spec, domain):
        if layout.single and single is not None:
            fits = single
        else:
            try:
                check(spec, layout, query.options)
            except CostcalcError as exc:
                refused = refused or str(exc)
                continue
            if held is not None and layout.devices * (usable + 2) < held:
                fits = False
            else:
                key = (layout.tp, layout.ep)
                if key not in shards:
                    shards[key] = shard(query, layout)
                fits = all(st["total_bytes"] <= usable for st in
                           per_device(query, layout, asked, shards[key], limits=False))
        if fits:
            return Search(layout, short)
        short = layout
    if short is not None and short.single and refused:
        return Search(None, short, f"one device does not; {refused}")
    return Search(None, short, f"none of tp 1 to {domain} (the scale-up domain) x pp 1 to {layers} does")


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
