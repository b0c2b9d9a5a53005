"""Linear-attention families: layers of a mixer that keeps a fixed-size state (``gdn``, ``kda``,
``lightning``) between layers of softmax attention.

- ``qwen3_next``, ``qwen3_5_text``, ``qwen3_5_moe_text``: Gated DeltaNet (``gdn``) layers and
  full-attention layers whose ``q_proj`` also gives a per-head sigmoid output gate (``gqa-gated``);
  layer_types, else every ``full_attention_interval``-th layer (default 4) full. Qwen3-Next's MoE
  layers follow Qwen2-MoE's rule (decoder_sparse_step, mlp_only_layers) with one gated shared
  expert; Qwen3.5 is dense everywhere, Qwen3.5-MoE MoE everywhere. Qwen3.5 splits the
  Gated DeltaNet's input projection in four (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a): the
  same products as Qwen3-Next's in_proj_qkvz and in_proj_ba.
- ``olmo_hybrid``: the same Gated DeltaNet with separate q/k/v/g/a/b projections (the same
  products again) beside plain GQA layers, dense SwiGLU everywhere.
- ``kimi_linear``: Kimi Delta Attention (``kda``) layers and MLA layers (``mla``; transformers 5.23
  caches the latent and expands it with kv_b_proj at every forward: the ``expanded`` form), dense
  or MoE with ungated shared experts by mlp_layer_types (else first_k_dense_replace).
- ``minimax``: lightning attention (``lightning``, blocks of block_size) and softmax attention
  (windowed where sliding_window is set), every layer MoE with experts of intermediate_size.

The chunk Q_c of the Gated DeltaNet and KDA scans is 64, fixed in transformers' torch path (not a
config key); the recurrent states of both are kept in fp32 whatever the model's dtype
(``STATE_DTYPE``), MiniMax's in the model's dtype.
"""
from __future__ import annotations

from ...errors import quote
from ..reader import FULL, Layer, Reader
from ..tables import KIMI_LINEAR_ATTN_CONFIG
from .common import Mapper, head_dim_number

LINEAR = "linear_attention"
CHUNK = 64          # chunk_size of torch_chunk_gated_delta_rule and chunk_kimi_delta_attention
STATE_DTYPE = {"qwen3_next": "fp32", "qwen3_5_text": "fp32", "qwen3_5_moe_text": "fp32", "olmo_hybrid": "fp32",
               "kimi_linear": "fp32"}


def _mixer_layers(r: Reader, derived: list[str], legacy: tuple[str, ...] = ()) -> list[bool]:
    """Which layers run the linear mixer: layer_types where written (linear_attention or
    full_attention), else ``derived``; a config carrying both must agree."""
    kinds = r.types((LINEAR, FULL))
    if kinds is None:
        return [k == LINEAR for k in derived]
    carried = [k for k in legacy if k in r.config]
    if carried and kinds != derived:
        layer = next(i for i, (a, b) in enumerate(zip(kinds, derived)) if a != b)
        raise r.error(f"'layer_types' and {', '.join(map(repr, carried))} disagree (layer {layer}: "
                      f"{kinds[layer]} vs {derived[layer]})")
    return [k == LINEAR for k in kinds]


def _interval_types(r: Reader) -> list[bool]:
    """Qwen3-Next / Qwen3.5: layer i is full attention iff (i+1) % full_attention_interval == 0."""
    interval = r.count("full_attention_interval", 4, minimum=1)
    derived = [FULL if (i + 1) % interval == 0 else LINEAR for i in range(r.layer_count())]
    return _mixer_layers(r, derived, ("full_attention_interval",))


def _gdn(r: Reader, heads: int | None = None) -> dict[str, int]:
    """Gated DeltaNet sizes. The Qwen classes' defaults are their example model: stated. With
    ``heads`` (OLMo-Hybrid), an absent or null size is derived as its class does: h_lk = h_lv =
    heads, d_lk = int(0.75 hidden_size / h_lk), d_lv = 2 d_lk."""
    def size(key: str, default) -> int:
        return r.need(key) if heads is None or r.has(key) else default()
    h_lk = size("linear_num_key_heads", lambda: heads)
    h_lv = size("linear_num_value_heads", lambda: heads)
    d_lk = size("linear_key_head_dim", lambda: int(0.75 * r.need("hidden_size") / h_lk))
    d_lv = size("linear_value_head_dim", lambda: 2 * d_lk)
    if h_lv % h_lk:
        raise r.error(f"linear_num_value_heads ({h_lv}) must be a multiple of linear_num_key_heads ({h_lk}): "
                      f"transformers repeats the key heads over the value heads")
    return {"h_lk": h_lk, "h_lv": h_lv, "d_lk": d_lk, "d_lv": d_lv,
            "K_c": r.count("linear_conv_kernel_dim", 4, minimum=1), "Q_c": CHUNK}


