"""Symbolic breakdowns of every workload of the cost model.

Everything is built from one step, ``forward``: B sequences each run ``new`` tokens
through the blocks after ``past`` cached tokens. The workloads are that step at
particular sizes, or sums of it over steps:

- prefill: ``forward(past=0, new=S)``;
- cached-prefix chunk: ``forward(past=T, new=C)``;
- decode step: ``forward(past=T, new=1)``;
- the decode phase of a generation: the sum of decode steps ``j = 1..N-1``, the j-th
  over ``S + j - 1`` cached tokens;
- a chunked schedule of n equal chunks: the sum of chunks ``j = 0..n-1`` over
  ``T + j C`` cached tokens;
- training: three times a forward with logits at every position.

``logits`` is ``last`` (one LM-head row per sequence) or ``all`` (a row per new token);
internally also ``none``, for a chunk that is not the prompt's last.
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .. import symbols as s
from ..blocks import Block, parse
from .attention import attention_flops, check_convention, per_query_flops, position_sum, single_query_keys
from .breakdown import Breakdown
from .linear import linear_terms, lm_head_flops

from ..vocab import LOGITS
_ROWS_PER_SEQUENCE = {"last": lambda new: 1, "all": lambda new: new, "none": lambda new: 0}
TRAIN_FACTOR = 3  # forward + backward ~ 3 x forward (weight and input gradients)


def _check_logits(logits: str) -> None:
    if logits not in _ROWS_PER_SEQUENCE:
        raise ValueError(f"unknown logits mode {logits!r}; expected one of {', '.join(LOGITS)}")


def forward(arch: str, convention: str, logits: str, past: sp.Expr, new: sp.Expr,
            batch: sp.Expr = s.B) -> Breakdown:
    """``batch`` sequences, each running ``new`` tokens after ``past`` cached ones."""
    check_convention(convention)
    _check_logits(logits)
    terms = {name: batch * e for name, e in linear_terms(arch, new).items()}
    terms["attention"] = batch * attention_flops(convention, past, new, arch)
    terms["lm_head"] = lm_head_flops(batch * _ROWS_PER_SEQUENCE[logits](new))
    return Breakdown(terms).map(sp.expand)


def summed(step: Breakdown, index: sp.Symbol, lo: sp.Expr, hi: sp.Expr) -> Breakdown:
    """The sum of a per-step breakdown over ``index = lo..hi``."""
    return step.map(lambda e: sp.summation(e, (index, lo, hi)))


def _check_closed(arch) -> None:
    kind = parse(arch) if isinstance(arch, str) else arch
    if kind.attention == "window":
        raise ValueError("a uniform chunk schedule over a sliding window has no single closed form; "
                         "evaluate the chunks one by one")


@lru_cache(maxsize=None)
def prefill(arch: str, convention: str = "causal", logits: str = "last") -> Breakdown:
    return forward(arch, convention, logits, past=sp.Integer(0), new=s.S)


@lru_cache(maxsize=None)
def cached_prefill(arch: str, convention: str = "causal", logits: str = "last") -> Breakdown:
    """C new tokens over a cached prefix of T tokens."""
    return forward(arch, convention, logits, past=s.T, new=s.C)


@lru_cache(maxsize=None)
def decode_step(arch: str, convention: str = "causal") -> Breakdown:
    """One decode step over T cached tokens: one new token per sequence."""
    return forward(arch, convention, "last", past=s.T, new=sp.Integer(1))


@lru_cache(maxsize=None)
def decode_phase(arch: str, convention: str = "causal") -> Breakdown:
    """The N-1 decode steps after a prefill of S: step j runs over S + j - 1 cached tokens.

    The linear and LM-head terms are the step's, summed over j. The step's one query sits
    at position S + j, so attention is the per-pair cost times the keys read at positions
    S+1..S+N-1: the legal keys under causal and tiled (a single query is a single tile), all
    cached keys plus its own under full -- summed over positions (split at W in a window).
    """
    check_convention(convention)
    step = decode_step(arch, convention)
    kind = parse(arch) if isinstance(arch, str) else arch
    others = Breakdown({n: e for n, e in step.terms.items() if n != "attention"})
    phase = summed(others.map(lambda e: e.subs(s.T, s.S + s.j - 1)), s.j, 1, s.N - 1)
    if convention == "tiled" and kind.attention == "window":   # whole key tiles: no closed form
        keys = sp.Sum(single_query_keys(convention, kind, s.S + s.j), (s.j, 1, s.N - 1))
    else:
        read = Block() if convention == "full" else kind      # full: no window cap
        keys = position_sum(read, s.S + 1, s.S + s.N - 1)
    attention = s.B * per_query_flops(sp.Integer(1), kind) * keys
    terms = dict(phase.terms)
    terms["attention"] = attention if attention.has(sp.Min, sp.Max, sp.Sum) else sp.expand(attention)
    return Breakdown({n: terms[n] for n in step.terms})


@lru_cache(maxsize=None)
def generation(arch: str, convention: str = "causal", logits: str = "last") -> Breakdown:
    """A whole generation of N tokens from a prompt of S: prefill plus N-1 decode steps."""
    return prefill(arch, convention, logits) + decode_phase(arch, convention)


def uniform_chunks(arch: str, convention: str, n_chunks: sp.Expr) -> Breakdown:
    """``n_chunks`` chunks of C tokens after a cached prefix of T, logits on the last chunk only.

    Chunk j (0-based) runs C tokens over T + j*C cached tokens.
    """
    _check_closed(arch)
    step = forward(arch, convention, "none", past=s.T + s.j * s.C, new=s.C)
    chunks = summed(step, s.j, 0, n_chunks - 1)
    return chunks + Breakdown({"lm_head": lm_head_flops(s.B)})


@lru_cache(maxsize=None)
def train_step(arch: str, convention: str = "causal") -> Breakdown:
    """Forward with logits at every position, times 3 for forward + backward."""
    return prefill(arch, convention, "all").map(lambda e: TRAIN_FACTOR * e)
