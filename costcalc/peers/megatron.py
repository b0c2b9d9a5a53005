"""Megatron-LM's ``num_floating_point_operations``: FLOPs of one training iteration.

Follows ``megatron/training/training.py`` at commit 001b00c: per token, 3 (forward +
backward) x 2 (per multiply-add) x [the FFN (SwiGLU: 3 matrices, ``gated_linear_multiplier``
3/2; without --swiglu 2; MoE: ``moe_ffn_hidden_size x
topk``, shared experts; no router), the attention projections (GQA: d (d_q + 2 d_kv) + d_q d;
MLA: q/kv LoRA with ``+1`` per rank -- the latent norms' weights -- and the RoPE key), the
attention core over ``seq_length / 2`` keys ("causal mask (only half of the mask is
non-zero)": the diagonal dropped; sliding windows are not in the standard path), and the
logits over ``padded_vocab_size`` (a multiple of 128 at TP 1)] x batch x seq_length.
Computed in floats.
"""
from __future__ import annotations

from fractions import Fraction

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, reconcile

PAD = 128     # make_vocab_size_divisible_by (x tensor-parallel size 1)


class Megatron(Recipe):
    name = "megatron"
    reported_as = "num_floating_point_operations(args, batch_size) (FLOPs per iteration, float)"
    source = "NVIDIA/Megatron-LM megatron/training/training.py at commit 001b00c"
    kinds = frozenset({"mlp", "chunk"})

    def why_not(self, case: Case) -> Optional[str]:
        return None if case.training else "a training count only (one iteration, forward + backward)"

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        spec, s = case.spec, case.seq
        d, V = spec["d"], spec["V"]
        padded = -(-V // PAD) * PAD
        ffn = attention = Fraction(0)
        norms = gates = 0
        for g in spec.groups:
            z, L, blk = g.sizes, g.count, g.block
            if blk.ffn in ("dense", "mlp"):     # gated_linear_multiplier: 3/2 with --swiglu, else 1
                ffn += L * 6 * d * (3 if blk.ffn == "dense" else 2) * z["m"]
            else:
                ffn += L * 6 * d * 3 * (z["m_e"] * z["k"] + (z["E_s"] * z["m_s"] if blk.shared else 0))
                gates += L * d if blk.shared_gate else 0
            if blk.attention == "mla":
                h, qk = z["h_q"], z["d_nope"] + z["d_rope"]
                q = z["r_q"] * (d + h * qk + 1) if blk.q_lora else d * h * qk
                ffn += L * 6 * (q + z["r_kv"] * (d + h * (z["d_nope"] + z["d_v"]) + 1) + d * z["d_rope"]
                                + h * z["d_v"] * d)
                attention += L * 6 * (Fraction(s * h * qk, 2) + Fraction(s * h * z["d_v"], 2))
                norms += L * (z["r_kv"] + (z["r_q"] if blk.q_lora else 0))
            else:
                dq, dkv = z["h_q"] * z["d_h"], z["h_kv"] * z["d_h"]
                ffn += L * 6 * (d * (dq + 2 * dkv) + dq * d)
                attention += L * 6 * Fraction(dq * s, 2) * 2
        per_token = ffn + attention + 6 * d * padded
        tokens = case.batch * s
        local = [w for w, on in (("windows", spec.windows), ("chunks", any(g.block.attention == "chunk"
                                                                            for g in spec.groups))) if on]
        extras = [("half square (S^2/2: the diagonal dropped" + (f"; {' and '.join(local)} ignored)" if local else ")"),
                   lambda c: tokens * attention - cc.term("attention", c)),
                  ("router omitted", lambda c: -cc.term("router", c)),
                  ("shared-expert gate not counted", -6 * tokens * gates),
                  ("MLA latent norm weights as matmul parameters (+1 per rank)", 6 * tokens * norms),
                  (f"padded vocabulary ({padded:,}, not {V:,})", 6 * tokens * d * (padded - V))]
        flops = tokens * per_token
        return reconcile(cc, [], extras, Told(flops, float(flops), f"batch_size {case.batch} x seq_length {s}; TP 1"))
