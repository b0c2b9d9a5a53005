"""DeepSeek Sparse Attention's lightning indexer: the scores it computes, summed over query positions.

For the query at position p (1-based, cached tokens included) the indexer scores a key s as
``I(p, s) = sum over its h_I heads j of w(p, j) ReLU(q(p, j) . k(s))``: per (query, key) pair and
layer ``h_I`` dot products of ``d_I`` (``2 h_I d_I`` FLOPs) and the weighted sum over the heads
(``2 h_I``): ``pair_flops``. Its projections (``indexer.wq_b``, ``indexer.wk``,
``indexer.weights_proj``) are ``core.linear``'s.

Which keys it scores is ``keys_scored``, like ``attention.keys_read``:

- causal: every legal key of the query, ``p`` -- dense: the top-k saves the main attention its
  reads, not the indexer its scores;
- full: the whole rectangle the shapes hold, ``past + new`` (transformers' ``q @ k^T`` over every
  cached and new key before the causal mask);
- tiled: refused, as for the sparse attention itself (``attention.refuse_tiled``).

Not modelled: the ReLU (elementwise, like softmax), the top-k selection, and the FP8 scoring of
the reference kernel (it halves bytes, not FLOPs).
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from ..blocks import Block
from ..vocab import Convention
from . import compressed
from .attention import refuse_tiled
from .matmul import matmul


def pair_flops(block: Block) -> sp.Expr:
    """FLOPs of one (query, key) pair in one layer: the h_I dot products of d_I and the weighted sum.
    DeepSeek-V4's indexer (``csa``) weights its heads elementwise (a product, then a sum over the
    heads: no matmul, like the ReLU): the dot products only."""
    if block.v4:
        return sp.expand(s.h_I * matmul(1, s.d_I, 1))
    return sp.expand(s.h_I * matmul(1, s.d_I, 1) + matmul(1, s.h_I, 1))


def keys_scored(convention: Convention, block: Block, p: sp.Expr, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Keys the indexer scores for the query at position ``p`` of a forward of ``new`` after ``past``."""
    refuse_tiled(convention, block)
    return past + new if convention == Convention.full else p


def pairs(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Pairs scored by all queries of one forward, ``sum(keys_scored(p) for p in past+1..past+new)``."""
    p = s.p
    return sp.expand(sp.summation(keys_scored(convention, block, p, past, new), (p, past + 1, past + new)))


def steps_pairs(convention: Convention, block: Block, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    """Pairs scored by single-query steps at positions lo..hi (the step at p over p - 1 cached)."""
    p = s.p
    return sp.expand(sp.summation(keys_scored(convention, block, p, p - 1, sp.Integer(1)), (p, lo, hi)))


def indexer_flops(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """The indexer's scores of one sequence in all L layers: ``new`` queries after ``past`` cached
    (DeepSeek-V4's over compressed index keys: ``core.compressed.index_pairs``)."""
    past, new = sp.sympify(past), sp.sympify(new)
    if block.v4:
        return sp.expand(s.L * pair_flops(block) * compressed.index_pairs(convention, block, past, new))
    return sp.expand(s.L * pair_flops(block) * pairs(convention, block, past, new))


def indexer_steps_flops(convention: Convention, block: Block, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    """The indexer's scores of single-query steps at positions lo..hi, all L layers."""
    if block.v4:
        return sp.expand(s.L * pair_flops(block) * compressed.index_steps(convention, block, lo, hi))
    return sp.expand(s.L * pair_flops(block) * steps_pairs(convention, block, lo, hi))
