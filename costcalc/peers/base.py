"""What every recipe shares: the case compared, costcalc's own numbers for it, and the answer.

A recipe computes a tool's number from the tool's own formula, written as the tool writes it.
Separately it names the differences from costcalc's default (causal, logits last, MLA auto):
first a *path* of costcalc options (``full square`` = costcalc full - causal, ``LM head on all
positions`` = logits all - last, ...), each step's size computed by costcalc's core; then the
tool's own terms (elementwise operations, a halved unit, parameters costcalc does not
multiply). ``reconcile`` adds them up and refuses an answer whose differences do not give the
tool's number exactly: the two computations check each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable, NamedTuple, Optional, Union

from ..core.registry import WORKLOADS as REGISTRY, Workload
from ..errors import CostcalcError
from ..evaluate import Options, Query
from ..spec import ModelSpec
from ..vocab import SCAN, Logits

Number = Union[int, Fraction]
WORKLOADS = tuple(name for name, w in REGISTRY.items() if w.compared)   # what the recipes answer
HALF = "x0.5"           # a difference that halves the running number (MACs not FLOPs)


@dataclass(frozen=True)
class Case:
    """One workload of one model: B sequences; ``seq`` S (prefill, train, the prompt of a
    generation), ``context`` T (decode), ``new`` N output tokens (generate). A recipe asks it
    what the workload runs (``decoding``, ``generating``, ``training``, ``prompt_logits``): its
    registry entry answers, never its name."""
    spec: ModelSpec
    workload: str
    batch: int = 1
    seq: int = 0
    context: int = 0
    new: int = 0

    @property
    def entry(self) -> Workload:
        """The workload's registry entry (``core.registry``)."""
        return REGISTRY[self.workload]

    def inputs(self) -> dict[str, int]:
        """The row columns of this case's sizes: its workload's inputs (``core.registry``)."""
        sizes = {"batch": self.batch, "seq": self.seq, "context": self.context, "new_tokens": self.new}
        return {i.column: sizes[i.column] for i in self.entry.inputs}

    @property
    def decoding(self) -> bool:
        """One decode step: a new token a sequence over T cached (the entry's phase)."""
        return self.entry.phase == "decode"

    @property
    def generating(self) -> bool:
        """A generation: a prefill of the prompt, then decode steps (the entry's phases)."""
        return bool(self.entry.phases)

    @property
    def training(self) -> bool:
        """A training step: the forward, then its backward (the entry's ``backward``)."""
        return self.entry.backward

    @property
    def prompt_logits(self) -> bool:
        """One forward over a prompt whose LM-head positions are costcalc's option (default the
        last; a plain forward of a tool runs them all): the logits are the caller's (the entry
        fixes none) and no decode steps follow."""
        return self.entry.logits is None and not self.generating

    @property
    def logits(self) -> Logits:
        """costcalc's default logits mode for the case: the entry's own, else the last position."""
        return Query(self.spec, self.workload, DEFAULT).logits

    @property
    def tokens(self) -> int:
        """Tokens a run of this case produces or processes: B*S (prefill, train), B (a decode
        step), B*N (a generation's output tokens). MFU per token-rate uses it."""
        return self.batch * (1 if self.decoding else self.new if self.generating else self.seq)


DEFAULT = Options()


def label(options: Options, case: Case) -> str:
    """Options as a compare row names them: ``full/all``, plus the MLA form and window cache
    where the model has them and they are not the default (``full/all, mla expanded,
    window-cache rolling``); the logits only where they are the caller's (the entry fixes none),
    the cache only where there is one (a decode step, a generation)."""
    spec = case.spec
    text = options.convention.value if case.entry.logits else f"{options.convention.value}/{options.logits.value}"
    if spec.has_mla and options.mla != "auto":
        text += f", mla {options.mla.value}"
    if spec.windows and options.window_cache != "whole" and (case.decoding or case.generating):
        text += f", window-cache {options.window_cache.value}"
    if spec.has_mixers:
        text += f", scan {SCAN[options.convention.value]}"
    return text


