"""A Llama-style decoder, read top-down: config, KV cache, attention, feed-forwards, layer, model.

One file, as gpt-fast's model.py is, so the decoder reads in one pass; it is longer (~500 lines)
because it holds every block kind costcalc models -- GQA (gated or not), sliding windows, chunked
attention, MLA in three forms, with or without a lightning indexer (DeepSeek Sparse Attention); SwiGLU, the non-gated MLP, MoE with shared experts -- each a short
class. The linear-attention and state-space mixers, each in a recurrent and a chunked form, are
in ``verify/mixers.py``; a layer runs one in attention's place or beside it.

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

from costcalc.blocks import Block
from costcalc.blocks import parse as parse_block

from . import mixers
from .mixers import STATE_DTYPES, MixerCache


@dataclass(frozen=True)
class LayerConfig:
    """One layer: its block kind (``costcalc.blocks``) and the sizes that kind uses."""
    block: Block
    h_q: int = 0
    h_kv: int = 0
    d_h: int = 0
    W: Optional[int] = None          # sliding window (keys a query reads at most)
    W_c: Optional[int] = None        # attention chunk (a query reads its own chunk up to itself)
    m: Optional[int] = None          # dense FFN width (SwiGLU, or the non-gated MLP)
    E: Optional[int] = None          # MoE: experts, experts per token, expert width
    k: Optional[int] = None
    m_e: Optional[int] = None
    E_s: int = 0                     # shared experts and their width
    m_s: Optional[int] = None
    r_q: Optional[int] = None        # MLA ranks and per-head widths
    r_kv: Optional[int] = None
    d_nope: Optional[int] = None
    d_rope: Optional[int] = None
    d_v: Optional[int] = None
    h_lk: Optional[int] = None       # linear attention (gdn, kda): key and value heads and widths
    h_lv: Optional[int] = None
    d_lk: Optional[int] = None
    d_lv: Optional[int] = None
    h_m: Optional[int] = None        # Mamba-2: heads, head width, groups; state per channel (Mamba-1 too)
    d_m: Optional[int] = None
    G: Optional[int] = None
    N_s: Optional[int] = None
    d_in: Optional[int] = None       # Mamba-1: inner width, dt rank
    r_dt: Optional[int] = None
    K_c: Optional[int] = None        # the mixers' convolution kernel and scan chunk
    Q_c: Optional[int] = None
    h_I: Optional[int] = None        # sparse MLA: the lightning indexer's heads, head width, keys selected
    d_I: Optional[int] = None
    k_I: Optional[int] = None

    @property
    def mla(self) -> bool:
        return self.block.attention == "mla"

    @property
    def moe(self) -> bool:
        return self.block.ffn == "moe"


@dataclass(frozen=True)
class DecoderConfig:
    d: int
    V: int
    layers: tuple[LayerConfig, ...]
    positions: str = "rope"          # "rope" or "table" (the seed toy's learned table)
    max_positions: int = 64          # rows of the position table
    norm_scale: bool = True          # RMSNorm with a learned scale (the toy has none)
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    state_dtype: str = ""            # the mixers' recurrent state ("": the model's dtype; fp32, bf16, ...)

    @property
    def L(self) -> int:
        return len(self.layers)

    @classmethod
    def uniform(cls, L: int, d: int, V: int, arch: str = "gqa.dense", **sizes) -> "DecoderConfig":
        model_keys = {k: sizes.pop(k) for k in ("positions", "max_positions", "norm_scale", "norm_eps",
                                                 "rope_theta") if k in sizes}
        layer = LayerConfig(parse_block(arch), **sizes)
        return cls(d=d, V=V, layers=(layer,) * L, **model_keys)

    @classmethod
    def from_spec(cls, spec, **overrides) -> "DecoderConfig":
        """From a costcalc ModelSpec: the very sizes the calculator uses, group after group
        (``L`` keeps that many layers round-robin over the groups, ``V`` a smaller vocabulary)."""
        if overrides:
            spec = spec.with_sizes(**overrides)
        layers = []
        for group in spec.groups:
            sizes = {k: v for k, v in group.sizes.items() if k not in ("d", "V")}
            layers += [LayerConfig(group.block, **sizes)] * group.count
        return cls(d=spec["d"], V=spec["V"], layers=tuple(layers), state_dtype=spec.state_dtype)


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


class Attend(nn.Module):
    """softmax(q k^T) v over the allowed pairs: one SDPA call with an explicit mask. Observers
    (``verify.counting``) attached to this module see the real tensors and mask first.
    q [B, H, Sq, E], k [B, H, Sk, E], v [B, H, Sk, Ev] (Ev may differ: MLA). ``offset``: keys
    a rolling cache has dropped before the first one here (tiles stay aligned at key 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.observers: list = []

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                scale: Optional[float] = None, offset: int = 0) -> torch.Tensor:
        for observe in self.observers:
            observe(q, k, v, mask, offset)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def band(mask: torch.Tensor, past: int, window: Optional[int], chunk: Optional[int] = None) -> torch.Tensor:
    """A causal mask [C, past + C] cut to a sliding window: query at position p reads keys
    p - W + 1 .. p (W keys, itself included); or to an attention chunk: the keys of its own
    chunk of W_c positions (chunks aligned at position 0) up to itself."""
    if chunk is not None:
        C, K = mask.shape[-2:]
        rows = torch.arange(past, past + C, device=mask.device) // chunk      # 1-D: each row's chunk
        cols = torch.arange(K, device=mask.device) // chunk
        return mask & (rows[:, None] == cols[None, :])
    if window is None:
        return mask
    C, K = mask.shape[-2:]
    # Row i is position past + i; key j is too old when j <= past + i - W, i.e. j - i <= past - W.
    too_old = torch.ones(C, K, dtype=torch.bool, device=mask.device).tril(diagonal=past - window)
    return mask & ~too_old


