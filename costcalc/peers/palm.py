"""PaLM's model FLOPs: ``6N + 12 L H Q T`` per token (Chowdhery et al. 2022, arXiv:2204.02311,
Appendix B "Model FLOPs utilization").

N = non-embedding parameters, read as every parameter but the input embedding table: norm
weights are parameters (in), an untied LM head is in, a tied table is the embedding (out).
12 L H Q T = 3 x (QK^T + AV) over the full T x T square, H query heads of Q. Training only;
for an MoE model N is the active parameters (the usual extension); MLA has no one H x Q.
"""
from __future__ import annotations

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, cannot, reconcile
from .counts import matrices, norms


class Palm(Recipe):
    name = "palm"
    printed = "FLOP/token"
    reported_as = "6N + 12LHQT (FLOPs per token, forward + backward)"
    source = "PaLM, arXiv:2204.02311, Appendix B"
    kinds = frozenset({"mlp", "chunk"})

    def why_not(self, case: Case) -> Optional[str]:
        return None if case.training else "a training formula only (model FLOPs per token, forward + backward)"

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        spec = case.spec
        if spec.has_mla:
            return cannot("MLA has no single H x Q (scores and values have different widths)")
        p = matrices(spec)
        n = p["active"] - (p["lm_head"] if p["tied"] else 0) + norms(spec)
        t = case.seq
        per_token = 6 * n + 12 * sum(g.count * g.sizes["h_q"] * g.sizes["d_h"] for g in spec.groups) * t
        tokens = case.batch * t
        extras = [("norm weights as matmul parameters", 6 * norms(spec) * tokens),
                  ("LM head not counted (a tied table is the embedding)",
                   lambda c: -cc.term("lm_head", c) if p["tied"] else 0)]
        note = f"per token x {tokens:,} tokens; N includes norm weights" + (
            "; MoE: N = active parameters" if any(g.block.ffn == "moe" for g in spec.groups) else "")
        return reconcile(cc, [("full square", {"convention": "full"})], extras, Told(tokens * per_token, per_token, note))
