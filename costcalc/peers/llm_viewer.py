"""LLM-Viewer (hahnyuan/LLM-Viewer): ``ModelAnalyzer.analyze()`` OPs.

Follows ``model_analyzer.py`` and ``configs/Llama.py`` (``configs/Mixtral.py`` for MoE) at
commit a626bee: linear layers at 2 OPs per multiply-add (q_proj and out_proj d x d, k/v
d x d h_kv/h_q, gate/up/down with intermediate_size: Mixtral's one expert, no router);
attention ``qk``, ``sv`` over the full square in prefill and over T keys (not T+1) in decode,
head size hidden_size // heads; softmax 5 OPs per score; two RMSNorms at 7 OPs per element
and two residual adds at 1 per element of hidden_size; the activation at 2 OPs per element of
hidden_size; the LM head once per stage (the last position) at 1 OP per multiply-add.
Inference stages only.
"""
from __future__ import annotations

from typing import Optional

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, cannot, full, reconcile
from .counts import layers, one_kind


class LlmViewer(Recipe):
    name = "llm-viewer"
    unit = "OP"
    reported_as = "total_results[stage]['OPs'] (float)"
    source = "hahnyuan/LLM-Viewer model_analyzer.py, configs/Llama.py, configs/Mixtral.py at commit a626bee"

    def why_not(self, case: Case) -> Optional[str]:
        if case.generating:
            return "analyze_generate_task() returns a time only (no OPs total)"
        if case.training:
            return "inference stages only (prefill and decode)"
        return None

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        g = one_kind(case.spec)
        if g is None or g.block.attention == "mla" or g.block.shared:
            return cannot(f"a Llama-style layer list (configs/Llama.py, Mixtral.py): one kind of GQA layer, no "
                          f"shared experts; this model: {layers(case.spec)}")
        z, L, b = g.sizes, g.count, case.batch
        d, hq, hkv, V = z["d"], z["h_q"], z["h_kv"], z["V"]
        if hq * z["d_h"] != d:
            return cannot("q_proj is hidden_size x hidden_size: head_dim x heads != hidden_size is not expressible")
        moe = g.block.ffn == "moe"
        m = z["m_e"] if moe else z["m"]
        prefill = not case.decoding
        tokens = b * case.seq if prefill else b
        rows = case.seq * case.seq if prefill else case.context      # query x key pairs per head
        hs = d // hq
        linear = tokens * 2 * (2 * d * d + 2 * d * d * hkv // hq + 3 * d * m)
        ops = L * (linear + 2 * 2 * rows * hs * hq * b + 5 * b * hq * rows + 18 * tokens * d) + b * d * V
        extras = [] if prefill else [("T keys not T+1", lambda c: -cc.per_key(c))]
        extras += [("softmax 5 ops per score", 5 * L * b * hq * rows),
                   ("RMSNorm 7 ops per element x2", 14 * L * tokens * d),
                   ("residual adds 1 op per element x2", 2 * L * tokens * d),
                   ("activation 2 ops per element of hidden_size", 2 * L * tokens * d),
                   ("LM head at 1 op per multiply-add", -b * d * V)]
        if moe:
            extras += [("router omitted", lambda c: -cc.term("router", c)),
                       (f"one expert instead of k={z['k']}", lambda c: L * tokens * 6 * d * m - cc.term("experts", c))]
        path = [full(case)]
        note = "float arithmetic, exact here" + ("; no sliding windows" if case.spec.windows else "")
        return reconcile(cc, path, extras, Told(ops, float(ops), note))