def _qwen_heads(r: Reader) -> dict[str, int]:
    r.same("attn_output_gate", True, "transformers 5.23 always gates the attention output (q_proj is 2 x the query width)")
    if "head_dim" not in r.config:
        raise r.error("needs field 'head_dim' (its class default is a fixed 256, not derived from the other sizes)")
    head_dim_number(r)
    return r.heads("require", kv="stated")


def _layers(mixer: list[bool], linear: tuple[str, dict], full: tuple[str, dict], ffns: list[tuple[str, dict]]) -> list[Layer]:
    out = []
    for is_mixer, (ffn, sizes) in zip(mixer, ffns):
        attn, attn_sizes = linear if is_mixer else full
        out.append({"arch": f"{attn}.{ffn}", **attn_sizes, **sizes})
    return out


def _qwen3_next(r: Reader) -> list[Layer]:
    n = r.layer_count()
    experts = r.int("num_experts", 0) if r.has("num_experts") else r.need("num_experts")
    step = r.count("decoder_sparse_step", 1, minimum=1)
    dense_only = set(r.indices("mlp_only_layers", []))
    is_moe = [experts > 0 and i not in dense_only and (i + 1) % step == 0 for i in range(n)]
    moe = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size"),
           "E_s": 1, "m_s": r.need("shared_expert_intermediate_size")} if any(is_moe) else {}
    ffns = [("moe_shared_gate", moe) if m else ("dense", {"m": r.need("intermediate_size")}) for m in is_moe]
    return _layers(_interval_types(r), ("gdn", _gdn(r)), ("gqa-gated", _qwen_heads(r)), ffns)


def _qwen3_5_text(r: Reader) -> list[Layer]:
    ffns = [("dense", {"m": r.need("intermediate_size")})] * r.layer_count()
    return _layers(_interval_types(r), ("gdn", _gdn(r)), ("gqa-gated", _qwen_heads(r)), ffns)


def _qwen3_5_moe_text(r: Reader) -> list[Layer]:
    moe = {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size"),
           "E_s": 1, "m_s": r.need("shared_expert_intermediate_size")}
    ffns = [("moe_shared_gate", moe)] * r.layer_count()
    return _layers(_interval_types(r), ("gdn", _gdn(r)), ("gqa-gated", _qwen_heads(r)), ffns)


def _olmo_hybrid(r: Reader) -> list[Layer]:
    n = r.layer_count()
    derived = [FULL if i % 4 == 3 else LINEAR for i in range(n)]
    if FULL not in derived:
        derived[-1] = FULL
    mixer = _mixer_layers(r, derived)
    if all(mixer) or not any(mixer):
        raise r.error("'layer_types' must have both linear_attention and full_attention layers (transformers refuses it)")
    heads = r.heads("derive")
    ffns = [("dense", {"m": r.need("intermediate_size")})] * n
    return _layers(mixer, ("gdn", _gdn(r, heads["h_q"])), ("gqa", heads), ffns)


