"""MoE families: all-MoE, dense-first or interleaved layouts, shared experts (gated or not), MLA
(DeepSeek), windows beside MoE (gpt-oss, dots1) and Llama 4's chunked attention. Where the current
modelling code and older reference code disagree, the current code is followed: qwen2_moe windows
the even layers below ``max_window_layers``; qwen3_moe with ``use_sliding_window`` windows every
layer; DeepSeek's MoE layers are those from ``first_k_dense_replace`` on (``moe_layer_freq`` 1)."""
from __future__ import annotations

from ...errors import quote
from ..reader import CHUNKED, Layer, Reader, moe_layers
from .common import Mapper, all_moe, dense, every_layer, hunyuan_keys, qwen_windows, stated_window


def _mixtral(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    return moe_layers(r, r.heads("derive", kv="stated"), every_layer(r), [True] * n, expert)


def _sparse_steps(r: Reader, experts: int) -> list[bool]:
    """Qwen2/3-MoE: layer i is MoE iff experts > 0, i not in mlp_only_layers, (i+1) % step == 0."""
    step = r.count("decoder_sparse_step", 1, minimum=1)
    dense_only = set(r.indices("mlp_only_layers", []))
    return [experts > 0 and i not in dense_only and (i + 1) % step == 0 for i in range(r.layer_count())]


def _qwen2_moe(r: Reader) -> list[Layer]:
    experts = r.int("num_experts", 0) if r.has("num_experts") else r.need("num_experts")
    is_moe = _sparse_steps(r, experts)
    expert = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")} \
        if any(is_moe) else {}
    shared = {"E_s": 1, "m_s": r.need("shared_expert_intermediate_size")} if any(is_moe) else {}
    return moe_layers(r, r.heads("derive", kv="stated"), qwen_windows(r, below=True), is_moe, expert, shared,
                      gate=True)


def _qwen3_moe(r: Reader) -> list[Layer]:
    experts = r.int("num_local_experts", 0) if r.has("num_local_experts") else r.need("num_local_experts")
    is_moe = _sparse_steps(r, experts)
    expert = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")} \
        if any(is_moe) else {}
    r.same("shared_expert_intermediate_size", 0, "transformers 5.23's qwen3_moe builds no shared expert")
    local = [r.flag("use_sliding_window", False)] * r.layer_count()
    return moe_layers(r, r.heads("derive", kv="stated"), local, is_moe, expert)


def _olmoe(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    return moe_layers(r, r.heads("derive"), [False] * n, [True] * n, expert)


def mla_sizes(r: Reader) -> tuple[str, dict[str, int]]:
    """DeepSeek's MLA as its families read it: the attention kind (``mla``, or ``mla_q`` with a
    query LoRA) and its sizes; also used by the sparse-attention families (``sparse.py``)."""
    if "q_lora_rank" not in r.config:
        raise r.error("needs field 'q_lora_rank' (null for no query LoRA; the class default is 1536)")
    mla = {"h_q": r.need("num_attention_heads"), "r_kv": r.need("kv_lora_rank"), "d_nope": r.need("qk_nope_head_dim"),
           "d_rope": r.need("qk_rope_head_dim"), "d_v": r.need("v_head_dim")}
    r.same("qk_head_dim", mla["d_nope"] + mla["d_rope"], "it must be qk_nope_head_dim + qk_rope_head_dim")
    r.same("num_key_value_heads", mla["h_q"], "MLA gives every head its own key and value (transformers needs "
                                               "num_key_value_heads = num_attention_heads)")
    r.same("moe_layer_freq", 1, "transformers 5.23 makes every layer from first_k_dense_replace on MoE")
    attn = "mla"
    if r.has("q_lora_rank"):
        mla["r_q"], attn = r.need("q_lora_rank"), "mla_q"
    return attn, mla


def deepseek_ffn(r: Reader, moe: bool) -> tuple[str, dict[str, int]]:
    """A DeepSeek layer's FFN: routed plus shared experts of width m_e, or a dense SwiGLU."""
    if moe:
        m_e = r.need("moe_intermediate_size")
        return "moe_shared", {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e,
                              "E_s": r.need("n_shared_experts"), "m_s": m_e}
    return "dense", {"m": r.need("intermediate_size")}


def _deepseek(r: Reader) -> list[Layer]:
    attn, mla = mla_sizes(r)
    first = r.count("first_k_dense_replace", 3 if r.family == "deepseek_v3" else 0)
    out = []
    for i in range(r.layer_count()):
        ffn, sizes = deepseek_ffn(r, i >= first)
        out.append({"arch": f"{attn}.{ffn}", **mla, **sizes})
    return out


def _gpt_oss(r: Reader) -> list[Layer]:
    k = r.need("num_experts_per_tok")
    r.same("experts_per_token", k, "transformers 5.23 runs num_experts_per_tok experts (it never reads this key)")
    expert = {"E": r.need("num_local_experts"), "k": k, "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    local = r.windowed([i % 2 == 0 for i in range(n)], ())
    return moe_layers(r, r.heads("stated", kv="stated"), local, [True] * n, expert)


def _glm4_moe(r: Reader) -> list[Layer]:
    first = r.count("first_k_dense_replace", 1)
    n = r.layer_count()
    m_e = r.need("moe_intermediate_size")
    expert = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e}
    shared = {"E_s": r.need("n_shared_experts"), "m_s": m_e}
    return moe_layers(r, r.heads("derive", kv="stated"), [False] * n, [i >= first for i in range(n)], expert, shared)


def _ernie4_5_moe(r: Reader) -> list[Layer]:
    n = r.layer_count()
    start = r.count("moe_layer_start_index", 1)
    end = r.int("moe_layer_end_index", -1) if "moe_layer_end_index" in r.config else -1
    end = n - 1 if end == -1 else end
    step = r.count("moe_layer_interval", 1, minimum=1)
    is_moe = [(i + 1) % step == 0 and start <= i <= end for i in range(n)]
    m_e = r.need("moe_intermediate_size")
    expert = {"E": r.need("moe_num_experts"), "k": r.need("moe_k"), "m_e": m_e}
    shared_count = r.int("moe_num_shared_experts", 0) if r.has("moe_num_shared_experts") else r.need("moe_num_shared_experts")
    shared = {"E_s": shared_count, "m_s": m_e} if shared_count else None
    return moe_layers(r, r.heads("derive", kv="stated"), [False] * n, is_moe, expert, shared)


def _llama4_text(r: Reader) -> list[Layer]:
    """Chunked attention where layer_types says so (absent: on the RoPE layers, no_rope_layers[i]
    == 1); MoE on moe_layers (absent: every interleave_moe_layer_step-th layer) with one shared
    expert of the expert width, dense SwiGLU of intermediate_size_mlp elsewhere. transformers runs
    every expert on every token and zeroes the unselected ones; costcalc counts the k routed."""
    n = r.layer_count()
    interval = r.count("no_rope_layer_interval", 4, minimum=1)
    rope = r.indices("no_rope_layers", []) or [int((i + 1) % interval != 0) for i in range(n)]
    if len(rope) != n:
        raise r.error("'no_rope_layers' must list one flag per layer")
    local = r.windowed([bool(x) for x in rope], ("no_rope_layers",) if r.get("no_rope_layers") else (), CHUNKED)
    step = r.count("interleave_moe_layer_step", 1, minimum=1)
    moe = set(r.indices("moe_layers", list(range(step - 1, n, step))))
    m_e = r.need("intermediate_size")
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e}
    return moe_layers(r, r.heads("stated", kv="stated"), local, [i in moe for i in range(n)], expert,
                      {"E_s": 1, "m_s": m_e}, dense_width="intermediate_size_mlp", kind="chunk")


def _dots1(r: Reader) -> list[Layer]:
    """GLM-4.5's layout (dense below first_k_dense_replace, then routed plus shared experts of
    width m_e) with Qwen2's windows: absent layer_types, layers i >= max_window_layers (62) are
    windowed when sliding_window (class default 4096) is not null."""
    r.same("moe_layer_freq", 1, "transformers 5.23 makes every layer from first_k_dense_replace on MoE")
    n = r.layer_count()
    first_window = r.count("max_window_layers", 62)
    window_set = "sliding_window" not in r.config or r.has("sliding_window")
    derived = [window_set and i >= first_window for i in range(n)]
    stated_window(r, any(derived))
    local = r.windowed(derived, tuple(k for k in ("sliding_window", "max_window_layers") if k in r.config))
    r.same("use_sliding_window", any(local), "transformers 5.23 does not read it: it must say whether the layers "
                                             "it builds (from sliding_window, max_window_layers, layer_types) are windowed")
    first = r.count("first_k_dense_replace", 0)
    m_e = r.need("moe_intermediate_size")
    expert = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e}
    shared = {"E_s": r.need("n_shared_experts"), "m_s": m_e}
    return moe_layers(r, r.heads("derive", kv="stated"), local, [i >= first for i in range(n)], expert, shared)