def default_config(case: Case) -> str:
    """costcalc's default for the case as a row's ``costcalc_config`` says it: ``causal, logits
    last`` (the case's logits mode), plus ``MLA auto`` where the model has MLA."""
    return (f"causal, logits {case.logits.value}" + (", MLA auto" if case.spec.has_mla else "")
            + (", scan recurrent" if case.spec.has_mixers else ""))


class Costcalc:
    """costcalc's own numbers for a case, by options, through ``costcalc.calc``."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self._seen: dict[Options, dict[str, int]] = {}

    def terms(self, options: Options = DEFAULT, **changes) -> dict[str, int]:
        """Every ``<term>`` (attention, experts, lm_head, linear, total, ...) as an int."""
        from .. import calc

        options = replace(options, **changes)
        if options not in self._seen:
            row = calc.point(Query(self.case.spec, self.case.workload, options), **self.case.inputs())
            self._seen[options] = {k.removesuffix("_flops"): v for k, v in row.items() if k.endswith("_flops")}
        return self._seen[options]

    def total(self, options: Options = DEFAULT, **changes) -> int:
        return self.terms(options, **changes)["total"]

    def term(self, name: str, options: Options = DEFAULT, **changes) -> int:
        return self.terms(options, **changes).get(name, 0)

    def per_key(self, options: Options = DEFAULT) -> int:
        """FLOPs of one more key for one query of every sequence in every layer (attention of
        a decode step over 2 cached tokens minus over 1; no window is that short)."""
        from .. import calc

        query = Query(self.case.spec, "decode", Options(options.convention, mla=options.mla))
        rows = [calc.point(query, batch=self.case.batch, context=t) for t in (1, 2)]
        return rows[1]["attention_flops"] - rows[0]["attention_flops"]


@dataclass(frozen=True)
class Difference:
    term: str
    flops: Number


@dataclass
class Answer:
    """A tool's answer for a case (``cannot`` says why there is none)."""
    reported: Union[int, float, None] = None
    flops: Optional[Number] = None
    differences: list[Difference] = field(default_factory=list)
    equals: Optional[str] = None
    note: str = ""
    cannot: Optional[str] = None


Step = tuple[str, dict]                                  # a costcalc option change, named
Extra = tuple[str, Union[Number, Callable[[Options], Number], str]]   # a tool term (or HALF)


def full(case: Case) -> Step:
    """The step to the full rectangle: a decode step only changes where windows are ignored."""
    if case.decoding:
        return ("sliding windows ignored (all T+1 keys)", {"convention": "full"})
    return ("full square", {"convention": "full"})


class Told(NamedTuple):
    """What a tool's formula gives for a case: the count, the number as the tool prints it,
    and a note (the settings it was read under)."""
    flops: Number
    reported: Union[int, float]
    note: str = ""


def reconcile(cc: Costcalc, path: list[Step], extras: list[Extra], told: Told) -> Answer:
    """The differences from costcalc's default to the tool's count (``told.flops``): the path's
    steps (each the change of costcalc's total), then the tool's terms (a number, a function
    of the path's end options, or HALF). Zero terms are left out; the sum must be the count
    exactly."""
    flops, reported, note = told
    config, running = DEFAULT, Fraction(cc.total())
    seen = [(DEFAULT, cc.total())]
    diffs: list[Difference] = []
    for name, change in path:
        step = replace(config, **change)
        delta = cc.total(step) - cc.total(config)
        if delta:
            diffs.append(Difference(name, delta))
        config, running = step, running + delta
        seen.append((step, cc.total(step)))
    for name, value in extras:
        delta = -running / 2 if value == HALF else Fraction(value(config) if callable(value) else value)
        if delta:
            diffs.append(Difference(name, exact(delta)))
        running += delta
    if running != flops:
        raise AssertionError(f"{cc.case.spec.name} {cc.case.workload}: the differences give {running}, "
                             f"the tool's formula {flops}")
    equals = next((label(c, cc.case) for c, v in [seen[0], seen[-1], *seen[1:-1]]
                   if v == flops), None)
    return Answer(reported, exact(flops), diffs, equals, note)


