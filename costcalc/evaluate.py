"""The one evaluation path: a workload's compiled recipe, summed over a model's layer groups.

``Options`` holds the conventions a number is computed under, validated once; ``table``
evaluates a compiled workload (``core.registry.WORKLOADS``) at every point of equal-length
input columns and returns its rows as columns. Few points are evaluated one by one; many at
once over arrays (``costcalc.compiled``), with the same exact integers either way.
"""
from __future__ import annotations

import operator
from fractions import Fraction
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence

from . import compiled
from .blocks import SPARSE_TILED, V4_TILED, Block
from .core.registry import WORKLOADS, Workload, workload as find
from .errors import CostcalcError
from .layout import Layout, check as check_layout
from .spec import Group, ModelSpec
from .vocab import DEFAULT_TILE, ONCE, SCAN, SUMS, TERM_ORDER, Convention, Draft, Logits, MlaForm, Overlap, WindowCache

if TYPE_CHECKING:   # bytes and time: the layer above (the types only)
    from .roofline import Machine, Precision

Table = dict[str, list]    # columns of equal length, in row order
SMALL = 256   # up to this many points a sweep is evaluated point by point (no numpy import)


def positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CostcalcError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class Options:
    """What a number is computed under: the attention convention, the logits mode, the tile
    of the tiled convention (default 128 x 128), the MLA form and the KV cache of window
    layers (both in ``docs/cost-model.md``), and the draft each decode step runs (``mtp``: the
    model's multi-token-prediction module, docs/cost-model.md "MTP layers"). With ``acceptance`` a
    decode step or a generation is speculative (``costcalc.speculation``, docs/cost-model.md
    "Speculative decoding"): the drafter (``mtp``, or ``draft_model``, another model) proposes
    ``draft_tokens`` = K tokens, the target verifies them, ``acceptance`` is one rate or K rates by
    position. Built from strings or enums; bad values are one error."""
    convention: Convention = Convention.causal
    logits: Logits = Logits.last
    tile: Optional[tuple[int, int]] = None
    mla: MlaForm = MlaForm.auto
    window_cache: WindowCache = WindowCache.whole
    draft: Draft = Draft.none
    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    sp: bool = False
    micro_batches: Optional[int] = None   # a pipeline's micro-batches per step (None: the schedule's default)
    overlap: Overlap = Overlap.full       # communication against compute (``vocab.Overlap``): full, a floor
    zero: int = 0                         # a training step's ZeRO stage (3: FSDP's full sharding)
    recompute: str = "none"               # a training step's activation recomputation (training.Recompute)
    optimizer: str = "adam"               # a training step's numeric convention (training.OPTIMIZERS)
    schedule: Optional[str] = None        # a training pipeline's schedule (pipeline.SCHEDULES; None: 1f1b)
    virtual_stages: int = 1               # model chunks a pipeline rank holds (the interleaved schedule)
    draft_model: Optional[ModelSpec] = None   # a draft model proposing tokens (--draft PRESET)
    draft_tokens: int = 1                 # K: tokens the drafter proposes a speculative step (--draft-tokens)
    acceptance: Optional[tuple] = None    # speculation's acceptance rate(s) (Fractions): one, or one per position
    draft_tp: Optional[int] = None        # a draft model's tensor-parallel degree (--draft-tp; None: the target's)

    def __post_init__(self) -> None:
        Layout(self.tp, self.ep, self.pp, self.dp, self.sp)   # validated: one error for a bad degree
        if self.micro_batches is not None:
            positive("--micro-batches", self.micro_batches)
        positive("--virtual-stages", self.virtual_stages)
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise CostcalcError(f"--zero is a ZeRO stage 0, 1, 2 or 3 (3: FSDP's full sharding), got {self.zero!r}")
        try:
            object.__setattr__(self, "draft", Draft.parse(self.draft, "draft"))
            object.__setattr__(self, "convention", Convention.parse(self.convention, "convention"))
            object.__setattr__(self, "logits", Logits.parse(self.logits, "logits"))
            object.__setattr__(self, "mla", MlaForm.parse(self.mla, "mla"))
            object.__setattr__(self, "window_cache", WindowCache.parse(self.window_cache, "window cache"))
            object.__setattr__(self, "overlap", Overlap.parse(self.overlap, "overlap"))
        except ValueError as exc:
            raise CostcalcError(str(exc)) from None
        _check_speculation(self)
        if self.convention == Convention.tiled:
            b_q, b_k = self.tile or DEFAULT_TILE
            object.__setattr__(self, "tile", (positive("tile queries", b_q), positive("tile keys", b_k)))
        else:
            object.__setattr__(self, "tile", None)   # not applicable

    @cached_property
    def layout(self) -> Layout:
        """The devices it runs on (``parallel.Layout``; tp1: one device, the numbers of today); made once
        (the options are frozen)."""
        return Layout(self.tp, self.ep, self.pp, self.dp, self.sp)

    @property
    def draft_layout(self) -> Layout:
        """The devices a draft model runs on: each data-parallel replica's, at ``draft_tp`` (default the
        target's tp: vLLM's draft_tensor_parallel_size; 1: the whole draft on every device), no experts,
        stages or sequence split of its own."""
        return Layout(self.draft_tp or self.tp, 1, 1, self.dp)

    def form(self, wl: Workload) -> MlaForm:
        """The MLA form a workload runs (``auto``: by its phase, ``vocab.MlaForm``)."""
        if self.mla != MlaForm.auto:
            return self.mla
        return MlaForm.absorbed if wl.phase == "decode" else MlaForm.naive

    def values(self) -> dict[str, int]:
        return {"b_q": self.tile[0], "b_k": self.tile[1]} if self.tile else {}


