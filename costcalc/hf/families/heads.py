"""Families whose attention needs the GQA head features of costcalc/blocks.py (derived from projection
shapes): values of their own head dim (``dv``) and per-head output gates (``head_gate``).

- ``mimo_v2_flash`` (MiMo-V2-Flash, transformers 5.23 ``models/mimo_v2_flash``): q and k of head_dim per
  head, v and o of v_head_dim (``-dv``); layer 0 and every 6th layer full attention with
  num_key_value_heads, the others a sliding window of W with twice the key/value heads and attention
  sinks (an extra softmax column: elementwise); layer 0 a dense SwiGLU, the others MoE (sigmoid router
  d x E, no shared expert). The published file's remote-code keys (swa_*, hybrid_layer_pattern,
  moe_layer_freq, sliding_window_size) are not read by 5.23 but must say what it builds; its window is
  sliding_window_size + 1 where that key is written (5.23's __post_init__).
- ``step3p5`` (the text decoder of Step-3.7-Flash's ``step3p7`` wrapper, transformers 5.23
  ``models/step3p7``): GQA with a per-head sigmoid output gate on every layer (``-hgated``: g_proj
  hidden_size -> heads); full or sliding layers by layer_types, the sliding ones with their own query
  heads (per_layer_config, else num_sliding_attention_heads, else the published attention_other_setting);
  dense SwiGLU or MoE with one shared expert of share_expert_dim (``moe_shared``) by mlp_layer_types
  (else moe_layers_enum, else layers >= 3 MoE). The MTP layers' trailing entries of the published
  per-layer lists are dropped, as 5.23 drops them; the clamps of swiglu_limits are elementwise.
- ``minimax_m3_vl_text`` (MiniMax-M3's text decoder, ``models/minimax_m3_vl``): plain GQA (per-head QK
  norms, partial RoPE: elementwise) with a fused SwiGLU-OAI MLP of dense_intermediate_size or MoE
  (sigmoid router d x E, experts of intermediate_size, one shared expert of shared_intermediate_size).
  Its ``minimax_m3_sparse`` layers add a lightning indexer over GQA that picks key blocks: refused in
  one line (costcalc's sparse attention is MLA's).
"""
from __future__ import annotations

from ...errors import quote
from ..reader import FULL, SLIDING, Layer, Reader
from .common import Mapper, causal_only

_OTHER_SETTING = ("attention_type", "num_attention_heads", "num_attention_groups", "head_dim")


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
    return [_mimo_v2_flash_layer(r, kind, ffn, window if kind == SLIDING else 0) for kind, ffn in zip(types, mlp)]


def _mimo_v2_flash_layer(r: Reader, kind: str, ffn: str, window: int) -> Layer:
    """One MiMo-V2-Flash layer: full or sliding (twice the KV heads, a window of W) GQA, dense or MoE."""
    h_q, h_kv = r.need("num_attention_heads"), r.need("num_key_value_heads")
    d_h, d_v = r.need("head_dim"), r.need("v_head_dim")
    dv = "-dv" if d_v != d_h else ""
    attn = {"h_q": h_q, "h_kv": h_kv, "d_h": d_h, **({"d_v": d_v} if dv else {})}
    if kind == SLIDING:
        attn.update(h_kv=2 * h_kv, W=window)
    sizes = ({"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"),
              "m_e": r.need("moe_intermediate_size")} if ffn == "sparse" else {"m": r.need("intermediate_size")})
    arch = ("window" if kind == SLIDING else "gqa") + dv + (".moe" if ffn == "sparse" else ".dense")
    return {"arch": arch, **attn, **sizes}


def _mimo_v2_flash_mtp(r: Reader, layers: list[Layer]) -> Layer:
    """An MTP module's decoder block as the serving engines build it (vLLM's and SGLang's
    ``MiMoV2FlashMTPBlock``): sliding-window attention of the swa_* sizes -- the sliding layers' --
    and a dense SwiGLU of intermediate_size (never MoE); its eh_proj is the module's."""
    window = r.int("sliding_window_size") + 1 if r.has("sliding_window_size") else r.need("sliding_window")
    return _mimo_v2_flash_layer(r, SLIDING, "dense", window)