class KVCache(nn.Module):
    """Preallocated tensors for B sequences, one per named stream (K and V; for MLA also the
    latent); ``filled`` tokens are valid and attention reads only those. A sliding-window layer
    keeps its whole cache and masks it, or, with ``keep`` = W - 1 (``--window-cache rolling``,
    Hugging Face's and vLLM's caches), only its last W - 1 tokens once a forward is done."""

    def __init__(self, batch: int, max_len: int, shapes: dict[str, tuple[int, int]], dtype, device,
                 keep: Optional[int] = None) -> None:
        super().__init__()
        self.keep = keep
        for name, (heads, width) in shapes.items():
            self.register_buffer(name, torch.zeros(batch, heads, max_len, width, dtype=dtype, device=device),
                                 persistent=False)
        self.names = tuple(shapes)
        self.filled = dict.fromkeys(shapes, 0)
        self.capacity = max_len

    def append(self, **streams: torch.Tensor) -> dict[str, torch.Tensor]:
        """Append each stream [B, H, C, D] after its filled tokens; return the filled prefixes.
        A rolling cache returns what it held plus the new tokens, then keeps the last ``keep``."""
        out = {}
        for name, x in streams.items():
            start = self.filled[name]
            end = start + x.shape[2]
            if end > self.capacity:
                raise ValueError(f"KV cache holds {self.capacity} tokens, asked for {end}")
            buf = getattr(self, name)
            buf[:, :, start:end] = x
            self.filled[name] = end
            out[name] = buf[:, :, :end]
            if self.keep is not None and end > self.keep:        # copies only: nothing counted
                out[name] = out[name].clone()
                buf[:, :, :self.keep] = buf[:, :, end - self.keep:end].clone()
                self.filled[name] = self.keep
        return out

    @property
    def length(self) -> int:
        return max(self.filled.values())


