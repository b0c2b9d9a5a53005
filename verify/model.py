"""A Llama-style decoder, read top-down: config, KV cache, attention, feed-forwards, block, model.

Every matmul is an ``nn.Linear`` entered through ``__call__`` (so the FLOP counter can name
it) or one ``scaled_dot_product_attention`` call with an explicit boolean mask (so the
counter can read which query-key pairs are legal). Inputs stay 3-D ``[B, S, d]`` so the
projections run as ``mm`` even for one decode token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DecoderConfig:
    L: int
    d: int
    h_q: int
    h_kv: int
    d_h: int
    V: int
    m: Optional[int] = None          # dense SwiGLU width
    E: Optional[int] = None          # MoE: experts, experts per token, expert width
    k: Optional[int] = None
    m_e: Optional[int] = None
    positions: str = "rope"          # "rope" or "table" (the seed toy's learned table)
    max_positions: int = 64          # rows of the position table
    norm_scale: bool = True          # RMSNorm with a learned scale (the toy has none)
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def moe(self) -> bool:
        return self.E is not None

    @classmethod
    def from_spec(cls, spec, **overrides) -> "DecoderConfig":
        """From a costcalc ModelSpec: the very sizes the calculator uses."""
        return cls(**{**spec.sizes, **overrides})


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, scale: bool) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * self.weight if self.weight is not None else y


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate pairs of x [B, H, S, D] by position (elementwise: no matmul)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float64) / half)
    angles = (positions.to(torch.float64)[:, None] * freqs[None, :]).to(x.dtype)  # [S, D/2]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class KVCache(nn.Module):
    """Preallocated K/V for B sequences; ``filled`` tokens are valid and attention reads only those."""

    def __init__(self, batch: int, max_len: int, h_kv: int, d_h: int, dtype, device) -> None:
        super().__init__()
        shape = (batch, h_kv, max_len, d_h)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.filled = 0

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, H_kv, C, D]; return the filled prefix [B, H_kv, T + C, D]."""
        start, end = self.filled, self.filled + k.shape[2]
        if end > self.k.shape[2]:
            raise ValueError(f"KV cache holds {self.k.shape[2]} tokens, asked for {end}")
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        self.filled = end
        return self.k[:, :, :end], self.v[:, :, :end]


class Attention(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.d, c.h_q * c.d_h, bias=False)
        self.k_proj = nn.Linear(c.d, c.h_kv * c.d_h, bias=False)
        self.v_proj = nn.Linear(c.d, c.h_kv * c.d_h, bias=False)
        self.o_proj = nn.Linear(c.h_q * c.d_h, c.d, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: Optional[KVCache]) -> torch.Tensor:
        B, C, _ = x.shape
        c = self.c
        q = self.q_proj(x).view(B, C, c.h_q, c.d_h).transpose(1, 2)     # [B, H_q, C, D]
        k = self.k_proj(x).view(B, C, c.h_kv, c.d_h).transpose(1, 2)    # [B, H_kv, C, D]
        v = self.v_proj(x).view(B, C, c.h_kv, c.d_h).transpose(1, 2)
        if c.positions == "rope":
            q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        if cache is not None:
            k, v = cache.update(k, v)                                    # [B, H_kv, T + C, D]
        group = c.h_q // c.h_kv                                           # GQA: query head h reads KV head h // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if isinstance(mask, Packed):   # varlen: one attention call per sequence, as varlen kernels do
            ys, start = [], 0
            for n in mask.lengths:
                part = slice(start, start + n)
                ys.append(F.scaled_dot_product_attention(q[:, :, part], k[:, :, part], v[:, :, part],
                                                         attn_mask=causal_mask(n, device=x.device)))
                start += n
            y = torch.cat(ys, dim=2)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H_q, C, D]
        return self.o_proj(y.transpose(1, 2).reshape(B, C, c.h_q * c.d_h))


@dataclass(frozen=True)
class Packed:
    """Sequences of these lengths packed into one row, each attending causally to itself only."""
    lengths: tuple[int, ...]


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, width: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, width, bias=False)
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEFeedForward(nn.Module):
    """Router, top-k, and each expert run on exactly the tokens routed to it."""

    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.k = c.k
        self.router = nn.Linear(c.d, c.E, bias=False)
        self.experts = nn.ModuleList(FeedForward(c.d, c.m_e) for _ in range(c.E))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, d = x.shape
        x_TD = x.reshape(B * S, d)
        scores_TE = self.router(x_TD.unsqueeze(0)).squeeze(0).softmax(-1)
        weights_TK, experts_TK = scores_TE.topk(self.k, dim=-1)
        weights_TK = weights_TK / weights_TK.sum(-1, keepdim=True)
        out_TD = torch.zeros_like(x_TD)
        for e, expert in enumerate(self.experts):
            token, slot = (experts_TK == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            y = expert(x_TD[token].unsqueeze(0)).squeeze(0)               # [tokens_e, d]
            out_TD.index_add_(0, token, y * weights_TK[token, slot, None])
        return out_TD.view(B, S, d)


class Block(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(c.d, c.norm_eps, c.norm_scale)
        self.attn = Attention(c)
        self.ffn_norm = RMSNorm(c.d, c.norm_eps, c.norm_scale)
        self.ffn = MoEFeedForward(c) if c.moe else FeedForward(c.d, c.m)

    def forward(self, x, positions, mask, cache):
        x = x + self.attn(self.attn_norm(x), positions, mask, cache)
        return x + self.ffn(self.ffn_norm(x))


class Decoder(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.V, c.d)
        self.position = nn.Embedding(c.max_positions, c.d) if c.positions == "table" else None
        self.layers = nn.ModuleList(Block(c) for _ in range(c.L))
        self.norm = RMSNorm(c.d, c.norm_eps, c.norm_scale)
        self.lm_head = nn.Linear(c.d, c.V, bias=False)

    def new_cache(self, batch: int, max_len: int) -> list[KVCache]:
        p = self.lm_head.weight
        return [KVCache(batch, max_len, self.c.h_kv, self.c.d_h, p.dtype, p.device) for _ in self.layers]

    def forward(self, tokens: torch.Tensor, mask, past: int = 0,
                cache: Optional[list[KVCache]] = None, logits: str = "last",
                rows: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> Optional[torch.Tensor]:
        """tokens [B, C] after ``past`` cached ones; ``mask`` [C, past + C] (True = may attend)
        or ``Packed(lengths)``.

        ``logits``: ``last`` -- the LM head on the positions ``rows`` = (batch index, position)
        (default: each sequence's last position), giving [R, V]; ``all`` -- every position,
        [B, C, V]; ``none`` -- no LM head (a chunk that is not the prompt's last).
        """
        B, C = tokens.shape
        positions = torch.arange(past, past + C, device=tokens.device)
        x = self.embed(tokens)
        if self.position is not None:
            x = x + self.position(positions)[None]
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, mask, cache[i] if cache is not None else None)
        if logits == "none":
            return None
        x = self.norm(x)
        if logits == "all":
            return self.lm_head(x)
        if rows is None:
            rows = (torch.arange(B, device=x.device), torch.full((B,), C - 1, device=x.device))
        return self.lm_head(x[rows][None])[0]                               # [R, V]


def causal_mask(new: int, past: int = 0, device=None) -> torch.Tensor:
    """[new, past + new]: new query q (0-based) may read keys 0 .. past + q (bottom-right aligned)."""
    return torch.ones(new, past + new, dtype=torch.bool, device=device).tril(diagonal=past)
