"""The tools people count FLOPs with, each a small recipe following the tool's own source
(cited in its module), and the comparison of their numbers with costcalc's.

``compare(case, tools, setup)`` gives one row per tool: the number it reports in its own
unit, that number as a count, its ratio to costcalc's default (causal, logits last, MLA
auto), the costcalc configuration it equals when one does, and the named differences that
take costcalc's default to it exactly (see ``base.reconcile``).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

from ..errors import CostcalcError
from .base import Answer, Case, Costcalc, Recipe, Setup, default_config
from .calflops import Calflops
from .deepspeed import DeepSpeed
from .fvcore import Fvcore
from .genz import Genz
from .llm_analysis import LlmAnalysis, LlmAnalysisHead
from .llm_viewer import LlmViewer
from .maxtext import Maxtext
from .megatron import Megatron
from .nanochat import Nanochat
from .palm import Palm
from .torch_flopcounter import TorchFlopCounter
from .torchtitan import Torchtitan
from .vllm import Vllm

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    TorchFlopCounter(), DeepSpeed(), Calflops(), Fvcore(), LlmAnalysis(), LlmAnalysisHead(), LlmViewer(),
    Genz(), Vllm(), Nanochat(), Palm(), Torchtitan(), Maxtext(), Megatron())}
TOOLS = tuple(RECIPES)


def tools(text: str) -> list[str]:
    """``all`` or a comma list of tool names (each known)."""
    if text.strip() == "all":
        return list(TOOLS)
    names = [t.strip() for t in text.split(",")]
    if "all" in names:
        raise CostcalcError(f"--tools: 'all' stands alone, not in a list ({text!r})")
    unknown = [t for t in names if t not in RECIPES]
    if unknown or not all(names):
        raise CostcalcError(f"--tools: unknown tool {', '.join(repr(t) for t in unknown) or 'name (empty)'}; "
                            f"expected all or a comma list of {', '.join(TOOLS)}")
    return list(dict.fromkeys(names))


def compare(case: Case, names: Sequence[str] = TOOLS, setup: Setup = Setup()) -> list[dict[str, Any]]:
    """One row per tool for the case (see the module docstring); costcalc's default first
    gives every row's ``ratio``."""
    cc = Costcalc(case)
    default = cc.total()
    config = default_config(case)
    rows = []
    for name in names:
        recipe = RECIPES[name]
        got: Answer = recipe.refusal(case) or recipe.answer(case, cc, setup)
        row: dict[str, Any] = {"preset": case.spec.name, "workload": case.workload, **case.inputs(),
                               "tool": name, "reported": got.reported, "unit": recipe.unit,
                               "reported_unit": recipe.printed or recipe.unit,
                               "reported_as": recipe.reported_as, "flops": got.flops,
                               "ratio": None if got.flops is None else round(float(Fraction(got.flops) / default), 6),
                               "equals": got.equals,
                               "differences": [{"term": d.term, "flops": d.flops} for d in got.differences],
                               "note": got.cannot and f"cannot answer: {got.cannot}" or got.note,
                               "source": recipe.source, "costcalc_flops": default, "costcalc_config": config}
        rows.append(row)
    return rows
