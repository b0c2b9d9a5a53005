"""Families whose attention needs the GQA head features of costcalc/blocks.py (derived from projection
shapes): values of their own head dim (``dv``) and per-head output gates (``head_gate``).

- ``mimo_v2_flash`` (MiMo-V2-Flash, transformers 5.23 ``models/mimo_v2_flash``): q and k of head_dim per
  head, v and o of v_head_dim (``-dv``); layer 0 and every 6th layer full attention with
  num_key_value_heads, the others a sliding window of W with twice the key/value heads and attention
  sinks (an extra softmax column: elementwise); layer 0 a dense SwiGLU, the others MoE (sigmoid router
  d x E, no shared expert). The published file's remote-code keys (swa_*, hybrid_layer_pattern,
  moe_layer_freq, sliding_window_size) are not read by 5.23 but must say what it builds; its window is
  sliding_window_size + 1 where that key is written (5.23's __post_init__).
"""
from __future__ import annotations

from ...errors import quote
from ..reader import FULL, SLIDING, Layer, Reader
from .common import Mapper


def _pattern(r: Reader, key: str, expected: list[int], meaning: str) -> None:
    """A per-layer 0/1 list 5.23 does not read must agree with what it builds."""
    given = r.get(key)
    if given is None:
        return
    if not isinstance(given, list) or len(given) != len(expected) or any(v not in (0, 1) for v in given):
        raise r.error(f"field {quote(key)} must list 0 or 1 for each layer (num_hidden_layers)")
    if given != expected:
        i = next(i for i, (a, b) in enumerate(zip(given, expected)) if a != b)
        raise r.error(f"field {quote(key)} says layer {i} is {meaning[given[i]]} but transformers 5.23 builds it "
                      f"{meaning[expected[i]]} (from layer_types / mlp_layer_types)")


def _mimo_v2_flash(r: Reader) -> list[Layer]:
    n = r.layer_count()
    h_q, h_kv = r.need("num_attention_heads"), r.need("num_key_value_heads")
    d_h, d_v = r.need("head_dim"), r.need("v_head_dim")
    types = r.types() or [FULL if i == 0 or (i + 1) % 6 == 0 else SLIDING for i in range(n)]
    mlp = r.get("mlp_layer_types") or ["dense"] + ["sparse"] * (n - 1)
    if not isinstance(mlp, list) or len(mlp) != n or any(k not in ("dense", "sparse") for k in mlp):
        raise r.error("'mlp_layer_types' must list dense or sparse for each layer (num_hidden_layers)")
    _pattern(r, "hybrid_layer_pattern", [int(t == SLIDING) for t in types], {0: "full", 1: "sliding"})
    _pattern(r, "moe_layer_freq", [int(k == "sparse") for k in mlp], {0: "dense", 1: "MoE"})
    for key, value in (("swa_num_attention_heads", h_q), ("swa_num_key_value_heads", 2 * h_kv),
                       ("swa_head_dim", d_h), ("swa_v_head_dim", d_v)):
        r.same(key, value, "transformers 5.23 does not read it: its sliding layers have num_attention_heads, "
                           "2 x num_key_value_heads, head_dim and v_head_dim")
    r.same("n_shared_experts", 0, "transformers 5.23 builds no shared expert")
    r.same("hybrid_block_size", None, "transformers 5.23 does not read it (only null is what it builds)")
    if SLIDING in types:
        window = r.int("sliding_window_size") + 1 if r.has("sliding_window_size") else r.need("sliding_window")
    dv = "-dv" if d_v != d_h else ""
    out = []
    for kind, ffn in zip(types, mlp):
        attn = {"h_q": h_q, "h_kv": h_kv, "d_h": d_h, **({"d_v": d_v} if dv else {})}
        if kind == SLIDING:
            attn.update(h_kv=2 * h_kv, W=window)
        sizes = ({"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"),
                  "m_e": r.need("moe_intermediate_size")} if ffn == "sparse" else {"m": r.need("intermediate_size")})
        arch = ("window" if kind == SLIDING else "gqa") + dv + (".moe" if ffn == "sparse" else ".dense")
        out.append({"arch": arch, **attn, **sizes})
    return out


MAPPERS: dict[str, Mapper] = {
    "mimo_v2_flash": _mimo_v2_flash,
}