class Attention(nn.Module):
    """GQA, with a sliding window or an attention chunk where the layer has one; gated
    (Qwen3-Next): ``q_proj`` also gives each head a gate, the output times its sigmoid; head-gated
    (Step-3.7): ``g_proj`` gives one gate per head; ``dv`` (MiMo-V2-Flash): values of d_v per head;
    ``k_eq_v`` (Gemma 4's full layers): no ``v_proj``, the key projection's output (before RoPE) is the values."""

    def __init__(self, c: DecoderConfig, lc: LayerConfig) -> None:
        super().__init__()
        self.c, self.lc = c, lc
        self.gated = lc.block.gated
        self.q_proj = nn.Linear(c.d, (2 if self.gated else 1) * lc.h_q * lc.d_h, bias=False)
        self.k_proj = nn.Linear(c.d, lc.h_kv * lc.d_h, bias=False)
        self.d_v = lc.d_v if lc.block.dv else lc.d_h
        self.v_proj = None if lc.block.k_eq_v else nn.Linear(c.d, lc.h_kv * self.d_v, bias=False)
        self.o_proj = nn.Linear(lc.h_q * self.d_v, c.d, bias=False)
        if lc.block.head_gate:
            self.g_proj = nn.Linear(c.d, lc.h_q, bias=False)
        self.attend = Attend()

    def cache_shapes(self) -> dict[str, tuple[int, int]]:
        return {"k": (self.lc.h_kv, self.lc.d_h), "v": (self.lc.h_kv, self.d_v)}

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask, cache: Optional[KVCache],
                form: str = "naive") -> torch.Tensor:
        B, C, _ = x.shape
        c, lc = self.c, self.lc
        q = self.q_proj(x).view(B, C, lc.h_q, -1).transpose(1, 2)         # [B, H_q, C, D] (gated: 2D)
        if self.gated:
            q, gate = q.chunk(2, dim=-1)
        k = self.k_proj(x).view(B, C, lc.h_kv, lc.d_h).transpose(1, 2)    # [B, H_kv, C, D]
        v = k if self.v_proj is None else self.v_proj(x).view(B, C, lc.h_kv, self.d_v).transpose(1, 2)
        if c.positions == "rope":
            q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        past = int(positions[0])
        if cache is not None:
            got = cache.append(k=k, v=v)                                   # [B, H_kv, T + C, D]
            k, v = got["k"], got["v"]
        kept = k.shape[2] - C                                              # a rolling cache holds fewer than past
        if kept < past and not isinstance(mask, Packed):
            mask = mask[..., past - kept:]                                 # the keys it still holds
        group = lc.h_q // lc.h_kv                                          # GQA: query head h reads KV head h // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = run_attention(self.attend, q, k, v, mask, min(past, kept), lc.W, offset=max(0, past - kept),
                          chunk=lc.W_c)                            # a chunked layer keeps its whole cache
        if self.gated:
            y = y * torch.sigmoid(gate)
        if lc.block.head_gate:                                             # [B, H_q, C, 1]: one gate per head
            y = y * torch.sigmoid(self.g_proj(x)).transpose(1, 2).unsqueeze(-1)
        return self.o_proj(y.transpose(1, 2).reshape(B, C, lc.h_q * self.d_v))


def run_attention(attend: Attend, q, k, v, mask, past: int, window: Optional[int], scale: Optional[float] = None,
                  offset: int = 0, chunk: Optional[int] = None):
    if isinstance(mask, Packed):   # varlen: one attention call per sequence, as varlen kernels do
        ys, start = [], 0
        for i, n in enumerate(mask.lengths):
            part = slice(start, start + n)
            own = mask.masks[i] if mask.masks else band(causal_mask(n, device=q.device), 0, window, chunk)
            ys.append(attend(q[:, :, part], k[:, :, part], v[:, :, part], own, scale))
            start += n
        return torch.cat(ys, dim=2)
    return attend(q, k, v, band(mask, past, window, chunk), scale, offset)  # [B, H_q, C, Dv]