MAX_DRAFT_TOKENS = 64   # --draft-tokens above this is an error (engines propose a handful)


def _check_speculation(options: Options) -> None:
    """The speculation fields: K a whole number 1..MAX_DRAFT_TOKENS, each rate a fraction in [0, 1),
    one rate or K of them, a drafter (mtp or a draft model, not both) exactly when a rate is given."""
    k = options.draft_tokens
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFT_TOKENS:
        raise CostcalcError(f"--draft-tokens must be a whole number from 1 to {MAX_DRAFT_TOKENS}, got {k!r}")
    drafter = options.draft_model is not None or options.draft == Draft.mtp
    if options.draft_tp is not None:
        positive("--draft-tp", options.draft_tp)
        if options.draft_model is None:
            raise CostcalcError("--draft-tp is a draft model's tensor-parallel degree: it needs --draft PRESET")
    if options.draft_model is not None and options.draft == Draft.mtp:
        raise CostcalcError("--draft is either mtp or a draft model, not both")
    if options.acceptance is None:     # a draft model alone: what memory holds beside the target
        if k != 1:
            raise CostcalcError("--draft-tokens needs --acceptance (the speculative step it sizes)")
        return
    if not drafter:
        raise CostcalcError("--acceptance needs --draft (mtp or a draft model's preset): what proposes the tokens")
    rates = tuple(_rate(a) for a in options.acceptance)
    if len(rates) not in (1, k):
        raise CostcalcError(f"--acceptance: one rate, or one per drafted position ({k} for --draft-tokens {k}); "
                            f"got {len(rates)}")
    object.__setattr__(options, "acceptance", rates)


def _rate(a: Any) -> Fraction:
    """One acceptance rate as an exact fraction (a float by its shortest decimal: 0.8 is 4/5)."""
    try:
        if isinstance(a, bool):
            raise ValueError
        value = Fraction(repr(a)) if isinstance(a, float) else Fraction(a)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        raise CostcalcError(f"--acceptance: each rate is a fraction in [0, 1), got {a!r}") from None
    if not 0 <= value < 1:
        raise CostcalcError(f"--acceptance: each rate is a fraction in [0, 1) (1 would accept every draft), got {a}")
    return value


