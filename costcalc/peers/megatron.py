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

Hybrid models as its later ``hybrid_flops`` counts them (``gdn_layer_flops``,
``mamba_layer_flops``; the output gate of gated attention in the query projection): a Gated
DeltaNet layer's projections and its convolution per token exactly, its recurrence as
``4 h_v d_v^2`` multiply-adds a token (the 8 h_v d_k d_v FLOPs of the peers, d_k = d_v; costcalc's
recurrent count is 6); a Mamba-2 layer with the inner width hard-wired to 2d, its scan as
``7 d_in N`` FLOPs a token and no convolution.
"""
from __future__ import annotations

from fractions import Fraction

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, reconcile

PAD = 128     # make_vocab_size_divisible_by (x tensor-parallel size 1)


class Megatron(Recipe):
    name = "megatron"
    reported_as = "num_floating_point_operations(args, batch_size) (FLOPs per iteration, float)"
    source = ("NVIDIA/Megatron-LM megatron/training/training.py at commit 001b00c; hybrids: its later "
              "hybrid_flops, gdn_layer_flops and mamba_layer_flops")
    kinds = frozenset({"mlp", "chunk", "gdn", "mamba2", "gated", "none"})

    def why_not(self, case: Case) -> Optional[str]:
        return None if case.training else "a training count only (one iteration, forward + backward)"

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        spec, s = case.spec, case.seq
        d, V = spec["d"], spec["V"]
        padded = -(-V // PAD) * PAD
        ffn = attention = Fraction(0)
        norms = gates = 0
        scan = conv = mamba_proj = ours_mamba_proj = 0     # per token, forward + backward
        for g in spec.groups:
            z, L, blk = g.sizes, g.count, g.block
            if blk.ffn in ("dense", "mlp"):     # gated_linear_multiplier: 3/2 with --swiglu, else 1
                ffn += L * 6 * d * (3 if blk.ffn == "dense" else 2) * z["m"]
            elif blk.ffn == "moe":      # SwiGLU experts 3 matrices; plain (non-gated: Nemotron-H) 2
                ffn += L * 6 * d * (2 if blk.plain else 3) * (z["m_e"] * z["k"] + (z["E_s"] * z["m_s"] if blk.shared else 0))
                gates += L * d if blk.shared_gate else 0
            if blk.attention == "mla":
                h, qk = z["h_q"], z["d_nope"] + z["d_rope"]
                q = z["r_q"] * (d + h * qk + 1) if blk.q_lora else d * h * qk
                ffn += L * 6 * (q + z["r_kv"] * (d + h * (z["d_nope"] + z["d_v"]) + 1) + d * z["d_rope"]
                                + h * z["d_v"] * d)
                attention += L * 6 * (Fraction(s * h * qk, 2) + Fraction(s * h * z["d_v"], 2))
                norms += L * (z["r_kv"] + (z["r_q"] if blk.q_lora else 0))
            elif blk.attends:
                dq, dkv = z["h_q"] * z["d_h"], z["h_kv"] * z["d_h"]
                ffn += L * 6 * (d * (dq + 2 * dkv + (dq if blk.gated else 0)) + dq * d)
                attention += L * 6 * Fraction(dq * s, 2) * 2
            if blk.mixer == "gdn":
                qk, v = z["h_lk"] * z["d_lk"], z["h_lv"] * z["d_lv"]
                ffn += L * 6 * (d * (2 * qk + 2 * v + 2 * z["h_lv"]) + v * d)
                conv += L * 6 * z["K_c"] * (2 * qk + v)
                scan += L * 6 * z["h_lv"] * z["d_lv"] ** 2 * 4
            elif blk.mixer == "mamba2":
                d_in, inner = 2 * d, z["h_m"] * z["d_m"]
                mamba_proj += L * 6 * (d * (2 * d_in + 2 * z["G"] * z["N_s"] + z["h_m"]) + d_in * d)
                ours_mamba_proj += L * 6 * (d * (2 * inner + 2 * z["G"] * z["N_s"] + z["h_m"]) + inner * d)
                scan += L * 3 * 7 * d_in * z["N_s"]
        per_token = ffn + attention + 6 * d * padded + scan + conv + mamba_proj
        tokens = case.batch * s
        local = [w for w, on in (("windows", spec.windows), ("chunks", any(g.block.attention == "chunk"
                                                                            for g in spec.groups))) if on]
        extras = [("half square (S^2/2: the diagonal dropped" + (f"; {' and '.join(local)} ignored)" if local else ")"),
                   lambda c: tokens * attention - cc.term("attention", c)),
                  ("router omitted", lambda c: -cc.term("router", c)),
                  ("shared-expert gate not counted", -6 * tokens * gates),
                  ("MLA latent norm weights as matmul parameters (+1 per rank)", 6 * tokens * norms),
                  (f"padded vocabulary ({padded:,}, not {V:,})", 6 * tokens * d * (padded - V)),
                  ("Mamba-2 projections with the inner width hard-wired to 2d", tokens * (mamba_proj - ours_mamba_proj)),
                  ("scan by constants: Gated DeltaNet 4 h_v d_v^2 multiply-adds a token (d_k = d_v), Mamba 7 d_in N FLOPs",
                   lambda c: tokens * scan - cc.term("scan", c)),
                  ("convolution one output a token, none for Mamba-2", lambda c: tokens * conv - cc.term("conv", c))]
        flops = tokens * per_token
        return reconcile(cc, [], extras, Told(flops, float(flops), f"batch_size {case.batch} x seq_length {s}; TP 1"))