class Absorb(nn.Module):
    """A per-head product with a slice of a weight another module owns (MLA's absorbed form):
    its own module so the FLOP counter can name it."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, weight)                                       # [B, H, C, a] x [H, a, b]


class IndexScore(nn.Module):
    """The lightning indexer's scores of every key for every query: per head q . k, ReLU, then the
    heads weighted and summed -- two matmuls over the whole rectangle, as transformers runs them.
    Observers (``verify.counting``) see the tensors and the legal pairs first.
    q [B, C, H_I, D_I], k [B, K, D_I], w [B, C, H_I], allowed [C, K] -> [B, C, K]."""

    def __init__(self) -> None:
        super().__init__()
        self.observers: list = []

    def forward(self, q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        for observe in self.observers:
            observe(q, k, allowed)
        scores = F.relu(torch.matmul(q.transpose(1, 2), k[:, None].transpose(-1, -2)))   # [B, H_I, C, K]
        return torch.matmul(scores.permute(0, 2, 3, 1), w[..., None])[..., 0]           # [B, C, K]


class Indexer(nn.Module):
    """DeepSeek Sparse Attention's lightning indexer (transformers' ``DeepseekV32Indexer``): the
    index query from the MLA query latent (``wq_b``; from x without a query LoRA), one index key
    per token (``wk``, then a LayerNorm), a weight per head (``weights_proj``); RoPE on the first
    d_rope channels of both. It scores the keys, caches its index keys, and returns which keys
    each query's attention reads: its top ``k_I`` of the legal ones (all of them below k_I)."""

    def __init__(self, c: DecoderConfig, lc: LayerConfig) -> None:
        super().__init__()
        self.c, self.lc = c, lc
        self.wq_b = nn.Linear(lc.r_q if lc.block.q_lora else c.d, lc.h_I * lc.d_I, bias=False)
        self.wk = nn.Linear(c.d, lc.d_I, bias=False)
        self.k_norm = nn.LayerNorm(lc.d_I, eps=1e-6)
        self.weights_proj = nn.Linear(c.d, lc.h_I, bias=False)
        self.score = IndexScore()

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rot = self.lc.d_rope
        return torch.cat([rope(x[..., :rot], positions, self.c.rope_theta), x[..., rot:]], dim=-1)

    def forward(self, x: torch.Tensor, q_in: torch.Tensor, positions: torch.Tensor, mask,
                cache: Optional[KVCache]):
        B, C, _ = x.shape
        lc = self.lc
        q = self.wq_b(q_in).view(B, C, lc.h_I, lc.d_I).transpose(1, 2)      # [B, H_I, C, D_I]
        q = self._rope(q, positions).transpose(1, 2)                         # [B, C, H_I, D_I]
        k = self._rope(self.k_norm(self.wk(x))[:, None], positions)          # [B, 1, C, D_I]
        if cache is not None:
            k = cache.append(index=k)["index"]                               # [B, 1, T + C, D_I]
        k, w = k[:, 0], self.weights_proj(x)                                 # [B, K, D_I], [B, C, H_I]
        if isinstance(mask, Packed):   # each sequence scores and selects among its own keys
            masks, start = [], 0
            for n in mask.lengths:
                part = slice(start, start + n)
                masks.append(self.select(q[:, part], k[:, part], w[:, part], causal_mask(n, device=x.device)))
                start += n
            return Packed(mask.lengths, tuple(masks))
        return self.select(q, k, w, mask)

    def select(self, q, k, w, allowed: torch.Tensor) -> torch.Tensor:
        """The keys each query reads, [B, 1, C, K]: the top k_I by score among the allowed ones, ties
        to the earlier key (a stable sort: ReLU makes exact ties, and a cached step must choose as the
        whole forward does; ``topk`` breaks them as it likes)."""
        scores = self.score(q, k, w, allowed).masked_fill(~allowed, float("-inf"))
        top = scores.sort(dim=-1, descending=True, stable=True).indices[..., :self.lc.k_I]
        chosen = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True)
        return (chosen & allowed)[:, None]