def exact(value: Number) -> Number:
    """An int where the value is whole, else the Fraction."""
    value = Fraction(value)
    return value.numerator if value.denominator == 1 else value


def cannot(reason: str) -> Answer:
    return Answer(cannot=reason)


class Recipe:
    """A tool: its name (the row's ``tool``), unit (FLOP, MAC or OP), what its printed number
    is (``reported_as``), the source it follows, ``why_not`` (the cases it has no count for)
    and ``answer``."""
    name = ""
    unit = "FLOP"
    printed = ""            # the printed number's unit where it is not ``unit`` (TFLOP, FLOP/token)
    reported_as = ""
    source = ""
    # Layer kinds costcalc models beyond those every recipe follows (GQA, window and MLA
    # attention; SwiGLU and MoE FFNs) that this recipe takes: "mlp" (the non-gated MLP),
    # "chunk" (chunked local attention). A model with another is a row that cannot answer.
    kinds: frozenset[str] = frozenset()

    def refusal(self, case: Case) -> Optional[Answer]:
        """Why the recipe has no answer for the case (a run it does not count, ``why_not``, or
        a layer kind it does not take), or None."""
        why = self.why_not(case)
        if why:
            return cannot(why)
        other = [k for k in KINDS if k not in self.kinds and any(k in features(g.block) for g in case.spec.groups)]
        if other:
            arch = dict.fromkeys(g.arch for g in case.spec.groups if not self.takes(g.block))
            return cannot(f"{' and '.join(KINDS[k] for k in other)} not modelled in this recipe "
                          f"(layers of kind {', '.join(arch)})")
        return None

    def takes(self, block) -> bool:
        return all(k in self.kinds for k in features(block) if k in KINDS)

    def why_not(self, case: Case) -> Optional[str]:
        """Why the tool has no count for the case's run, asked of the case (``case.training``,
        ``case.generating``, ...); None where it has one. By default it counts every run."""
        return None

    def answer(self, case: Case, cc: Costcalc, setup: "Setup") -> Answer:
        """The tool's answer for a case the recipe takes (``refusal`` is None)."""
        raise NotImplementedError


KINDS = {"mlp": "non-gated MLPs", "chunk": "chunked attention", "gdn": "Gated DeltaNet layers",
         "kda": "Kimi Delta Attention layers", "mamba2": "Mamba-2 layers", "mamba1": "Mamba layers",
         "lightning": "lightning attention layers", "shortconv": "short-convolution layers",
         "gated": "gated attention outputs", "none": "layers without a mixer or an FFN",
         "sparse": "DeepSeek sparse attention (an indexer and top-k keys)",
         "keqv": "attention whose values are its keys (no v_proj)",
         "hgated": "per-head attention output gates (g_proj)", "dv": "value heads of their own width (d_v != d_h)",
         "swa": "DeepSeek-V4 sliding-window layers (grouped output, hyper-connections)",
         "hca": "DeepSeek-V4 heavily compressed attention", "csa": "DeepSeek-V4 compressed sparse attention"}


def features(block) -> set[str]:
    """The layer kinds of ``KINDS`` a block has."""
    return ({block.ffn, block.attention, block.mixer} | ({"gated"} if block.gated else set())
            | ({"sparse"} if block.sparse else set()) | ({"keqv"} if block.k_eq_v else set())
            | ({"hgated"} if block.head_gate else set()) | ({"dv"} if block.dv else set())) & set(KINDS)


@dataclass(frozen=True)
class Setup:
    """How a Hugging Face model runs under the executed counters: attention (eager or sdpa)
    and routed experts (grouped_mm, batched_mm or eager), as transformers 5.23 names them."""
    attention: str = "eager"
    experts: str = "batched_mm"

    def __post_init__(self) -> None:
        if self.attention not in ("eager", "sdpa"):
            raise CostcalcError(f"--hf-attention must be eager or sdpa, got {self.attention!r}")
        if self.experts not in ("grouped_mm", "batched_mm", "eager"):
            raise CostcalcError(f"--hf-experts must be grouped_mm, batched_mm or eager, got {self.experts!r}")