@dataclass(frozen=True)
class Query:
    """The question a number answers: a model, a workload (a registry entry, or its name), the
    options it runs under and, for bytes and time, the dtypes and the device. ``recipes`` is
    the one door to the compiled recipes."""
    spec: ModelSpec
    workload: Workload
    options: Options = Options()
    precision: Optional["Precision"] = None
    machine: Optional["Machine"] = None

    def __post_init__(self) -> None:
        if isinstance(self.workload, str):
            try:
                object.__setattr__(self, "workload", find(self.workload))
            except ValueError as exc:
                raise CostcalcError(str(exc)) from None
        if self.options.convention == Convention.tiled and any(g.block.sparse for g in self.spec.groups):
            raise CostcalcError(f"{self.spec.name}: {SPARSE_TILED}")
        if self.options.convention == Convention.tiled and any(g.block.v4 for g in self.spec.groups):
            raise CostcalcError(f"{self.spec.name}: {V4_TILED}")
        if self.options.draft == Draft.mtp:
            if self.spec.mtp is None:
                raise CostcalcError(f"{self.spec.name} has no multi-token-prediction layers costcalc models (a preset's "
                                    f"'mtp', from num_nextn_predict_layers or mtp_num_hidden_layers where its family's "
                                    f"modules are modelled: docs/hf-import.md): --draft mtp needs them")
            if self.workload.name not in DRAFTED:
                raise CostcalcError(f"--draft mtp applies to decode steps and generations, not {self.workload.name}")
        if self.options.acceptance is not None:
            if self.workload.name not in SPECULATIVE:
                raise CostcalcError(f"speculative decoding (--acceptance) applies to decode steps and generations, "
                                    f"not {self.workload.name}")
            model = self.options.draft_model
            if model is not None and model.sizes["V"] != self.spec.sizes["V"]:
                raise CostcalcError(f"--draft {model.name}: its vocabulary ({model.sizes['V']:,}) differs from "
                                    f"{self.spec.name}'s ({self.spec.sizes['V']:,}); a draft proposes the target's tokens")
        check_layout(self)

    @property
    def draft(self) -> Optional[Group]:
        """The MTP module a drafting step runs (one: the first of the model's ``mtp`` modules), or None."""
        if self.options.draft != Draft.mtp:
            return None
        return Group(1, self.spec.mtp.block, self.spec.mtp.sizes)

    @property
    def logits(self) -> Logits:
        """The logits mode it runs: the workload's own, else the options'."""
        return self.workload.logits or self.options.logits

    @property
    def form(self) -> MlaForm:
        return self.options.form(self.workload)

    @property
    def traffic(self) -> bool:
        """Whether bytes (and, with a machine, times) are asked for."""
        return self.precision is not None or self.machine is not None

    def but(self, **changes: Any) -> "Query":
        """The same question about another workload (``workload=``) or under other options
        (``logits=``, ``convention=``, ...)."""
        own = {k: changes.pop(k) for k in ("spec", "workload", "precision", "machine") if k in changes}
        return replace(self, options=replace(self.options, **changes), **own) if changes else replace(self, **own)

    def block(self, group: Group) -> Block:
        """A layer group's block kind as this workload runs it (MLA form, window cache)."""
        return group.block.with_form(self.form.value).with_cache(self.options.window_cache.value)

    def labels(self) -> dict[str, Any]:
        """The columns that say what a row was computed under."""
        spec, options = self.spec, self.options
        out: dict[str, Any] = {"convention": options.convention.value}
        if options.tile:
            out["tile"] = f"{options.tile[0]}x{options.tile[1]}"
        if spec.has_mla:
            out["mla"] = self.form.value
        if spec.has_mixers:
            out["scan"] = SCAN[options.convention.value]
        if spec.windows and options.convention == Convention.full:
            out["window_cache"] = options.window_cache.value
        if options.draft_model is not None:
            out["draft"] = options.draft_model.name
        elif options.draft != Draft.none:
            out["draft"] = options.draft.value
        if not options.layout.single:
            out["layout"] = options.layout.label
        return out

    def recipes(self, kind: str = "flops") -> Iterator[tuple[Group, "Recipe"]]:
        """Each layer group with its compiled recipe: ``flops`` (the workload's operators and
        terms), ``bytes`` (the elements each operator moves), ``p_lin`` (executed linear
        parameters), ``params`` (the block's weights) or ``crossover`` (its formulas). The
        workload's recipes run under the query's convention and logits; the model's under
        ``causal`` and ``last``, where neither changes them. The LM head is charged once. With a
        draft (``--draft mtp``) the workload's recipes are followed by the MTP module's, every
        output of it charged to ``draft`` (``DraftRecipe``)."""
        fetched: dict[Block, Any] = {}     # groups of one block kind share its recipe
        for index, group in enumerate(self.spec.groups):
            block = group.block if kind in ("params", "matrices") else self.block(group)
            if block not in fetched:
                if kind in ("flops", "bytes"):
                    name = self.workload.name + ("" if kind == "flops" else ".bytes")
                    fetched[block] = compiled.get(name, block, self.options.convention, self.logits)
                else:
                    fetched[block] = compiled.get(kind, block)
            yield group, Recipe.of(fetched[block], index == 0)
        draft = self.draft
        if draft is not None and kind in ("flops", "bytes"):
            name = self.workload.name + ("" if kind == "flops" else ".bytes")
            # the draft token's logits, one row a sequence whatever the target's (vLLM's proposer samples the last)
            yield draft, DraftRecipe(compiled.get(name, self.block(draft), self.options.convention, Logits.last))


    def modules(self, kind: str = "params") -> Iterator[tuple[Group, "Recipe"]]:
        """The model's multi-token-prediction modules (``spec.mtp``: L = their count) with a
        model recipe (``params``, ``p_lin``) of their block; nothing for a model without."""
        if self.spec.mtp is not None:
            yield self.spec.mtp, Recipe(compiled.get(kind, self.spec.mtp.block), True)


