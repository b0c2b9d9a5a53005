"""Every workload of the cost model, declared once (no sympy: a fast start reads it).

An entry says what the rest of the project needs: its name (the one spelling of rows,
recipes, ``costcalc formula`` and verify), its inputs (row column, symbol, minimum), its
logits policy, the phase that picks the MLA form (its builder is the function of
``core.workloads`` of the same name), and what the layers above read from it: its forward
for bytes, the tiled cap, its extra columns, its axis in a figure, whether ``compare`` answers
it, whether ``verify`` runs it, whether it is a training step (``compare``'s recipes ask), a
composite's compiled workloads. Those with ``compiled`` are printed as code
(``costcalc.codegen``) and evaluated (``costcalc.evaluate``); the others are composites that
``costcalc.composites`` assembles from compiled ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..vocab import Logits


@dataclass(frozen=True)
class Input:
    column: str        # row column and CLI option stem
    symbol: str        # the symbol it binds
    minimum: int       # smallest legal value


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str                       # what it is, in a line
    inputs: tuple[Input, ...]
    logits: Optional[Logits] = None    # a fixed logits mode; None: the caller's
    phase: str = "prefill"             # "decode": decode steps (--mla auto: docs/cost-model.md, MLA)
    compiled: bool = True              # printed as a recipe; False: assembled from compiled ones
    aliases: tuple[str, ...] = ()      # other spellings accepted on input
    traffic: str = ""                  # its memory-traffic recipe ("<name>.bytes", core.traffic): the forward
                                       # it runs, "past,new" by symbol, or "steps" (a decode step per new token)
    routed: tuple[str, ...] = ()       # the inputs whose product is the tokens one forward routes
    tiled_over: str = ""               # the input whose queries the tiled convention sums tile by tile
                                       # (a decode phase: one query a step); "" for none worth capping
    extras: tuple[str, ...] = ()       # columns its rows add beside the FLOPs (``costcalc.calc.EXTRAS``)
    axis: str = ""                     # the x axis ``costcalc plot`` draws it against; "" for none
    compared: bool = False             # ``costcalc compare`` answers it (its inputs are the case's sizes)
    runs: str = ""                     # a composite of one compiled workload run many times (``costcalc.composites``):
                                       # a prefill per prompt, a cached prefill per chunk
    phases: tuple[str, ...] = ()       # a composite of compiled workloads run one after another, a row each and
                                       # their total (its point): a generation's prefill, then its decode phase
    backward: bool = False             # a training step: the forward, then its backward (2 forwards more)
    verified: bool = False             # ``costcalc verify`` runs it (a job of ``costcalc.verify.jobs`` of its name,
                                       # with its sizes there); the registry's order is verify's

    @property
    def build(self) -> Callable:
        """Its builder: the function of ``core.workloads`` named after it, (block, convention,
        logits) -> Breakdown."""
        from . import workloads   # sympy, only when a breakdown is derived

        return getattr(workloads, self.name)

    @property
    def labelled_logits(self) -> bool:
        """Rows say their logits mode, except a decode step's (one row per sequence, always)."""
        return self.logits != Logits.last


_B, _S, _T, _N = Input("batch", "B", 1), Input("seq", "S", 1), Input("context", "T", 1), Input("new_tokens", "N", 1)
_CHUNK, _PREFIX = Input("chunk", "C", 1), Input("prefix", "T", 0)

WORKLOADS = {w.name: w for w in (
    Workload("prefill", "B prompts of S tokens", (_B, _S), traffic="0,S", routed=("B", "S"),
             tiled_over="S", axis="prompt length S (tokens)", compared=True, verified=True),
    Workload("varlen_prefill", "packed variable-length batch (padded: prefill at S = max S_i)",
             (Input("lengths", "S_i", 1),), compiled=False, aliases=("varlen",), runs="prefill",
             verified=True),
    Workload("cached_prefill", "C new tokens over T cached", (_B, _CHUNK, _PREFIX),
             aliases=("cached-prefill", "chunk"), traffic="T,C", routed=("B", "C"), tiled_over="C",
             verified=True),
    Workload("chunked", "n chunks of C tokens after T cached, logits on the last",
             (_B, _S, _CHUNK, _PREFIX), compiled=False, runs="cached_prefill", verified=True),
    Workload("decode", "one decode step over T cached tokens", (_B, _T), Logits.last, "decode",
             traffic="T,1", routed=("B",), extras=("per_token",), axis="cached context T (tokens)", compared=True,
             verified=True),
    Workload("decode_phase", "the N-1 decode steps after a prefill of S", (_B, _S, _N),
             Logits.last, "decode", traffic="steps", routed=("B",), tiled_over="N"),
    Workload("generate", "prefill of S plus N-1 decode steps", (_B, _S, _N), compiled=False,
             axis="generated token j", compared=True, phases=("prefill", "decode_phase"),
             verified=True),
    Workload("train", "forward with all-position logits x 3", (_B, _S), Logits.all, tiled_over="S",
             extras=("rule_6p",), compared=True, backward=True),
)}


def workload(name: str) -> Workload:
    """A workload by its name or an alias; an unknown name lists the known ones."""
    for w in WORKLOADS.values():
        if name == w.name or name in w.aliases:
            return w
    raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")
