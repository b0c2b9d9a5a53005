"""DeepSpeed's flops profiler around a Hugging Face transformers model.

Follows ``deepspeed/profiling/flops_profiler/profiler.py`` of DeepSpeed 0.19.8: patched
``F.linear`` (``2 x input.numel() x out_features``), ``torch.matmul``/``bmm``,
``F.scaled_dot_product_attention`` (the full rectangle, mask and ``is_causal`` ignored) and
elementwise functions at one FLOP per element: ``F.silu`` on every MLP gate, ``F.softmax`` on
eager attention scores and on softmax router logits. ``get_total_flops()`` = 2 x MACs +
those elements. Operators (RMSNorm, RoPE, residual adds) and ``torch._grouped_mm`` (HF's
default experts) are not patched: 0. It profiles a forward; no training count.
"""
from __future__ import annotations

from typing import Optional

from . import hf
from .base import Answer, Case, Costcalc, Recipe, Setup, Told, reconcile

ELEMENTWISE = "elementwise counts as on HF's Llama, Mixtral and DeepSeek-V3 paths (SiLU MLPs)"


def elementwise(m: dict, eager: bool) -> list:
    """The patched elementwise functions' counts, one FLOP per element."""
    return [("elementwise: SiLU, 1 per element", m["silu"]),
            ("elementwise: attention softmax, 1 per element", m["softmax"] if eager else 0),
            ("elementwise: router softmax, 1 per element", m["router_softmax"])]


class DeepSpeed(Recipe):
    name = "deepspeed"
    unit = "FLOP"
    reported_as = "FlopsProfiler.get_total_flops() (2 x MACs + elementwise ops)"
    source = "DeepSpeed 0.19.8 deepspeed/profiling/flops_profiler/profiler.py, on transformers 5.23 models"

    def why_not(self, case: Case) -> Optional[str]:
        if case.training:
            return "profiles a forward; no training count (the engine's printout only scales rates)"
        return None

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        eager = setup.attention == "eager"
        m = hf.macs(case, hf.run(case, logits_all=not case.generating))
        missed = "torch._grouped_mm not patched" if setup.experts == "grouped_mm" else None
        macs, extras = hf.counted(m, cc, experts=missed)        # matmul and SDPA are patched: attention counted
        flops = 2 * macs + m["silu"] + m["router_softmax"] + (m["softmax"] if eager else 0)
        note = hf.SETUP.format(**vars(setup)) + f"; {ELEMENTWISE}"
        if case.decoding:
            note += "; FlopsProfiler on one step (get_model_profile's warm-up would add a key)"
        return reconcile(cc, hf.path(case), extras + elementwise(m, eager), Told(flops, flops, note))
