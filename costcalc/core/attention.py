"""Attention FLOPs, derived as a sum over query positions.

A query that reads K keys runs, per query head, ``QK^T = [1, d_h] x [d_h, K]`` and
``AV = [1, K] x [K, d_h]``. Which keys it reads is the *convention*:

- ``causal``: the legal keys only -- the new query number q (1-based) after ``past``
  cached tokens reads ``past + q`` keys (itself included, future keys skipped);
- ``full``: the whole rectangle the shapes imply -- every query reads all
  ``past + new`` keys (what a dense masked matmul, and torch's SDPA counter, charge);
- ``tiled``: what a block-skipping kernel executes -- queries go in tiles of ``b_q``;
  query tile t reads every key tile of ``b_k`` (aligned at key 0) that holds a legal key,
  i.e. ``min(ceil((past + q_end)/b_k) b_k, past + new)`` keys for each of its rows.

The sums below are taken by ``sympy.summation``, so the causal triangle, the
cached-prefix chunk and the decode step all come out of one definition.
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from .matmul import matmul

CONVENTIONS = ("causal", "full", "tiled")


def check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {', '.join(CONVENTIONS)}")


def keys_read(convention: str, past: sp.Expr, new: sp.Expr, q: sp.Expr) -> sp.Expr:
    """Keys that new query number ``q`` (1..new) reads after ``past`` cached tokens."""
    check_convention(convention)
    if convention == "tiled":
        raise ValueError("the tiled convention reads keys per query tile, not per query")
    return past + q if convention == "causal" else past + new


def pairs(convention: str, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Query-key pairs of ``new`` queries after ``past`` cached tokens (one head, one layer)."""
    return sp.expand(sp.summation(keys_read(convention, past, new, s.i), (s.i, 1, new)))


def per_query_flops(keys: sp.Expr) -> sp.Expr:
    """QK^T and AV of one query over ``keys`` keys, all query heads of all layers."""
    one_head = matmul(1, s.d_h, keys) + matmul(1, keys, s.d_h)
    # h_q heads of width d_h make up the query width d_q = h_q*d_h.
    return (s.L * s.h_q * one_head).subs(s.h_q, s.d_q / s.d_h)


def attention_flops(convention: str, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Attention FLOPs of one sequence: ``new`` queries after ``past`` cached tokens."""
    check_convention(convention)
    if new == 1:  # one query reads past + 1 keys under every convention (a single tile)
        return sp.expand(per_query_flops(past + 1))
    if convention == "tiled":
        return tiled_attention_flops(past, new)
    q = s.i
    total = sp.summation(per_query_flops(keys_read(convention, past, new, q)), (q, 1, new))
    return sp.expand(total)


def tiled_attention_flops(past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Sum over query tiles t = 0..ceil(new/b_q)-1 of (rows in tile) x (keys of the visited key tiles)."""
    t = s.t
    q_end = sp.Min((t + 1) * s.b_q, new)            # last query of tile t (1-based)
    rows = q_end - t * s.b_q
    keys = sp.Min(sp.ceiling((past + q_end) / s.b_k) * s.b_k, past + new)
    return sp.Sum(rows * per_query_flops(keys), (t, 0, sp.ceiling(new / s.b_q) - 1))
