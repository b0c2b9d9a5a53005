"""Attention FLOPs: one rule for the keys a query reads, summed over query positions.

A query that reads K keys runs, per query head, ``QK^T = [1, d_qk] x [d_qk, K]`` and
``AV = [1, K] x [K, d_v']`` (``per_query_flops``): for GQA ``d_qk = d_v' = d_h`` (``d_v' = d_v``
where its values have their own head dim, ``dv``); for naive
(and expanded) MLA ``d_qk = d_nope + d_rope`` and ``d_v' = d_v``; for absorbed MLA the scores run over the
latent and the RoPE key, ``d_qk = r_kv + d_rope``, and the values over the latent, ``d_v' = r_kv``.

Which keys it reads is ``keys_read(convention, block, p, past, new)``, for the query at
position p (1-based, cached tokens included) of a forward of ``new`` tokens after ``past``;
every workload's attention is a sum of it over positions (``attention_sum``), the decode step
being the one-query case and the decode phase of a generation a sum of such steps.

A sparse MLA block (DeepSeek Sparse Attention) reads, under causal, the k_I keys its indexer
selects among the query's p legal ones, ``min(p, k_I)``: a window of k_I in FLOPs, not in the
keys loaded (``keys_loaded``); under full, every key (transformers turns the selection into a
mask over the dense rectangle); tiled is refused (selected keys are not tiles). The indexer's
own scores are ``core.indexer``.
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from ..blocks import SPARSE_TILED, Block
from ..vocab import Convention
from . import compressed
from .matmul import matmul


def head_dims(block: Block) -> tuple[sp.Expr, sp.Expr]:
    """(score width, value width) per query head and key."""
    if block.attention in ("gqa", "window", "chunk"):
        return s.d_h, (s.d_v if block.dv else s.d_h)
    if block.v4:                                        # V4: one K=V head of d_h
        return s.d_h, s.d_h
    if block.form != "absorbed":                        # naive and expanded: per-head K and V
        return s.d_nope + s.d_rope, s.d_v
    return s.r_kv + s.d_rope, s.r_kv


def query_heads(block: Block) -> sp.Expr:
    """Query heads per layer: ``h_q`` for MLA; ``d_q / d_h`` otherwise (h_q heads of width d_h
    make up the query width d_q, the size GQA's formulas are written in)."""
    return s.h_q if block.attention == "mla" or block.dv or block.v4 else s.d_q / s.d_h


def per_query_flops(keys: sp.Expr, block: Block) -> sp.Expr:
    """QK^T and AV of one query over ``keys`` keys, all query heads of all layers."""
    qk, av = head_dims(block)
    return sp.expand(s.L * query_heads(block) * (matmul(1, qk, keys) + matmul(1, keys, av)))


def keys_read(convention: Convention, block: Block, p: sp.Expr, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys the query at position ``p`` reads, in a forward of ``new`` tokens after ``past``.

    - causal: its legal keys -- ``p`` (itself and every earlier token), ``min(p, W)`` in a
      sliding-window layer (itself and the W-1 before it), ``((p - 1) mod W_c) + 1`` in a
      chunked layer (the keys of its own chunk of W_c, chunks aligned at position 1, up to
      itself); ``min(p, k_I)`` in a sparse MLA layer (the keys its indexer selects);
    - full: every key the shapes hold, ``past + new``, window or not (a dense masked matmul);
      with a rolling window cache, ``min(past, W - 1) + new`` (docs/cost-model.md, "Sliding
      windows");
    - tiled: the key tiles of ``b_k`` (aligned at key 0) its query tile visits: queries go in
      tiles of ``b_q`` from the first new one; tile t reads from the tile holding the window
      (or chunk) start of its first row (key 1 without either) to the tile holding its last row's
      own key -- ``ceil(q_last / b_k) b_k`` clipped to ``past + new``, minus
      ``floor(max(q_first - W, 0) / b_k) b_k`` (``tile_keys``). One query is one tile. Refused
      for a sparse layer (``refuse_tiled``).
    DeepSeek-V4's layers: ``core.compressed``.
    """
    if block.v4:
        return compressed.keys_read(convention, block, p, past, new)
    refuse_tiled(convention, block)
    if convention == Convention.full:
        if block.attention == "window" and block.cache == "rolling":
            return sp.Min(past, s.W - 1) + new
        return past + new
    if convention == Convention.causal:
        if block.attention == "chunk":
            return p - chunk_start(p)
        cap = cap_of(block)
        return sp.Min(p, cap) if cap is not None else p
    if new == 1:                                          # one query: one tile, ending at itself
        return tile_keys(block, sp.Integer(0), past, new)
    return tile_keys(block, sp.floor((p - past - 1) / s.b_q), past, new)


def cap_of(block: Block) -> "sp.Expr | None":
    """The most keys a query reads under causal: W in a window, k_I in a sparse layer, else None."""
    return s.W if block.attention == "window" else s.k_I if block.sparse else None


def refuse_tiled(convention: Convention, block: Block) -> None:
    """A sparse layer under tiled: a ValueError of one line (``SPARSE_TILED``)."""
    if convention == Convention.tiled and block.sparse:
        raise ValueError(SPARSE_TILED)


def tile_keys(block: Block, t: sp.Expr, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys every query of query tile ``t`` reads under ``tiled`` (see ``keys_read``)."""
    first = past + t * s.b_q + 1                          # the tile's first row
    if new == 1:
        end = past + 1                                    # a single query's tile ends at its own key
    else:
        last = past + sp.Min((t + 1) * s.b_q, new)        # the tile's last row
        end = sp.Min(sp.ceiling(last / s.b_k) * s.b_k, past + new)
    start = sp.floor(sp.Max(first - s.W, 0) / s.b_k) * s.b_k if block.attention == "window" else 0
    if block.attention == "chunk":
        start = sp.floor(chunk_start(first) / s.b_k) * s.b_k
    return end - start


def chunk_start(p: sp.Expr) -> sp.Expr:
    """Keys before the chunk of the query at position ``p``: ``W_c floor((p - 1) / W_c)``."""
    return s.W_c * sp.floor((p - 1) / s.W_c)


def attention_sum(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys read by all queries of a forward, ``sum(keys_read(p) for p in past+1..past+new)``.

    In closed form: causal ``new*past + new(new+1)/2`` (split at p = W in a window, where the
    keys stop growing); full ``new (past + new)`` (``new (min(past, W-1) + new)`` in a window
    with a rolling cache); tiled the same sum grouped by query tile
    (every row of a tile reads the tile's keys), left as a sum over tiles. DeepSeek-V4's layers:
    ``core.compressed``.
    """
    if block.v4:
        return sp.expand(compressed.attention_sum(convention, block, past, new))
    refuse_tiled(convention, block)
    if new == 1:
        return keys_read(convention, block, past + 1, past, new)
    if convention == Convention.full:
        return sp.expand(new * keys_read(convention, block, past + 1, past, new))
    if convention == Convention.causal:
        return position_sum(block, past + 1, past + new)
    t = s.t
    rows = sp.Min((t + 1) * s.b_q, new) - t * s.b_q
    return sp.Sum(rows * tile_keys(block, t, past, new), (t, 0, sp.ceiling(new / s.b_q) - 1))


def position_sum(block: Block, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    """``sum(keys_read(causal, p) for p in lo..hi)`` (hi >= lo - 1), by ``sympy.summation``.

    In a window the positions split at W: those at or below it read p keys, those above it W
    keys; the split point is clamped with Min/Max so one expression holds whichever side of
    W the range lies. A sparse layer splits the same way at k_I.
    """
    p = s.p
    if block.attention == "chunk":
        return chunk_prefix_sum(hi) - chunk_prefix_sum(lo - 1)
    cap = cap_of(block)
    if cap is None:
        return sp.summation(p, (p, lo, hi))
    split = sp.Max(sp.Min(hi, cap), lo - 1)            # last position that reads p keys
    return sp.summation(p, (p, lo, split)) + sp.summation(cap, (p, split + 1, hi))


def chunk_prefix_sum(n: sp.Expr) -> sp.Expr:
    """Keys read by the queries at positions 1..n of a chunked layer (causal): ``floor(n/W_c)``
    whole chunks, in each of which the queries read 1..W_c keys, then the ``n mod W_c``
    queries of the last, partial chunk reading 1, 2, ... keys."""
    p, whole = s.p, sp.floor(n / s.W_c)
    rest = n - s.W_c * whole
    return whole * sp.summation(p, (p, 1, s.W_c)) + sp.summation(p, (p, 1, rest))


def steps_sum(convention: Convention, block: Block, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    """Keys read by single-query steps (decode) at positions lo..hi: the query at p runs over
    ``p - 1`` cached tokens, ``sum(keys_read(p, past=p-1, new=1) for p in lo..hi)``. (Under
    ``full`` with a rolling window cache a step reads ``min(p - 1, W - 1) + 1 = min(p, W)``:
    the causal window sum.) DeepSeek-V4's layers: ``core.compressed``."""
    if block.v4:
        return sp.expand(compressed.steps_sum(convention, block, lo, hi))
    p = s.p
    if convention == Convention.causal and block.attention == "chunk":
        return position_sum(block, lo, hi)                # a step reads what the same query of a prefill does
    keys = keys_read(convention, block, p, p - 1, sp.Integer(1))
    if keys.has(sp.floor, sp.ceiling):                    # whole key tiles in a window: no closed form
        return sp.Sum(keys, (p, lo, hi))
    if keys.has(sp.Min):                                  # min(p, W) (or min(p-1, W-1)+1, min(p, k_I)): split
        return position_sum(block, lo, hi)
    return sp.summation(keys, (p, lo, hi))


def attention_flops(convention: Convention, past: sp.Expr, new: sp.Expr,
                    block: Block) -> sp.Expr:
    """Attention FLOPs of one sequence: ``new`` queries after ``past`` cached tokens."""
    keys = attention_sum(convention, block, sp.sympify(past), sp.sympify(new))
    unit = per_query_flops(sp.Integer(1), block)          # FLOPs per query-key pair, all layers
    if isinstance(keys, sp.Sum):
        body, limits = keys.args[0], keys.args[1]
        return sp.Sum(sp.expand(unit * body) if not body.has(sp.Min, sp.Max, sp.floor, sp.ceiling)
                      else unit * body, limits)
    return expand(unit * keys)


def expand(expr: sp.Expr) -> sp.Expr:
    """Expand closed forms; leave sums over tiles and window splits (Min/Max) as they are."""
    return expr if expr.has(sp.Sum, sp.Min, sp.Max) else sp.expand(expr)


def keys_loaded(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys a fused attention kernel loads from memory in a forward of ``new`` queries after
    ``past`` cached tokens (per sequence, head group and layer): each key once under causal
    (the union of the queries' legal keys: ``past + new``, ``min(past + new, W - 1 + new)`` in
    a window, ``past + new`` less the keys before the first query's chunk in a chunked layer) and full (every key the shapes hold); under tiled, every query tile loads the
    key tiles it visits again (``tile_keys`` summed over the tiles).

    A sparse layer under causal loads the latent rows its queries select, each once, and at most
    the cache: ``min(past + new, sum over the queries of min(p, k_I))`` -- the union of the
    selections at its largest (which rows are chosen is data, not shape). One query (a decode
    step) loads exactly its ``min(T + 1, k_I)``; an uncached prefill every key (each query
    selects at least one, so the bound is ``new``). Under full it loads every key (the dense
    masked kernel transformers runs). The indexer's own reads of the index keys are
    ``core.traffic``'s. DeepSeek-V4's layers: ``core.compressed``."""
    if block.v4:
        return compressed.keys_loaded(convention, block, past, new)
    refuse_tiled(convention, block)
    if convention == Convention.full:
        return keys_read(convention, block, past + 1, past, new)      # a rolling window cache holds fewer
    if convention == Convention.causal and block.sparse:
        if new == 1:
            return keys_read(convention, block, past + 1, past, new)
        if past == 0:                                     # every query selects a key: all of them at most
            return new
        # halves kept outside the Min, so the printed recipe divides once, exactly
        return sp.Min(2 * (past + new), sp.expand(2 * position_sum(block, past + 1, past + new))) / 2
    if convention == Convention.causal:
        if block.attention == "chunk":                    # from the first query's chunk start on
            return past + new - chunk_start(past + 1)
        return sp.Min(past + new, s.W - 1 + new) if block.attention == "window" else past + new
    if new == 1:
        return tile_keys(block, sp.Integer(0), past, new)
    t = s.t
    return sp.Sum(tile_keys(block, t, past, new), (t, 0, sp.ceiling(new / s.b_q) - 1))
