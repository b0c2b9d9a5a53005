"""llm-analysis (cli99/llm-analysis): the PyPI 0.2.2 wheel, and the repository after its MLP
change.

``llm-analysis`` follows ``llm_analysis/analysis.py`` of the wheel 0.2.2:
``get_num_flops_fwd_total(b, s) = L (4bsh^2 + 4bsh^2/g + 4bs^2h + 16bsh^2) + 2bshV`` with
h = hidden_dim, g = n_head / num_key_value_heads (a float): the full square, a fixed
16bsh^2 MLP (no gating, no E or k, no router), the LM head on all s positions. Prefill is
``fwd(B, S)``; a decode step with the KV cache is ``fwd(B, 1)`` -- the context never enters
(no KV-cache attention); training is fwd + 2 fwd. For MHA models it asserts the total is
within 1% of ``24bLsh^2(1 + s/6h + V/12Lh)``.

``llm-analysis-head`` follows the repository's HEAD, commit d841e40 (d841e40aec8c84b9e76ba9cfbce67418adb172bd,
2024-11-13, "fix allreduce latency and memory usage calculation when using tp (#28)"), the same
file: ``get_num_flops_fwd_per_layer_mlp = (6 if mlp_gated_linear_units else 4) b s h^2 x
expansion_ratio`` -- 6bsh^2 x ratio, three d x m matrices, for a gated (SwiGLU) MLP, 4bsh^2 x ratio
for a plain one -- with one expert (no E or k, no router), the attention and LM head as the wheel's.
The model is described to it as it runs: ``mlp_gated_linear_units`` true for a gated MLP, as the
tool's own ``upstage_Llama-2-70b-instruct-v2.json`` sets it (its Hugging Face reader sets it only
where intermediate_size / hidden_size is exactly 3.5). The MHA assert stays; a gated Llama-2-7B
(ratio 2.6875: 16.125bsh^2) no longer trips it.
"""
from __future__ import annotations

from typing import Optional

from .base import Answer, Case, Costcalc, Recipe, Setup, Told, cannot, full, reconcile
from .counts import layers, one_kind

ALL = ("LM head on all positions", {"logits": "all"})


class LlmAnalysis(Recipe):
    name = "llm-analysis"
    reported_as = "prefill/decode_num_flops_fwd_total, num_flops_total_per_micro_batch (float FLOPs)"
    source = "llm-analysis 0.2.2 (PyPI wheel) llm_analysis/analysis.py"
    mlp_name = "fixed 16bsh^2 MLP"

    def why_not(self, case: Case) -> Optional[str]:
        return "prints prefill and per-step decode FLOPs, no generation total" if case.generating else None

    def mlp(self, g, tokens: int) -> float:
        return 16 * tokens * g.sizes["d"] ** 2

    def fwd(self, g, b: int, s: int, float_path: bool = False):
        z, L = g.sizes, g.count
        d, hq, hkv = z["d"], z["h_q"], z["h_kv"]
        kv = 4 * b * s * d ** 2 / (hq / hkv) if float_path else 4 * b * s * d * hkv * z["d_h"]
        return L * (4 * b * s * d ** 2 + kv + 4 * b * s ** 2 * d + self.mlp(g, b * s)) + 2 * b * s * d * z["V"]

    def asserts(self, g, b: int, s: int) -> bool:
        """get_num_flops_fwd_total's MHA check (floats, as the tool computes it)."""
        z, L = g.sizes, g.count
        if z["h_kv"] != z["h_q"]:
            return False
        d = z["d"]
        target = 24 * b * L * s * d ** 2 * (1 + s / (6 * d) + z["V"] / (12 * L * d))
        return not abs(self.fwd(g, b, s, True) - target) / target < 0.01

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        g = one_kind(case.spec)
        if g is None or g.block.attention == "mla" or g.block.shared:
            return cannot(f"one kind of GQA layer only (ModelConfig has no layer groups, no MLA latent, no "
                          f"shared experts); this model: {layers(case.spec)}")
        if g.sizes["h_q"] * g.sizes["d_h"] != g.sizes["d"]:
            return cannot("attention width is hidden_dim: head_dim x n_head != hidden_dim is not expressible")
        b, one = case.batch, case.decoding
        s = 1 if one else case.seq
        if self.asserts(g, b, s):
            return cannot(f"AssertionError in get_num_flops_fwd_total: an MHA total more than 1% off "
                          f"24bLsh^2(1+s/6h+V/12Lh) (its formula would give {self.fwd(g, b, s):,})")
        times = 3 if case.training else 1
        flops = times * self.fwd(g, b, s)
        z, L, tokens = g.sizes, g.count, b * s
        moe = g.block.ffn == "moe"
        extras = []
        if one:
            extras.append(("no KV-cache attention: 1 key (itself), not T+1",
                           lambda c: 4 * L * b * z["d"] - cc.term("attention", c)))
        if moe:
            extras.append(("router omitted", lambda c: -cc.term("router", c)))
        ffn = "experts" if moe else "ffn"
        name = self.mlp_name + (f", one expert instead of k={z['k']}" if moe else "")
        extras.append((name, lambda c: times * L * self.mlp(g, tokens) - cc.term(ffn, c)))
        path = [full(case)] + ([ALL] if case.prompt_logits else [])
        note = "float arithmetic, exact here" + ("; no sliding windows" if case.spec.windows else "")
        return reconcile(cc, path, extras, Told(flops, float(flops), note))


class LlmAnalysisHead(LlmAnalysis):
    name = "llm-analysis-head"
    source = "cli99/llm-analysis llm_analysis/analysis.py at HEAD, commit d841e40 (2024-11-13)"
    mlp_name = "bsh^2 x ratio MLP (6 gated, 4 plain)"
    kinds = frozenset({"mlp"})   # a plain MLP: mlp_gated_linear_units false

    def mlp(self, g, tokens: int) -> float:
        z, ffn = g.sizes, g.block.ffn
        gated = ffn == "dense" or (ffn == "moe" and not g.block.plain)   # mlp_gated_linear_units
        return (6 if gated else 4) * tokens * z["d"] * (z["m"] if ffn in ("dense", "mlp") else z["m_e"])
