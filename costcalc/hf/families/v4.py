"""DeepSeek-V4 (``deepseek_v4``): its layers as transformers 5.23's configuration and modelling code build them.

- Attention by ``layer_types`` (the source of truth), else the legacy per-layer ``compress_ratios``
  (0 sliding, 4 compressed sparse, 128 heavily compressed: the value names the kind, the rate comes
  from ``compress_rates``; entries past num_hidden_layers describe the MTP layer and are dropped, as
  5.23 drops them), else the class's default schedule (two heavily compressed layers, then
  heavily compressed and compressed sparse alternating): ``swa``, ``hca``, ``csa``.
- ``compress_rates`` (default 4 and 128; the legacy ``compress_rate_csa`` / ``compress_rate_hca`` fold
  in): R_c of the layer's kind.
- Every layer's FFN is the routed experts plus one shared SwiGLU of moe_intermediate_size (5.23's
  ``DeepseekV4MLP``, whatever ``n_shared_experts`` says); ``hash_moe`` layers (``mlp_layer_types``,
  else the first ``num_hash_layers``, default 3) take their experts from a token-id table but run the
  same router matmul for their weights: the same block.

Not built, so not counted: the MTP layer (``num_nextn_predict_layers``: DeepSeek's ``MTPBlock`` adds
``e_proj`` d -> d on the embedding and ``h_proj`` d -> d on each of the ``hc_mult`` streams, then its own
``hc_head``, which costcalc's eh_proj module is not) and DSpark's speculative module (``dspark_*``). ``quantization_config`` and ``expert_dtype`` (FP4 experts) say how weights are
stored, not the matmul shapes.
"""
from __future__ import annotations

from ...errors import quote
from ..reader import Layer, Reader
from .common import Mapper

KINDS = {"sliding_attention": "swa", "heavily_compressed_attention": "hca", "compressed_sparse_attention": "csa"}
RATIOS = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}


def layer_types(r: Reader) -> list[str]:
    """``layer_types`` as written, else from ``compress_ratios``, else the class default."""
    n = r.layer_count()
    types = r.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n or any(t not in KINDS for t in types):
            raise r.error(f"'layer_types' must list one of {', '.join(KINDS)} for each layer (num_hidden_layers)")
        return types
    ratios = r.get("compress_ratios")
    if ratios is not None:
        if not isinstance(ratios, list) or len(ratios) < n or any(isinstance(x, bool) or x not in RATIOS
                                                                     for x in ratios[:n]):
            raise r.error(f"'compress_ratios' must give 0, 4 or 128 for each of the {n} layers (transformers 5.23 "
                          f"maps no other ratio to a layer type), got {quote(ratios)}")
        return [RATIOS[x] for x in ratios[:n]]
    return ["heavily_compressed_attention"] * min(n, 2) + [
        "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(n - 2, 0))]


def _rates(r: Reader) -> dict[str, int]:
    rates = r.get("compress_rates", RATES)
    if not isinstance(rates, dict) or set(rates) - set(RATES):
        raise r.error(f"'compress_rates' must map {' and '.join(RATES)} to rates, got {quote(rates)}")
    rates = {**RATES, **rates}
    for legacy, kind in (("compress_rate_csa", "compressed_sparse_attention"),
                         ("compress_rate_hca", "heavily_compressed_attention")):
        if r.has(legacy):
            rates[kind] = r.int(legacy)
    for kind, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise r.error(f"the compress rate of {kind} must be a positive integer, got {quote(rate)}")
    return rates


def _mlp_types(r: Reader) -> None:
    """``mlp_layer_types`` checked (hash_moe and moe layers cost the same: the router matmul runs in both)."""
    kinds = r.get("mlp_layer_types")
    if kinds is not None and (not isinstance(kinds, list) or len(kinds) != r.layer_count()
                              or any(k not in ("hash_moe", "moe") for k in kinds)):
        raise r.error("'mlp_layer_types' must list hash_moe or moe for each layer (num_hidden_layers)")
    r.count("num_hash_layers", 3)


def _v4(r: Reader) -> list[Layer]:
    types = layer_types(r)
    _mlp_types(r)
    r.same("num_key_value_heads", 1, "transformers 5.23 builds one K=V head (kv_proj: hidden_size -> head_dim)")
    attn = {"h_q": r.need("num_attention_heads"), "d_h": r.need("head_dim"), "r_q": r.need("q_lora_rank"),
            "G_o": r.need("o_groups"), "r_o": r.need("o_lora_rank"), "W": r.need("sliding_window"),
            "n_hc": r.need("hc_mult")}
    if attn["h_q"] * attn["d_h"] % attn["G_o"]:
        raise r.error(f"o_groups ({attn['G_o']}) must divide num_attention_heads x head_dim "
                      f"({attn['h_q'] * attn['d_h']}): the grouped output projection splits the heads' outputs")
    m_e = r.need("moe_intermediate_size")
    ffn = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e, "E_s": 1, "m_s": m_e}
    rates = _rates(r)
    index = {}
    if "compressed_sparse_attention" in types:
        index = {"h_I": r.need("index_n_heads"), "d_I": r.need("index_head_dim"), "k_I": r.need("index_topk")}
    out = []
    for kind in types:
        layer = {"arch": f"{KINDS[kind]}.moe_shared", **attn, **ffn}
        if kind in rates:
            layer["R_c"] = rates[kind]
        if kind == "compressed_sparse_attention":
            layer.update(index)
        out.append(layer)
    return out


MAPPERS: dict[str, Mapper] = {"deepseek_v4": _v4}
