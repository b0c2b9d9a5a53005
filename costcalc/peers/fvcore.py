"""fvcore's ``FlopCountAnalysis`` on a (traced) Hugging Face transformers model.

Follows ``fvcore/nn/flop_count.py`` and ``jit_handles.py`` of fvcore 0.1.5.post20221221:
"We count one fused multiply-add as one flop" -- ``.total()`` is a count of multiply-adds.
Handles: ``aten::linear``, ``matmul``/``mm`` (eager attention, full rectangle), ``bmm``
(HF ``batched_mm`` experts); everything else is 0 with a warning: SDPA, ``_grouped_mm``,
elementwise operations. A trace of one forward: no ``generate()``, no training count; a
decode step needs a wrapper that takes the cache as tensors.
"""
from __future__ import annotations

from typing import Optional

from . import hf
from .base import HALF, Answer, Case, Costcalc, Recipe, Setup, Told, reconcile


class Fvcore(Recipe):
    name = "fvcore"
    unit = "MAC"
    reported_as = "FlopCountAnalysis(model, inputs).total() (multiply-adds, named flops)"
    source = "fvcore 0.1.5.post20221221 fvcore/nn/flop_count.py, jit_handles.py, on transformers 5.23 models"
    kinds = frozenset({"mlp"})

    def why_not(self, case: Case) -> Optional[str]:
        if case.generating:
            return "a jit trace of one forward: generate() cannot be traced"
        if case.training:
            return "a trace of the forward: no training count"
        return None

    def answer(self, case: Case, cc: Costcalc, setup: Setup) -> Answer:
        m = hf.macs(case, hf.run(case))
        macs, extras = hf.counted(
            m, cc, attention=None if setup.attention == "eager" else "aten::scaled_dot_product_attention unsupported",
            experts="aten::_grouped_mm unsupported" if setup.experts == "grouped_mm" else None)
        extras.append(("MACs not FLOPs x0.5", HALF))
        note = hf.SETUP.format(**vars(setup)) + "; one multiply-add counted as one flop"
        if case.decoding:
            note += "; the model wrapped to take the cache as tensors (HF's DynamicCache cannot be traced)"
        return reconcile(cc, hf.path(case), extras, Told(macs, macs, note))
