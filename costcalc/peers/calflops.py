"""calflops around a Hugging Face transformers model.

Follows ``calflops/pytorch_ops.py`` and ``calflops/flops_counter.py`` of calflops 0.3.2, a
trimmed copy of DeepSpeed's profiler with fewer patches: ``F.linear`` and ``torch.matmul``
are counted (2 per multiply-add) but ``torch.bmm``/``torch.mm`` are not (their patches are
commented out: HF's ``batched_mm`` experts read 0) and ``F.scaled_dot_product_attention``
is not patched (SDPA attention reads 0); SiLU and softmax at one FLOP per element.
``calculate_flops(include_backPropagation=True)`` multiplies the forward by 1 + 2 (floats).
"""
from __future__ import annotations

from . import hf
from .base import Answer, Case, Costcalc, Recipe, Setup, Told, reconcile
from .deepspeed import ELEMENTWISE, elementwise

# Why HF's routed experts read 0 (eager experts run F.linear, which is counted).
_MISSED_EXPERTS = {"batched_mm": "torch.bmm not patched", "grouped_mm": "torch._grouped_mm not patched"}


class Calflops(Recipe):
    name = "calflops"
    unit = "FLOP"
    reported_as = "calculate_flops(..., output_as_string=False)[0] (2 x MACs + elementwise ops)"
    source = "calflops 0.3.2 calflops/pytorch_ops.py, flops_counter.py, on transformers 5.23 models"

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        eager = setup.attention == "eager"
        m = hf.macs(case, hf.run(case, logits_all=not case.generating))
        macs, extras = hf.counted(m, cc, attention=None if eager else "F.scaled_dot_product_attention not patched",
                                  experts=_MISSED_EXPERTS.get(setup.experts))
        flops = 2 * macs + m["silu"] + m["router_softmax"] + (m["softmax"] if eager else 0)
        times = 3 if case.training else 1
        extras += [(name, times * value) for name, value in elementwise(m, eager)]
        note = hf.SETUP.format(**vars(setup)) + f"; {ELEMENTWISE}"
        if case.decoding:
            note += "; calculate_flops() cannot take a DynamicCache: this is its pipeline on one step"
        if case.training:
            note += "; include_backPropagation=True: forward x 3, as a float"
        value = times * flops
        return reconcile(cc, hf.path(case), extras, Told(value, float(value) if times > 1 else value, note))
