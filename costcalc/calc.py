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
from .evaluate import SMALL, Options, Query, Table
from .params import executed_linear_params, parameters, rule_6p

if TYPE_CHECKING:   # bytes and time load only when asked for (a FLOPs answer starts faster)
    from .roofline import Machine, Precision
# The composites (generate, chunked, varlen_prefill) are assembled from compiled workloads in
# costcalc.composites; this API offers them by keyword, and for a query.
from .composites import chunk_schedule, varlen
from .rows import as_rows as rows   # a table as a list of row dicts
from .spec import ModelSpec
from .vocab import DEFAULT_TILE

Row = dict[str, Any]

__all__ = ["prefill", "cached_prefill", "varlen_prefill", "chunk_schedule", "chunked", "chunked_table", "decode",
           "generate", "generate_table", "train", "table", "rows", "mla_form", "parameters", "executed_linear_params",
           "rule_6p", "crossover", "attention_fraction", "operators", "operator_terms", "WORKLOADS", "Options", "SMALL",
           "Query", "answer", "options", "generation", "schedule", "varlen", "point"]


def options(convention: str = "causal", logits: str = "last", tile: tuple[int, int] | None = None,
            mla: str = "auto", window_cache: str = "whole") -> Options:
    """The options of the keyword API, as one record (``evaluate.Options``)."""
    return Options(convention, logits, tile, mla, window_cache)


def table(spec: ModelSpec, workload: str, convention: str = "causal", logits: str = "last",
          tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
          machine: Machine | None = None, window_cache: str = "whole", **inputs: Sequence[int]) -> Table:
    """Exact FLOPs of a compiled workload at every point given by equal-length input columns;
    a decode step adds its cost per output token, a training step the 6P rule beside it. With
    ``precision`` (dtypes) or ``machine`` (a device), the bytes it moves, and its time."""
    query = Query(spec, workload, options(convention, logits, tile, mla, window_cache), precision, machine)
    return answer(query, **inputs)


def answer(query: Query, **inputs: Sequence[int]) -> Table:
    """``table`` for a query: its FLOPs, the columns its workload adds (``Workload.extras``),
    and with dtypes or a device its bytes and time. A training step on a layout, with recomputation
    or on a device is the whole step's with ``training``'s columns beside it (forward and backward per
    device, memory, time)."""
    if query.workload.name == "train" and (not query.options.layout.single or query.machine is not None
                                           or query.options.recompute != "none"):
        from . import training

        return training.extend(query, answer(training.single(query), **inputs))
    if _speculative(query):
        from . import speculation

        return speculation.step(query, **inputs)
    out = evaluate.table(query, **inputs)
    for extra in query.workload.extras:
        out.update(EXTRAS[extra](query, out))
    if query.traffic:
        from . import roofline   # bytes and time load only when asked for

        wl = query.workload
        out.update(roofline.row_columns(query, {i.symbol: out[i.column] for i in wl.inputs}, out["total_flops"]))
    if not query.options.layout.single:
        from . import parallel

        wl = query.workload
        out.update(parallel.columns(query, {i.symbol: out[i.column] for i in wl.inputs}, len(out["total_flops"])))
        out = parallel.beside(out)
    if query.machine is not None and query.workload.name in HELD:
        out = fit_and_rates(query, out)
    return out


# The tokens each sequence's cache holds after a step of a compiled workload (``costcalc.fitting``).
HELD = {"prefill": lambda t: t["seq"],
        "cached_prefill": lambda t: [p + c for p, c in zip(t["prefix"], t["chunk"])],
        "decode": lambda t: [c + 1 for c in t["context"]]}


def _speculative(query: Query) -> bool:
    """Whether a query asks a speculative step (``--acceptance``; a draft model runs only so)."""
    if query.options.draft_model is not None and query.options.acceptance is None:
        from .errors import CostcalcError

        raise CostcalcError(f"--draft {query.options.draft_model.name}: a draft model runs only as speculative "
                            f"decoding; give --acceptance")
    return query.options.acceptance is not None


def fit_and_rates(query: Query, out: Table) -> Table:
    """A timed row's ``fits`` (its weights and the cache it holds after the step, on its device:
    ``costcalc.fitting``) beside its time; a decode step's ``tokens_per_s`` (one token per sequence:
    1 / time_s) and ``batch_tokens_per_s`` (B / time_s)."""
    from . import fitting

    new: dict[str, list] = {}
    if query.workload.name == "decode" and "time_s" in out:
        new["tokens_per_s"] = [1 / t if t else None for t in out["time_s"]]
        new["batch_tokens_per_s"] = [b / t if t else None for b, t in zip(out["batch"], out["time_s"])]
    new["fits"] = fitting.column(query, out["batch"], HELD[query.workload.name](out))
    return fitting.insert_after(out, "time_s", new)


