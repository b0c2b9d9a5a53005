"""Parameter counts the parameter-count formulas (PaLM, torchtitan, nanochat, MaxText) start
from, and the shape checks of the tools that take one kind of layer."""
from __future__ import annotations

from typing import Optional

from ..spec import Group, ModelSpec


def norms(spec: ModelSpec) -> int:
    """RMSNorm weight elements of a Llama-style model as Hugging Face and torchtitan build it:
    2d per layer (before attention and before the FFN), d for the final norm, and MLA's
    latent norms (r_q for the query LoRA, r_kv for the KV latent). Families with more norms
    (Gemma's four per layer, q/k norms of Qwen3 or OLMoE) have more than this."""
    total = spec["d"]
    for g in spec.groups:
        per = 2 * g.sizes["d"]
        if g.block.attention == "mla":
            per += g.sizes["r_kv"] + (g.sizes["r_q"] if g.block.q_lora else 0)
        total += g.count * per
    return total


def matrices(spec: ModelSpec) -> dict[str, int]:
    """Matrix parameters from costcalc's own count (``calc.parameters``): ``total`` (every
    expert; a tied table once), ``active`` (what a token runs, LM head included), the
    embedding and LM head, and the routed experts apart (all, and the k a token runs)."""
    from .. import calc

    p = calc.parameters(spec)
    all_experts = sum(g.count * g.sizes["E"] * 3 * g.sizes["d"] * g.sizes["m_e"] for g in spec.groups
                      if g.block.ffn == "moe")
    run = sum(g.count * g.sizes["k"] * 3 * g.sizes["d"] * g.sizes["m_e"] for g in spec.groups
              if g.block.ffn == "moe")
    return {"total": p["total_params"], "active": p["active_params"], "embedding": p["embedding_params"],
            "lm_head": p["lm_head_params"], "tied": p["tied_embeddings"], "experts": all_experts,
            "experts_run": run}


def one_kind(spec: ModelSpec) -> Optional[Group]:
    """The model's one layer group, or None where its layers differ."""
    return spec.groups[0] if spec.uniform else None


def has(spec: ModelSpec, attention: str = "", ffn: str = "") -> bool:
    return any((not attention or g.block.attention == attention) and (not ffn or g.block.ffn == ffn)
               for g in spec.groups)


def layers(spec: ModelSpec) -> str:
    """The model's layers as a tool that takes one kind would need to know: ``12 window.moe +
    12 gqa.moe``."""
    return " + ".join(f"{g.count} {g.arch}" for g in spec.groups)
