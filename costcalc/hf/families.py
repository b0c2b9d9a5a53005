"""Layer lists of the families costcalc imported before transformers 5, read as transformers 5.23 reads them.

Each mapper returns one dict per layer (``{"arch": ..., sizes}``). Where the current modelling
code and older reference code disagree, the current code is followed (docs/hf-import.md):
qwen2_moe windows the even layers below ``max_window_layers``; qwen3_moe with
``use_sliding_window`` windows every layer; DeepSeek's MoE layers are those from
``first_k_dense_replace`` on (``moe_layer_freq`` must be 1).
"""
from __future__ import annotations

from typing import Callable

from .reader import Layer, Reader, dense_layers, moe_layers


def _llama(r: Reader) -> list[Layer]:
    return dense_layers(r, r.heads("derive"), [False] * r.layer_count())


def _mistral(r: Reader) -> list[Layer]:
    if "sliding_window" not in r.config:
        raise r.error("needs field 'sliding_window' (null for no window; the class default is 4096)")
    return dense_layers(r, r.heads("derive", kv="stated"), _every_layer(r, r.has("sliding_window")))


def _every_layer(r: Reader, windowed: bool) -> list[bool]:
    return [windowed] * r.layer_count()


def _qwen_windows(r: Reader, below: bool) -> list[bool]:
    """Qwen2/3 (``below`` False): layers i >= max_window_layers; Qwen2-MoE (``below``): even layers
    i < max_window_layers -- when use_sliding_window; layer_types decides where written."""
    on = r.flag("use_sliding_window", False)
    first = r.count("max_window_layers", 28)
    n = r.layer_count()
    derived = [on and ((i % 2 == 0 and i < first) if below else i >= first) for i in range(n)]
    local = r.windowed(derived, ("use_sliding_window", "max_window_layers"))
    if any(local) and not on:
        raise r.error("'layer_types' windows layers but use_sliding_window is not true (transformers then has no window)")
    return local


def _qwen2(r: Reader) -> list[Layer]:
    return dense_layers(r, r.heads("derive", kv="stated"), _qwen_windows(r, below=False))


def _qwen3(r: Reader) -> list[Layer]:
    return dense_layers(r, r.heads("require", kv="stated"), _qwen_windows(r, below=False))


def _mixtral(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    return moe_layers(r, r.heads("derive", kv="stated"), _every_layer(r, r.has("sliding_window")), [True] * n, expert)


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
    return moe_layers(r, r.heads("derive", kv="stated"), _qwen_windows(r, below=True), is_moe, expert, shared,
                      gate=True)


def _qwen3_moe(r: Reader) -> list[Layer]:
    experts = r.int("num_local_experts", 0) if r.has("num_local_experts") else r.need("num_local_experts")
    is_moe = _sparse_steps(r, experts)
    expert = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")} \
        if any(is_moe) else {}
    local = _every_layer(r, r.flag("use_sliding_window", False))
    return moe_layers(r, r.heads("derive", kv="stated"), local, is_moe, expert)


def _olmoe(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    return moe_layers(r, r.heads("derive"), [False] * n, [True] * n, expert)


def _deepseek(r: Reader) -> list[Layer]:
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
    first = r.count("first_k_dense_replace", 3 if r.family == "deepseek_v3" else 0)
    m_e = r.need("moe_intermediate_size")
    out = []
    for i in range(r.layer_count()):
        if i >= first:
            sizes = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e,
                     "E_s": r.need("n_shared_experts"), "m_s": m_e}
            out.append({"arch": f"{attn}.moe_shared", **mla, **sizes})
        else:
            out.append({"arch": f"{attn}.dense", **mla, "m": r.need("intermediate_size")})
    return out


def _gpt_oss(r: Reader) -> list[Layer]:
    k = r.need("num_experts_per_tok")
    r.same("experts_per_token", k, "transformers 5.23 runs num_experts_per_tok experts (it never reads this key)")
    expert = {"E": r.need("num_local_experts"), "k": k, "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    local = r.windowed([i % 2 == 0 for i in range(n)], ())
    return moe_layers(r, r.heads("stated", kv="stated"), local, [True] * n, expert)


def _causal(r: Reader) -> None:
    if r.get("use_bidirectional_attention", False) is not False:
        raise r.error("use_bidirectional_attention must be false: a non-causal decoder is not modelled")


def _gemma2(r: Reader) -> list[Layer]:
    _causal(r)
    r.same("sliding_window_size", r.get("sliding_window"), "it must equal sliding_window")
    n = r.layer_count()
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed([i % 2 == 0 for i in range(n)], ()))


def _gemma3_text(r: Reader) -> list[Layer]:
    _causal(r)
    keys = ("sliding_window_pattern", "_sliding_window_pattern")
    given = {r.count(k, 6, minimum=1) for k in keys if r.has(k)}
    if len(given) > 1:
        raise r.error(f"fields {keys[0]!r} and {keys[1]!r} disagree")
    every = given.pop() if given else 6
    derived = [(i + 1) % every != 0 for i in range(r.layer_count())]
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed(derived, keys))


MAPPERS: dict[str, Callable[[Reader], list[Layer]]] = {
    "llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "qwen3": _qwen3, "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe, "olmoe": _olmoe, "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek, "gpt_oss": _gpt_oss, "gemma2": _gemma2, "gemma3_text": _gemma3_text,
}
