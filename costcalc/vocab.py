"""The project's one vocabulary, as plain names: no sympy, so a fast start can read it.

A model symbol's name is its key in a preset file; a workload symbol has a row column
/ CLI option stem. ``costcalc.symbols`` turns these names into sympy symbols.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

ARCHS = ("dense", "moe")


class Name(NamedTuple):
    name: str       # the symbol's name
    key: str        # preset key (model) or row column / CLI option stem (workload)
    meaning: str
    hf_field: str = ""


MODEL = (
    Name("L", "L", "decoder layers", "num_hidden_layers"),
    Name("d", "d", "model width", "hidden_size"),
    Name("h_q", "h_q", "query heads", "num_attention_heads"),
    Name("h_kv", "h_kv", "key/value heads", "num_key_value_heads"),
    Name("d_h", "d_h", "head dim", "head_dim (else hidden_size / num_attention_heads)"),
    Name("m", "m", "dense SwiGLU width", "intermediate_size"),
    Name("E", "E", "routed experts", "num_local_experts / num_experts"),
    Name("k", "k", "experts per token", "num_experts_per_tok"),
    Name("m_e", "m_e", "expert width", "moe_intermediate_size (Mixtral: intermediate_size)"),
    Name("V", "V", "vocabulary", "vocab_size"),
    Name("W", "W", "sliding window: keys a query reads at most, itself included", "sliding_window"),
    Name("E_s", "E_s", "shared experts (always on)", "n_shared_experts (Qwen2-MoE: 1)"),
    Name("m_s", "m_s", "shared expert width", "moe_intermediate_size / shared_expert_intermediate_size"),
    Name("r_q", "r_q", "MLA query LoRA rank", "q_lora_rank"),
    Name("r_kv", "r_kv", "MLA key/value latent rank", "kv_lora_rank"),
    Name("d_nope", "d_nope", "MLA per-head query/key dim without RoPE", "qk_nope_head_dim"),
    Name("d_rope", "d_rope", "MLA per-head RoPE dim (one shared key)", "qk_rope_head_dim"),
    Name("d_v", "d_v", "MLA per-head value dim", "v_head_dim"),
)

DERIVED = (
    Name("d_q", "d_q", "query width h_q*d_h"),
    Name("d_kv", "d_kv", "K (or V) width h_kv*d_h"),
)

WORKLOAD = (
    Name("B", "batch", "sequences in the batch"),
    Name("S", "seq", "prompt length"),
    Name("T", "context", "tokens already in the KV cache (prefix for a chunk)"),
    Name("C", "chunk", "new tokens in a chunk"),
    Name("N", "new_tokens", "output tokens of a generation"),
    Name("b_q", "tile", "queries per attention tile (tiled convention)"),
    Name("b_k", "tile", "keys per attention tile (tiled convention)"),
)

# Attention conventions, logits modes, and the breakdown terms in the order columns show them:
# the block linear parts, their sum ``linear``, attention, LM head, ``total``.
CONVENTIONS = ("causal", "full", "tiled")
LOGITS = ("last", "all")
LINEAR_PARTS = ("attn_proj", "ffn", "router", "experts", "shared_experts")
TERM_ORDER = LINEAR_PARTS + ("linear", "attention", "lm_head", "total")

ORDER = tuple(n.name for n in MODEL + DERIVED + WORKLOAD)  # argument order of generated code


def derived(sizes: Mapping[str, int]) -> dict[str, int]:
    """The derived widths d_q and d_kv from a model's head counts (where it has d_h)."""
    if "d_h" not in sizes:
        return {}
    return {"d_q": sizes["h_q"] * sizes["d_h"], "d_kv": sizes["h_kv"] * sizes["d_h"]}


def meaning(name: str) -> str:
    return next(n.meaning for n in MODEL + DERIVED + WORKLOAD if n.name == name)


# The workloads ``costcalc formula`` prints, with what each one is.
FORMULAS = {
    "prefill": "B prompts of S tokens",
    "cached-prefill": "C new tokens over T cached",
    "varlen": "packed variable-length batch (padded: prefill at S = max S_i)",
    "chunked": "n chunks of C tokens after T cached, logits on the last",
    "decode": "one decode step over T cached tokens",
    "generate": "prefill of S plus N-1 decode steps",
    "train": "forward with all-position logits x 3",
    "crossover": "where attention FLOPs equal linear FLOPs",
}