def _trimmed(r: Reader, key: str, n: int, mtp: int) -> list | None:
    """A per-layer list, less the MTP layers' trailing entries a published file pads it with."""
    value = r.get(key)
    if isinstance(value, list) and mtp and len(value) == n + mtp:
        return value[:n]
    return value


def _step3p5_mlp(r: Reader, n: int, mtp: int) -> list[str]:
    """mlp_layer_types, else moe_layers_enum (indices over the padded range), else layers >= 3 MoE."""
    kinds = _trimmed(r, "mlp_layer_types", n, mtp)
    if kinds is None:
        enum = r.get("moe_layers_enum")
        if enum is None:
            moe = set(range(3, n))
        else:
            items = enum.split(",") if isinstance(enum, str) else enum
            try:
                moe = {int(i) for i in items if str(i).strip()}
            except (TypeError, ValueError):
                raise r.error(f"field 'moe_layers_enum' must list layer indices, got {quote(enum)}") from None
        kinds = ["sparse" if i in moe else "dense" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in ("dense", "sparse") for k in kinds):
        raise r.error("'mlp_layer_types' must list dense or sparse for each layer (num_hidden_layers)")
    freq = _trimmed(r, "moe_layer_freq", n, mtp)
    if freq is not None:
        r.config["moe_layer_freq"] = freq
        _pattern(r, "moe_layer_freq", [int(k == "sparse") for k in kinds], {0: "dense", 1: "MoE"})
    return kinds


def _sliding_heads(r: Reader) -> int:
    """The sliding layers' query heads: num_sliding_attention_heads, else attention_other_setting's."""
    if r.has("num_sliding_attention_heads"):
        return r.int("num_sliding_attention_heads")
    other = r.get("attention_other_setting") or {}
    return other.get("num_attention_heads") or r.need("num_attention_heads")


def _step3p5_heads(r: Reader, types: list[str]) -> list[int]:
    """Query heads per layer as 5.23 builds them: per_layer_config where written (its only override
    read), else num_sliding_attention_heads / attention_other_setting on the sliding layers."""
    h_q = r.need("num_attention_heads")
    other = r.get("attention_other_setting", {})
    if not isinstance(other, dict):
        raise r.error(f"field 'attention_other_setting' must be an object, got {quote(other)}")
    unknown = [k for k in other if k not in _OTHER_SETTING and other[k] is not None]
    if unknown:
        raise r.error(f"field 'attention_other_setting.{unknown[0]}' is not understood and may change the cost; "
                      f"costcalc does not guess -- remove it if it does not")
    for key, target in (("num_attention_groups", "num_key_value_heads"), ("head_dim", "head_dim")):
        if other.get(key) is not None and other[key] != r.need(target):
            raise r.error(f"attention_other_setting.{key} is {quote(other[key])} but transformers 5.23 does not "
                          f"read it: its sliding layers have {target} {r.need(target)}")
    sliding = _sliding_heads(r)
    per_layer = r.get("per_layer_config")
    if per_layer is None:
        return [sliding if t == SLIDING else h_q for t in types]
    if not isinstance(per_layer, dict):
        raise r.error(f"field 'per_layer_config' must be an object of layer overrides, got {quote(per_layer)}")
    out = [h_q] * len(types)
    for index, override in per_layer.items():
        if not str(index).isdigit() or int(index) >= len(types) or not isinstance(override, dict) \
                or set(override) - {"num_attention_heads"}:
            raise r.error(f"per_layer_config entry {quote(index)} must give a layer's num_attention_heads only "
                          f"(the one override 5.23's Step-3.7 layers read), got {quote(override)}")
        value = override.get("num_attention_heads")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise r.error(f"per_layer_config entry {quote(index)}: num_attention_heads must be a positive integer")
        out[int(index)] = value
    return out


