"""Layer lists of the attention + MLP/MoE decoder families added with transformers 5, read as 5.23 reads them.

What each family runs (docs/hf-import.md): fused projections (phi3's ``qkv_proj`` and
``gate_up_proj``, GPT-NeoX's ``query_key_value``, GLM-4's ``gate_up_proj``) cost exactly the
projections they fuse; parallel attention/MLP blocks (Cohere, GPT-NeoX) run the same matmuls as
serial ones; GPT-NeoX, StarCoder2 and Apertus have a non-gated MLP (FFN ``mlp``); Llama 4 has
chunked local attention (``chunk``). Biases are not counted.
"""
from __future__ import annotations

from typing import Callable

from .reader import CHUNKED, Layer, Reader, dense_layers, moe_layers


def _every_layer(r: Reader) -> list[bool]:
    """phi3, phimoe, starcoder2: one sliding mask for the whole model when sliding_window is set."""
    return [r.has("sliding_window")] * r.layer_count()


def _none(r: Reader) -> list[bool]:
    return [False] * r.layer_count()


def _dense(head_dim: str = "derive", kv: str = "derive", ffn: str = "dense",
           windows: Callable[[Reader], list[bool]] = _none) -> Callable[[Reader], list[Layer]]:
    def mapper(r: Reader) -> list[Layer]:
        if r.family == "gemma" and r.get("use_bidirectional_attention", False) is not False:
            raise r.error("use_bidirectional_attention must be false: a non-causal decoder is not modelled")
        return dense_layers(r, r.heads(head_dim, kv), windows(r), ffn)
    return mapper


def _all_moe(kv: str, experts: str = "num_local_experts", k: int | None = None,
             windows: Callable[[Reader], list[bool]] = _none) -> Callable[[Reader], list[Layer]]:
    def mapper(r: Reader) -> list[Layer]:
        expert = {"E": r.need(experts), "k": k or r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
        return moe_layers(r, r.heads("derive", kv), windows(r), [True] * r.layer_count(), expert)
    return mapper


def _olmo3_windows(r: Reader) -> list[bool]:
    return r.windowed([(i + 1) % 4 != 0 for i in range(r.layer_count())], ())


def _exaone4_windows(r: Reader) -> list[bool]:
    """layer_types, else the pattern: an int p (layer i global iff (i+1) % p == 0) or, as
    published files write it, a string such as 'LLLG' (read only to check layer_types)."""
    n = r.layer_count()
    pattern = r.get("sliding_window_pattern", 4)
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise r.error(f"sliding_window_pattern {pattern!r} is not a string of L (local) and G (global)")
        derived = [pattern[i % len(pattern)] == "L" for i in range(n)]
    else:
        every = r.count("sliding_window_pattern", 4, minimum=1)
        derived = [(i + 1) % every != 0 for i in range(n)]
    if r.get("layer_types") is None and (isinstance(pattern, str) or not r.has("sliding_window")):
        raise r.error("needs field 'layer_types': transformers 5.23 cannot derive it from a string "
                      "sliding_window_pattern or without a sliding_window")
    return r.windowed(derived, ("sliding_window_pattern",) if r.has("sliding_window_pattern") else ())


def _smollm3_windows(r: Reader) -> list[bool]:
    n = r.layer_count()
    on = r.flag("use_sliding_window", False) and r.has("sliding_window")
    interval = r.count("no_rope_layer_interval", 4, minimum=1)
    nope = r.indices("no_rope_layers", [int((i + 1) % interval != 0) for i in range(n)])
    if len(nope) != n:
        raise r.error("'no_rope_layers' must list one flag per layer")
    local = r.windowed([on and not nope[i] for i in range(n)],
                       tuple(k for k in ("use_sliding_window", "no_rope_layers") if r.has(k)))
    if any(local) and not on:
        raise r.error("'layer_types' windows layers but use_sliding_window is not true or sliding_window is null")
    return local


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
    rope = r.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
    if len(rope) != n:
        raise r.error("'no_rope_layers' must list one flag per layer")
    local = r.windowed([bool(x) for x in rope], ("no_rope_layers",) if r.get("no_rope_layers") else (), CHUNKED)
    step = r.count("interleave_moe_layer_step", 1, minimum=1)
    moe = set(r.indices("moe_layers", list(range(step - 1, n, step))))
    m_e = r.need("intermediate_size")
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e}
    return moe_layers(r, r.heads("stated", kv="stated"), local, [i in moe for i in range(n)], expert,
                      {"E_s": 1, "m_s": m_e}, dense_width="intermediate_size_mlp", kind="chunk")


MAPPERS: dict[str, Callable[[Reader], list[Layer]]] = {
    "phi3": _dense(windows=_every_layer),
    "phimoe": _all_moe("stated", k=2, windows=_every_layer),     # sparsemixer: always 2 experts
    "granite": _dense(),
    "granitemoe": _all_moe("derive"),
    "olmo2": _dense(),
    "olmo3": _dense(windows=_olmo3_windows),
    "starcoder2": _dense(kv="stated", ffn="mlp", windows=_every_layer),
    "gemma": _dense("require", "stated"),
    "cohere": _dense(),
    "gpt_neox": _dense("mha", ffn="mlp"),
    "glm4": _dense("require", "stated"),
    "glm4_moe": _glm4_moe,
    "ernie4_5_moe": _ernie4_5_moe,
    "exaone4": _dense(kv="stated", windows=_exaone4_windows),
    "smollm3": _dense(kv="stated", windows=_smollm3_windows),
    "seed_oss": _dense("stated", "stated"),
    "apertus": _dense(ffn="mlp"),
    "llama4_text": _llama4_text,
}