def generation(query: Query, batch: Sequence[int], seq: Sequence[int], new_tokens: Sequence[int]) -> Table:
    """``composites.generation``; on a device each row's ``fits``: the prefill holding S tokens a
    sequence, the decode phase and the total S + N - 1."""
    if _speculative(query):
        from . import speculation

        return speculation.generation(query, batch, seq, new_tokens)
    from .composites import generation as generated

    out = generated(query, batch, seq, new_tokens)
    if query.machine is None:
        return out
    from . import fitting

    context = [s if phase == "prefill" else s + n - 1 for phase, s, n in zip(out["phase"], out["seq"], out["new_tokens"])]
    return fitting.insert_after(out, "time_s", {"fits": fitting.column(query, out["batch"], context)})


def schedule(query: Query, seq: int, chunk: int, prefix: int = 0, batch: int = 1) -> Table:
    """``composites.schedule``; on a device each row's ``fits``: a chunk holding the prefix and
    the chunks so far, the total and the unchunked pass prefix + seq."""
    from .composites import schedule as scheduled

    out = scheduled(query, seq, chunk, prefix, batch)
    if query.machine is None:
        return out
    from . import fitting

    n = len(out["phase"]) - 2       # the chunks, then the total and the unchunked pass: prefix + seq
    chunks = fitting.increasing(query, batch, [p + c for p, c in zip(out["prefix"][:n], out["chunk"][:n])])
    whole = fitting.fits(query, batch, prefix + seq)
    return fitting.insert_after(out, "time_s", {"fits": chunks + [whole, whole]})


def per_token(query: Query, rows: Table) -> Table:
    """A decode step's cost per output token: one token per sequence."""
    return {"total_flops_per_token": list(map(int.__floordiv__, rows["total_flops"], rows["batch"]))}


def beside_6p(query: Query, rows: Table) -> Table:
    """The 6P rule of thumb beside a training step, and the step's ratio to it."""
    per_token = rule_6p(query.spec, 1, query.options.mla.value)
    rule = [per_token * b * s for b, s in zip(rows["batch"], rows["seq"])]
    return {"rule_6p_flops": rule, "ratio_to_6p": [round(t / r, 4) for t, r in zip(rows["total_flops"], rule)]}


EXTRAS = {"per_token": per_token, "rule_6p": beside_6p}   # the columns a registry entry's ``extras`` names


def point(query: Query, **inputs: int) -> Row:
    """One point of a workload as a row: a compiled workload's, or the total of one run in
    phases (a generation's)."""
    columns = {k: [v] for k, v in inputs.items()}
    if query.workload.phases:
        return rows(generation(query, **columns))[-1]
    return rows(answer(query, **columns))[0]


def _one(spec: ModelSpec, workload: str, options: Options, **inputs: int) -> Row:
    return point(Query(spec, workload, options), **inputs)


def operators(spec: ModelSpec, workload: str, convention: str = "causal", logits: str = "last",
              tile: tuple[int, int] | None = None, mla: str = "auto", **inputs: int) -> dict[str, int]:
    """FLOPs of each operator (the projections by name, ``attention``, ``lm_head``) of one point
    of a compiled workload, summed over the layer groups. ``logits`` may be ``none``."""
    return evaluate.operators(Query(spec, workload, Options(convention, logits, tile, mla)), **inputs)


def operator_terms(spec: ModelSpec, workload: str = "prefill", mla: str = "auto") -> dict[str, str]:
    """The term each operator of a workload is charged to."""
    return evaluate.operator_terms(Query(spec, workload, Options(mla=mla)))


def crossover(spec: ModelSpec, conventions=("causal", "full"), mla: str = "auto", precision=None,
              batch: int = 1) -> list[Row]:
    """T_equal, the prefill crossover per convention, and with dtypes the time crossover
    (``costcalc.crossover``)."""
    from . import crossover as solved

    return solved.crossover(spec, conventions, mla, precision, batch)


