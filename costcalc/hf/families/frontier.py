"""Frontier MoE and multimodal text-decoder families (issue #19): MiniMax-M2 and the text decoders
inside Qwen3-VL. Kimi-K2's remote-code ``kimi_k2`` configs describe DeepSeek-V3's structure and are
read as ``deepseek_v3`` (``hf.REMOTE_CODE``); Kimi-K2.5's ``kimi_k25`` wraps one (its ``text_config``).

- ``minimax_m2`` (MiniMax-M2, M2.1, M2.5, M2.7): every layer GQA (per-layer QK RMSNorm over all heads:
  vectors, no product; partial RoPE, ``rotary_dim``) and an MoE of ``num_local_experts`` SwiGLU experts of
  width ``intermediate_size`` (fused ``gate_up_proj``: the two projections it fuses), k per token, a
  ``d x E`` router with a sigmoid score and a selection bias (elementwise); no shared expert, no dense
  layer. The remote-code keys 5.23 does not read must say what it builds: ``attn_type_list`` all 1
  (softmax attention on every layer: a 0 would be MiniMax-Text-01's lightning attention, which
  ``minimax_m2`` does not build) and ``shared_intermediate_size`` 0.
- ``qwen3_vl_text``: Qwen3's dense layers (GQA with per-head QK norms, SwiGLU), every layer full attention.
- ``qwen3_vl_moe_text``: Qwen3-MoE's layers (experts of ``moe_intermediate_size``, no shared expert; layer i
  MoE iff (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers, else a SwiGLU of intermediate_size);
  ``sliding_window`` is set to null by the class (no window).
Both Qwen3-VL decoders use interleaved multimodal RoPE (``mrope_section``): elementwise. Their vision
tower (``vision_config``) and the DeepStack visual features it adds to the first layers' hidden states
are not part of the text decoder costed here.
"""
from __future__ import annotations

from ...errors import quote
from ..reader import Layer, Reader, dense_layers, moe_layers
from .common import Mapper, head_dim_number


def _minimax_m2(r: Reader) -> list[Layer]:
    head_dim_number(r)
    n = r.layer_count()
    kinds = r.get("attn_type_list")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != n:
            raise r.error("'attn_type_list' must list one attention type per layer (num_hidden_layers)")
        for i, kind in enumerate(kinds):
            if kind != 1:
                raise r.error(f"attn_type_list gives layer {i} the type {quote(kind)} (0: lightning attention), which "
                              f"transformers 5.23's minimax_m2 does not build (softmax attention, type 1, on every "
                              f"layer; MiniMax-Text-01's model_type 'minimax' runs lightning layers)")
    r.same("shared_intermediate_size", 0, "transformers 5.23's minimax_m2 builds no shared expert")
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    return moe_layers(r, r.heads("require", kv="stated"), [False] * n, [True] * n, expert)


def _qwen3_vl_text(r: Reader) -> list[Layer]:
    head_dim_number(r)
    return dense_layers(r, r.heads("stated", kv="stated"), [False] * r.layer_count())


def _qwen3_vl_moe_text(r: Reader) -> list[Layer]:
    experts = r.int("num_local_experts", 0) if r.has("num_local_experts") else r.need("num_local_experts")
    step = r.count("decoder_sparse_step", 1, minimum=1)
    dense_only = set(r.indices("mlp_only_layers", []))
    n = r.layer_count()
    is_moe = [experts > 0 and i not in dense_only and (i + 1) % step == 0 for i in range(n)]
    expert = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")} \
        if any(is_moe) else {}
    return moe_layers(r, r.heads("derive", kv="stated"), [False] * n, is_moe, expert)


MAPPERS: dict[str, Mapper] = {
    "minimax_m2": _minimax_m2,
    "qwen3_vl_text": _qwen3_vl_text,
    "qwen3_vl_moe_text": _qwen3_vl_moe_text,
}
