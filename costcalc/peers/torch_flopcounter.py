"""torch's ``FlopCounterMode`` around a Hugging Face transformers model.

Follows ``torch/utils/flop_counter.py`` of torch 2.13.0: ``mm``/``addmm``/``bmm`` at
``2 m n k`` (``mm_flop``, bias ignored), the CUDA SDPA kernels at the full rectangle
("We aren't accounting for causal attention", ``sdpa_flop``); an op without a formula --
CPU SDPA's ``_scaled_dot_product_flash_attention_for_cpu``, MoE ``_grouped_mm`` -- is run
and counted 0, silently. No elementwise operations. Training: the executed backward counts
every forward product twice more (3 x forward; CPU SDPA stays 0 both ways).
"""
from __future__ import annotations

from . import hf
from .base import Answer, Case, Costcalc, Recipe, Setup, Told, reconcile


class TorchFlopCounter(Recipe):
    name = "torch-flopcounter"
    unit = "FLOP"
    reported_as = "FlopCounterMode.get_total_flops() (FLOPs, 2 per multiply-add)"
    source = "torch 2.13.0 torch/utils/flop_counter.py, on transformers 5.23 models (CPU)"
    kinds = frozenset({"mlp"})

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        counts_attention = setup.attention == "eager" or hf.sdpa_falls_back(case)
        m = hf.macs(case, hf.run(case, logits_all=not case.generating))
        macs, extras = hf.counted(m, cc, attention=None if counts_attention else "CPU SDPA kernel has no formula",
                                  experts="_grouped_mm has no formula" if setup.experts == "grouped_mm" else None)
        flops = 2 * macs
        times = 3 if case.training else 1
        note = hf.SETUP.format(**vars(setup)) + "; CPU"
        if setup.attention == "sdpa":
            note += " (on CUDA, SDPA is counted as the full rectangle, as eager is)"
        if case.training:
            note += "; forward(labels) + backward executed: 3 x forward"
        return reconcile(cc, hf.path(case), extras, Told(times * flops, times * flops, note))
