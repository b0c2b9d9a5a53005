"""The symbolic breakdown of every workload (each declared once in ``core.registry.WORKLOADS``,
which names its builder here).

Everything is built from one step, ``forward``: B sequences each run ``new`` tokens
through the blocks after ``past`` cached tokens. The workloads are that step at
particular sizes, or sums of it:

- prefill: ``forward(past=0, new=S)``;
- cached prefill (a chunk): ``forward(past=T, new=C)``;
- decode step: ``forward(past=T, new=1)``;
- the decode phase of a generation: decode steps j = 1..N-1, the j-th over S + j - 1 cached
  tokens (its query at position S + j);
- a generation: the prefill and its decode phase;
- a chunked schedule: chunks j = 0..n-1 of C tokens over T + jC cached tokens, logits on
  the last; a packed variable-length batch: a prefill of S_i per sequence i;
- training: three times a forward with logits at every position.

``logits`` is ``last`` (one LM-head row per sequence) or ``all`` (a row per new token);
internally also ``none``, for a chunk that is not the prompt's last.
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .. import symbols as s
from ..blocks import Block
from ..vocab import Convention, Logits
from .attention import attention_flops, per_query_flops, steps_sum
from .breakdown import Breakdown
from .indexer import indexer_flops, indexer_steps_flops
from .linear import HC_HEAD, LM_HEAD, lm_head_flops, lm_head_rows, operators, term_of
from .matmul import matmul
from .mixers import conv_channels, conv_flops, scan_flops

TRAIN_FACTOR = 3  # forward + backward ~ 3 x forward (weight and input gradients)


def forward(block: Block, convention: Convention, logits: Logits, past: sp.Expr, new: sp.Expr,
            batch: sp.Expr = s.B) -> Breakdown:
    """``batch`` sequences, each running ``new`` tokens after ``past`` cached ones."""
    rows = lm_head_rows(logits, new)
    ops = {name: batch * e for name, e in operators(block, new, past).items()}
    if block.attends:
        ops["attention"] = batch * attention_flops(convention, past, new, block)
    if block.indexed:           # DeepSeek Sparse Attention, V4's csa: the indexer scores the keys (core.indexer)
        ops["indexer"] = batch * indexer_flops(convention, block, past, new)
    if block.mixer:
        ops["scan"] = batch * scan_flops(convention, block, past, new)
        if conv_channels(block.mixer) != 0:
            ops["conv"] = batch * conv_flops(convention, block, past, new)
    if block.v4:                # the hyper-connection head: every new token's streams, once per model
        ops[HC_HEAD.name] = matmul(batch * new, HC_HEAD.fan_in, HC_HEAD.fan_out)
    ops[LM_HEAD.name] = lm_head_flops(batch * rows)
    # a stateful mixer's scan stays a column where it counts nothing (transformers' Gated DeltaNet step)
    kept = (LM_HEAD.name, "scan") if block.stateful else (LM_HEAD.name,)
    return Breakdown({op: e for op, e in ops.items() if op in kept or e != 0}, term_of(block)).expanded()


@lru_cache(maxsize=None)
def prefill(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Breakdown:
    return forward(block, convention, logits, past=sp.Integer(0), new=s.S)


@lru_cache(maxsize=None)
def cached_prefill(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Breakdown:
    """C new tokens over a cached prefix of T tokens."""
    return forward(block, convention, logits, past=s.T, new=s.C)


@lru_cache(maxsize=None)
def decode(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Breakdown:
    """One decode step over T cached tokens: one new token per sequence."""
    return forward(block, convention, "last", past=s.T, new=sp.Integer(1))


@lru_cache(maxsize=None)
def decode_phase(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Breakdown:
    """The N-1 decode steps after a prefill of S: step j runs over S + j - 1 cached tokens.

    Its linear and LM-head operators are the step's, summed over j; its attention is the
    per-pair cost times the keys the steps read, ``steps_sum`` over positions S+1..S+N-1.
    """
    step = decode(block, convention)
    ops = {op: sp.summation(e.subs(s.T, s.S + s.j - 1), (s.j, 1, s.N - 1))
           for op, e in step.operators.items() if op not in ("attention", "indexer")}
    if block.attends:
        keys = steps_sum(convention, block, s.S + 1, s.S + s.N - 1)
        ops["attention"] = s.B * per_query_flops(sp.Integer(1), block) * keys
    if block.indexed:
        ops["indexer"] = s.B * indexer_steps_flops(convention, block, s.S + 1, s.S + s.N - 1)
    return Breakdown({op: ops[op] for op in step.operators}, step.term_of).expanded()


@lru_cache(maxsize=None)
def generate(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Breakdown:
    """A whole generation of N tokens from a prompt of S: prefill plus N-1 decode steps."""
    return prefill(block, convention, logits) + decode_phase(block, convention)


def chunked(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last,
                   n_chunks: sp.Expr = s.n_chunks) -> Breakdown:
    """``n_chunks`` chunks of C tokens after a cached prefix of T, logits on the last chunk only.

    Chunk j (0-based) runs C tokens over T + j*C cached tokens.
    """
    if block.attention in ("window", "chunk") or block.indexed or block.v4:
        raise ValueError("a uniform chunk schedule over a sliding window, attention chunks, sparse attention or compressed "
                         "entries has no single closed form; evaluate the chunks one by one")
    step = forward(block, convention, "none", past=s.T + s.j * s.C, new=s.C)
    chunks = step.map(lambda e: sp.summation(e, (s.j, 0, n_chunks - 1)))
    return chunks + Breakdown({LM_HEAD.name: lm_head_flops(s.B)})


def varlen_prefill(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Breakdown:
    """Sequence i of a packed variable-length batch: a one-sequence prefill of S_i tokens
    (the batch is the sum over i = 1..B)."""
    return prefill(block, convention, logits).map(lambda e: e.subs(s.B, 1).subs(s.S, s.S_i))


@lru_cache(maxsize=None)
def train(block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.all) -> Breakdown:
    """Forward with logits at every position, times 3 for forward + backward."""
    return prefill(block, convention, "all").map(lambda e: TRAIN_FACTOR * e)
