"""Attention FLOPs, derived as a sum over query positions.

A query that reads K keys runs, per query head, ``QK^T = [1, d_h] x [d_h, K]`` and
``AV = [1, K] x [K, d_h]``. Which keys it reads is the *convention*:

- ``causal``: the legal keys only -- the new query number q (1-based) after ``past``
  cached tokens reads ``past + q`` keys (itself included, future keys skipped);
- ``full``: the whole rectangle the shapes imply -- every query reads all
  ``past + new`` keys (what a dense masked matmul, and torch's SDPA counter, charge).

The sums below are taken by ``sympy.summation``, so the causal triangle, the
cached-prefix chunk and the decode step all come out of one definition.
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from .matmul import matmul

CONVENTIONS = ("causal", "full")


def check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {', '.join(CONVENTIONS)}")


def keys_read(convention: str, past: sp.Expr, new: sp.Expr, q: sp.Expr) -> sp.Expr:
    """Keys that new query number ``q`` (1..new) reads after ``past`` cached tokens."""
    check_convention(convention)
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
    q = s.i
    total = sp.summation(per_query_flops(keys_read(convention, past, new, q)), (q, 1, new))
    return sp.expand(total)
