"""Mamba-1 and short-convolution families: a state-keeping mixer in the attention's slot.

- mamba, falcon_mamba: every layer one Mamba-1 mixer and no FFN (``mamba1.none``). The inner
  width d_in is ``intermediate_size`` where the config states it (Falcon-Mamba-7B's file says
  ``expand`` 16 but ``intermediate_size`` 8192: 8192 is what transformers 5.23 builds), else
  ``int(expand * hidden_size)``; the dt rank ``time_step_rank`` (``"auto"``: ceil(d / 16)).
- jamba: layer i attends (GQA, no RoPE) iff ``i % attn_layer_period == attn_layer_offset``, else
  runs Mamba-1 (d_in = ``mamba_expand * hidden_size``); its FFN is MoE iff
  ``i % expert_layer_period == expert_layer_offset`` and ``num_experts`` > 1, else a SwiGLU; both
  ``intermediate_size`` wide.
- lfm2: ``layer_types`` (else from ``full_attn_idxs``; neither: every layer attends) picks a gated
  short convolution (``shortconv``, kernel ``conv_L_cache``) or GQA per layer; every layer a
  SwiGLU whose width ``block_auto_adjust_ff_dim`` adjusts (``Lfm2MLP``).
- lfm2_moe: the same mixers; the first ``num_dense_layers`` layers a SwiGLU of
  ``intermediate_size`` (no adjustment), the rest MoE of ``moe_intermediate_size``.

Mamba-1's recurrent state is float32 in transformers whatever the model's dtype (the scan
promotes it): those families' presets say ``state_dtype`` fp32 (``STATE_DTYPES``).
"""
from __future__ import annotations

import math

from ...errors import quote
from ..reader import FULL, Layer, Reader
from .common import Mapper

CONV = "conv"
STATE_DTYPES = {"mamba": "fp32", "falcon_mamba": "fp32", "jamba": "fp32"}


def _number(r: Reader, key: str, default: float) -> float:
    """A positive number (int or float), the class's default where absent or null."""
    value = r.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise r.error(f"field {quote(key)} must be a positive number, got {quote(value)}")
    return value


def _dt_rank(r: Reader, key: str) -> int:
    """``"auto"`` (the class default): ceil(hidden_size / 16); else a positive integer."""
    if r.get(key, "auto") == "auto":
        return math.ceil(r.need("hidden_size") / 16)
    return r.int(key)


def _mamba1(r: Reader, d_in: int, state: str, conv: str, rank: str) -> dict:
    return {"d_in": d_in, "N_s": r.count(state, 16, minimum=1), "r_dt": _dt_rank(r, rank),
            "K_c": r.count(conv, 4, minimum=1)}


def _mamba(r: Reader) -> list[Layer]:
    """Mamba / Falcon-Mamba: ``MambaMixer`` on every layer (Falcon-Mamba's extra RMSNorms of dt, B
    and C have no weights: no product)."""
    r.same("n_layer", r.layer_count(), "transformers 5.23 reads num_hidden_layers")
    d = r.need("hidden_size")
    d_in = r.int("intermediate_size") if r.has("intermediate_size") else int(_number(r, "expand", 2) * d)
    mixer = _mamba1(r, d_in, "state_size", "conv_kernel", "time_step_rank")
    return [{"arch": "mamba1.none", **mixer} for _ in range(r.layer_count())]


def _placed(r: Reader, period: str, offset: str, defaults: tuple[int, int]) -> list[bool]:
    """Jamba's placements: layer i iff i % period == offset (offset < period, as the class checks)."""
    p, o = r.count(period, defaults[0], minimum=1), r.count(offset, defaults[1])
    if o >= p:
        raise r.error(f"{offset} ({o}) must be smaller than {period} ({p}) (transformers refuses it)")
    return [i % p == o for i in range(r.layer_count())]