def _kimi_linear(r: Reader) -> list[Layer]:
    """KDA sizes from linear_attn_config where the checkpoint carries it (it wins over the
    linear_* fields, as __post_init__ reads it); layers from layer_types, else its 1-based
    kda_layers / full_attn_layers, else every 4th from layer 4 MLA."""
    n = r.layer_count()
    sub = r.get("linear_attn_config", {})
    if not isinstance(sub, dict):
        raise r.error(f"field 'linear_attn_config' must be an object, got {quote(sub)}")
    known = KIMI_LINEAR_ATTN_CONFIG.rows
    for key, value in sub.items():
        if value is not None and key not in known:
            raise r.error(f"field 'linear_attn_config.{key}' is not understood and may change the cost; costcalc "
                          f"does not guess -- remove it if it does not")
    for key, field in (("num_heads", "linear_num_heads"), ("head_dim", "linear_head_dim"),
                       ("short_conv_kernel_size", "linear_conv_kernel_dim")):
        if sub.get(key) is not None:
            r.config[field] = sub[key]
    d_l = r.count("linear_head_dim", 128, minimum=1)
    kda = {"h_lv": r.count("linear_num_heads", 32, minimum=1), "d_lk": d_l, "d_lv": d_l,
           "K_c": r.count("linear_conv_kernel_dim", 4, minimum=1), "Q_c": CHUNK}
    if r.types((LINEAR, FULL)) is not None or "full_attn_layers" not in sub or "kda_layers" not in sub:
        mixer = _mixer_layers(r, [FULL if i and i % 4 == 0 else LINEAR for i in range(n)])
    else:
        kinds: list = [None] * n
        for key, kind in (("full_attn_layers", FULL), ("kda_layers", LINEAR)):
            numbers = sub[key]
            if not isinstance(numbers, list) or any(isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= n
                                                    for x in numbers):
                raise r.error(f"'linear_attn_config.{key}' must list layer numbers from 1 to {n} (1-based)")
            for x in numbers:
                kinds[x - 1] = kind
        if None in kinds:
            raise r.error(f"linear_attn_config lists no kind for layer {kinds.index(None) + 1} (1-based): "
                          f"transformers cannot build it")
        mixer = [k == LINEAR for k in kinds]
    heads = r.need("num_attention_heads")
    mla = {"h_q": heads, "r_kv": r.need("kv_lora_rank"), "d_nope": r.need("qk_nope_head_dim"),
           "d_rope": r.need("qk_rope_head_dim"), "d_v": r.need("v_head_dim")}
    r.same("qk_head_dim", mla["d_nope"] + mla["d_rope"], "it must be qk_nope_head_dim + qk_rope_head_dim")
    r.same("num_key_value_heads", heads, "MLA gives every head its own key and value (transformers needs "
                                          "num_key_value_heads = num_attention_heads)")
    r.same("moe_layer_freq", 1, "transformers 5.23 makes every sparse layer MoE (it never reads this key)")
    attn = "mla"
    if r.has("q_lora_rank"):
        mla["r_q"], attn = r.need("q_lora_rank"), "mla_q"
    ffn_kinds = r.get("mlp_layer_types")
    if ffn_kinds is None:
        first = r.count("first_k_dense_replace", 1)
        ffn_kinds = ["dense" if i < first else "sparse" for i in range(n)]
    if not isinstance(ffn_kinds, list) or len(ffn_kinds) != n or any(k not in ("dense", "sparse") for k in ffn_kinds):
        raise r.error("'mlp_layer_types' must list dense or sparse for each layer (num_hidden_layers)")
    ffns = []
    for kind in ffn_kinds:
        if kind == "dense":
            ffns.append(("dense", {"m": r.need("intermediate_size")}))
        else:
            m_e = r.need("moe_intermediate_size")
            ffns.append(("moe_shared", {"E": r.need("num_experts"), "k": r.need("num_experts_per_token"), "m_e": m_e,
                                        "E_s": r.need("num_shared_experts"), "m_s": m_e}))
    return _layers(mixer, ("kda", kda), (attn, mla), ffns)


def _minimax(r: Reader) -> list[Layer]:
    n = r.layer_count()
    mixer = _mixer_layers(r, [FULL if (i + 1) % 2 else LINEAR for i in range(n)])
    given = r.get("attn_type_list")
    if given is not None and given != [0 if m else 1 for m in mixer]:
        raise r.error("'attn_type_list' (0 lightning, 1 softmax) disagrees with the layers transformers 5.23 builds "
                      "(from layer_types; absent: the even layers softmax): write layer_types")
    heads = r.heads("derive", kv="stated")
    window = r.has("sliding_window")
    full = ("window", {**heads, "W": r.need("sliding_window")}) if window else ("gqa", heads)
    lightning = {"h_q": heads["h_q"], "d_h": heads["d_h"], "Q_c": r.count("block_size", 256, minimum=1)}
    moe = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    return _layers(mixer, ("lightning", lightning), full, [("moe", moe)] * n)


MAPPERS: dict[str, Mapper] = {
    "qwen3_next": _qwen3_next,
    "qwen3_5_text": _qwen3_5_text,
    "qwen3_5_moe_text": _qwen3_5_moe_text,
    "olmo_hybrid": _olmo_hybrid,
    "kimi_linear": _kimi_linear,
    "minimax": _minimax,
}
