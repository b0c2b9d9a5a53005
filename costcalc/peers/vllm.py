"""vLLM's MFU metric: ``vllm:estimated_flops_per_gpu_total``.

Follows ``vllm/v1/metrics/perf.py`` of vLLM 0.33.0 (the MFU metrics): each scheduler step
is a set of requests (new tokens, context length = computed + new tokens). Attention:
``qkv_proj`` and ``out_proj`` per token, ``attn_qk`` = ``attn_av`` = 2 x heads x head_dim x
sum(tokens x context) -- every new token charged its request's whole context: the full
rectangle for a prefill, T+1 keys for a decode step; a sliding-window layer clips the
context to W (``min(context, W)``: a rectangle, not the band). MLA
(``MLAAttentionMetrics``): the naive form (kv_b_proj on the new tokens, per key
2h(d_qk + d_v)). FFN: dense, k routed experts and the shared experts at
``moe_intermediate_size x n_shared_experts``; no router. Unembedding: one row per prefill
request and per decode token. tp = pp = dp = 1. Layer counts are floats: exact below 2^53.
"""
from __future__ import annotations

from typing import Optional

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, reconcile
from .hf import sum_min


def contexts(case: Case, window) -> tuple[int, int, int]:
    """(new tokens, logit rows, sum of tokens x context clipped to ``window``) over the
    scheduler steps of a case: a prefill of B requests (S tokens, context S), a decode step
    (context T+1), or a generation (the prefill, then step j with context S+j)."""
    b, s = case.batch, case.seq
    clip = (lambda c: min(c, window)) if window else (lambda c: c)
    if case.decoding:
        return b, b, b * clip(case.context + 1)
    steps = case.new - 1 if case.generating else 0
    later = sum_min(s + 1, s + steps, window) if window else steps * s + steps * (steps + 1) // 2
    return b * (s + steps), b * (1 + steps), b * (s * clip(s) + later)


def count(case: Case) -> dict[str, int]:
    """perf.py's FLOPs by component, summed over the steps."""
    tokens, logits, _ = contexts(case, None)
    out = {"attn_proj": 0, "attention": 0, "ffn": 0, "experts": 0, "shared_experts": 0,
           "lm_head": 2 * logits * case.spec["d"] * case.spec["V"]}
    for g in case.spec.groups:
        z, L, d = g.sizes, g.count, g.sizes["d"]
        tc = contexts(case, z["W"] if g.block.attention == "window" else None)[2]
        if g.block.attention == "mla":
            h, qk = z["h_q"], z["d_nope"] + z["d_rope"]
            q = d * z["r_q"] + z["r_q"] * h * qk if g.block.q_lora else d * h * qk
            out["attn_proj"] += 2 * L * tokens * (q + d * (z["r_kv"] + z["d_rope"])
                                                  + z["r_kv"] * h * (z["d_nope"] + z["d_v"]) + h * z["d_v"] * d)
            out["attention"] += 2 * L * h * tc * (qk + z["d_v"])
        else:
            hq, hkv, dh = z["h_q"], z["h_kv"], z["d_h"]
            out["attn_proj"] += 2 * L * tokens * d * (2 * hq + 2 * hkv) * dh
            out["attention"] += 2 * 2 * L * hq * tc * dh
        if g.block.ffn == "dense":
            out["ffn"] += 2 * L * tokens * 3 * d * z["m"]
        else:
            out["experts"] += 2 * L * tokens * z["k"] * 3 * d * z["m_e"]
            shared = z["E_s"] if g.block.shared and not g.block.shared_gate else 0   # n_shared_experts
            out["shared_experts"] += 2 * L * tokens * shared * 3 * d * z["m_e"]
    return out


class Vllm(Recipe):
    name = "vllm"
    reported_as = "vllm:estimated_flops_per_gpu_total (FLOPs, summed over scheduler steps)"
    source = "vLLM 0.33.0 vllm/v1/metrics/perf.py"

    def why_not(self, case: Case) -> Optional[str]:
        return "an inference engine's metric: no training count" if case.training else None

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        got = count(case)
        flops = sum(got.values())
        path = [("MLA per pair naive, not absorbed", {"mla": "naive"}),
                ("rolling window cache (W-1 keys)", {"window_cache": "rolling"}),
                ("full square", {"convention": "full"})]
        extras = [("window layers clip each request's context to W (a rectangle)",
                   lambda c: got["attention"] - cc.term("attention", c)),
                  ("router omitted", lambda c: -cc.term("router", c)),
                  ("shared experts at moe_intermediate_size x n_shared_experts",
                   lambda c: got["shared_experts"] - cc.term("shared_experts", c))]
        return reconcile(cc, path, extras, Told(flops, flops, "tp = pp = dp = 1; one step per prefill, per decode token"))