def _step3p5(r: Reader) -> list[Layer]:
    causal_only(r)
    n = r.layer_count()
    mtp = r.count("num_nextn_predict_layers", 0)
    gating = r.get("gating", True)
    if gating is not True and gating != "per-head":
        raise r.error(f"gating {quote(gating)}: a per-channel output gate (g_proj hidden_size -> heads x head_dim) "
                      f"beside q_proj, which costcalc does not model (the per-head gate, true, is)")
    r.same("use_head_wise_attn_gate", True, "transformers 5.23 always builds the per-head gate g_proj")
    r.same("att_impl_type", "GQA", "transformers 5.23 builds grouped-query attention")
    types = _trimmed(r, "layer_types", n, mtp)
    if types is None:
        types = [FULL] * n
    if not isinstance(types, list) or len(types) != n:
        raise r.error("'layer_types' must list one type per layer (num_hidden_layers, plus the MTP layers')")
    for kind in types:
        if kind not in (FULL, SLIDING):
            raise r.error(f"layer type {quote(kind)}: transformers 5.23's Step-3.7 layers are full_attention or "
                          f"sliding_attention (it builds no sparse indexer)")
    sparse = r.get("sparse_attention_config")
    if isinstance(sparse, dict) and any(sparse.get("sparse_attention_freq") or []):
        raise r.error("sparse_attention_config marks sparse-attention layers, which transformers 5.23's Step-3.7 "
                      "does not build (its layer_types are derived first)")
    mlp = _step3p5_mlp(r, n, mtp)
    if "sparse" in mlp:
        r.same("use_moe", True, "layers are MoE (mlp_layer_types / moe_layers_enum)")
    heads = _step3p5_heads(r, types)
    if "head_dim" not in r.config or "num_key_value_heads" not in r.config:
        raise r.error("needs fields 'num_key_value_heads' and 'head_dim' (their class defaults are the example model's)")
    return [_step3p5_layer(r, kind, ffn, h_q) for kind, ffn, h_q in zip(types, mlp, heads)]


def _step3p5_layer(r: Reader, kind: str, ffn: str, h_q: int) -> Layer:
    """One Step-3.5/3.7 layer: gated GQA (full, or sliding with a window of W) and a dense SwiGLU or MoE."""
    attn = ("window" if kind == SLIDING else "gqa") + "-hgated"
    sizes = ({"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"),
              "m_e": r.need("moe_intermediate_size"), "E_s": 1, "m_s": r.need("share_expert_dim")}
             if ffn == "sparse" else {"m": r.need("intermediate_size")})
    return {"arch": attn + (".moe_shared" if ffn == "sparse" else ".dense"), "h_q": h_q,
            "h_kv": r.need("num_key_value_heads"), "d_h": r.need("head_dim"),
            **({"W": r.need("sliding_window")} if kind == SLIDING else {}), **sizes}


