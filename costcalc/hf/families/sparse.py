"""Sparse-attention families: DeepSeek Sparse Attention (DSA), MLA whose keys a lightning indexer selects.

- ``deepseek_v32`` (DeepSeek-V3.2): every layer is MLA with a query LoRA plus an indexer
  (``mla_q-sparse``): wq_b (r_q -> h_I d_I, from the MLA query latent), wk (d -> d_I, then a
  LayerNorm), weights_proj (d -> h_I); its scores ReLU(q . k) summed over the h_I heads with the
  per-head weights, and each query keeps its top index_topk keys. The FFN is DeepSeek-V3's: dense
  SwiGLU below first_k_dense_replace (or where mlp_layer_types says dense), routed plus shared
  experts of width m_e elsewhere (``moe.deepseek_ffn``).
- ``glm_moe_dsa`` (GLM-5): the same layers. Its ``indexer_types`` may mark a layer ``shared``: that
  layer builds no indexer and reuses the previous full layer's top-k (GLM-5.2's index sharing,
  from index_topk_freq / index_skip_topk_offset / index_topk_pattern) -- sparse attention without
  an indexer of its own, a block kind costcalc does not model: refused.

Not built, so not counted: the multi-token-prediction layer (num_nextn_predict_layers; 5.23 drops the
checkpoint's extra layer on load). quantization_config changes how weights are stored, not the
matmul shapes: ignored (the indexer's FP8 scoring of the reference code is not what 5.23 runs).
"""
from __future__ import annotations

from ...errors import quote
from ..reader import Layer, Reader
from .common import Mapper
from .moe import deepseek_ffn, mla_sizes

INDEXED = "indexed_attention"


def _ffn_kinds(r: Reader) -> list[str]:
    """``mlp_layer_types`` as written, else the first first_k_dense_replace (default 3) layers dense."""
    n = r.layer_count()
    kinds = r.get("mlp_layer_types")
    if kinds is None:
        first = r.count("first_k_dense_replace", 3)
        return ["dense" if i < first else "sparse" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in ("dense", "sparse") for k in kinds):
        raise r.error("'mlp_layer_types' must list dense or sparse for each layer (num_hidden_layers)")
    return kinds


def _indexer_types(r: Reader) -> list[str]:
    """glm_moe_dsa's per-layer indexer mode, derived as its __post_init__ derives it."""
    n = r.layer_count()
    kinds = r.get("indexer_types")
    if kinds is None:
        pattern = r.get("index_topk_pattern")
        if pattern is not None:
            if not isinstance(pattern, (str, list)) or any(c not in ("F", "S", "full", "shared") for c in pattern):
                raise r.error(f"field 'index_topk_pattern' must be a string of F and S, got {quote(pattern)}")
            kinds = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern]
        else:
            freq = max(r.count("index_topk_freq", 1), 1)
            offset = r.count("index_skip_topk_offset", 2)
            kinds = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in ("full", "shared") for k in kinds):
        raise r.error("'indexer_types' must list full or shared for each layer (num_hidden_layers)")
    return kinds


def _dsa(r: Reader) -> list[Layer]:
    attn, mla = mla_sizes(r)
    if attn != "mla_q":
        raise r.error("field 'q_lora_rank' must be a number (transformers 5.23's DSA attention always builds the "
                      "query LoRA, whose latent the indexer reads)")
    n = r.layer_count()
    types = r.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != n or any(t != INDEXED for t in types)):
        raise r.error(f"'layer_types' must list {INDEXED} for each layer (num_hidden_layers): 5.23 runs no other kind")
    if r.family == "glm_moe_dsa":
        kinds = _indexer_types(r)
        if "shared" in kinds:
            raise r.error(f"layer {kinds.index('shared')} is an indexer_types 'shared' layer (index_topk_freq, "
                          f"index_topk_pattern): sparse attention reusing another layer's top-k without an indexer, "
                          f"a block kind costcalc does not model")
    index = {"h_I": r.need("index_n_heads"), "d_I": r.need("index_head_dim"), "k_I": r.need("index_topk")}
    if index["d_I"] < mla["d_rope"]:
        raise r.error(f"index_head_dim ({index['d_I']}) must be at least qk_rope_head_dim ({mla['d_rope']}): the "
                      f"indexer rotates its first qk_rope_head_dim channels")
    out = []
    for kind in _ffn_kinds(r):
        ffn, sizes = deepseek_ffn(r, kind == "sparse")
        out.append({"arch": f"{attn}-sparse.{ffn}", **mla, **index, **sizes})
    return out


MAPPERS: dict[str, Mapper] = {
    "deepseek_v32": _dsa,
    "glm_moe_dsa": _dsa,
}
