"""The one evaluation path: a workload's compiled recipe, summed over a model's layer groups.

``Options`` holds the conventions a number is computed under, validated once; ``table``
evaluates a compiled workload (``core.registry.WORKLOADS``) at every point of equal-length
input columns and returns its rows as columns. Few points are evaluated one by one; many at
once over arrays (``costcalc.compiled``), with the same exact integers either way.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from . import compiled
from .core.registry import WORKLOADS, Workload, workload as find
from .errors import CostcalcError
from .spec import ModelSpec
from .vocab import DEFAULT_TILE, SUMS, TERM_ORDER, Convention, Logits, MlaForm, WindowCache, ident

Table = dict[str, list]    # columns of equal length, in row order
SMALL = 256   # up to this many points a sweep is evaluated point by point (no numpy import)


@dataclass(frozen=True)
class Options:
    """What a number is computed under: the attention convention, the logits mode, the tile
    of the tiled convention (default 128 x 128), the MLA form (``auto``: absorbed for
    decode steps, naive otherwise) and the KV cache of window layers (``whole``, or
    ``rolling``: the last W-1 keys, which changes ``full`` only). Built from strings or enums;
    bad values are one error."""
    convention: Convention = Convention.causal
    logits: Logits = Logits.last
    tile: Optional[tuple[int, int]] = None
    mla: MlaForm = MlaForm.auto
    window_cache: WindowCache = WindowCache.whole

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "convention", Convention.parse(self.convention, "convention"))
            object.__setattr__(self, "logits", Logits.parse(self.logits, "logits"))
            object.__setattr__(self, "mla", MlaForm.parse(self.mla, "mla"))
            object.__setattr__(self, "window_cache", WindowCache.parse(self.window_cache, "window cache"))
        except ValueError as exc:
            raise CostcalcError(str(exc)) from None
        if self.convention == Convention.tiled:
            b_q, b_k = self.tile or DEFAULT_TILE
            object.__setattr__(self, "tile", (positive("tile queries", b_q), positive("tile keys", b_k)))
        else:
            object.__setattr__(self, "tile", None)   # not applicable

    def form(self, wl: Workload) -> str:
        """The MLA form a workload runs: ``auto`` is absorbed for decode steps, naive otherwise."""
        if self.mla != MlaForm.auto:
            return self.mla.value
        return "absorbed" if wl.phase == "decode" else "naive"

    def labels(self, spec: ModelSpec, wl: Workload) -> dict[str, Any]:
        """The columns that say what a row was computed under."""
        out: dict[str, Any] = {"convention": self.convention.value}
        if self.tile:
            out["tile"] = f"{self.tile[0]}x{self.tile[1]}"
        if spec.has_mla:
            out["mla"] = self.form(wl)
        if spec.windows and self.convention == Convention.full:
            out["window_cache"] = self.window_cache.value
        return out

    def block(self, group, wl: Workload):
        """A layer group's block kind as this workload runs it (MLA form, window cache)."""
        return group.block.with_form(self.form(wl)).with_cache(self.window_cache.value)

    def values(self) -> dict[str, int]:
        return {"b_q": self.tile[0], "b_k": self.tile[1]} if self.tile else {}


def positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CostcalcError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_inputs(wl: Workload, inputs: dict[str, Sequence[int]]) -> int:
    """Every input column present, of one length, and at least its minimum; returns the length."""
    columns = [i.column for i in wl.inputs]
    if sorted(inputs) != sorted(columns):
        raise CostcalcError(f"{wl.name} takes {', '.join(columns)}; got {', '.join(inputs) or 'nothing'}")
    sizes = {len(v) for v in inputs.values()}
    if len(sizes) != 1:
        raise CostcalcError(f"{wl.name}: input columns of different lengths {sorted(sizes)}")
    n = sizes.pop()
    for item in wl.inputs:
        values = inputs[item.column]
        if n > SMALL and hasattr(values, "dtype"):
            low = int(values.min())
            if low < item.minimum:
                _below(item.column, low, item.minimum)
            continue
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < item.minimum:
                _below(item.column, v, item.minimum)
    return n


MAX_TILE_STEPS = 5_000_000   # query tiles summed one by one (~3 us each) before a tiled sweep is refused


class TooManyTiles(CostcalcError):
    """A tiled sweep refused before it starts (``steps``: the query tiles it would add up)."""

    def __init__(self, message: str, steps: int) -> None:
        super().__init__(message)
        self.steps = steps


