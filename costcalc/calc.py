"""Exact numbers for a model: each workload's symbolic breakdown evaluated at one point.

Every function takes a ``ModelSpec`` and workload sizes and returns rows: plain dicts
with the inputs (``preset``, ``workload``, ``convention``, ``batch``, ``seq``, ...), the
``phase`` where a workload has phases, and one ``<term>_flops`` exact ``int`` per
breakdown term plus ``linear_flops`` and ``total_flops``. ``costcalc.frame`` turns rows
into a pandas DataFrame.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import sympy as sp

from . import symbols as s
from .core import crossover as cx
from .core import workloads as w
from .core.attention import CONVENTIONS
from .core.breakdown import Breakdown, exact_int
from .core.linear import p_lin
from .errors import CostcalcError
from .spec import ModelSpec

Row = dict[str, Any]


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


DEFAULT_TILE = (128, 128)


def _tile(convention: str, tile: tuple[int, int] | None) -> tuple[dict[str, Any], dict[sp.Symbol, int]]:
    """The ``tile`` column and the tile sizes to bind, for the tiled convention only."""
    if convention != "tiled":
        return {}, {}
    b_q, b_k = tile or DEFAULT_TILE
    _positive("tile queries", b_q), _positive("tile keys", b_k)
    return {"tile": f"{b_q}x{b_k}"}, {s.b_q: b_q, s.b_k: b_k}


def _logits(logits: str) -> str:
    if logits not in w.LOGITS:
        raise CostcalcError(f"logits must be one of {', '.join(w.LOGITS)}, got {logits!r}")
    return logits


# --- rows ---------------------------------------------------------------------------

def _row(spec: ModelSpec, workload: str, convention: str, inputs: dict[str, Any],
         breakdown: Breakdown, point: dict[sp.Symbol, int], tile: tuple[int, int] | None = None) -> Row:
    tile_column, tile_point = _tile(convention, tile)
    values = breakdown.evaluate({**spec.values(), **point, **tile_point})
    row: Row = {"preset": spec.name, "workload": workload, "convention": convention, **tile_column, **inputs}
    row.update({f"{name}_flops": value for name, value in values.items()})
    return row


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
            logits: str = "last", tile: tuple[int, int] | None = None) -> Row:
    """B prompts of S tokens, no cache."""
    seq, batch = _positive("seq", seq), _positive("batch", batch)
    bd = w.prefill(spec.arch, _convention(convention), _logits(logits))
    return _row(spec, "prefill", convention, {"batch": batch, "seq": seq, "logits": logits},
                bd, {s.B: batch, s.S: seq}, tile)


def cached_prefill(spec: ModelSpec, chunk: int, prefix: int, batch: int = 1,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None) -> Row:
    """C new tokens per sequence over a cached prefix of T tokens."""
    chunk, prefix = _positive("chunk", chunk), _non_negative("prefix", prefix)
    batch = _positive("batch", batch)
    bd = w.cached_prefill(spec.arch, _convention(convention), _logits(logits))
    return _row(spec, "cached_prefill", convention,
                {"batch": batch, "chunk": chunk, "prefix": prefix, "logits": logits},
                bd, {s.B: batch, s.C: chunk, s.T: prefix}, tile)


def varlen_prefill(spec: ModelSpec, lengths: Sequence[int], padded: bool = False,
                   convention: str = "causal", logits: str = "last",
                   tile: tuple[int, int] | None = None) -> Row:
    """A batch of prompts of different lengths, packed (sums) or padded to the longest."""
    if not lengths:
        raise CostcalcError("lengths must list at least one prompt length")
    lengths = [_positive("each of lengths", n) for n in lengths]
    bd = w.prefill(spec.arch, _convention(convention), _logits(logits))
    tile_column, tile_point = _tile(convention, tile)
    base = {**spec.values(), **tile_point, s.B: 1}
    if padded:
        per_seq = [bd.evaluate({**base, s.B: len(lengths), s.S: max(lengths)})]
    else:
        per_seq = [bd.evaluate({**base, s.S: n}) for n in lengths]
    row: Row = {"preset": spec.name, "workload": "varlen_prefill", "convention": convention,
                **tile_column, "batch": len(lengths), "lengths": ",".join(map(str, lengths)),
                "padded": padded, "logits": logits}
    row.update({f"{name}_flops": sum(v[name] for v in per_seq) for name in per_seq[0]})
    return row


def chunk_schedule(seq: int, chunk: int) -> list[int]:
    """Chunk sizes of a prompt of ``seq`` tokens cut into chunks of ``chunk`` (last may be short)."""
    seq, chunk = _positive("seq", seq), _positive("chunk", chunk)
    if chunk > seq:
        raise CostcalcError(f"chunk {chunk} is larger than the prompt (seq {seq})")
    full, rest = divmod(seq, chunk)
    return [chunk] * full + ([rest] if rest else [])


def chunked(spec: ModelSpec, seq: int, chunk: int, prefix: int = 0, batch: int = 1,
            convention: str = "causal", logits: str = "last",
            tile: tuple[int, int] | None = None) -> list[Row]:
    """The chunk schedule of one prompt: a row per chunk, a ``total`` row, and the
    ``unchunked`` single pass over the same prefix for comparison.

    Only the final chunk produces logits (``logits=last``); with ``all`` every chunk
    produces logits for its own tokens.
    """
    sizes = chunk_schedule(seq, chunk)
    prefix, batch = _non_negative("prefix", prefix), _positive("batch", batch)
    _convention(convention), _logits(logits)
    rows, done = [], 0
    for index, size in enumerate(sizes, start=1):
        mode = logits if (logits == "all" or index == len(sizes)) else "none"
        bd = w.forward(spec.arch, convention, mode, past=s.T, new=s.C)
        rows.append(_row(spec, "chunked", convention,
                         {"phase": f"chunk {index}", "batch": batch, "seq": seq,
                          "chunk": size, "prefix": prefix + done, "logits": logits},
                         bd, {s.B: batch, s.C: size, s.T: prefix + done}, tile))
        done += size
    total = total_row(rows, phase="total", chunk=chunk, prefix=prefix)
    single = cached_prefill(spec, seq, prefix, batch, convention, logits, tile)
    single.update(workload="chunked", phase="unchunked", seq=seq, chunk=seq)
    return rows + [total, {k: single[k] for k in total}]


def decode(spec: ModelSpec, context: int, batch: int = 1, convention: str = "causal",
           tile: tuple[int, int] | None = None) -> Row:
    """One decode step over T cached tokens, B sequences; also per output token."""
    context, batch = _positive("context", context), _positive("batch", batch)
    bd = w.decode_step(spec.arch, _convention(convention))
    row = _row(spec, "decode", convention, {"batch": batch, "context": context},
               bd, {s.B: batch, s.T: context}, tile)
    row["total_flops_per_token"] = row["total_flops"] // batch
    return row


def generate(spec: ModelSpec, prompt: int, new: int, batch: int = 1,
             convention: str = "causal", logits: str = "last",
             tile: tuple[int, int] | None = None) -> list[Row]:
    """Prefill of S, then N-1 decode steps: ``prefill``, ``decode`` and ``total`` rows."""
    prompt, new = _positive("prompt", prompt), _positive("new", new)
    batch = _positive("batch", batch)
    _convention(convention), _logits(logits)
    point = {s.B: batch, s.S: prompt, s.N: new}
    inputs = {"batch": batch, "seq": prompt, "new_tokens": new, "logits": logits}
    rows = [
        _row(spec, "generate", convention, {"phase": "prefill", **inputs},
             w.prefill(spec.arch, convention, logits), point, tile),
        _row(spec, "generate", convention, {"phase": "decode", **inputs},
             w.decode_phase(spec.arch, convention), point, tile),
    ]
    return rows + [total_row(rows, phase="total")]


def train(spec: ModelSpec, seq: int, batch: int = 1, convention: str = "causal",
          tile: tuple[int, int] | None = None) -> Row:
    """Forward with logits at every position, x3 for forward + backward, beside 6P."""
    seq, batch = _positive("seq", seq), _positive("batch", batch)
    row = _row(spec, "train", _convention(convention), {"batch": batch, "seq": seq, "logits": "all"},
               w.train_step(spec.arch, convention), {s.B: batch, s.S: seq}, tile)
    row["rule_6p_flops"] = rule_6p(spec, batch * seq)
    row["ratio_to_6p"] = round(row["total_flops"] / row["rule_6p_flops"], 4)
    return row


def executed_linear_params(spec: ModelSpec) -> int:
    """P_lin: block linear parameters a token runs through (active experts only)."""
    return exact_int(p_lin(spec.arch), _integers(spec.values()), "P_lin")


def rule_6p(spec: ModelSpec, tokens: int) -> int:
    """The 6P-per-token rule of thumb, P = executed linear + LM head parameters per token."""
    return 6 * (executed_linear_params(spec) + spec["d"] * spec["V"]) * tokens


def crossover(spec: ModelSpec, conventions: Iterable[str] = ("causal", "full")) -> list[Row]:
    """T_equal for decode and the prefill length where attention equals linear, exactly."""
    point = _integers(spec.values())
    rows = [_crossover_row(spec, "decode_t_equal", "causal", cx.decode_t_equal(spec.arch), point)]
    for conv in conventions:
        rows.append(_crossover_row(spec, "prefill_attention_equals_linear", _convention(conv),
                                   cx.prefill_crossover(spec.arch, conv), point))
    return rows


def _crossover_row(spec: ModelSpec, quantity: str, convention: str, expr: sp.Expr,
                   point: dict[sp.Symbol, sp.Integer]) -> Row:
    value = sp.Rational(expr.xreplace(point))
    return {"preset": spec.name, "workload": "crossover", "quantity": quantity,
            "convention": convention, "exact": str(value), "tokens": round(float(value), 2),
            "formula": str(expr)}


def _integers(values: dict[sp.Symbol, int]) -> dict[sp.Symbol, sp.Integer]:
    return {sym: sp.Integer(v) for sym, v in values.items()}


def tiled_fraction(seq: int, tile: tuple[int, int]) -> sp.Rational:
    """Tiled / full attention of one uncached prefill of ``seq``: what a tile kernel saves."""
    from .core.attention import attention_flops

    point = {s.S: sp.Integer(_positive("seq", seq)), s.b_q: sp.Integer(tile[0]), s.b_k: sp.Integer(tile[1]),
             s.L: sp.Integer(1), s.d_q: sp.Integer(1)}  # the ratio does not depend on them
    tiled = exact_int(attention_flops("tiled", 0, s.S), point, "tiled attention")
    full = exact_int(attention_flops("full", 0, s.S), point, "full attention")
    return sp.Rational(tiled, full)