def _jamba(r: Reader) -> list[Layer]:
    d = r.need("hidden_size")
    mixer = _mamba1(r, r.count("mamba_expand", 2, minimum=1) * d, "mamba_d_state", "mamba_d_conv", "mamba_dt_rank")
    heads = r.heads("derive", kv="stated")
    attends = _placed(r, "attn_layer_period", "attn_layer_offset", (8, 4))
    experts = r.need("num_experts")
    sparse = [moe and experts > 1 for moe in _placed(r, "expert_layer_period", "expert_layer_offset", (2, 1))]
    width = r.need("intermediate_size")
    out = []
    for attn, moe in zip(attends, sparse):
        ffn = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": width} if moe else {"m": width}
        kind = ("gqa" if attn else "mamba1") + (".moe" if moe else ".dense")
        out.append({"arch": kind, **(heads if attn else mixer), **ffn})
    return out


def _lfm2_kinds(r: Reader, fallback: bool) -> list[bool]:
    """Which layers attend: ``layer_types`` (conv / full_attention); lfm2 without it reads
    ``full_attn_idxs`` (absent too: every layer attends). Both written must agree."""
    kinds = r.types((CONV, FULL))
    if fallback and r.has("full_attn_idxs"):
        listed = set(r.indices("full_attn_idxs", []))
        derived = [i in listed for i in range(r.layer_count())]
        if kinds is not None and [k == FULL for k in kinds] != derived:
            raise r.error("'layer_types' and 'full_attn_idxs' disagree")
        return derived
    if kinds is None:
        if not fallback:
            raise r.error("needs field 'layer_types' (conv or full_attention per layer: its class derives none)")
        return [True] * r.layer_count()
    return [k == FULL for k in kinds]


def _conv_checks(r: Reader) -> dict:
    """The short convolution's kernel, and the published LFM2 keys 5.23 does not read, held to what it builds."""
    d = r.need("hidden_size")
    for key in ("block_dim", "conv_dim", "conv_dim_out"):
        r.same(key, d, "transformers 5.23 builds the block and its convolution hidden_size wide")
    r.same("num_heads", r.need("num_attention_heads"), "transformers 5.23 reads num_attention_heads")
    r.same("block_use_swiglu", True, "transformers 5.23's MLP is always the gated SwiGLU")
    return {"K_c": r.count("conv_L_cache", 3, minimum=1)}


def _lfm2_width(r: Reader) -> int:
    """``Lfm2MLP``: int(2/3 x intermediate_size) when ``block_auto_adjust_ff_dim``; with a
    ``block_ffn_dim_multiplier`` also scaled and rounded up to ``block_multiple_of``."""
    width = r.need("intermediate_size")
    if not r.flag("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    if "block_ffn_dim_multiplier" in r.config and r.config["block_ffn_dim_multiplier"] is None:
        return width                    # null: no multiplier, no rounding
    width = int(_number(r, "block_ffn_dim_multiplier", 1.0) * width)
    step = r.count("block_multiple_of", 256, minimum=1)
    return step * -(-width // step)


def _lfm2(r: Reader) -> list[Layer]:
    conv = _conv_checks(r)
    heads = r.heads("derive", kv="stated")
    m = _lfm2_width(r)
    return [{"arch": "gqa.dense", **heads, "m": m} if attn else {"arch": "shortconv.dense", **conv, "m": m}
            for attn in _lfm2_kinds(r, fallback=True)]


def _lfm2_moe(r: Reader) -> list[Layer]:
    conv = _conv_checks(r)
    heads = r.heads("derive", kv="stated")
    first = r.count("num_dense_layers", 2)
    out = []
    for i, attn in enumerate(_lfm2_kinds(r, fallback=False)):
        if i < first:
            ffn, sizes = "dense", {"m": r.need("intermediate_size")}
        else:
            ffn, sizes = "moe", {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"),
                                 "m_e": r.need("moe_intermediate_size")}
        out.append({"arch": f"gqa.{ffn}", **heads, **sizes} if attn else {"arch": f"shortconv.{ffn}", **conv, **sizes})
    return out


MAPPERS: dict[str, Mapper] = {"mamba": _mamba, "falcon_mamba": _mamba, "jamba": _jamba, "lfm2": _lfm2,
                              "lfm2_moe": _lfm2_moe}
