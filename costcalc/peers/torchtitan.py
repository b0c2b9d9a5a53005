"""torchtitan's FLOPs per token (``get_dense_model_nparams_and_flops`` /
``get_moe_model_nparams_and_flops``).

Follows ``torchtitan/models/utils.py`` at commit 76dd118: ``6 x (nparams - embedding) +
6 x n_layers x n_heads x head_dims x seq_len``, head_dims = 2 head_dim (Llama, Qwen) or
d_nope + d_rope + d_v (DeepSeek-V3): every parameter but ``tok_embeddings`` (norm weights in,
the untied ``output`` in), attention over the full square ("we follow the convention and do
not account for sparsity in causal attention"). MoE: router and shared experts in full,
routed experts as ``all x top_k // num_experts``. MLA in the naive form. Training only.
"""
from __future__ import annotations

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, reconcile
from .counts import matrices, norms


class Torchtitan(Recipe):
    name = "torchtitan"
    printed = "FLOP/token"
    reported_as = "num_flops_per_token (FLOPs per token, forward + backward)"
    source = "pytorch/torchtitan torchtitan/models/utils.py at commit 76dd118"
    kinds = frozenset({"mlp", "chunk"})

    def why_not(self, case: Case) -> Optional[str]:
        return None if case.training else "a training estimate only (FLOPs per token for MFU)"

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        spec = case.spec
        p = matrices(spec)
        dense = p["total"] - p["experts"] - p["embedding"] + norms(spec)      # tied: the table once, then out
        routed = 0
        for g in spec.groups:
            if g.block.ffn == "moe":
                routed = p["experts"] * g.sizes["k"] // g.sizes["E"]
                break
        g0 = spec.groups[0]
        if g0.block.attention == "mla":
            head_dims = g0.sizes["d_nope"] + g0.sizes["d_rope"] + g0.sizes["d_v"]
        else:
            head_dims = 2 * g0.sizes["d_h"]
        t = case.seq
        per_token = 6 * (dense + routed) + 6 * spec["L"] * g0.sizes["h_q"] * head_dims * t
        tokens = case.batch * t
        extras = [("norm weights as matmul parameters", 6 * norms(spec) * tokens),
                  ("LM head not counted (a tied output is the embedding)",
                   lambda c: -cc.term("lm_head", c) if p["tied"] else 0),
                  ("routed experts as all x top_k // num_experts",
                   lambda c: 6 * tokens * routed - cc.term("experts", c))]
        return reconcile(cc, [("full square", {"convention": "full"})], extras, Told(tokens * per_token, per_token,
                         f"per token x {tokens:,} tokens; MLA naive"))
