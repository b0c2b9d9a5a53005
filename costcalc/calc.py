"""Exact numbers for a model: each workload as rows (dicts) or tables (columns).

Every function takes a ``ModelSpec``, the workload's sizes and the conventions (``convention``,
``logits``, ``tile``, ``mla``), and returns rows: plain dicts with the inputs (``preset``,
``workload``, ``convention``, ``batch``, ``seq``, ...), the ``phase`` where a workload has
phases, and one ``<term>_flops`` exact ``int`` per breakdown term plus ``linear_flops`` and
``total_flops``. Compiled workloads go through ``costcalc.evaluate``; the composites
(``generate``, ``chunked``, ``varlen_prefill``) are assembled from them in
``costcalc.composites`` and offered here.
``costcalc.frame`` turns rows into a pandas DataFrame.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from . import evaluate
from .core.registry import WORKLOADS, workload as find
from .evaluate import SMALL, Options, Table
from .params import executed_linear_params, parameters, rule_6p

if TYPE_CHECKING:   # bytes and time load only when asked for (a FLOPs answer starts faster)
    from .roofline import Machine, Precision
# The composites (generate, chunked, varlen_prefill), assembled from compiled workloads, live
# in costcalc.composites; they are part of this API.
from .composites import chunk_schedule, chunked, chunked_table, generate, generate_table, varlen_prefill
from .render import as_rows as rows   # a table as a list of row dicts
from .spec import ModelSpec
from .vocab import DEFAULT_TILE

Row = dict[str, Any]

__all__ = ["prefill", "cached_prefill", "varlen_prefill", "chunk_schedule", "chunked", "chunked_table", "decode",
           "generate", "generate_table", "train", "table", "rows", "mla_form", "parameters", "executed_linear_params",
           "rule_6p", "crossover", "attention_fraction", "operators", "operator_terms", "WORKLOADS", "Options", "SMALL"]


def table(spec: ModelSpec, workload: str, convention: str = "causal", logits: str = "last",
          tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
          machine: Machine | None = None, window_cache: str = "whole", **inputs: Sequence[int]) -> Table:
    """Exact FLOPs of a compiled workload at every point given by equal-length input columns;
    a decode step adds its cost per output token, a training step the 6P rule beside it. With
    ``precision`` (dtypes) or ``machine`` (a device), the bytes it moves, and its time."""
    options = Options(convention, logits, tile, mla, window_cache)
    out = evaluate.table(spec, workload, options, **inputs)
    wl = find(workload)
    if wl.name == "decode":
        out["total_flops_per_token"] = list(map(int.__floordiv__, out["total_flops"], out["batch"]))
    if wl.name == "train":
        per_token = rule_6p(spec, 1, mla)
        out["rule_6p_flops"] = [per_token * b * q for b, q in zip(out["batch"], out["seq"])]
        out["ratio_to_6p"] = [round(t / r, 4) for t, r in zip(out["total_flops"], out["rule_6p_flops"])]
    if precision is not None or machine is not None:
        from . import roofline   # bytes and time load only when asked for

        out.update(roofline.row_columns(spec, wl, options, (wl.logits or options.logits).value, precision, machine,
                                        {i.symbol: out[i.column] for i in wl.inputs}, out["total_flops"]))
    return out


def _one(spec: ModelSpec, workload: str, convention: str, logits: str, tile, mla: str,
         window_cache: str = "whole", **inputs: int) -> Row:
    return rows(table(spec, workload, convention, logits, tile, mla, window_cache=window_cache,
                      **{k: [v] for k, v in inputs.items()}))[0]


def operators(spec: ModelSpec, workload: str, convention: str = "causal", logits: str = "last",
              tile: tuple[int, int] | None = None, mla: str = "auto", **inputs: int) -> dict[str, int]:
    """FLOPs of each operator (the projections by name, ``attention``, ``lm_head``) of one point
    of a compiled workload, summed over the layer groups. ``logits`` may be ``none``."""
    options = Options(convention, "last" if logits == "none" else logits, tile, mla)
    return evaluate.operators(spec, workload, options, logits, **inputs)


def operator_terms(spec: ModelSpec, workload: str = "prefill", mla: str = "auto") -> dict[str, str]:
    """The term each operator of a workload is charged to."""
    return evaluate.operator_terms(spec, workload, Options(mla=mla))


def crossover(spec: ModelSpec, conventions=("causal", "full"), mla: str = "auto", precision=None,
              batch: int = 1) -> list[Row]:
    """T_equal, the prefill crossover per convention, and with dtypes the time crossover
    (``costcalc.crossover``)."""
    from . import crossover as solved

    return solved.crossover(spec, conventions, mla, precision, batch)


def attention_fraction(seq: int, convention: str, tile: tuple[int, int] = DEFAULT_TILE):
    """Attention under a convention over the full rectangle, one uncached prefill of ``seq``
    (``costcalc.crossover``)."""
    from . import crossover as solved

    return solved.attention_fraction(seq, convention, tile)


def mla_form(workload: str, mla: str) -> str:
    """The MLA form a workload runs: ``auto`` is absorbed for decode steps, naive otherwise."""
    return Options(mla=mla).form(find(workload))


# --- single steps ----------------------------------------------------------------------

def prefill(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
            logits: str = "last", tile: tuple[int, int] | None = None, mla: str = "auto",
            window_cache: str = "whole") -> Row:
    """B prompts of S tokens, no cache."""
    return _one(spec, "prefill", convention, logits, tile, mla, window_cache, batch=batch, seq=seq)


def cached_prefill(spec: ModelSpec, chunk: int, prefix: int, batch: int = 1,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> Row:
    """C new tokens per sequence over a cached prefix of T tokens."""
    return _one(spec, "cached_prefill", convention, logits, tile, mla, window_cache,
                batch=batch, chunk=chunk, prefix=prefix)


def decode(spec: ModelSpec, context: int, batch: int = 1, convention: str = "causal",
           tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> Row:
    """One decode step over T cached tokens, B sequences; also per output token."""
    return _one(spec, "decode", convention, "last", tile, mla, window_cache, batch=batch, context=context)


def train(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
          tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """Forward with logits at every position, x3 for forward + backward, beside 6P (no cache:
    the window cache does not apply)."""
    return _one(spec, "train", convention, "all", tile, mla, batch=batch, seq=seq)