# The compiled workloads a draft runs in: a decode step, a generation's decode phase, and its
# prefill (which runs the MTP module over the prompt: its KV cache, the first draft).
DRAFTED = ("prefill", "cached_prefill", "decode", "decode_phase", "generate")   # cached_prefill: a proposer's first
SPECULATIVE = ("decode", "generate")   # the workloads a speculative query asks (costcalc.speculation)


_RECIPES: dict = {}     # (id(compiled recipe), head) -> (the compiled recipe, its Recipe): ``Recipe.of``


class Recipe:
    """A layer group's compiled recipe as a query charges it: the LM head's outputs
    (``lm_head``, ``lm_head.<kind>``; so DeepSeek-V4's hyper-connection head, ``vocab.ONCE``), and the
    ``total`` that holds it, in the first group only -- a model has one LM head, whatever its groups (a model's total is its groups'
    terms added: ``evaluate.columns``)."""

    @classmethod
    def of(cls, code: Any, head: bool) -> "Recipe":
        """``Recipe(code, head)``, the same object each time asked for the same compiled recipe (a search
        asks at every point; a recipe is not changed once made)."""
        hit = _RECIPES.get((id(code), head))
        if hit is not None and hit[0] is code:
            return hit[1]
        if len(_RECIPES) >= 4096:
            _RECIPES.clear()
        made = _RECIPES[id(code), head] = (code, cls(code, head))
        return made[1]

    def __init__(self, code: Any, head: bool) -> None:
        self.code, self.head = code, head
        self.outputs = [n for n in code.outputs if head or (n.split(".")[0] not in ONCE and n != "total")]
        self._kept = set(self.outputs)
        self.operators = [n for n in self.outputs if n in code.term_of]
        self.term_of: dict[str, str] = code.term_of
        self.constants: dict[str, str] = code.constants

    def name(self, output: str) -> str:
        """An output of the workload's recipe (``attention.kv_write``) by the name this recipe gives it."""
        return output

    def _own(self, names: Optional[Iterable[str]]) -> list[str]:
        return self.outputs if names is None else [n for n in names if n in self._kept]

    def evaluate(self, values: dict[str, int], names: Optional[Iterable[str]] = None) -> dict[str, int]:
        return self.code.evaluate(values, self._own(names))

    def columns(self, values: dict[str, Any], n: int, names: Optional[Iterable[str]] = None) -> dict[str, list[int]]:
        return self.code.columns(values, n, self._own(names))


class DraftRecipe:
    """The MTP module's recipe of a workload as a drafting query charges it: its operators
    prefixed ``mtp.`` and charged to the term ``draft``, which is its whole total (eh_proj, the
    block, its attention over its own KV cache, and the LM head of the draft token's logits)."""

    PREFIX = "mtp."

    def __init__(self, code: Any) -> None:
        self.code = code
        own = [n for n in code.outputs if n in code.term_of or "." in n and n not in TERM_ORDER]
        self._of = {self.PREFIX + n: n for n in own}
        self.operators = [self.PREFIX + n for n in own if n in code.term_of]
        self.term_of: dict[str, str] = {op: "draft" for op in self.operators}
        self.outputs = list(self._of) + (["draft", "total"] if "total" in code.outputs else [])
        self.constants: dict[str, str] = code.constants

    def name(self, output: str) -> str:
        """An output of the workload's recipe (``attention.kv_write``) by the name this recipe gives it."""
        return self.PREFIX + output

    def _asked(self, names: Optional[Iterable[str]]) -> tuple[list[str], list[str]]:
        """The outputs asked for (its own names) and the recipe's outputs that give them."""
        own = self.outputs if names is None else [x for x in names if x in self.outputs]
        return own, [self._of.get(x, "total") for x in own]

    def evaluate(self, values: dict[str, int], names: Optional[Iterable[str]] = None) -> dict[str, int]:
        own, inner = self._asked(names)
        got = self.code.evaluate(values, inner)
        return {x: got[y] for x, y in zip(own, inner)}

    def columns(self, values: dict[str, Any], n: int, names: Optional[Iterable[str]] = None) -> dict[str, list[int]]:
        own, inner = self._asked(names)
        got = self.code.columns(values, n, inner)
        return {x: got[y] for x, y in zip(own, inner)}


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


