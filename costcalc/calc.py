"""Exact numbers for a model: each workload's symbolic breakdown evaluated at one point.

Every function takes a ``ModelSpec`` and workload sizes and returns rows: plain dicts
with the inputs (``preset``, ``workload``, ``convention``, ``batch``, ``seq``, ...), the
``phase`` where a workload has phases, and one ``<term>_flops`` exact ``int`` per
breakdown term plus ``linear_flops`` and ``total_flops``. ``costcalc.frame`` turns rows
into a pandas DataFrame.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import operator

from . import compiled
from .errors import CostcalcError
from .ranges import check_rows
from .render import as_rows as rows   # a table as a list of row dicts
from .spec import ModelSpec
from .vocab import CONVENTIONS, LINEAR_PARTS, LOGITS, TERM_ORDER

Row = dict[str, Any]
Table = dict[str, list]    # columns of equal length, in row order

DEFAULT_TILE = (128, 128)
SMALL = 256   # up to this many points a sweep is evaluated point by point (no numpy import)


# --- input checks -------------------------------------------------------------------

def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CostcalcError(f"{name} must be a positive integer, got {value!r}")
    return value


def _non_negative(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CostcalcError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _convention(convention: str) -> str:
    if convention not in CONVENTIONS:
        raise CostcalcError(f"convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
    return convention


def _tile(convention: str, tile: tuple[int, int] | None) -> tuple[dict[str, Any], dict[str, int]]:
    """The ``tile`` column and the tile sizes to bind, for the tiled convention only."""
    if convention != "tiled":
        return {}, {}
    b_q, b_k = tile or DEFAULT_TILE
    _positive("tile queries", b_q), _positive("tile keys", b_k)
    return {"tile": f"{b_q}x{b_k}"}, {"b_q": b_q, "b_k": b_k}


def _logits(logits: str) -> str:
    if logits not in LOGITS:
        raise CostcalcError(f"logits must be one of {', '.join(LOGITS)}, got {logits!r}")
    return logits


# --- workloads as tables ------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """How a workload's inputs (row columns) bind the symbols of a compiled recipe."""
    kind: str                          # the recipe (see costcalc.codegen.KINDS)
    inputs: tuple[tuple[str, str], ...]  # (column, symbol), in column order
    minimum: dict[str, int]            # smallest legal value per column
    logits: str | None = None          # fixed logits mode, or None: the caller's


WORKLOADS = {
    "prefill": Workload("prefill", (("batch", "B"), ("seq", "S")), {"batch": 1, "seq": 1}),
    "cached_prefill": Workload("chunk", (("batch", "B"), ("chunk", "C"), ("prefix", "T")),
                               {"batch": 1, "chunk": 1, "prefix": 0}),
    "decode": Workload("decode", (("batch", "B"), ("context", "T")), {"batch": 1, "context": 1}, "-"),
    "train": Workload("train", (("batch", "B"), ("seq", "S")), {"batch": 1, "seq": 1}, "all"),
}


def table(spec: ModelSpec, workload: str, convention: str = "causal", logits: str = "last",
          tile: tuple[int, int] | None = None, mla: str = "auto", **inputs: Sequence[int]) -> Table:
    """Exact FLOPs of ``workload`` at every point given by equal-length input columns.

    Few points are evaluated one by one; many at once over arrays (``costcalc.compiled``),
    with the same exact integers either way.
    """
    wl = WORKLOADS[workload]
    _convention(convention)
    mode = wl.logits or _logits(logits)
    columns = [name for name, _ in wl.inputs]
    if sorted(inputs) != sorted(columns):
        raise CostcalcError(f"{workload} takes {', '.join(columns)}; got {', '.join(inputs) or 'nothing'}")
    sizes = {len(v) for v in inputs.values()}
    if len(sizes) != 1:
        raise CostcalcError(f"{workload}: input columns of different lengths {sorted(sizes)}")
    n = sizes.pop()
    for name, values in inputs.items():
        check = _positive if wl.minimum[name] == 1 else _non_negative
        if n <= SMALL or not hasattr(values, "dtype"):
            for v in values:
                check(name, v)
        elif values.min() < wl.minimum[name]:
            check(name, int(values.min()))
    tile_column, _ = _tile(convention, tile)
    flops = _flops_columns(spec, wl.kind, convention, "last" if mode == "-" else mode, tile, n,
                           {symbol: inputs[column] for column, symbol in wl.inputs}, mla)
    out: Table = {"preset": [spec.name] * n, "workload": [workload] * n, "convention": [convention] * n}
    out.update({key: [value] * n for key, value in tile_column.items()})
    out.update({key: [value] * n for key, value in _mla_column(spec, wl.kind, mla).items()})
    out.update({c: [int(v) for v in inputs[c]] if n <= SMALL else _ints(inputs[c]) for c in columns})
    if wl.logits != "-":
        out["logits"] = [mode] * n
    out.update({f"{name}_flops": values for name, values in flops.items()})
    if workload == "decode":
        out["total_flops_per_token"] = list(map(int.__floordiv__, out["total_flops"], out["batch"]))
    if workload == "train":
        out["rule_6p_flops"] = [rule_6p(spec, b * q, mla) for b, q in zip(out["batch"], out["seq"])]
        out["ratio_to_6p"] = [round(t / r, 4) for t, r in zip(out["total_flops"], out["rule_6p_flops"])]
    return out


