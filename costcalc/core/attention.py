"""Attention FLOPs, derived as a sum over query positions.

A query that reads K keys runs, per query head, ``QK^T = [1, d_qk] x [d_qk, K]`` and
``AV = [1, K] x [K, d_v']``: for GQA ``d_qk = d_v' = d_h``; for naive MLA
``d_qk = d_nope + d_rope`` and ``d_v' = d_v``; for absorbed MLA the scores run over the
latent and the RoPE key, ``d_qk = r_kv + d_rope``, and the values over the latent,
``d_v' = r_kv``. Which keys it reads is the *convention*:

- ``causal``: the legal keys only -- the query at position p (1-based, cached tokens
  included) reads p keys (itself included, future keys skipped); in a sliding-window
  layer ``min(p, W)``;
- ``full``: the whole rectangle the shapes imply -- every query reads all
  ``past + new`` keys (what a dense masked matmul, and torch's SDPA counter, charge),
  window or not;
- ``tiled``: what a block-skipping kernel executes -- queries go in tiles of ``b_q``;
  query tile t reads every key tile of ``b_k`` (aligned at key 0) that holds a legal key
  for one of its rows: from the tile holding the window start of its first row (key 1
  without a window) to the tile holding its last row's own key.

The sums below are taken by ``sympy.summation`` over positions, so the causal triangle,
the cached-prefix chunk, the decode step and the decode phase of a generation all come
out of one definition; a window splits the sum at p = W.
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from ..blocks import Block, parse
from .matmul import matmul

from ..vocab import CONVENTIONS


def check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {', '.join(CONVENTIONS)}")


def _block(arch: "str | Block | None") -> Block:
    if arch is None:
        return Block()
    return arch if isinstance(arch, Block) else parse(arch)


def head_dims(kind: Block) -> tuple[sp.Expr, sp.Expr]:
    """(score width, value width) per query head and key."""
    if kind.attention in ("gqa", "window"):
        return s.d_h, s.d_h
    if kind.form == "naive":
        return s.d_nope + s.d_rope, s.d_v
    return s.r_kv + s.d_rope, s.r_kv


def per_query_flops(keys: sp.Expr, arch: "str | Block | None" = None) -> sp.Expr:
    """QK^T and AV of one query over ``keys`` keys, all query heads of all layers."""
    kind = _block(arch)
    qk, av = head_dims(kind)
    one_head = matmul(1, qk, keys) + matmul(1, keys, av)
    if kind.attention == "mla":
        return sp.expand(s.L * s.h_q * one_head)
    # h_q heads of width d_h make up the query width d_q = h_q*d_h.
    return sp.expand((s.L * s.h_q * one_head).subs(s.h_q, s.d_q / s.d_h))


def legal_keys(kind: Block, position: sp.Expr) -> sp.Expr:
    """Keys the query at ``position`` may read under ``causal``."""
    return sp.Min(position, s.W) if kind.attention == "window" else position


def position_sum(kind: Block, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    """Sum of the causal keys read by the queries at positions ``lo..hi`` (hi >= lo - 1).

    Without a window, the sum of p. With one, the positions split at W: those at or
    below it read p keys, those above it W keys, each part a ``sympy.summation``; the
    split point is clamped with Min/Max so the same expression holds whichever side of W
    the range lies.
    """
    p = s.p
    if kind.attention != "window":
        return sp.summation(p, (p, lo, hi))
    split = sp.Max(sp.Min(hi, s.W), lo - 1)            # last position that reads p keys
    below = sp.summation(p, (p, lo, split))             # positions lo..split read p keys
    above = sp.summation(s.W, (p, split + 1, hi))       # the rest read W keys
    return below + above


def pairs(convention: str, past: sp.Expr, new: sp.Expr, arch=None) -> sp.Expr:
    """Query-key pairs of ``new`` queries after ``past`` cached tokens (one head, one layer)."""
    check_convention(convention)
    kind = _block(arch)
    if convention == "full":
        return sp.expand(new * (past + new))
    if convention == "causal":
        return sp.expand(position_sum(kind, past + 1, past + new))
    raise ValueError("count tiled pairs with attention_flops")


def attention_flops(convention: str, past: sp.Expr, new: sp.Expr, arch=None) -> sp.Expr:
    """Attention FLOPs of one sequence: ``new`` queries after ``past`` cached tokens."""
    check_convention(convention)
    kind = _block(arch)
    unit = per_query_flops(sp.Integer(1), kind)          # FLOPs per query-key pair, all layers
    if new == 1:  # one query: a single query tile
        return _expand(unit * single_query_keys(convention, kind, past + 1))
    if convention == "tiled":
        return tiled_attention_flops(past, new, kind)
    return _expand(unit * pairs(convention, past, new, kind))


def single_query_keys(convention: str, kind: Block, position: sp.Expr) -> sp.Expr:
    """Keys one query at ``position`` reads: all cached keys and its own under full; its
    legal keys under causal; under tiled the whole key tiles its legal keys fall in -- the
    same as causal without a window (tiles from key 0 up to itself), more with one (the
    first tile of the window may start before it)."""
    if convention == "full":
        return position
    if convention == "tiled" and kind.attention == "window":
        return position - sp.floor(sp.Max(position - s.W, 0) / s.b_k) * s.b_k
    return legal_keys(kind, position)


def tiled_attention_flops(past: sp.Expr, new: sp.Expr, arch=None) -> sp.Expr:
    """Sum over query tiles t = 0..ceil(new/b_q)-1 of (rows in tile) x (keys of the visited key tiles)."""
    kind = _block(arch)
    t = s.t
    q_end = sp.Min((t + 1) * s.b_q, new)            # last query of tile t (1-based, in the chunk)
    rows = q_end - t * s.b_q
    end = sp.Min(sp.ceiling((past + q_end) / s.b_k) * s.b_k, past + new)
    if kind.attention == "window":
        first = past + t * s.b_q + 1                # position of the tile's first query
        start = sp.floor(sp.Max(first - s.W, 0) / s.b_k) * s.b_k
        keys = end - start
    else:
        keys = end
    return sp.Sum(rows * per_query_flops(keys, kind), (t, 0, sp.ceiling(new / s.b_q) - 1))


def _expand(expr: sp.Expr) -> sp.Expr:
    return expr if expr.has(sp.Min, sp.Max) else sp.expand(expr)