class MLAttention(nn.Module):
    """DeepSeek's multi-head latent attention, naive, absorbed or expanded.

    Naive: Q (direct or LoRA), the latent c = kv_a(x) with the shared RoPE key, K_nope and V
    up-projected from the latent for the new tokens, cached decompressed; scores over
    d_nope + d_rope, values d_v. Absorbed: the query taken into the latent per head
    (W_UK), scores over the cached latent and RoPE key, values in the latent, brought back to
    d_v per head (W_UV). Expanded (what Hugging Face transformers runs): only the latent is
    cached, and kv_b_proj up-projects every cached latent again at each forward. All scale
    scores by 1/sqrt(d_nope + d_rope): the same function."""

    def __init__(self, c: DecoderConfig, lc: LayerConfig) -> None:
        super().__init__()
        self.c, self.lc = c, lc
        qk = lc.d_nope + lc.d_rope
        if lc.block.q_lora:
            self.q_a_proj = nn.Linear(c.d, lc.r_q, bias=False)
            self.q_a_norm = RMSNorm(lc.r_q, c.norm_eps, c.norm_scale)
            self.q_b_proj = nn.Linear(lc.r_q, lc.h_q * qk, bias=False)
        else:
            self.q_proj = nn.Linear(c.d, lc.h_q * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.d, lc.r_kv + lc.d_rope, bias=False)
        self.kv_a_norm = RMSNorm(lc.r_kv, c.norm_eps, c.norm_scale)
        self.kv_b_proj = nn.Linear(lc.r_kv, lc.h_q * (lc.d_nope + lc.d_v), bias=False)
        self.o_proj = nn.Linear(lc.h_q * lc.d_v, c.d, bias=False)
        self.q_absorb = Absorb()
        self.v_absorb = Absorb()
        self.attend = Attend()
        self.scale = qk ** -0.5
        self.indexer = Indexer(c, lc) if lc.block.sparse else None

    def cache_shapes(self) -> dict[str, tuple[int, int]]:
        lc = self.lc
        index = {"index": (1, lc.d_I)} if lc.block.sparse else {}
        return {"k": (lc.h_q, lc.d_nope + lc.d_rope), "v": (lc.h_q, lc.d_v), "latent": (1, lc.r_kv + lc.d_rope),
                **index}

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask, cache: Optional[KVCache],
                form: str = "naive") -> torch.Tensor:
        B, C, _ = x.shape
        c, lc = self.c, self.lc
        q_lat = self.q_a_norm(self.q_a_proj(x)) if lc.block.q_lora else x   # the query latent (or x)
        q_in = self.q_b_proj(q_lat) if lc.block.q_lora else self.q_proj(x)
        q = q_in.view(B, C, lc.h_q, lc.d_nope + lc.d_rope).transpose(1, 2)
        q_nope, q_rope = q.split([lc.d_nope, lc.d_rope], dim=-1)
        c_kv, k_rope = self.kv_a_proj_with_mqa(x).split([lc.r_kv, lc.d_rope], dim=-1)
        c_kv = self.kv_a_norm(c_kv)[:, None]                                # [B, 1, C, r_kv]
        k_rope = k_rope[:, None]                                            # [B, 1, C, d_rope]
        q_rope, k_rope = rope(q_rope, positions, c.rope_theta), rope(k_rope, positions, c.rope_theta)
        latent = torch.cat([c_kv, k_rope], dim=-1)                          # [B, 1, C, r_kv + d_rope]
        past = int(positions[0])
        if self.indexer is not None:   # the keys each query reads: the indexer's top-k of the legal ones
            mask = self.indexer(x, q_lat, positions, mask, cache)
        w_b = self.kv_b_proj.weight.detach().view(lc.h_q, lc.d_nope + lc.d_v, lc.r_kv)   # a module input: no grad
        if form == "naive":
            kv = self.kv_b_proj(c_kv[:, 0]).view(B, C, lc.h_q, lc.d_nope + lc.d_v).transpose(1, 2)
            k_nope, v = kv.split([lc.d_nope, lc.d_v], dim=-1)
            k = torch.cat([k_nope, k_rope.expand(B, lc.h_q, C, lc.d_rope)], dim=-1)
            if cache is not None:
                if cache.filled["k"] != cache.filled["latent"]:
                    raise ValueError("a naive MLA step after absorbed ones: the decompressed cache is incomplete")
                got = cache.append(k=k, v=v, latent=latent)
                k, v = got["k"], got["v"]
            y = run_attention(self.attend, torch.cat([q_nope, q_rope], dim=-1), k, v, mask, past, None, self.scale)
        elif form == "expanded":
            if cache is not None:
                latent = cache.append(latent=latent)["latent"]                # [B, 1, T + C, r_kv + d_rope]
            keys = latent.shape[2]
            c_all, k_rope_all = latent[:, 0].split([lc.r_kv, lc.d_rope], dim=-1)
            kv = self.kv_b_proj(c_all).view(B, keys, lc.h_q, lc.d_nope + lc.d_v).transpose(1, 2)
            k_nope, v = kv.split([lc.d_nope, lc.d_v], dim=-1)               # every cached latent, again
            k = torch.cat([k_nope, k_rope_all[:, None].expand(B, lc.h_q, keys, lc.d_rope)], dim=-1)
            y = run_attention(self.attend, torch.cat([q_nope, q_rope], dim=-1), k, v, mask, past, None, self.scale)
        else:
            if cache is not None:
                latent = cache.append(latent=latent)["latent"]
            q_lat = self.q_absorb(q_nope, w_b[:, :lc.d_nope, :])            # [B, H, C, r_kv]
            keys = latent.expand(B, lc.h_q, latent.shape[2], lc.r_kv + lc.d_rope)
            values = keys[..., :lc.r_kv]
            y_lat = run_attention(self.attend, torch.cat([q_lat, q_rope], dim=-1), keys, values, mask, past, None,
                                  self.scale)
            y = self.v_absorb(y_lat, w_b[:, lc.d_nope:, :].transpose(1, 2))  # [B, H, C, d_v]
        return self.o_proj(y.transpose(1, 2).reshape(B, C, lc.h_q * lc.d_v))