def _mla_column(spec: ModelSpec, kind: str, mla: str) -> dict[str, str]:
    """The ``mla`` column (the form used) for a model with MLA layers."""
    return {"mla": mla_form(kind, mla)} if spec.has_mla else {}


def _ints(values: Any) -> list[int]:
    return values.tolist() if hasattr(values, "tolist") else [int(v) for v in values]


def _one(spec: ModelSpec, workload: str, convention: str, logits: str,
         tile: tuple[int, int] | None, mla: str = "auto", **inputs: int) -> Row:
    return rows(table(spec, workload, convention, logits, tile, mla, **{k: [v] for k, v in inputs.items()}))[0]


def total_row(rows: Sequence[Row], **labels: Any) -> Row:
    """The sum of the ``*_flops`` columns of ``rows``, with the first row's other fields."""
    out = {key: value for key, value in rows[0].items() if not key.endswith("_flops")}
    out.update(labels)
    for key in rows[0]:
        if key.endswith("_flops"):
            out[key] = sum(r[key] for r in rows)
    return out


# --- workloads ----------------------------------------------------------------------

def prefill(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
            logits: str = "last", tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """B prompts of S tokens, no cache."""
    return _one(spec, "prefill", convention, logits, tile, mla, batch=batch, seq=seq)


def cached_prefill(spec: ModelSpec, chunk: int, prefix: int, batch: int = 1,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """C new tokens per sequence over a cached prefix of T tokens."""
    return _one(spec, "cached_prefill", convention, logits, tile, mla, batch=batch, chunk=chunk, prefix=prefix)


def varlen_prefill(spec: ModelSpec, lengths: Sequence[int], padded: bool = False,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """A batch of prompts of different lengths, packed (sums) or padded to the longest."""
    if not lengths:
        raise CostcalcError("lengths must list at least one prompt length")
    lengths = [_positive("each of lengths", n) for n in lengths]
    if padded:
        one = table(spec, "prefill", convention, logits, tile, mla, batch=[len(lengths)], seq=[max(lengths)])
        flops = {k: v[0] for k, v in one.items() if k.endswith("_flops")}
    else:
        each = table(spec, "prefill", convention, logits, tile, mla, batch=[1] * len(lengths), seq=lengths)
        flops = {k: sum(v) for k, v in each.items() if k.endswith("_flops")}
    tile_column, _ = _tile(convention, tile)
    row: Row = {"preset": spec.name, "workload": "varlen_prefill", "convention": convention,
                **tile_column, **_mla_column(spec, "prefill", mla), "batch": len(lengths), "lengths": ",".join(map(str, lengths)),
                "padded": padded, "logits": logits}
    row.update(flops)
    return row


def chunk_schedule(seq: int, chunk: int) -> list[int]:
    """Chunk sizes of a prompt of ``seq`` tokens cut into chunks of ``chunk`` (last may be short)."""
    full, rest = _chunk_counts(seq, chunk)
    return [chunk] * full + ([rest] if rest else [])


def _chunk_counts(seq: int, chunk: int) -> tuple[int, int]:
    seq, chunk = _positive("seq", seq), _positive("chunk", chunk)
    if chunk > seq:
        raise CostcalcError(f"chunk {chunk} is larger than the prompt (seq {seq})")
    full, rest = divmod(seq, chunk)
    check_rows(full + bool(rest) + 2, f"the schedule of seq {seq} in chunks of {chunk}")
    return full, rest


def chunked(spec: ModelSpec, seq: int, chunk: int, prefix: int = 0, batch: int = 1,
            convention: str = "causal", logits: str = "last",
            tile: tuple[int, int] | None = None, mla: str = "auto") -> list[Row]:
    """The chunk schedule of one prompt: a row per chunk, a ``total`` row, and the
    ``unchunked`` single pass over the same prefix for comparison.

    Only the final chunk produces logits (``logits=last``); with ``all`` every chunk
    produces logits for its own tokens.
    """
    return rows(chunked_table(spec, seq, chunk, prefix, batch, convention, logits, tile, mla))


def chunked_table(spec: ModelSpec, seq: int, chunk: int, prefix: int = 0, batch: int = 1,
                  convention: str = "causal", logits: str = "last",
                  tile: tuple[int, int] | None = None, mla: str = "auto") -> Table:
    """``chunked`` as columns: every chunk evaluated at once over arrays (a schedule of a
    million chunks takes seconds), then the ``total`` and ``unchunked`` rows."""
    full, rest = _chunk_counts(seq, chunk)
    prefix, batch = _non_negative("prefix", prefix), _positive("batch", batch)
    _convention(convention), _logits(logits)
    tile_column, _ = _tile(convention, tile)
    n = full + bool(rest)
    sizes = _arange_like(n, chunk)
    if rest:
        sizes[-1] = rest
    starts = _starts(n, chunk, prefix)
    # logits last: the last chunk alone runs the LM head; all: each chunk for its own tokens
    flops: dict[str, list[int]] = {}
    parts = [(0, n, logits)] if logits == "all" else [(0, n - 1, "none"), (n - 1, n, "last")]
    for lo, hi, mode in parts:
        if hi <= lo:
            continue
        got = _flops_columns(spec, "chunk", convention, mode, tile, hi - lo,
                             {"B": [batch] * (hi - lo) if hi - lo <= SMALL else _full(hi - lo, batch),
                              "C": sizes[lo:hi], "T": starts[lo:hi]}, mla)
        for name, column in got.items():
            flops.setdefault(name, []).extend(column)
    labels = {"preset": spec.name, "workload": "chunked", "convention": convention, **tile_column,
              **_mla_column(spec, "chunk", mla)}
    out: Table = {key: [value] * (n + 2) for key, value in labels.items()}
    out["phase"] = [f"chunk {i}" for i in range(1, n + 1)] + ["total", "unchunked"]
    out["batch"] = [batch] * (n + 2)
    out["seq"] = [seq] * (n + 2)
    out["chunk"] = _ints(sizes) + [chunk, seq]
    out["prefix"] = _ints(starts) + [prefix, prefix]
    out["logits"] = [logits] * (n + 2)
    single = cached_prefill(spec, seq, prefix, batch, convention, logits, tile, mla)
    for name, column in flops.items():
        key = f"{name}_flops"
        out[key] = column + [sum(column), single[key]]
    return out


def _arange_like(n: int, value: int):
    if n <= SMALL:
        return [value] * n
    import numpy as np

    return np.full(n, value, dtype=np.int64)


def _starts(n: int, chunk: int, prefix: int):
    if n <= SMALL:
        return [prefix + i * chunk for i in range(n)]
    import numpy as np

    return prefix + chunk * np.arange(n, dtype=np.int64)


def _full(n: int, value: int):
    import numpy as np

    return np.full(n, value, dtype=np.int64)


def decode(spec: ModelSpec, context: int, batch: int = 1, convention: str = "causal",
           tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """One decode step over T cached tokens, B sequences; also per output token."""
    return _one(spec, "decode", convention, "last", tile, mla, batch=batch, context=context)


def generate(spec: ModelSpec, prompt: int, new: int, batch: int = 1,
             convention: str = "causal", logits: str = "last",
             tile: tuple[int, int] | None = None, mla: str = "auto") -> list[Row]:
    """Prefill of S, then N-1 decode steps: ``prefill``, ``decode`` and ``total`` rows."""
    return rows(generate_table(spec, convention, logits, tile, mla, batch=[batch], seq=[prompt], new_tokens=[new]))


def generate_table(spec: ModelSpec, convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None, mla: str = "auto", *, batch: Sequence[int],
                   seq: Sequence[int], new_tokens: Sequence[int]) -> Table:
    """Generations at every point of equal-length columns: three rows per point
    (``prefill``, ``decode`` = the N-1 steps, ``total``)."""
    n = len(seq)
    if not (len(batch) == len(new_tokens) == n):
        raise CostcalcError("generate: input columns of different lengths")
    if n <= SMALL or not hasattr(new_tokens, "dtype"):
        for v in new_tokens:
            _positive("new", v)
    elif new_tokens.min() < 1:
        _positive("new", int(new_tokens.min()))
    first = table(spec, "prefill", convention, logits, tile, mla, batch=batch, seq=seq)
    steps = _flops_columns(spec, "decode_phase", convention, "last", tile, n,
                           {"B": batch, "S": seq, "N": new_tokens}, mla)
    phases = {"prefill": {k: v for k, v in first.items() if k.endswith("_flops")},
              "decode": {f"{k}_flops": v for k, v in steps.items()}}
    phases["total"] = {k: _add([phases["prefill"][k], phases["decode"][k]]) for k in phases["prefill"]}
    labels = {k: v for k, v in first.items() if not k.endswith("_flops")}
    labels["new_tokens"] = _ints(new_tokens) if n > SMALL else [int(v) for v in new_tokens]
    out: Table = {}
    for key in ("preset", "workload", "convention", "tile"):
        if key in labels:
            out[key] = _repeat(labels[key], 3)
    if spec.has_mla:
        first_form, step_form = mla_form("prefill", mla), mla_form("decode_phase", mla)
        both = first_form if first_form == step_form else f"{first_form}+{step_form}"
        out["mla"] = [first_form, step_form, both] * n
    out["workload"] = ["generate"] * (3 * n)
    out["phase"] = ["prefill", "decode", "total"] * n
    for key in ("batch", "seq", "new_tokens", "logits"):
        out[key] = _repeat(labels[key], 3)
    for key in phases["prefill"]:
        column = [0] * (3 * n)
        for offset, phase in enumerate(phases):
            column[offset::3] = phases[phase][key]
        out[key] = column
    return out


def _repeat(values: list, times: int) -> list:
    return [v for v in values for _ in range(times)]


MLA_FORMS = ("auto", "naive", "absorbed")
DECODE_KINDS = ("decode", "decode_phase")


def mla_form(kind: str, mla: str) -> str:
    """The MLA form a recipe runs: ``auto`` is absorbed for decode steps, naive otherwise."""
    if mla not in MLA_FORMS:
        raise CostcalcError(f"mla must be one of {', '.join(MLA_FORMS)}, got {mla!r}")
    if mla != "auto":
        return mla
    return "absorbed" if kind in DECODE_KINDS else "naive"


def _flops_columns(spec: ModelSpec, kind: str, convention: str, logits: str,
                   tile: tuple[int, int] | None, n: int, point: dict[str, Sequence[int]],
                   mla: str = "auto") -> dict[str, list[int]]:
    """Every output of a recipe at n points (symbol name -> column), summed over the
    model's layer groups: each group's terms with L = its layer count, the LM head once."""
    _, tile_point = _tile(convention, tile)
    form = mla_form(kind, mla)
    per_group = []
    for group in spec.groups:
        recipe = compiled.get(kind, group.block.with_form(form).key, convention, logits)
        base = {**group.numbers(), **tile_point}
        if n <= SMALL:
            points = [recipe.evaluate({**base, **{k: int(v[i]) for k, v in point.items()}}) for i in range(n)]
            per_group.append({name: [p[name] for p in points] for name in recipe.outputs})
        else:
            per_group.append(recipe.columns({**base, **point}, n))
    if len(per_group) == 1:
        return per_group[0]
    return _combine(per_group)


def _combine(per_group: list[dict[str, list[int]]]) -> dict[str, list[int]]:
    """Terms summed over groups (the LM head is the first group's: the model has one)."""
    names = [t for t in TERM_ORDER if any(t in g for g in per_group)]
    names += [t for g in per_group for t in g if t not in names and t not in TERM_ORDER]
    out: dict[str, list[int]] = {}
    for name in names:
        if name in ("linear", "total"):
            continue
        columns = [g[name] for g in (per_group[:1] if name == "lm_head" else per_group) if name in g]
        out[name] = _add(columns)
    if "total" in names:
        linear = [out[t] for t in LINEAR_PARTS if t in out]
        if linear:
            out["linear"] = _add(linear)
        out["total"] = _add([out[t] for t in out if t != "linear"])
        out = {t: out[t] for t in TERM_ORDER if t in out}
    return out


def _add(columns: list[list[int]]) -> list[int]:
    total = list(columns[0])
    for column in columns[1:]:
        total = list(map(operator.add, total, column))
    return total


def train(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
          tile: tuple[int, int] | None = None, mla: str = "auto") -> Row:
    """Forward with logits at every position, x3 for forward + backward, beside 6P."""
    return _one(spec, "train", convention, "all", tile, mla, batch=batch, seq=seq)


def executed_linear_params(spec: ModelSpec, mla: str = "naive") -> int:
    """P_lin: block linear parameters a token runs through (active experts only), i.e. the
    linear FLOPs of one token / 2 (MLA: in the given form; absorbed runs other products)."""
    return sum(compiled.get("p_lin", g.block.with_form(mla).key, "-", "-").evaluate(g.numbers())["p_lin"]
               for g in spec.groups)


def parameters(spec: ModelSpec) -> Row:
    """Weights: ``total_params`` (every expert; a tied LM head once), ``active_params`` (the
    block weights a token runs plus the LM head), and the embedding and LM head apart.
    Matrices only: norms and biases are not counted (well under 0.1% of any preset)."""
    blocks_total = blocks_active = 0
    for g in spec.groups:
        got = compiled.get("params", g.arch, "-", "-").evaluate(g.numbers())
        blocks_total += got["block_total"]
        blocks_active += got["block_active"]
    embedding = lm_head = spec["d"] * spec["V"]
    return {"total_params": blocks_total + embedding + (0 if spec.tied_embeddings else lm_head),
            "active_params": blocks_active + lm_head,
            "embedding_params": embedding, "lm_head_params": lm_head,
            "tied_embeddings": spec.tied_embeddings,
            "block_params": blocks_total, "block_active_params": blocks_active}


def rule_6p(spec: ModelSpec, tokens: int, mla: str = "auto") -> int:
    """The 6P-per-token rule of thumb, P = executed linear + LM head parameters per token."""
    return 6 * (executed_linear_params(spec, mla_form("train", mla)) + spec["d"] * spec["V"]) * tokens


def crossover(spec: ModelSpec, conventions: Iterable[str] = ("causal", "full"), mla: str = "auto") -> list[Row]:
    """T_equal for decode and the prefill length where attention equals linear, exactly.

    Over a model's layer groups: attention and linear summed over the groups, each at its
    own layer count. Sliding windows make attention piecewise; where it never catches up
    with the linear layers the answer is ``never``."""
    import sympy as sp

    from . import symbols as sy
    from .core import crossover as cx

    def bound(group, expr):
        return expr.xreplace({sy.BY_NAME[k]: sp.Integer(v) for k, v in group.numbers().items()})

    decode_form, prefill_form = mla_form("decode", mla), mla_form("prefill", mla)
    gaps = [cx.decode_gap(g.block.with_form(decode_form).key) for g in spec.groups]
    keys = gaps[0][1]
    gap = sp.Add(*(bound(g, e) for g, (e, _) in zip(spec.groups, gaps)))
    simple = spec.uniform and not spec.windows
    rows = [_crossover_row(spec, "decode_t_equal", "causal", cx.first_crossing(gap, keys),
                           str(cx.decode_t_equal(spec.groups[0].block.with_form(decode_form).key)) if simple
                           else "piecewise over layer groups", decode_form)]
    for conv in conventions:
        if _convention(conv) == "tiled":
            raise CostcalcError("crossover: the tiled convention has no closed form; use causal or full")
        gap = sp.Add(*(bound(g, cx.prefill_gap(g.block.with_form(prefill_form).key, conv)) for g in spec.groups))
        formula = (str(cx.prefill_crossover(spec.groups[0].block.with_form(prefill_form).key, conv))
                   if simple else "piecewise over layer groups")
        rows.append(_crossover_row(spec, "prefill_attention_equals_linear", conv,
                                   cx.first_crossing(gap, sy.S), formula, prefill_form))
    return rows


def _crossover_row(spec: ModelSpec, quantity: str, convention: str, value, formula: str, form: str) -> Row:
    row = {"preset": spec.name, "workload": "crossover", "quantity": quantity, "convention": convention}
    if spec.has_mla:
        row["mla"] = form
    if value is None:
        row.update(exact="never", tokens=None)
    else:
        row.update(exact=str(value), tokens=round(float(value), 2))
    if quantity == "decode_t_equal":   # keys read by the step = cached context + its own key
        row["context_exact"] = "never" if value is None else str(value - 1)
        row["context"] = None if value is None else round(float(value - 1), 2)
    row["formula"] = formula
    return row


def tiled_fraction(seq: int, tile: tuple[int, int]) -> sp.Rational:
    """Tiled / full attention of one uncached prefill of ``seq``: what a tile kernel saves."""
    import sympy as sp

    from . import symbols as s
    from .core.attention import attention_flops
    from .core.breakdown import exact_int

    point = {s.S: sp.Integer(_positive("seq", seq)), s.b_q: sp.Integer(tile[0]), s.b_k: sp.Integer(tile[1]),
             s.L: sp.Integer(1), s.d_q: sp.Integer(1)}  # the ratio does not depend on them
    tiled = exact_int(attention_flops("tiled", 0, s.S), point, "tiled attention")
    full = exact_int(attention_flops("full", 0, s.S), point, "full attention")
    return sp.Rational(tiled, full)