def table(query: Query, **inputs: Sequence[int]) -> Table:
    """Rows of a compiled workload at every point of the input columns, as columns:
    ``preset``, ``workload``, the option labels, the inputs, ``logits``, the ``<term>_flops``."""
    wl = query.workload
    if not wl.compiled:
        raise CostcalcError(f"{wl.name} is assembled from other workloads; use costcalc.calc.{wl.name}")
    n = check_inputs(wl, inputs)
    if any(g.block.attends for g in query.spec.groups):   # only softmax attention is summed tile by tile
        check_tile_work(wl, query.options, inputs, n)
    flops = columns(query, {item.symbol: inputs[item.column] for item in wl.inputs}, n)
    out: Table = {"preset": [query.spec.name] * n, "workload": [wl.name] * n}
    out.update({key: [value] * n for key, value in query.labels().items()})
    out.update({i.column: ints(inputs[i.column], n) for i in wl.inputs})
    if wl.labelled_logits:
        out["logits"] = [query.logits.value] * n
    out.update({f"{term}_flops": values for term, values in flops.items()})
    return out


def columns(query: Query, point: dict[str, Sequence[int]], n: int,
            names: Optional[Iterable[str]] = None) -> dict[str, list[int]]:
    """A recipe's outputs at n points (``names``: terms and sums by default), summed over the
    model's layer groups: each group's terms with L = its layer count, the LM head once."""
    wanted = list(names) if names is not None else list(TERM_ORDER)
    groups = len(query.spec.groups) + (query.draft is not None)
    if n * groups > MAX_GROUP_POINTS:
        raise CostcalcError(f"the sweep is {n:,} points x {groups:,} layer groups = {n * groups:,} group "
                            f"points (at most {MAX_GROUP_POINTS:,}); narrow the ranges")
    if groups == 1:
        return _ordered(_group_columns(query, next(query.recipes()), point, n, wanted), wanted)
    out: dict[str, list[int]] = {}      # the groups added as they come: one group's columns held at a time
    for pair in query.recipes():
        for name, column in _group_columns(query, pair, point, n, wanted).items():
            if name not in SUMS:
                out[name] = add([out[name], column]) if name in out else column
    return _sums(out, wanted)


MAX_GROUP_POINTS = 10_000_000   # points x layer groups of one sweep (about 5 s at 1,024 groups)


def _group_columns(query: Query, pair: tuple[Group, "Recipe"], point: dict[str, Sequence[int]], n: int,
                   wanted: list[str]) -> dict[str, list[int]]:
    """One layer group's outputs (``pair``: the group and its recipe) at n points."""
    group, recipe = pair
    base = {**group.numbers(), **query.options.values()}
    if n <= SMALL:
        got = [recipe.evaluate({**base, **{k: int(v[i]) for k, v in point.items()}}, wanted) for i in range(n)]
        return {name: [g[name] for g in got] for name in recipe.outputs if name in wanted}
    return recipe.columns({**base, **point}, n, wanted)


def _ordered(got: dict[str, list[int]], wanted: list[str]) -> dict[str, list[int]]:
    return {name: got[name] for name in wanted if name in got}


def _sums(out: dict[str, list[int]], wanted: list[str]) -> dict[str, list[int]]:
    """The terms summed over groups, in ``wanted`` order, with ``linear`` and ``total`` formed
    again from them (the LM head is in the first group only)."""
    out = _ordered(out, wanted)
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


def operators(query: Query, **inputs: int) -> dict[str, int]:
    """FLOPs per operator (``q_proj``, ``experts.up_proj``, ``attention``, ``lm_head``, ...) of
    one point, summed over the layer groups: what the verifier holds each projection to."""
    wl = query.workload
    check_inputs(wl, {k: [v] for k, v in inputs.items()})
    point = {item.symbol: inputs[item.column] for item in wl.inputs}
    out: dict[str, int] = {}
    for group, recipe in query.recipes():
        got = recipe.evaluate({**group.numbers(), **query.options.values(), **point}, recipe.operators)
        for op, value in got.items():
            out[op] = out.get(op, 0) + value
    return out


def operator_terms(query: Query) -> dict[str, str]:
    """The term each operator of a workload is charged to (``q_proj`` -> ``attn_proj``, ...)."""
    out: dict[str, str] = {}
    for _, recipe in query.recipes():
        out.update(recipe.term_of)
    return out


__all__ = ["Options", "Query", "Recipe", "Table", "WORKLOADS", "table", "columns", "operators", "operator_terms",
           "check_inputs", "positive"]
