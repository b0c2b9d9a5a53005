"""Gemma 4 (``gemma4``, its ``text_config`` read as ``gemma4_text``), as transformers 5.23's
``modeling_gemma4.py`` builds the text decoder:

- Layers by ``layer_types`` (absent: every sixth full, the rest sliding); 5.23 forces the last layer
  full. Sliding layers (``window``, W = ``sliding_window``) have ``head_dim`` and
  ``num_key_value_heads``; full layers (``gqa``) the ``per_layer_config`` overrides, which the class
  derives, where the config has none, from ``global_head_dim`` (the head width of the full layers)
  and -- only with ``attention_k_eq_v`` -- ``num_global_key_value_heads``. A written
  ``per_layer_config`` wins (5.23 then ignores both keys); it may set only ``head_dim`` and
  ``num_key_value_heads``, the two a layer reads from it.
- ``attention_k_eq_v``: the full layers build no ``v_proj``; the key projection's output (before the
  key norm and RoPE) is the values (the ``-keqv`` attention). Sliding layers keep ``v_proj``.
- ``enable_moe_block``: every layer runs its dense GeGLU MLP (``mlp``, ``intermediate_size``) and,
  beside it on the same input, a router (d -> ``num_experts``) and ``top_k_experts`` routed GeGLU
  experts of ``moe_intermediate_size``, outputs summed: the ``moe_shared`` FFN with one always-on
  expert of the MLP's width (the same products). Without it, a dense GeGLU.

Refused, one line each, naming what 5.23 runs: per-layer embeddings (``hidden_size_per_layer_input``
> 0, its class default 256: a model-level d x L p projection and per layer a d x p gate and a p x d
projection feeding a second residual stream), cross-layer KV sharing (``num_kv_shared_layers`` > 0:
the last layers build no k_proj/v_proj and attend to an earlier layer's keys), and
``use_bidirectional_attention`` ``all`` (a non-causal decoder). The vision and audio towers of the
wrapper are not part of the decoder costed here.
"""
from __future__ import annotations

from ...errors import quote
from ..reader import FULL, SLIDING, Layer, Reader
from .common import Mapper, stated_window

PLE_DEFAULT = 256          # Gemma4TextConfig.hidden_size_per_layer_input
OVERRIDES = ("head_dim", "num_key_value_heads")


def _refusals(r: Reader) -> None:
    bidirectional = r.get("use_bidirectional_attention")
    if bidirectional not in (None, "vision"):
        raise r.error(f"use_bidirectional_attention is {quote(bidirectional)}: every token attends to every "
                      f"other, a non-causal decoder costcalc does not model (null or 'vision': text is causal)")
    per_layer = r.int("hidden_size_per_layer_input", 0) if r.has("hidden_size_per_layer_input") else PLE_DEFAULT
    if per_layer:
        raise r.error(f"hidden_size_per_layer_input is {per_layer}"
                      f"{' (the class default)' if not r.has('hidden_size_per_layer_input') else ''}: per-layer "
                      f"embeddings (a d x L*{per_layer} projection of the embeddings and per layer a d x {per_layer} "
                      f"gate and {per_layer} x d projection) are a block kind costcalc does not model")
    shared = r.count("num_kv_shared_layers", 0)
    if shared:
        raise r.error(f"num_kv_shared_layers is {shared}: the last {shared} layers build no k_proj/v_proj and "
                      f"attend to an earlier layer's keys and values, a block kind costcalc does not model")


def _layer_types(r: Reader) -> list[str]:
    """layer_types as written, else every sixth layer full; the last layer full either way (5.23)."""
    n = r.layer_count()
    kinds = r.types() or [SLIDING if (i + 1) % 6 else FULL for i in range(n)]
    return kinds[:-1] + [FULL]


def _overrides(r: Reader, kinds: list[str], k_eq_v: bool) -> dict[int, dict[str, int]]:
    """Each layer's head_dim / num_key_value_heads overrides, as 5.23's __post_init__ resolves them."""
    n = len(kinds)
    written = r.get("per_layer_config")
    if written is not None:
        if not isinstance(written, dict):
            raise r.error(f"field 'per_layer_config' must be an object of layer overrides, got {quote(written)}")
        out: dict[int, dict[str, int]] = {}
        for index, changes in written.items():
            if not (isinstance(index, str) and index.isdigit() or isinstance(index, int)) or not 0 <= int(index) < n:
                raise r.error(f"per_layer_config key {quote(index)} is not a layer index below {n}")
            if not isinstance(changes, dict):
                raise r.error(f"per_layer_config[{quote(index)}] must be an object, got {quote(changes)}")
            for key, value in changes.items():
                if key not in OVERRIDES:
                    raise r.error(f"per_layer_config[{quote(index)}] sets {quote(key)}: 5.23's Gemma 4 layers read "
                                  f"only head_dim and num_key_value_heads from it")
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise r.error(f"per_layer_config[{quote(index)}].{key} must be a positive integer, got {quote(value)}")
            out[int(index)] = dict(changes)
        return out
    if FULL not in kinds:
        return {}
    if not r.has("global_head_dim"):
        raise r.error("needs field 'global_head_dim' (the head width of the full-attention layers; the class "
                      "default 512 is not assumed)")
    full = {"head_dim": r.need("global_head_dim")}
    if k_eq_v and r.has("num_global_key_value_heads"):
        full["num_key_value_heads"] = r.need("num_global_key_value_heads")
    return {i: full for i, kind in enumerate(kinds) if kind == FULL}


def _ffn(r: Reader) -> tuple[str, dict[str, int]]:
    m = r.need("intermediate_size")
    if not r.flag("enable_moe_block", False):
        return "dense", {"m": m}
    m_e = r.need("moe_intermediate_size")
    r.same("expert_intermediate_size", m_e, "it must equal moe_intermediate_size (5.23 reads that)")
    return "moe_shared", {"E": r.need("num_experts"), "k": r.need("top_k_experts"), "m_e": m_e, "E_s": 1, "m_s": m}


def _gemma4_text(r: Reader) -> list[Layer]:
    _refusals(r)
    kinds = _layer_types(r)
    k_eq_v = r.flag("attention_k_eq_v", False)
    overrides = _overrides(r, kinds, k_eq_v)
    heads = r.heads("require", kv="stated")
    ffn, sizes = _ffn(r)
    stated_window(r, SLIDING in kinds)
    out = []
    for i, kind in enumerate(kinds):
        own = overrides.get(i, {})
        layer = {"h_q": heads["h_q"], "h_kv": own.get("num_key_value_heads", heads["h_kv"]),
                 "d_h": own.get("head_dim", heads["d_h"])}
        if layer["h_q"] % layer["h_kv"]:
            raise r.error(f"layer {i}: num_attention_heads ({layer['h_q']}) is not a multiple of its key/value heads "
                          f"({layer['h_kv']})")
        if kind == SLIDING:
            out.append({"arch": f"window.{ffn}", **layer, "W": r.need("sliding_window"), **sizes})
        else:
            out.append({"arch": f"gqa{'-keqv' if k_eq_v else ''}.{ffn}", **layer, **sizes})
    return out


MAPPERS: dict[str, Mapper] = {"gemma4_text": _gemma4_text}
