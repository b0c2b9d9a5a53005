"""Linear-attention and state-space mixers: the scan and the short convolution, from shapes.

A mixer keeps a fixed-size state per sequence instead of a KV cache (``blocks.MIXERS``). Its
projections are weight matrices (``core.linear``); what is left is

- the **scan**: the products of the tokens with the state. Under ``recurrent`` (the causal
  convention: ``vocab.SCAN``) each new token updates the state and reads it once: the
  products ``recurrent_products`` lists, summed over the new tokens' positions. Under
  ``chunked`` (full and tiled) the products transformers' torch path runs: a forward of
  several tokens cuts them into whole chunks of Q_c (the last one padded) and runs
  ``chunk_products`` per chunk, plus, for Mamba-2, the products between the chunks' states;
  a single-token step over a cache runs its recurrent step, of which only the products
  ``step_products`` are matrix products (the rest is elementwise, which a FLOP counter of
  matrix products does not see -- docs/cost-model.md names it);
- the **convolution**: a depthwise causal convolution of K_c taps over ``conv_channels``
  channels. Recurrent: one output per new token. Chunked: the outputs transformers computes
  (``conv_outputs``).

Every count is per sequence, over all L layers of the block; 2 FLOPs a multiply-add (``matmul``).
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from ..blocks import Block
from ..vocab import SCAN, Convention
from .matmul import matmul

class Cached(sp.Function):
    """1 if any token is cached (``past`` >= 1), else 0: whether a forward reads a state.
    Left unevaluated for a symbol (sympy takes a positive T for >= 1, but a cached prefill's
    prefix may be 0); printed as ``_min(past, 1)``."""

    @classmethod
    def eval(cls, past):
        if past.is_Integer:
            return sp.Integer(1 if past > 0 else 0)
        return None

    def _sympystr(self, printer) -> str:          # as ``costcalc formula`` shows it
        return f"Min({printer._print(self.args[0])}, 1)"

    def _latex(self, printer) -> str:
        return rf"\min\left({printer._print(self.args[0])}, 1\right)"


Product = tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]   # (copies, n, a, b): copies x [n, a] x [a, b]


def recurrent_products(mixer: str) -> tuple[Product, ...]:
    """The products one token runs with the state, per layer (ideal recurrence).

    - gdn, kda (delta rule, per value head, state d_lk x d_lv): the state's prediction of the
      value ``k^T S``, the rank-1 correction ``k (beta (v - k^T S))``, the read ``q^T S``;
    - mamba2 (per head, state d_m x N_s): the rank-1 update ``x (dt B)^T``, the read ``S C``;
    - mamba1 (per channel, state N_s): the update ``x (dt B)``, the read ``S . C``;
    - lightning (per head, state d_h x d_h): the update ``k^T v``, the read ``q S``;
    - shortconv: no state products (its state is the convolution window).
    """
    if mixer in ("gdn", "kda"):
        return ((s.h_lv, 1, s.d_lk, s.d_lv), (s.h_lv, s.d_lk, 1, s.d_lv), (s.h_lv, 1, s.d_lk, s.d_lv))
    if mixer == "mamba2":
        return ((s.h_m, s.d_m, 1, s.N_s), (s.h_m, s.d_m, s.N_s, 1))
    if mixer == "mamba1":
        return ((s.d_in, 1, 1, s.N_s), (s.d_in, 1, s.N_s, 1))
    if mixer == "lightning":
        return ((s.d_q / s.d_h, s.d_h, 1, s.d_h), (s.d_q / s.d_h, 1, s.d_h, s.d_h))
    return ()


def chunk_products(mixer: str, n: sp.Expr = s.Q_c) -> tuple[Product, ...]:
    """The matrix products transformers' chunked torch path runs per chunk of ``n`` tokens
    (Q_c: a whole chunk).

    - gdn (``torch_chunk_gated_delta_rule``, per value head): ``K_beta K^T`` and ``Q K^T``
      ([Q_c, d_lk] x [d_lk, Q_c]); the state's reads ``k_cumdecay S`` and ``Q S`` ([Q_c, d_lk]
      x [d_lk, d_lv]); the intra-chunk output ``A v_new`` ([Q_c, Q_c] x [Q_c, d_lv]); the
      update ``K^T v_new`` ([d_lk, Q_c] x [Q_c, d_lv]). Its two triangular solves are not
      matrix products a counter sees.
    - kda (``chunk_kimi_delta_attention``, per head): the intra-chunk scores with per-channel
      decay are elementwise multiply-sums and the triangular inverse a loop of elementwise
      rows (neither a matrix product); then ``A v_beta`` ([Q_c, Q_c] x [Q_c, d_lv]) and
      ``A (k_beta e^g)`` ([Q_c, Q_c] x [Q_c, d_lk]), and per chunk the reads ``(q e^g) S``
      and ``k_cumdecay S``, the output ``A_qk v_new`` and the update ``K^T v_new`` as gdn's.
    - mamba2 (``torch_forward``'s SSD, per head: B and C repeated from G groups to every
      head): the scores ``C B^T`` ([Q_c, N_s] x [N_s, Q_c]), the intra-chunk output
      ``(L . C B^T) X`` ([Q_c, Q_c] x [Q_c, d_m]), the chunk's state ``B^T X``
      ([N_s, Q_c] x [Q_c, d_m]) and the read of the states ``C S`` ([Q_c, N_s] x [N_s, d_m]);
      and once per forward the states passed between the chunks (``between_chunks``).
    - lightning (``MiniMaxLightningAttention``, per head, blocks of Q_c): the intra-block
      scores ``Q K^T`` ([n, d_h] x [d_h, n]) and their decayed product with V ([n, n] x [n, d_h]),
      the read of the running state ``(Q decay) KV`` ([n, d_h] x [d_h, d_h]) and its update
      ``(K decay)^T V`` ([d_h, n] x [n, d_h]).
    """
    if mixer == "gdn":
        return ((s.h_lv, s.Q_c, s.d_lk, s.Q_c), (s.h_lv, s.Q_c, s.d_lk, s.Q_c),
                (s.h_lv, s.Q_c, s.d_lk, s.d_lv), (s.h_lv, s.Q_c, s.d_lk, s.d_lv),
                (s.h_lv, s.Q_c, s.Q_c, s.d_lv), (s.h_lv, s.d_lk, s.Q_c, s.d_lv))
    if mixer == "kda":
        return ((s.h_lv, s.Q_c, s.Q_c, s.d_lv), (s.h_lv, s.Q_c, s.Q_c, s.d_lk),
                (s.h_lv, s.Q_c, s.d_lk, s.d_lv), (s.h_lv, s.Q_c, s.d_lk, s.d_lv),
                (s.h_lv, s.Q_c, s.Q_c, s.d_lv), (s.h_lv, s.d_lk, s.Q_c, s.d_lv))
    if mixer == "mamba2":
        return ((s.h_m, s.Q_c, s.N_s, s.Q_c), (s.h_m, s.Q_c, s.Q_c, s.d_m),
                (s.h_m, s.N_s, s.Q_c, s.d_m), (s.h_m, s.Q_c, s.N_s, s.d_m))
    if mixer == "shortconv":           # no state products: its state is the convolution window
        return ()
    if mixer == "lightning":
        h = s.d_q / s.d_h
        return ((h, n, s.d_h, n), (h, n, n, s.d_h), (h, n, s.d_h, s.d_h), (h, s.d_h, n, s.d_h))
    raise NotImplementedError(mixer)


def step_products(mixer: str) -> tuple[Product, ...]:
    """The matrix products of transformers' single-token step over a cache (the rest of its
    recurrence is elementwise)."""
    if mixer in ("gdn", "kda", "shortconv"):
        return ()
    if mixer == "mamba2":               # the read S C; the update is elementwise
        return ((s.h_m, s.d_m, s.N_s, 1),)
    if mixer == "mamba1":               # the read S C; the update is elementwise
        return ((s.d_in, 1, s.N_s, 1),)
    if mixer == "lightning":            # the update k^T v and the read q KV, as batched products
        return recurrent_products(mixer)
    raise NotImplementedError(mixer)


def _flops(products: tuple[Product, ...]) -> sp.Expr:
    return sp.Add(*(c * matmul(n, a, b) for c, n, a, b in products))


def scan_flops(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """The scan's FLOPs of one sequence: ``new`` tokens after ``past`` cached ones, all layers.

    Chunked, transformers takes its single-token step where a state is cached and one token is
    new (a decode step; a one-token chunk over a cache), and the chunked path otherwise (a
    prompt of one token too)."""
    mixer = block.mixer
    if SCAN[Convention(convention).value] == "recurrent":
        p = s.p
        per_token = _flops(recurrent_products(mixer))
        return sp.expand(s.L * sp.summation(per_token, (p, past + 1, past + new)))
    step = sp.expand(_flops(step_products(mixer)))
    chunked = chunk_flops(mixer, new)
    if new == 1:                       # a decode step: always over a cache
        return s.L * step
    # lightning steps token by token over any cached state; the others chunk several new tokens
    stepping = Cached(past) * (1 if mixer == "lightning" else 1 - many(new))
    return s.L * sp.expand(stepping * new * step + (1 - stepping) * chunked)


def chunk_flops(mixer: str, new: sp.Expr) -> sp.Expr:
    """The chunked path's products for ``new`` tokens: ``ceil(new / Q_c)`` whole chunks, the last
    padded (lightning: ``floor(new / Q_c)`` whole blocks and the rest as a shorter block; Mamba-1's
    scan: its step at every token)."""
    if mixer == "shortconv":           # no state products: its state is the convolution window
        return sp.Integer(0)
    if mixer == "mamba1":
        return new * sp.expand(_flops(step_products(mixer)))
    if mixer == "lightning":
        whole = sp.floor(new / s.Q_c)
        return whole * sp.expand(_flops(chunk_products(mixer))) + _flops(chunk_products(mixer, new - s.Q_c * whole))
    chunks = sp.ceiling(new / s.Q_c)
    out = chunks * sp.expand(_flops(chunk_products(mixer)))
    return out + between_chunks(mixer, chunks)


def between_chunks(mixer: str, chunks: sp.Expr) -> sp.Expr:
    """Mamba-2's pass of the states between chunks: per head, the decays between every pair of
    the ``chunks + 1`` boundaries (the initial state's included) times the states,
    ``[chunks + 1, chunks + 1] x [chunks + 1, d_m N_s]`` -- quadratic in the chunk count."""
    if mixer != "mamba2":
        return sp.Integer(0)
    return s.h_m * matmul(chunks + 1, chunks + 1, s.d_m * s.N_s)


def many(new: sp.Expr) -> sp.Expr:
    """1 if more than one token is new, else 0."""
    return sp.Min(new - 1, 1)


def conv_channels(mixer: str) -> sp.Expr:
    """Channels of the mixer's depthwise convolution (0: none)."""
    return {"gdn": 2 * s.h_lk * s.d_lk + s.h_lv * s.d_lv,
            "kda": 2 * s.h_lv * s.d_lk + s.h_lv * s.d_lv,
            "mamba2": s.h_m * s.d_m + 2 * s.G * s.N_s,
            "mamba1": s.d_in,
            "shortconv": s.d_c}.get(mixer, sp.Integer(0))


def conv_outputs(convention: Convention, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    """Output positions the convolution computes per channel for ``new`` tokens after ``past``.

    Recurrent: one per new token. Chunked, as transformers' torch path runs it: a prompt is
    padded with K_c - 1 zeros on both sides (``new + K_c - 1`` outputs, the extra ones cut
    off); a single-token step over a cache convolves the K_c kept positions and the token
    without padding (2 outputs); several tokens over a cache are appended to the K_c kept
    positions and padded as a prompt (``new + 2 K_c - 1``)."""
    if SCAN[Convention(convention).value] == "recurrent":
        return new
    if new == 1:                       # a decode step
        return sp.Integer(2)
    over_cache = many(new) * s.K_c + (1 - many(new)) * (2 - s.K_c)
    return new + s.K_c - 1 + Cached(past) * over_cache


def conv_flops(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr) -> sp.Expr:
    channels = conv_channels(block.mixer)
    if channels == 0:
        return sp.Integer(0)
    return sp.expand(s.L * channels * matmul(conv_outputs(convention, past, new), s.K_c, 1))


def scan_io(mixer: str) -> sp.Expr:
    """Elements the scan reads and writes per token: its inputs (after the convolution) and
    its output."""
    return {"gdn": 2 * s.h_lk * s.d_lk + 2 * s.h_lv * s.d_lv + 2 * s.h_lv,
            "kda": 2 * s.h_lv * s.d_lk + 2 * s.h_lv * s.d_lv + s.h_lv * s.d_lk + s.h_lv,
            "mamba2": 2 * s.h_m * s.d_m + 2 * s.G * s.N_s + s.h_m,
            "mamba1": 3 * s.d_in + 2 * s.N_s,
            "lightning": 4 * s.d_q}.get(mixer, sp.Integer(0))


def state_size(block: Block) -> sp.Expr:
    """Elements of the recurrent state one sequence keeps per layer."""
    return {"gdn": s.h_lv * s.d_lk * s.d_lv, "kda": s.h_lv * s.d_lk * s.d_lv,
            "mamba2": s.h_m * s.d_m * s.N_s, "mamba1": s.d_in * s.N_s,
            "lightning": s.d_q * s.d_h}.get(block.mixer, sp.Integer(0))


def conv_state_size(convention: Convention, block: Block) -> sp.Expr:
    """Elements of the convolution window one sequence keeps per layer: the K_c - 1 last
    positions a next token needs (recurrent), or the K_c transformers keeps (chunked)."""
    keep = s.K_c - 1 if SCAN[Convention(convention).value] == "recurrent" else s.K_c
    return sp.expand(conv_channels(block.mixer) * keep)