def _step3p5_mtp(r: Reader, layers: list[Layer]) -> Layer:
    """An MTP module's decoder block as the serving engines build it (vLLM's and SGLang's
    ``Step3p5DecoderLayer`` at index num_hidden_layers + i): its kind from ``mtp_layer_types``, else the
    published layer_types' trailing entries, else full attention (5.23's ``__post_init__``); its FFN from
    ``mtp_mlp_layer_types``, else mlp_layer_types' trailing entries, else moe_layers_enum over the padded
    range (absent: dense); a sliding one has the sliding layers' query heads (attention_other_setting's).
    Modules of different kinds are refused: costcalc's modules are one kind."""
    n, mtp = r.layer_count(), r.count("num_nextn_predict_layers", 0)

    def trailing(key: str, own: str) -> list | None:
        value = r.get(own)
        if value is None:
            full = r.get(key)
            value = full[n:] if isinstance(full, list) and len(full) == n + mtp else None
        if value is not None and (not isinstance(value, list) or len(value) != mtp):
            raise r.error(f"field {quote(own)} must list one entry per MTP layer (num_nextn_predict_layers, {mtp})")
        return value

    types = trailing("layer_types", "mtp_layer_types") or [FULL] * mtp
    mlp = trailing("mlp_layer_types", "mtp_mlp_layer_types")
    if mlp is None:
        enum = r.get("moe_layers_enum")
        items = (enum.split(",") if isinstance(enum, str) else enum) if enum is not None else []
        moe = {int(i) for i in items if str(i).strip()}
        mlp = ["sparse" if n + i in moe else "dense" for i in range(mtp)]
    for kind, ffn in zip(types, mlp):
        if kind not in (FULL, SLIDING) or ffn not in ("dense", "sparse"):
            raise r.error(f"an MTP layer of kind {quote(kind)} / {quote(ffn)}: full_attention or sliding_attention, "
                          f"dense or sparse")
    if len(set(types)) > 1 or len(set(mlp)) > 1:
        raise r.error(f"the MTP layers are of different kinds ({', '.join(f'{t}/{f}' for t, f in zip(types, mlp))}): "
                      f"costcalc's MTP modules are all one block kind")
    h_q = _sliding_heads(r) if types[0] == SLIDING else r.need("num_attention_heads")
    return _step3p5_layer(r, types[0], mlp[0], h_q)


M3_SPARSE = "minimax_m3_sparse"


def _minimax_m3(r: Reader) -> list[Layer]:
    n = r.layer_count()
    sparse = r.get("sparse_attention_config")
    freq = sparse.get("sparse_attention_freq") if isinstance(sparse, dict) else None
    types = r.get("layer_types")
    if types is None:
        types = [M3_SPARSE if f else FULL for f in freq] if freq is not None else [FULL] * n
    if not isinstance(types, list) or len(types) != n or any(t not in (FULL, M3_SPARSE) for t in types):
        raise r.error(f"'layer_types' must list full_attention or {M3_SPARSE} for each layer (num_hidden_layers)")
    if M3_SPARSE in types:
        raise r.error(f"layer {types.index(M3_SPARSE)} is a {M3_SPARSE} layer: GQA with a lightning indexer (q_proj "
                      f"hidden_size -> index_n_heads x index_head_dim, k_proj hidden_size -> index_head_dim) whose "
                      f"scores pick index_topk_blocks blocks of index_block_size keys, which costcalc does not model "
                      f"(its sparse attention is MLA's)")
    mlp = r.get("mlp_layer_types")
    if mlp is None:
        freq = r.get("moe_layer_freq")
        mlp = ["sparse" if f else "dense" for f in freq] if isinstance(freq, list) else ["sparse"] * n
    if not isinstance(mlp, list) or len(mlp) != n or any(k not in ("dense", "sparse") for k in mlp):
        raise r.error("'mlp_layer_types' must list dense or sparse for each layer (num_hidden_layers)")
    heads = r.heads("stated", kv="stated")
    out = []
    for ffn in mlp:
        sizes = ({"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size"),
                  "E_s": 1, "m_s": r.need("shared_intermediate_size")} if ffn == "sparse"
                 else {"m": r.need("dense_intermediate_size")})
        out.append({"arch": "gqa.moe_shared" if ffn == "sparse" else "gqa.dense", **heads, **sizes})
    return out


MAPPERS: dict[str, Mapper] = {
    "mimo_v2_flash": _mimo_v2_flash,
    "step3p5": _step3p5,
    "minimax_m3_vl_text": _minimax_m3,
}

# The decoder block of a family's MTP module where it is not the last layer's (hf.MTP_KEYS).
MTP_LAYERS = {"mimo_v2_flash": _mimo_v2_flash_mtp, "step3p5": _step3p5_mtp}