def check_tile_work(wl: Workload, options: Options, inputs: dict[str, Sequence[int]], n: int) -> None:
    """The tiled convention adds up its query tiles one by one (a sum over tiles has no closed
    form): refuse a sweep whose tiles would run for minutes, before it starts."""
    if options.tile is None:
        return
    column = next((i.column for i in wl.inputs if i.symbol == wl.tiled_over), None)
    if column is None:
        return
    values = inputs[column]
    longest = int(values.max()) if hasattr(values, "max") else max(values)
    per_point = longest if wl.phase == "decode" else -(-longest // options.tile[0])
    if per_point * n > MAX_TILE_STEPS:
        raise TooManyTiles(f"the tiled convention adds up query tiles one by one: this sweep has about "
                           f"{per_point * n:,} (at most {MAX_TILE_STEPS:,}); use a larger --tile, fewer points, "
                           f"or --convention causal/full", per_point * n)


def _below(name: str, value: Any, minimum: int) -> None:
    kind = "a positive integer" if minimum == 1 else "a non-negative integer"
    raise CostcalcError(f"{name} must be {kind}, got {value!r}")


def table(spec: ModelSpec, name: str, options: Options, **inputs: Sequence[int]) -> Table:
    """Rows of a compiled workload at every point of the input columns, as columns:
    ``preset``, ``workload``, the option labels, the inputs, ``logits``, the ``<term>_flops``."""
    wl = find(name)
    if not wl.compiled:
        raise CostcalcError(f"{wl.name} is assembled from other workloads; use costcalc.calc.{wl.name}")
    n = check_inputs(wl, inputs)
    check_tile_work(wl, options, inputs, n)
    logits = wl.logits or options.logits
    point = {item.symbol: inputs[item.column] for item in wl.inputs}
    flops = columns(spec, wl, options, logits.value, point, n)
    out: Table = {"preset": [spec.name] * n, "workload": [wl.name] * n}
    out.update({key: [value] * n for key, value in options.labels(spec, wl).items()})
    out.update({i.column: ints(inputs[i.column], n) for i in wl.inputs})
    if wl.labelled_logits:
        out["logits"] = [logits.value] * n
    out.update({f"{term}_flops": values for term, values in flops.items()})
    return out


def once(index: int, names: Iterable[str]) -> list[str]:
    """The outputs layer group ``index`` contributes: all, but the LM head's (``lm_head``,
    ``lm_head.<kind>``) only in the first -- a model has one LM head, whatever its groups."""
    return [n for n in names if index == 0 or n.split(".")[0] != "lm_head"]


def columns(spec: ModelSpec, wl: Workload, options: Options, logits: str, point: dict[str, Sequence[int]],
            n: int, names: Optional[Iterable[str]] = None) -> dict[str, list[int]]:
    """A recipe's outputs at n points (``names``: terms and sums by default), summed over the
    model's layer groups: each group's terms with L = its layer count, the LM head once."""
    wanted = list(names) if names is not None else list(TERM_ORDER)
    per_group = []
    for index, group in enumerate(spec.groups):
        recipe = compiled.get(wl.name, options.block(group, wl).key, options.convention.value, logits)
        base = {**group.numbers(), **options.values()}
        own = once(index, wanted)
        if n <= SMALL:
            got = [recipe.evaluate({**base, **{k: int(v[i]) for k, v in point.items()}}, own) for i in range(n)]
            per_group.append({name: [g[name] for g in got] for name in recipe.outputs if name in own})
        else:
            per_group.append(recipe.columns({**base, **point}, n, own))
    if len(per_group) == 1:
        return _ordered(per_group[0], wanted)
    return _combine(per_group, wanted)


def _ordered(got: dict[str, list[int]], wanted: list[str]) -> dict[str, list[int]]:
    return {name: got[name] for name in wanted if name in got}


def _combine(per_group: list[dict[str, list[int]]], wanted: list[str]) -> dict[str, list[int]]:
    """Outputs summed over groups; ``linear`` and ``total`` formed again from the summed terms
    (the LM head is in the first group only)."""
    out: dict[str, list[int]] = {}
    for name in wanted:
        if name in SUMS:
            continue
        present = [g[name] for g in per_group if name in g]
        if present:
            out[name] = add(present)
    if "linear" in wanted and any(t in out for t in SUMS["linear"]):
        out["linear"] = add([out[t] for t in SUMS["linear"] if t in out])
    if "total" in wanted:
        out["total"] = add([out[t] for t in SUMS["total"] if t in out])
    return _ordered(out, wanted) | {k: v for k, v in out.items() if k not in wanted}


def add(columns: list[list[int]]) -> list[int]:
    total = list(columns[0])
    for column in columns[1:]:
        total = list(map(operator.add, total, column))
    return total


def ints(values: Any, n: int) -> list[int]:
    if n <= SMALL or not hasattr(values, "tolist"):
        return [int(v) for v in values]
    return values.tolist()


def operators(spec: ModelSpec, name: str, options: Options, logits: Optional[str] = None,
              **inputs: int) -> dict[str, int]:
    """FLOPs per operator (``q_proj``, ``experts.up_proj``, ``attention``, ``lm_head``, ...) of
    one point, summed over the layer groups: what the verifier holds each projection to.
    ``logits`` may also be ``none`` (a chunk that runs no LM head)."""
    wl = find(name)
    check_inputs(wl, {k: [v] for k, v in inputs.items()})
    point = {item.symbol: inputs[item.column] for item in wl.inputs}
    mode = logits or (wl.logits or options.logits).value
    out: dict[str, int] = {}
    for index, group in enumerate(spec.groups):
        recipe = compiled.get(wl.name, options.block(group, wl).key, options.convention.value, mode)
        ops = [o for o, parts in recipe.outputs.items() if parts == (ident(o),)]   # not sums
        ops = once(index, ops)
        for op, value in recipe.evaluate({**group.numbers(), **options.values(), **point}, ops).items():
            out[op] = out.get(op, 0) + value
    return out


def operator_terms(spec: ModelSpec, name: str, options: Options) -> dict[str, str]:
    """The term each operator of a workload is charged to (``q_proj`` -> ``attn_proj``, ...)."""
    wl = find(name)
    out: dict[str, str] = {}
    for group in spec.groups:
        out.update(compiled.get(wl.name, options.block(group, wl).key, options.convention.value,
                                (wl.logits or options.logits).value).term_of)
    return out


__all__ = ["Options", "Table", "WORKLOADS", "table", "columns", "operators", "operator_terms", "check_inputs",
           "positive"]
