"""Llama-Nemotron NAS models (``nemotron-nas``: Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B,
Llama-3.1-Nemotron-51B): DeciLM remote code (``modeling_decilm.py``), which transformers 5.23 does not
ship. Llama's layers, each sized by its own entry of ``block_configs``:

- ``attention``: GQA with ``num_attention_heads // n_heads_in_group`` key/value heads (q, k, v, o of
  head width ``hidden_size // num_attention_heads``), or ``no_op`` (the layer has no attention: a
  ``none`` mixer);
- ``ffn``: a SwiGLU whose width DeciLM computes from ``ffn_mult`` (``_ffn_mult_to_intermediate_size``:
  ``int(2 * ffn_mult * hidden_size / 3)`` rounded up to a multiple of 256), or ``no_op`` (``none``).

A layer that is ``no_op`` in both runs nothing and is left out. Refused, naming it: ``replace_with_linear``
(one hidden x hidden linear in the attention's or the FFN's place), an attention ``window_length``, sink
tokens, ``sparsify``, and any key of a block the DeciLM code of these checkpoints does not write.
"""
from __future__ import annotations

from ...errors import quote
from ..reader import Layer, Reader
from ..tables import NEMOTRON_NAS_BLOCK
from .common import Mapper, divisible

ROUND = 256         # DeciLM's _find_multiple(intermediate_size, 256)


def ffn_width(ffn_mult: float, d: int) -> int:
    """DeciLM's ``_ffn_mult_to_intermediate_size``: int(2 ffn_mult d / 3), rounded up to 256."""
    width = int(2 * ffn_mult * d / 3)
    return width if width % ROUND == 0 else width + ROUND - width % ROUND


def _part(r: Reader, i: int, block: dict, part: str) -> dict:
    sub = block.get(part, {})
    if not isinstance(sub, dict):
        raise r.error(f"block_configs[{i}].{part} must be an object, got {quote(sub)}")
    known = NEMOTRON_NAS_BLOCK[part].known()
    for key, value in sub.items():
        if key not in known:
            raise r.error(f"field 'block_configs[{i}].{part}.{key}' is not understood and may change the cost; "
                          f"costcalc does not guess")
        if key == "replace_with_linear" and value:
            raise r.error(f"block_configs[{i}].{part}.replace_with_linear is true: one hidden_size x hidden_size "
                          f"linear in the {part}'s place, a block kind costcalc does not model")
        if key in ("sparsify", "window_length", "num_sink_tokens") and value is not None:
            raise r.error(f"block_configs[{i}].{part}.{key} is {quote(value)}: DeciLM's {key} changes which keys or "
                          f"weights the layer runs, which costcalc does not model")
        if key in ("unshifted_sink", "use_prefill_window_in_sink_attention") and value:
            raise r.error(f"block_configs[{i}].{part}.{key} is true: sink attention is not modelled")
    if not isinstance(sub.get("no_op", False), bool):
        raise r.error(f"block_configs[{i}].{part}.no_op must be true or false, got {quote(sub['no_op'])}")
    return sub


def _positive(r: Reader, where: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise r.error(f"{where} must be a positive number, got {quote(value)}")


def _nemotron_nas(r: Reader) -> list[Layer]:
    n = r.layer_count()
    blocks = r.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != n:
        raise r.error("needs 'block_configs': one block per layer (num_hidden_layers)")
    for key in ("intermediate_size", "num_key_value_heads"):
        r.same(key, None, "DeciLM sizes every layer from block_configs (the key must be null)")
    divisible(r, "hidden_size", "num_attention_heads")
    d, h_q = r.need("hidden_size"), r.need("num_attention_heads")
    d_h = r.need("head_dim") if r.has("head_dim") else d // h_q
    out: list[Layer] = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or set(block) - {"attention", "ffn"}:
            raise r.error(f"block_configs[{i}] must be an object of 'attention' and 'ffn'")
        attn, ffn = _part(r, i, block, "attention"), _part(r, i, block, "ffn")
        layer: dict = {}
        if not attn.get("no_op", False):
            group = attn.get("n_heads_in_group")
            if isinstance(group, bool) or not isinstance(group, int) or group < 1 or h_q % group:
                raise r.error(f"block_configs[{i}].attention.n_heads_in_group must divide num_attention_heads "
                              f"({h_q}), got {quote(group)}")
            layer.update(h_q=h_q, h_kv=h_q // group, d_h=d_h)
        if not ffn.get("no_op", False):
            _positive(r, f"block_configs[{i}].ffn.ffn_mult", ffn.get("ffn_mult"))
            layer["m"] = ffn_width(ffn["ffn_mult"], d)
        if layer:           # a layer that is no_op in both runs nothing
            kind = f"{'gqa' if 'h_q' in layer else 'none'}.{'dense' if 'm' in layer else 'none'}"
            out.append({"arch": kind, **layer})
    if not out:
        raise r.error("every block is no_op: the model has no layer to cost")
    return out


MAPPERS: dict[str, Mapper] = {"nemotron-nas": _nemotron_nas}
