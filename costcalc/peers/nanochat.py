"""nanochat's ``GPT.estimate_flops`` (karpathy/nanochat).

Follows ``nanochat/gpt.py`` at commit e28d4ea: FLOPs per token of training (forward +
backward) = ``6 x (parameters - wte - value embeddings - scalars - 1-D block parameters) +
sum over layers of 12 h q min(window, t)``, q = n_embd // n_head, t = sequence_len: the
matrices a token runs through (norm weights, being 1-D, out; the untied lm_head in), and
attention over the full rectangle, a sliding-window layer as t x min(W, t). A dense model
only; no inference estimate.
"""
from __future__ import annotations

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, cannot, reconcile
from .counts import has, matrices


class Nanochat(Recipe):
    name = "nanochat"
    printed = "FLOP/token"
    reported_as = "GPT.estimate_flops() (FLOPs per token, forward + backward)"
    source = "karpathy/nanochat nanochat/gpt.py at commit e28d4ea"
    kinds = frozenset({"mlp"})

    def why_not(self, case: Case) -> Optional[str]:
        return None if case.training else "a training estimate only (FLOPs per token, forward + backward)"

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        spec = case.spec
        if has(spec, ffn="moe") or spec.has_mla:
            return cannot("nanochat's GPT is a dense GQA model: no MoE, no MLA")
        p = matrices(spec)
        weights = p["total"] - p["embedding"]          # wte out (a tied table takes the LM head with it)
        t, q = case.seq, spec["d"] // spec["h_q"]
        attention = sum(g.count * 12 * g.sizes["h_q"] * q * (min(g.sizes["W"], t) if "W" in g.sizes else t)
                        for g in spec.groups)
        per_token = 6 * weights + attention
        tokens = case.batch * t
        extras = [("LM head not counted (a tied table is excluded as wte)",
                   lambda c: -cc.term("lm_head", c) if p["tied"] else 0),
                  ("attention as written: window layers t x min(W, t), width n_embd",
                   lambda c: tokens * attention - cc.term("attention", c))]
        return reconcile(cc, [("full square", {"convention": "full"})], extras, Told(tokens * per_token, per_token,
                         f"per token x {tokens:,} tokens (batch x seq)"))
