"""MaxText's TFLOPs: ``calculate_tflops_training_per_device`` and
``calculate_prefill_tflops_per_device``.

Follows ``src/MaxText/maxtext_utils.py`` at commit c491caa. Training, from the shapes: the
FFN (SwiGLU; MoE: the gate 2BSdE and k experts; DeepSeek: dense-first layers and shared
experts), QKV and output projections (MLA naive), ``embedding_flops = 2BSdV`` (the LM head
on every position), x3 for forward and backward; attention = the non-causal 4BS^2 h d_h
halved "due to causal mask" -- S^2/2, the diagonal dropped (a sliding-window layer: the
rectangle S x min(W, S), halved). Prefill, from the parameter count:
``2 N S + 4 h L d_h S^2 / 2`` with N every parameter of the loaded tree (embedding table,
norm weights, every expert), per prompt. TFLOPs per device, one device.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Optional

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, cannot, reconcile
from .counts import matrices, norms

HALF = "half square (S^2/2: the diagonal dropped)"


class Maxtext(Recipe):
    name = "maxtext"
    printed = "TFLOP"
    reported_as = "TFLOPs per device (per training step, or per prefill)"
    source = "AI-Hypercomputer/maxtext src/MaxText/maxtext_utils.py at commit c491caa"

    def why_not(self, case: Case) -> Optional[str]:
        if case.decoding or case.generating:
            return "no decode FLOP estimate (its inference microbenchmark reports decode as time and bandwidth)"
        return None

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        """calculate_tflops_training_per_device for a training step, else
        calculate_prefill_tflops_per_device."""
        return (self.train if case.training else self.prefill)(case, cc, setup)

    def train(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        spec, b, s = case.spec, case.batch, case.seq
        learnable, attention = 2 * b * s * spec["d"] * spec["V"], Fraction(0)
        for g in spec.groups:
            z, L, d, blk = g.sizes, g.count, g.sizes["d"], g.block
            if blk.ffn == "dense":
                learnable += L * 6 * b * s * z["m"] * d
            else:
                learnable += L * (2 * b * s * d * z["E"] + z["k"] * 6 * b * s * z["m_e"] * d)
                learnable += L * z["E_s"] * 6 * b * s * z["m_s"] * d if blk.shared else 0
            if blk.attention == "mla":
                h, qk = z["h_q"], z["d_nope"] + z["d_rope"]
                q = d * z["r_q"] + z["r_q"] * h * qk if blk.q_lora else d * h * qk
                kv = d * (z["r_kv"] + z["d_rope"]) + z["r_kv"] * h * (z["d_nope"] + z["d_v"])
                learnable += L * 2 * b * s * (q + kv + d * h * z["d_v"])
                attention += L * Fraction(2 * b * s * s * h * (qk + z["d_v"]), 2)
            else:
                hq, hkv, dh = z["h_q"], z["h_kv"], z["d_h"]
                learnable += L * (2 * b * s * d * (hq + 2 * hkv) * dh + 2 * b * s * d * hq * dh)
                keys = min(z["W"], s) if blk.attention == "window" else s
                attention += L * Fraction(4 * b * s * keys * hq * dh, 2)
        flops = 3 * (learnable + attention)
        extras = [(HALF + ("; window layers S x min(W, S) / 2" if spec.windows else ""),
                   lambda c: 3 * attention - cc.term("attention", c)),
                  ("shared-expert gate not counted", -3 * 2 * b * s * sum(g.count * g.sizes["d"] for g in spec.groups
                                                                     if g.block.shared_gate))]
        return reconcile(cc, [], extras, Told(flops, float(flops) / 1e12, "per device per step, 1 device, gas 1"))

    def prefill(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        spec, b, s = case.spec, case.batch, case.seq
        if spec.has_mla:
            return cannot("its prefill formula takes config.head_dim, which MLA's per-head widths are not")
        p = matrices(spec)
        n = p["total"] + norms(spec)                    # the whole parameter tree
        g = spec.groups[0]
        per_prompt = 2 * n * s + Fraction(4 * g.sizes["h_q"] * spec["L"] * g.sizes["d_h"] * s * s, 2)
        flops = b * per_prompt
        attention = b * Fraction(4 * g.sizes["h_q"] * spec["L"] * g.sizes["d_h"] * s * s, 2)
        extras = [(HALF + ("; windows ignored" if spec.windows else ""),
                   lambda c: attention - cc.term("attention", c)),
                  ("norm weights as matmul parameters", 2 * b * s * norms(spec)),
                  ("embedding as a GEMM (the table in the parameter count)",
                   0 if p["tied"] else 2 * b * s * p["embedding"]),
                  ("every expert counted (all E, not k)", 2 * b * s * (p["experts"] - p["experts_run"]))]
        return reconcile(cc, [("LM head on all positions", {"logits": "all"})], extras, Told(flops,
                         float(flops) / 1e12, f"per prompt (x {b}), 1 device; N = every parameter"))