@dataclass(frozen=True)
class Packed:
    """Sequences of these lengths packed into one row, each attending causally to itself only
    (``masks``: each sequence's own mask where a sparse layer's indexer has cut it to its top-k)."""
    lengths: tuple[int, ...]
    masks: tuple = ()


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, width: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, width, bias=False)
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MLP(nn.Module):
    """The non-gated MLP (GPT-NeoX, StarCoder2, Apertus): down(gelu(up(x)))."""

    def __init__(self, d: int, width: int) -> None:
        super().__init__()
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.up_proj(x)))


class MoEFeedForward(nn.Module):
    """Router, top-k, each expert run on exactly the tokens routed to it; shared experts run
    on every token (with a sigmoid gate where the layer has one: Qwen2-MoE). Experts are
    SwiGLU, or non-gated MLPs where the block says ``plain`` (Nemotron-H)."""

    def __init__(self, c: DecoderConfig, lc: LayerConfig) -> None:
        super().__init__()
        self.k = lc.k
        self.router = nn.Linear(c.d, lc.E, bias=False)
        expert = MLP if lc.block.plain else FeedForward
        self.experts = nn.ModuleList(expert(c.d, lc.m_e) for _ in range(lc.E))
        self.shared_experts = nn.ModuleList(expert(c.d, lc.m_s) for _ in range(lc.E_s))
        self.shared_expert_gate = nn.Linear(c.d, 1, bias=False) if lc.block.shared_gate else None
        self.balanced = 0                # g > 0: ``balanced_route`` over g groups, not the top-k (verify.parallel)

    def route(self, x_TD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [T, k], experts [T, k]): the router's top-k, or with ``balanced`` the fixed
        balanced assignment over that many expert groups, weighted by the router's scores of those experts."""
        scores_TE = self.router(x_TD.unsqueeze(0)).squeeze(0).softmax(-1)
        if not self.balanced:
            return scores_TE.topk(self.k, dim=-1)
        experts_TK = balanced_route(x_TD.shape[0], self.k, scores_TE.shape[-1], self.balanced, x_TD.device)
        return scores_TE.gather(-1, experts_TK), experts_TK

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, d = x.shape
        x_TD = x.reshape(B * S, d)
        weights_TK, experts_TK = self.route(x_TD)
        weights_TK = weights_TK / weights_TK.sum(-1, keepdim=True)
        out_TD = torch.zeros_like(x_TD)
        for e, expert in enumerate(self.experts):
            token, slot = (experts_TK == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            y = expert(x_TD[token].unsqueeze(0)).squeeze(0)               # [tokens_e, d]
            # index_put_ accumulating, not index_add_ (the same sums; index_add_ takes ~50 ms a call on CPU)
            out_TD.index_put_((token,), y * weights_TK[token, slot, None], accumulate=True)
        out = out_TD.view(B, S, d)
        if len(self.shared_experts):
            shared = sum(expert(x) for expert in self.shared_experts)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(x)) * shared
            out = out + shared
        return out


