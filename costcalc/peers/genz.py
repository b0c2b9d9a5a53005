"""GenZ (abhibambhaniya/GenZ-LLM-Analyzer): the ``summary_table`` of ``prefill_moddeling`` /
``decode_moddeling``.

Follows the PyPI wheel genz-llm 0.0.16 (``GenZ/Models/attention.py``, ``ffn.py``,
``embedding.py``, ``get_language_model.py``, ``operator_base.py``, ``analyse_model.py``):
operators count multiply-adds, and the default path reports 2 x them / 1e6 in a column
named 'MACs (MFLOP)' (``operator_base.py``: ``num_ops * 2``). Prefill: QKV and output
projections, Logit and Attend over the full square, the FFN (MoE: router E x d and k
experts, ``floor(S k / E)`` tokens per expert), the classifier on all S positions and the
input embedding as a D x S x V GEMM. Decode (``input_tokens=T``, ``output_tokens=0``,
``Bb=1``; its default beam width 4 multiplies every linear layer): T keys, the classifier
on one position. No MLA (its DeepSeek-V3 is a catalogue entry with GQA shapes), no shared
experts, no dense-first layers, sliding windows ignored.
"""
from __future__ import annotations

from typing import Optional

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, cannot, full, reconcile
from .counts import layers, one_kind

# GenZ's own DeepSeek-V3 entry (Models/Model_sets/misc.py, DeepseekV3_moe_671b_config)
DEEPSEEK_V3 = dict(L=61, D=7168, H=128, Hkv=2, Dq=56, Df=18432, E=256, K=8, V=129280)


class Genz(Recipe):
    name = "genz"
    printed = "MFLOP"
    reported_as = "summary_table 'MACs (MFLOP)' column (FLOPs / 1e6 on the default path)"
    source = "genz-llm 0.0.16 (PyPI wheel) GenZ/Models/*.py, operator_base.py, analyse_model.py"

    def why_not(self, case: Case) -> Optional[str]:
        if case.generating:
            return "models prefill and decode stages; no generation total"
        if case.training:
            return "inference only (prefill, decode, chunked)"
        return None

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        c = self.config(case)
        if c is None:
            return cannot(f"one kind of GQA layer only (no MLA, shared experts or dense-first layers); "
                          f"this model: {layers(case.spec)}")
        b, prefill = case.batch, not case.decoding
        s = case.seq if prefill else 1
        D, H, Hkv, Dq, Df, E, K, L, V = (c[k] for k in ("D", "H", "Hkv", "Dq", "Df", "E", "K", "L", "V"))
        proj = b * s * (D * (H * Dq + 2 * Hkv * Dq) + D * H * Dq)
        attention = 2 * b * H * Dq * (s * s if prefill else case.context)
        if E > 1:
            routed = (s * K // E) * E if prefill else K          # tokens through experts, per sequence
            ffn = {"router": b * s * E * D, "experts": b * routed * 3 * Df * D}
        else:
            ffn = {"ffn": b * s * 3 * Df * D}
        head = b * (s if prefill else 1) * V * D
        embed = b * s * D * V if prefill else 0
        macs = L * (proj + attention + sum(ffn.values())) + head + embed
        flops = 2 * macs
        note = "Bb=1, output_tokens=0; the column is named MACs but holds FLOPs"
        if c.get("catalogue"):
            return self.catalogue(case, cc, flops, {"attn_proj": 2 * L * proj, "attention": 2 * L * attention,
                                                    **{k: 2 * L * v for k, v in ffn.items()}, "lm_head": 2 * head,
                                                    "embedding": 2 * embed}, note)
        path = [full(case)] + ([("LM head on all positions", {"logits": "all"})] if prefill else [])
        extras = [("embedding as a GEMM (D x S x V)", 2 * embed)] if prefill else \
            [("T keys not T+1", lambda c: -cc.per_key(c))]
        if E > 1:
            extras.append(("tokens per expert floored (S k // E)",
                           lambda c: 2 * L * ffn["experts"] - cc.term("experts", c)))
        note += "; sliding windows ignored" if case.spec.windows else ""
        return reconcile(cc, path, extras, Told(flops, flops / 1e6, note))

    def config(self, case: Case):
        spec = case.spec
        if spec.has_mla:
            moe = [g for g in spec.groups if g.block.ffn == "moe"]
            same = (spec["d"] == 7168 and spec["h_q"] == 128 and spec["V"] == 129280 and spec["L"] == 61
                    and moe and moe[0].sizes["E"] == 256 and moe[0].sizes["k"] == 8)
            return {**DEEPSEEK_V3, "catalogue": True} if same else None
        g = one_kind(spec)
        if g is None or g.block.shared:
            return None
        z = g.sizes
        moe = g.block.ffn == "moe"
        return dict(L=g.count, D=z["d"], H=z["h_q"], Hkv=z["h_kv"], Dq=z["d_h"], V=z["V"],
                    Df=z["m_e"] if moe else z["m"], E=z["E"] if moe else 1, K=z["k"] if moe else 1)

    def catalogue(self, case: Case, cc: Costcalc, flops: int, tool: dict, note: str) -> Answer:
        """DeepSeek-V3 as GenZ's catalogue has it: another model, compared term by term."""
        names = {"attn_proj": "attention projections: GQA stand-in (H=128, Hkv=2, d_h=56), not MLA",
                 "attention": "attention core: GQA stand-in, 2 x 128 heads x 56 per key, not MLA",
                 "router": "router in all 61 layers (no dense-first layers)",
                 "experts": "k=8 experts of intermediate_size 18432 (not 2048) in all 61 layers",
                 "ffn": "dense-first layers (3) not modelled",
                 "shared_experts": "shared expert omitted",
                 "lm_head": "LM head on all positions",
                 "embedding": "embedding as a GEMM (D x S x V)"}
        extras = [(names[k], lambda c, k=k: tool.get(k, 0) - cc.term(k, c)) for k in names]
        note += "; DeepSeek-V3 as GenZ's catalogue entry (Model_sets/misc.py): GQA shapes, no MLA"
        return reconcile(cc, [], extras, Told(flops, flops / 1e6, note))
