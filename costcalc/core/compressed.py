"""DeepSeek-V4's attention: the keys a query reads, as transformers 5.23's modeling_deepseek_v4 builds them.

Every V4 layer attends over one K=V head of d_h. Its keys are two parts (docs/cost-model.md,
"DeepSeek-V4"):

- the window: the layer's own recent tokens. Causal: the query at position p (1-based, cached
  tokens included) reads ``min(p, W)`` (itself and the W-1 before it). Full (what transformers
  multiplies): its cache keeps the last W-1 tokens (``DynamicSlidingWindowLayer``) and a forward
  of ``new`` after ``past`` runs over ``min(past, W-1) + new`` keys, every query all of them, the
  window a mask.
- compressed entries (``hca``, ``csa``): one entry per R_c tokens, ``floor(n / R_c)`` of them after
  n tokens. Causal: the query at p may read the entries whose tokens all precede or are it,
  ``floor(p / R_c)`` (transformers' ``entry < (position + 1) // R_c``); in ``csa`` its indexer keeps
  at most k_I of them, ``min(floor(p / R_c), k_I)``. Full: every query runs over every entry that
  exists after the forward, ``floor((past + new) / R_c)``, the causal and top-k choices a mask.

The indexer of a ``csa`` layer scores a query against compressed index keys: causal its
``floor(p / R_c)`` legal ones, full every one there is (``index_pairs``).

Sums over positions are closed forms: ``sum(floor(p / R) for p in 1..n)`` is
``R q (q - 1) / 2 + q (n - R q + 1)`` with ``q = floor(n / R)`` (``floor_prefix``); with the cap k,
positions up to ``k R - 1`` read ``floor(p / R)`` and the rest k.

Tiled is refused (``blocks.V4_TILED``): compressed entries are not key tiles.
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from ..blocks import V4_TILED, Block
from ..vocab import Convention


def refuse_tiled(convention: Convention, block: Block) -> None:
    if convention == Convention.tiled and block.v4:
        raise ValueError(V4_TILED)


def entries(n: sp.Expr) -> sp.Expr:
    """Compressed entries emitted after n tokens."""
    return sp.floor(n / s.R_c)


def floor_prefix(n: sp.Expr) -> sp.Expr:
    """``sum(floor(p / R_c) for p in 1..n)``, n >= 0."""
    q = entries(n)
    return s.R_c * q * (q - 1) / 2 + q * (n - s.R_c * q + 1)


def capped_prefix(n: sp.Expr, cap: sp.Expr) -> sp.Expr:
    """``sum(min(floor(p / R_c), cap) for p in 1..n)``: positions below ``cap R_c`` read fewer than cap."""
    split = sp.Min(n, cap * s.R_c - 1)
    return floor_prefix(split) + cap * (n - split)


def window_prefix(n: sp.Expr) -> sp.Expr:
    """``sum(min(p, W) for p in 1..n)``: p keys up to W, W after."""
    split = sp.Min(n, s.W)
    return split * (split + 1) / 2 + s.W * (n - split)


def _compressed_prefix(block: Block, n: sp.Expr, capped: bool) -> sp.Expr:
    if not block.compressed:
        return sp.Integer(0)
    return capped_prefix(n, s.k_I) if capped and block.attention == "csa" else floor_prefix(n)


def keys_read(convention: Convention, block: Block, p: sp.Expr, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys the query at position ``p`` reads in a forward of ``new`` after ``past`` (window and entries)."""
    refuse_tiled(convention, block)
    if convention == Convention.full:
        return sp.Min(past, s.W - 1) + new + (entries(past + new) if block.compressed else 0)
    held = entries(p) if block.compressed else sp.Integer(0)
    return sp.Min(p, s.W) + (sp.Min(held, s.k_I) if block.attention == "csa" else held)


def attention_sum(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys read by all ``new`` queries of a forward after ``past``."""
    refuse_tiled(convention, block)
    if convention == Convention.full:
        return new * keys_read(convention, block, past + 1, past, new)
    return position_sum(block, past + 1, past + new, capped=True)


def position_sum(block: Block, lo: sp.Expr, hi: sp.Expr, capped: bool) -> sp.Expr:
    """``sum(min(p, W) + entries read for p in lo..hi)``, the entries capped at k_I (csa) if ``capped``."""
    return (window_prefix(hi) - window_prefix(lo - 1)
            + _compressed_prefix(block, hi, capped) - _compressed_prefix(block, lo - 1, capped))


def steps_sum(convention: Convention, block: Block, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    """Keys read by single-query steps at positions lo..hi (the step at p over p - 1 cached): causal
    as the same queries of a prefill; full ``min(p - 1, W - 1) + 1 = min(p, W)`` window keys and every
    entry, ``floor(p / R_c)``, uncapped."""
    refuse_tiled(convention, block)
    return position_sum(block, lo, hi, capped=convention == Convention.causal)


def keys_loaded(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys (d_h each) a fused kernel loads in a forward: full every key the shapes hold; causal the
    window's union, ``min(past + new, W - 1 + new)``, and every entry there is (``hca``), or in ``csa``
    the entries selected, at most all of them: ``min(entries, sum of min(floor(p / R_c), k_I))`` (one
    query: exactly its selection)."""
    refuse_tiled(convention, block)
    if convention == Convention.full:
        return keys_read(convention, block, past + 1, past, new)
    window = sp.Min(past + new, s.W - 1 + new)
    if block.attention == "csa":
        if new == 1:
            return window + sp.Min(entries(past + 1), s.k_I)
        return window + sp.Min(entries(past + new), capped_prefix(past + new, s.k_I) - capped_prefix(past, s.k_I))
    return window + (entries(past + new) if block.compressed else 0)


def index_pairs(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """(query, index key) pairs a csa layer's indexer scores in a forward: causal ``floor(p / R_c)`` per
    query; full every query against every entry, ``new floor((past + new) / R_c)``."""
    refuse_tiled(convention, block)
    if convention == Convention.full:
        return new * entries(past + new)
    return floor_prefix(past + new) - floor_prefix(past)


def index_steps(convention: Convention, block: Block, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    """Pairs scored by single-query steps at positions lo..hi: ``floor(p / R_c)`` each, both conventions."""
    refuse_tiled(convention, block)
    return floor_prefix(hi) - floor_prefix(lo - 1)