def balanced_route(tokens: int, k: int, experts: int, groups: int = 1, device=None) -> torch.Tensor:
    """A fixed, balanced routing [tokens, k] over ``groups`` equal groups of consecutive experts (the
    ranks of an expert-parallel layout): pair p = t k + j (token t's j-th choice) goes to group
    p mod g, to its expert (p // g) mod (E / g). The T k pairs cycle over the groups first, so each
    group gets T k / g of them where g divides T k (the expected n k / ep pairs a rank are then
    exact), and a token's k experts are distinct (k <= E)."""
    pair = torch.arange(tokens, device=device)[:, None] * k + torch.arange(k, device=device)[None, :]
    per = experts // groups
    return (pair % groups) * per + (pair // groups) % per


class Layer(nn.Module):
    """One decoder layer: a token mixer and a feed-forward, each after an RMSNorm, each residual.
    The mixer is attention, a linear-attention or state-space ``mixer``, or both side by side
    (their outputs summed: Falcon-H1); either half may be absent (``none``)."""

    def __init__(self, c: DecoderConfig, lc: LayerConfig) -> None:
        super().__init__()
        block = lc.block
        self.attn_norm = RMSNorm(c.d, c.norm_eps, c.norm_scale)
        self.attn = (MLAttention(c, lc) if lc.mla else Attention(c, lc)) if block.attends else None
        state = STATE_DTYPES.get(c.state_dtype)
        self.mixer = mixers.build(block.mixer, c.d, lc, state) if block.mixer else None
        self.ffn_norm = RMSNorm(c.d, c.norm_eps, c.norm_scale) if block.ffn != "none" else None
        self.ffn = (None if block.ffn == "none" else MoEFeedForward(c, lc) if lc.moe else
                    (MLP if block.ffn == "mlp" else FeedForward)(c.d, lc.m))

    def forward(self, x, positions, mask, cache: Optional["LayerCache"], form="naive", scan="chunked"):
        if self.attn is not None or self.mixer is not None:
            h = self.attn_norm(x)
            if self.attn is not None:
                x = x + self.attn(h, positions, mask, cache.kv if cache else None, form)
            if self.mixer is not None:
                x = x + self.mixer(h, positions, mask, cache.mixer if cache else None, scan)
        return x if self.ffn is None else x + self.ffn(self.ffn_norm(x))


@dataclass
class LayerCache:
    """What one layer keeps per sequence: a KV cache (attention) and a mixer's state."""
    kv: Optional[KVCache] = None
    mixer: Optional[MixerCache] = None


class Decoder(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.V, c.d)
        self.position = nn.Embedding(c.max_positions, c.d) if c.positions == "table" else None
        self.layers = nn.ModuleList(Layer(c, lc) for lc in c.layers)
        self.norm = RMSNorm(c.d, c.norm_eps, c.norm_scale)
        self.lm_head = nn.Linear(c.d, c.V, bias=False)

    def new_cache(self, batch: int, max_len: int, window_cache: str = "whole") -> list[LayerCache]:
        """A cache per layer; ``window_cache`` ``rolling``: a window layer keeps its last W - 1 tokens."""
        p = self.lm_head.weight
        return [LayerCache(KVCache(batch, max_len, layer.attn.cache_shapes(), p.dtype, p.device,
                                   lc.W - 1 if window_cache == "rolling" and lc.W is not None else None)
                           if layer.attn is not None else None,
                           MixerCache() if layer.mixer is not None else None)
                for layer, lc in zip(self.layers, self.c.layers)]

    def forward(self, tokens: torch.Tensor, mask, past: int = 0,
                cache: Optional[list[LayerCache]] = None, logits: str = "last",
                rows: Optional[tuple[torch.Tensor, torch.Tensor]] = None, form: str = "naive",
                scan: str = "chunked") -> Optional[torch.Tensor]:
        """tokens [B, C] after ``past`` cached ones; ``mask`` [C, past + C] (True = may attend)
        or ``Packed(lengths)``; sliding-window and chunked layers cut it to their window or chunk.

        ``logits``: ``last`` -- the LM head on the positions ``rows`` = (batch index, position)
        (default: each sequence's last position), giving [R, V]; ``all`` -- every position,
        [B, C, V]; ``none`` -- no LM head (a chunk that is not the prompt's last).
        ``form``: the MLA form (``naive``, ``absorbed`` or ``expanded``) for MLA layers;
        ``scan``: the mixers' form (``chunked`` or ``recurrent``: ``verify.mixers``).
        """
        B, C = tokens.shape
        positions = torch.arange(past, past + C, device=tokens.device)
        x = self.embed(tokens)
        if self.position is not None:
            x = x + self.position(positions)[None]
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, mask, cache[i] if cache is not None else None, form, scan)
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
