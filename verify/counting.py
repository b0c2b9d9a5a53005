"""Counting what the decoder executes, term by term, under three attention conventions.

``torch.utils.flop_counter.FlopCounterMode`` counts every ``mm`` from shapes. Its gaps
(see shared/docs/torch-counting.md) are closed here:

- the SDPA ops (on CPU ``_scaled_dot_product_flash_attention_for_cpu`` counts 0 in the stock
  registry) get a *raw* formula that sees the real tensors, reads the attention mask and
  records three counts per call: ``full`` (the Sq x Sk rectangle, torch's own convention),
  ``causal`` (the allowed pairs in the mask) and ``tiled`` (the area of the b_q x b_k blocks
  holding at least one allowed pair, edge-aware, tiles aligned at key 0).
- linear terms come from the counter's per-module keys: each ``nn.Linear`` of the model
  is charged to its breakdown term by its name; the sum of terms must equal the Global total.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

CONVENTIONS = ("causal", "full", "tiled")
aten = torch.ops.aten
_SDPA_NAMES = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
               "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention")
SDPA_OPS = [getattr(aten, n) for n in _SDPA_NAMES if hasattr(aten, n)]


def term_of(name: str) -> str:
    """Breakdown term of a linear module, from its name in the Decoder."""
    if name == "lm_head":
        return "lm_head"
    if ".attn." in name:
        return "attn_proj"
    if name.endswith(".ffn.router"):
        return "router"
    if ".ffn.experts." in name:
        return "experts"
    if ".ffn." in name:
        return "ffn"
    raise ValueError(f"no breakdown term for linear module {name!r}")


def allowed_pairs(mask: torch.Tensor | None, sq: int, sk: int) -> torch.Tensor:
    """Boolean [.., Sq, Sk] of the pairs a query may attend (bool mask, or additive -inf bias)."""
    if mask is None:
        return torch.ones(sq, sk, dtype=torch.bool)
    return mask if mask.dtype == torch.bool else torch.isfinite(mask) & (mask > torch.finfo(mask.dtype).min)


def tiled_area(allowed: torch.Tensor, b_q: int, b_k: int) -> int:
    """Sum over (b_q x b_k) tiles holding any allowed pair of the tile's real area; last tiles may be short."""
    *lead, sq, sk = allowed.shape
    nq, nk = -(-sq // b_q), -(-sk // b_k)
    padded = torch.zeros(*lead, nq * b_q, nk * b_k, dtype=torch.bool, device=allowed.device)
    padded[..., :sq, :sk] = allowed
    occupied = padded.view(*lead, nq, b_q, nk, b_k).any(dim=-1).any(dim=-2)   # [.., nq, nk]
    rows = torch.full((nq,), b_q, device=allowed.device)
    rows[-1] = sq - (nq - 1) * b_q
    cols = torch.full((nk,), b_k, device=allowed.device)
    cols[-1] = sk - (nk - 1) * b_k
    return int((occupied * (rows[:, None] * cols[None, :])).sum())


@dataclass
class AttentionRecorder:
    """Collects the three conventions' counts of every SDPA call made under the counter."""
    tile: tuple[int, int]
    flops: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONVENTIONS, 0))
    calls: int = 0

    def formula(self):
        def sdpa_raw(query, key, *args, out_val=None, **kwargs):
            mask = kwargs.get("attn_mask")
            if mask is None and len(args) >= 2 and isinstance(args[1], torch.Tensor):
                mask = args[1]  # efficient / cudnn: (query, key, value, attn_bias, ...)
            b, h, sq, dh = query.shape
            sk = key.shape[-2]
            allowed = allowed_pairs(mask, sq, sk)
            allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
            copies = (b // allowed.shape[0]) * (h // allowed.shape[1])   # broadcast over batch, heads
            per_pair = 4 * dh                                             # QK^T and AV
            self.flops["full"] += per_pair * b * h * sq * sk
            self.flops["causal"] += per_pair * copies * int(allowed.sum())
            self.flops["tiled"] += per_pair * copies * tiled_area(allowed, *self.tile)
            self.calls += 1
            return per_pair * b * h * sq * sk   # the counter keeps torch's own (full) convention
        sdpa_raw._get_raw = True
        return sdpa_raw


@dataclass
class Counted:
    """Executed FLOPs per term; ``attention`` per convention."""
    linear_terms: dict[str, int]
    attention: dict[str, int]
    total_counter: int      # the counter's Global total (attention at full)

    def term(self, name: str, convention: str) -> int:
        if name == "attention":
            return self.attention[convention]
        if name == "linear":
            return sum(v for k, v in self.linear_terms.items() if k != "lm_head")
        if name == "total":
            return sum(self.linear_terms.values()) + self.attention[convention]
        return self.linear_terms.get(name, 0)


class Counter:
    """``with Counter(model, tile) as c: model(...)``; then ``c.result()``."""

    def __init__(self, model: nn.Module, tile: tuple[int, int] = (128, 128)) -> None:
        self.model = model
        self.recorder = AttentionRecorder(tile)
        formula = self.recorder.formula()
        self.mode = FlopCounterMode(display=False, custom_mapping={op: formula for op in SDPA_OPS})
        root = type(model).__name__
        self.keys = {f"{root}.{name}": term_of(name)
                     for name, mod in model.named_modules() if isinstance(mod, nn.Linear)}

    def __enter__(self) -> "Counter":
        self.mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.mode.__exit__(*exc)

    def result(self) -> Counted:
        counts = self.mode.get_flop_counts()
        terms: dict[str, int] = defaultdict(int)
        for key, term in self.keys.items():
            terms[term] += sum(counts.get(key, {}).values())
        total = self.mode.get_total_flops()
        accounted = sum(terms.values()) + self.recorder.flops["full"]
        if accounted != total:
            raise AssertionError(f"counter total {total} != terms {accounted}: an op was not attributed")
        return Counted(dict(terms), dict(self.recorder.flops), total)