def _hunyuan_v1_moe(r: Reader) -> list[Layer]:
    """Every layer MoE: num_experts experts and one shared SwiGLU MLP with no output gate (unlike
    qwen2_moe's), all intermediate_size wide; k = moe_topk (one per layer where a list). Keys of the
    published file that 5.23 does not read must say what 5.23 builds (``hunyuan_keys`` too)."""
    heads = r.heads("require", kv="derive")
    n = r.layer_count()
    m = r.need("intermediate_size")
    hunyuan_keys(r, heads["d_h"])
    r.same("use_mixed_mlp_moe", True, "transformers 5.23 always runs the shared MLP")
    for key, value, why in (("moe_intermediate_size", m, "transformers 5.23's experts are intermediate_size wide"),
                            ("num_shared_expert", 1, "transformers 5.23 builds one shared MLP")):
        given = r.get(key)
        if given is not None and any(v != value for v in (given if isinstance(given, list) else [given])):
            raise r.error(f"field {quote(key)} is {quote(given)} but {why} ({value})")
    if isinstance(r.get("num_experts"), list):
        raise r.error("'num_experts' must be one integer (transformers 5.23 cannot build per-layer expert counts)")
    experts = r.need("num_experts")
    topk = r.get("moe_topk")
    if isinstance(topk, list):
        if len(topk) != n or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in topk):
            raise r.error("'moe_topk' must be a positive integer or one per layer (num_hidden_layers)")
        ks = topk
    else:
        ks = [r.need("moe_topk")] * n
    return [layer for k in ks       # a layer's k is one of its sizes: one layer at a time
            for layer in moe_layers(r, heads, [False], [True], {"E": experts, "k": k, "m_e": m}, {"E_s": 1, "m_s": m})]

MAPPERS: dict[str, Mapper] = {
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "qwen3_moe": _qwen3_moe,
    "olmoe": _olmoe,
    "phimoe": all_moe("stated", k=2, windows=every_layer),   # sparsemixer: always 2 experts
    "granitemoe": all_moe("derive"),
    "gpt_oss": _gpt_oss,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "glm4_moe": _glm4_moe,
    "ernie4_5_moe": _ernie4_5_moe,
    "dots1": _dots1,
    "hunyuan_v1_moe": _hunyuan_v1_moe,
    "llama4_text": _llama4_text,
}