def compute_bound(rows: list[Row], step: Query, context: int | None = None) -> list[Row]:
    """``crossover``'s rows of one model with the batch at which ``step`` (a decode step's query on
    a device) over ``context`` cached tokens (else T_equal's) and each of its terms turns
    compute-bound, exactly (``crossover.compute_bound``)."""
    from . import crossover as solved

    return solved.beside(rows, step, context)


def attention_fraction(seq: int, convention: str, tile: tuple[int, int] = DEFAULT_TILE):
    """Attention under a convention over the full rectangle, one uncached prefill of ``seq``
    (``costcalc.crossover``)."""
    from . import crossover as solved

    return solved.attention_fraction(seq, convention, tile)


def mla_form(workload: str, mla: str) -> str:
    """The MLA form a workload runs (``Options.form``)."""
    return Options(mla=mla).form(find(workload)).value


# --- single steps ----------------------------------------------------------------------

def prefill(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
            logits: str = "last", tile: tuple[int, int] | None = None, mla: str = "auto",
            window_cache: str = "whole") -> Row:
    """B prompts of S tokens, no cache."""
    return _one(spec, "prefill", options(convention, logits, tile, mla, window_cache), batch=batch, seq=seq)


def cached_prefill(spec: ModelSpec, chunk: int, prefix: int, batch: int = 1,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> Row:
    """C new tokens per sequence over a cached prefix of T tokens."""
    return _one(spec, "cached_prefill", options(convention, logits, tile, mla, window_cache),
                batch=batch, chunk=chunk, prefix=prefix)


def decode(spec: ModelSpec, context: int, batch: int = 1, convention: str = "causal",
           tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> Row:
    """One decode step over T cached tokens, B sequences; also per output token."""
    return _one(spec, "decode", options(convention, "last", tile, mla, window_cache), batch=batch, context=context)


def train(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
          tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """Forward with logits at every position, x3 for forward + backward, beside 6P (no cache:
    the window cache does not apply)."""
    return _one(spec, "train", options(convention, "all", tile, mla), batch=batch, seq=seq)


# --- composites -------------------------------------------------------------------------

def varlen_prefill(spec: ModelSpec, lengths: Sequence[int], padded: bool = False,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
                   machine: Machine | None = None) -> Row:
    """A batch of prompts of different lengths, packed (sums) or padded to the longest; with
    ``precision`` or ``machine``, the bytes and times of its forwards, summed."""
    return varlen(Query(spec, "varlen_prefill", options(convention, logits, tile, mla), precision, machine), lengths,
                  padded)


def generate(spec: ModelSpec, prompt: int, new: int, batch: int = 1,
             convention: str = "causal", logits: str = "last",
             tile: tuple[int, int] | None = None, mla: str = "auto", window_cache: str = "whole") -> list[Row]:
    """Prefill of S, then N-1 decode steps: ``prefill``, ``decode`` and ``total`` rows."""
    query = Query(spec, "generate", options(convention, logits, tile, mla, window_cache))
    return rows(generation(query, [batch], [prompt], [new]))


def generate_table(spec: ModelSpec, convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
                   machine: Machine | None = None, *, batch: Sequence[int],
                   seq: Sequence[int], new_tokens: Sequence[int], window_cache: str = "whole") -> Table:
    """Generations at every point of equal-length columns (``composites.generation``)."""
    query = Query(spec, "generate", options(convention, logits, tile, mla, window_cache), precision, machine)
    return generation(query, batch, seq, new_tokens)


def chunked(spec: ModelSpec, seq: int, chunk: int, prefix: int = 0, batch: int = 1,
            convention: str = "causal", logits: str = "last",
            tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
            machine: Machine | None = None, window_cache: str = "whole") -> list[Row]:
    """The chunk schedule of one prompt: a row per chunk, a ``total`` row, and the
    ``unchunked`` single pass over the same prefix for comparison (``composites.schedule``)."""
    return rows(chunked_table(spec, seq, chunk, prefix, batch, convention, logits, tile, mla, precision, machine,
                              window_cache))


def chunked_table(spec: ModelSpec, seq: int, chunk: int, prefix: int = 0, batch: int = 1,
                  convention: str = "causal", logits: str = "last",
                  tile: tuple[int, int] | None = None, mla: str = "auto", precision: Precision | None = None,
                  machine: Machine | None = None, window_cache: str = "whole") -> Table:
    """``chunked`` as columns."""
    query = Query(spec, "chunked", options(convention, logits, tile, mla, window_cache), precision, machine)
    return schedule(query, seq, chunk, prefix, batch)
