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
from .base import Answer, Case, Costcalc, Recipe, Setup, reconcile
from .deepspeed import ELEMENTWISE, elementwise


class Calflops(Recipe):
    name = "calflops"
    unit = "FLOP"
    reported_as = "calculate_flops(..., output_as_string=False)[0] (2 x MACs + elementwise ops)"
    source = "calflops 0.3.2 calflops/pytorch_ops.py, flops_counter.py, on transformers 5.23 models"

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        eager, counts_experts = setup.attention == "eager", setup.experts == "eager"
        m = hf.macs(case, hf.run(case, logits_all=case.workload != "generate"))
        flops = 2 * (m["linear"] + m["attention"] * eager + m["experts"] * counts_experts)
        flops += m["silu"] + m["router_softmax"] + (m["softmax"] if eager else 0)
        times = 3 if case.workload == "train" else 1
        extras = []
        if not eager:
            extras.append(("attention not counted (F.scaled_dot_product_attention not patched)",
                           lambda c: -cc.term("attention", c)))
        if not counts_experts:
            why = "torch.bmm not patched" if setup.experts == "batched_mm" else "torch._grouped_mm not patched"
            extras.append((f"routed experts not counted ({why})", lambda c: -cc.term("experts", c)))
        extras += [(name, times * value) for name, value in elementwise(m, eager)]
        note = hf.SETUP.format(**vars(setup)) + f"; {ELEMENTWISE}"
        if case.workload == "decode":
            note += "; calculate_flops() cannot take a DynamicCache: this is its pipeline on one step"
        if case.workload == "train":
            note += "; include_backPropagation=True: forward x 3, as a float"
        value = times * flops
        return reconcile(cc, hf.path(case), extras, value, float(value) if times > 1 else value, note)
