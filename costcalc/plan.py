"""Serving plans (``costcalc plan``): every valid layout x batch x weight format x speculation of a
model on a number of devices, for one request shape (input length S, output length N), each
candidate timed as ``costcalc generate`` times it, against latency targets (docs/cost-model.md,
"Planning").

A candidate is one generation of ``batch`` sequences (``composites.generation``'s total row, through
``composites.rates``): TTFT is its prefill
step's time, TPOT its decode phase's time / (N - 1), both on one device of the layout. From them:

- ``tokens_per_s_per_gpu`` = B N / (TTFT + (N - 1) TPOT) / the layout's devices (generate's
  ``batch_tokens_per_s`` over its devices): the output tokens each GPU delivers;
- ``tokens_per_s_per_user`` = 1 / TPOT: the rate a user reads tokens at once the first has come.

Layouts: tp x pp x dp devices dividing ``--devices``; the devices left run copies of the layout
(``devices`` / (tp pp dp) of them, each with its own requests), which serve at the same rates per GPU
and per user. Data parallelism is searched only with the experts over every replica (``ep = tp dp``,
vLLM's expert parallel with data-parallel attention): with ``ep`` 1 or tp its replicas are such
copies. A pipeline (pp > 1) runs pp micro-batches (one a stage: a full pipeline). Sequence parallelism
is not searched (the same bytes on the wire as the all-reduces). ``costcalc.layout.check`` and
``costcalc.memory.check`` decide which are valid; batches are powers of two (multiples of the replicas
x micro-batches) up to the largest whose weights and KV cache fit (``fitting.max_batch``) at the
context held after the last step, S + N - 1: every candidate fits.

With ``batching="continuous"`` a candidate is instead ``costcalc serve``'s steady state
(``serving.aggregated``): one tp x ep engine (serve runs no pipeline, data-parallel replicas or sequence
parallelism; the devices left run copies of the engine, as above) at a concurrency C of powers of two up
to serve's ``--concurrency max`` (the most whose weights and caches fit, then the most whose prompts
keep up), its TTFT a request's own mixed iterations, its TPOT the rest of the cycle; ``batch`` is C, no
speculation (serve has none), the command a ``costcalc serve`` line. With ``disagg`` too, every split of
the devices into a prefill pool and a decode pool (``Split``: each pool a whole number of one tp x ep
engine) at decode concurrencies 2^k up to the decode engine's ``--concurrency max`` is a candidate
(``serving.disaggregated``, ``costcalc serve --disagg``), beside the aggregated ones.
"""
from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Callable, Optional, Sequence

from . import fitting
from .composites import rates
from .errors import CostcalcError, quote
from .ranges import MAX_VALUE
from .evaluate import Options, Query, positive
from .layout import Layout
from .spec import ModelSpec

Row = dict[str, Any]
EXTRA_DTYPES = ("bf16", "fp8")     # searched beside the model's own formats, where the device has the peak
FIELDS = ("layout", "devices", "batch", "weight_dtype", "speculation", "ttft_s", "tpot_s", "tokens_per_s_per_gpu",
          "tokens_per_s_per_user", "meets_targets", "pareto", "fits", "timing", "batching", "command")
BATCHINGS = ("static", "continuous")
MAX_DEVICES = 4096      # --devices: a plan's cluster at most (a search enumerates every layout of it)
MAX_SPLIT_DEVICES = 256     # with --disagg: every split into two pools is searched
DISAGGREGATED = "disaggregated"     # the batching of a disaggregated row: continuous, on two pools
_DURATION = re.compile(r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*(s|ms|us|ns)?")
_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, None: 1.0}


def duration(text: str, option: str) -> float:
    """``"2s"`` -> 2.0, ``"30ms"`` -> 0.03 (s, ms, us, ns; a bare number is seconds); positive."""
    match = _DURATION.fullmatch(str(text).strip().lower())
    if not match or float(match.group(1)) * _SCALE[match.group(2)] <= 0:
        raise CostcalcError(f"{option}: {quote(str(text).strip())} is not a positive duration (e.g. 2s, 30ms, 0.5)")
    return float(match.group(1)) * _SCALE[match.group(2)]


NO_DRAFTS = ("--batching continuous: serve models no speculative decoding or drafting (no --draft, --draft-tokens "
             "or --acceptance); search them with --batching static")


@dataclass(frozen=True)
class Request:
    """The request shape and the latency targets: prompts of ``isl`` tokens, ``osl`` output tokens
    (at least 2: a TPOT is a decode step's), TTFT at most ``ttft`` and TPOT at most ``tpot`` seconds; or,
    with ``mix`` (``--requests``), several shapes (``RequestShape``s), each held to the targets (``isl`` and
    ``osl`` then the first's)."""
    isl: int
    osl: int
    ttft: float
    tpot: float
    mix: tuple = ()

    @classmethod
    def of(cls, mix: Sequence["RequestShape"], ttft: float, tpot: float) -> "Request":
        """The question of ``mix``'s shapes (one shape: a plain request)."""
        return cls(mix[0].isl, mix[0].osl, ttft, tpot, tuple(mix) if len(mix) > 1 else ())

    def __post_init__(self) -> None:
        for name, least in (("isl", 1), ("osl", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise CostcalcError(f"--{name} must be an integer of at least {least}, got {value!r}"
                                    + (" (a time per output token needs a decode step)" if name == "osl" else ""))


@dataclass(frozen=True)
class Setup:
    """The model on its device: ``spec``, the dtypes and device (``precision``, ``machine``), the devices
    to fill, the weight formats to search (None: the model's own), how a command line names the model
    and the options it was given (``source``: e.g. ``("--preset", "deepseek-v3")``; ``flags``: the
    device and dtype options every command repeats) and the speculation axis (``drafts``)."""
    spec: ModelSpec
    precision: Any
    machine: Any
    devices: int
    weights: tuple = (None,)
    source: tuple = ("--preset", "")
    flags: tuple = ()
    drafts: Optional[tuple] = None      # the speculation axis (``Draft``s, None: none); default ``speculations``
    batching: str = "static"            # static (``generate``'s batches) or continuous (``serve``'s engine)
    budget: Optional[int] = None        # continuous: serve's --max-batched-tokens (None: serving.BUDGET)
    disagg: bool = False                # continuous: prefill and decode pools searched too

    def __post_init__(self) -> None:
        if isinstance(self.devices, bool) or not isinstance(self.devices, int) or self.devices < 1:
            raise CostcalcError(f"--devices must be a positive integer, got {self.devices!r}")
        if self.devices > MAX_DEVICES:
            raise CostcalcError(f"--devices {self.devices:,}: at most {MAX_DEVICES:,} (the search enumerates every "
                                f"layout and, with --disagg, every split of them)")
        if self.batching not in BATCHINGS:
            raise CostcalcError(f"--batching: {quote(str(self.batching))} is not one of {', '.join(BATCHINGS)}")
        if self.budget is not None:
            positive("--max-batched-tokens", self.budget)
        if self.batching == "static" and self.budget is not None:
            raise CostcalcError("--max-batched-tokens is continuous batching's token budget: it needs "
                                "--batching continuous")
        if self.disagg and self.devices > MAX_SPLIT_DEVICES:
            raise CostcalcError(f"--disagg on {self.devices:,} devices: at most {MAX_SPLIT_DEVICES} (every split of "
                                f"them into two pools is a candidate)")
        if self.disagg and self.batching != "continuous":
            raise CostcalcError("--disagg splits the devices into continuous-batching pools: it needs "
                                "--batching continuous")
        if self.batching == "continuous" and self.drafts is not None and any(self.drafts):
            raise CostcalcError(NO_DRAFTS)

    @property
    def continuous(self) -> bool:
        return self.batching == "continuous"


def weight_choices(spec: ModelSpec, precision: Any, machine: Any, given: Optional[Sequence[Any]] = None) -> tuple:
    """The weight formats a search tries: ``given`` (``weights.Format``s), else the model's own (None)
    and ``EXTRA_DTYPES`` where the device has that dtype's peak; one of each label (the model's own bf16
    is bf16)."""
    from .weights import parse

    options = list(given) if given else [None] + [parse(name) for name in EXTRA_DTYPES
                                                  if name in machine.device.peak_flops]
    seen, out = set(), []
    for fmt in options:
        label = replace(precision, weight=fmt).weights(spec).label
        if label not in seen:
            seen.add(label)
            out.append(fmt)
    return tuple(out)


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def layouts(spec: ModelSpec, devices: int, continuous: bool = False, replicas: bool = True) -> list[Layout]:
    """The layouts searched on ``devices`` (the module's rules): tp x pp x dp dividing it; ep 1 or tp at
    dp 1, tp x dp with dp > 1 (MoE models only); ``continuous``: serve's engines, tp dividing it with ep 1
    or tp, and (``replicas``) tp x dp dividing it with ep = tp x dp (MoE models: data-parallel attention,
    the experts over every replica; pp = 1); not yet checked against the model."""
    moe = any(g.block.ffn == "moe" for g in spec.groups)
    out = []
    if continuous:
        for tp in divisors(devices):
            out += [Layout(tp, ep, 1, 1) for ep in dict.fromkeys((1, tp)) if ep == 1 or moe]
            out += [Layout(tp, tp * dp, 1, dp) for dp in divisors(devices // tp) if dp > 1 and moe and replicas]
        return out
    for n in divisors(devices):
        for tp in divisors(n):
            for pp in divisors(n // tp):
                dp = n // tp // pp
                if dp > 1:
                    if moe:
                        out.append(Layout(tp, tp * dp, pp, dp))
                    continue
                out += [Layout(tp, ep, pp, 1) for ep in dict.fromkeys((1, tp)) if ep == 1 or moe]
    return out


@dataclass(frozen=True)
class Split:
    """A disaggregated deployment (``serve --disagg``): the prefill engine's layout and its pool's
    devices (a whole number of engines), the decode engine's and its pool's."""
    prefill: Layout
    prefill_devices: int
    decode: Layout
    decode_devices: int

    @property
    def devices(self) -> int:
        return self.prefill_devices + self.decode_devices

    @property
    def label(self) -> str:
        """``p:2xtp2 d:1xtp4.ep4``: each pool's engines x its engine's layout."""
        return (f"p:{self.prefill_devices // self.prefill.devices}x{self.prefill.label} "
                f"d:{self.decode_devices // self.decode.devices}x{self.decode.label}")


def splits(spec: ModelSpec, devices: int) -> list[Split]:
    """Every split of ``devices`` into a prefill pool of p and a decode pool of devices - p (both at least
    one), each pool's engine a tp x ep layout whose devices divide its pool (``layouts``' continuous
    rule); a pool of several engines stands for copies, so no split leaves devices over."""
    return [Split(first, p, second, devices - p) for p in range(1, devices)     # serve --disagg's pools: tp x ep
            for first in layouts(spec, p, True, False) for second in layouts(spec, devices - p, True, False)]


@dataclass(frozen=True)
class Draft:
    """One value of the speculation axis: its ``label`` (the rows' ``speculation``: ``mtp``, or
    ``mtp k2 a0.8``), the ``evaluate.Options`` fields it sets (``draft``, ``draft_model``,
    ``draft_tokens``, ``acceptance``) and the ``generate`` options that ask it (``flags``)."""
    label: str
    fields: Any = field(default_factory=dict, compare=False, hash=False)
    flags: str = ""

    @property
    def speculative(self) -> bool:
        """Whether its tokens are accepted (speculative decoding), not only drafted (``--draft mtp``)."""
        return self.fields.get("acceptance") is not None


MTP = Draft("mtp", {"draft": "mtp"}, "--draft mtp")


def speculations(spec: ModelSpec) -> tuple:
    """The default speculation axis: no draft, whatever the model. A draft whose tokens no rate accepts
    only costs (``--draft mtp`` alone: its module at every step, no token more), so it could never be on
    the front: speculative decoding is searched where ``--acceptance`` gives its rate (``speculative``)."""
    return (None,)


def speculative(drafter: str, tokens: Sequence[int], acceptance: str, fields: Callable[[int], dict]) -> tuple:
    """Speculative decoding's values of the axis: ``drafter`` (mtp or a draft model's preset) proposing K
    tokens for each K of ``tokens``, accepted at ``acceptance`` (the option's text: one rate, or one per
    position); ``fields(K)``: the ``Options`` fields of K (``cli.options.speculation``'s)."""
    return tuple(Draft(f"{drafter} k{k} a{acceptance}", fields(k),
                       f"--draft {shlex.quote(drafter)} --draft-tokens {k} --acceptance {acceptance}") for k in tokens)


def query(setup: Setup, layout: Layout, weight: Any, draft: Optional[Draft]) -> Query:
    """The ``generate`` question of one layout, weight format and draft (``layout.check``-ed: an error
    where it is not valid)."""
    options = Options(tp=layout.tp, ep=layout.ep, pp=layout.pp, dp=layout.dp,
                      micro_batches=layout.pp if layout.pp > 1 else None, **(draft.fields if draft else {}))
    return Query(setup.spec, "generate", options, replace(setup.precision, weight=weight), setup.machine)


def batches(step: int, largest: int) -> list[int]:
    """Powers of two times ``step`` (a layout's replicas x micro-batches) up to ``largest``."""
    out, b = [], step
    while b <= largest:
        out.append(b)
        b *= 2
    return out


@dataclass
class Search:
    """A search's candidates (``rows``, every field of ``FIELDS``) and the layouts it left out with why
    (``skipped``: label -> reason); ``seconds`` it took."""
    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    evaluated: int = 0


@dataclass
class Memo:
    """What a search works out once for all its candidates: each serve engine and its fit (``engines``),
    and for static batching the times of every batch at once (``fast``: a ``steptimes.Search``; None:
    ``composites.rates`` candidate by candidate)."""
    engines: dict = field(default_factory=dict)
    fast: Any = None


def evaluate(setup: Setup, request: Request, item: tuple, memo: Optional[Memo] = None,
             sized: Optional[tuple] = None) -> list[Row]:
    """The candidates of one (layout, weight format, draft) over all its batches at once (an error where
    the layout is not valid or nothing fits); static batching: ``sized``, its query and batches where
    ``sizes_of`` worked them out already."""
    layout, _, _ = item
    memo = memo or Memo()
    if isinstance(layout, Split):
        return disaggregated(setup, request, item, memo.engines)
    if setup.continuous:
        return continuous(setup, request, item)
    return static(setup, request, item, sized, memo.fast)


def sizes_of(setup: Setup, request: Request, item: tuple) -> tuple[Query, list[int]]:
    """A static candidate's ``generate`` question and its batches: powers of two times its replicas x
    micro-batches up to the largest that fits (an error where the layout is not valid or nothing fits)."""
    layout, weight, draft = item
    q = query(setup, layout, weight, draft)
    held = request.isl + request.osl - 1
    largest = fitting.max_batch(q, held)
    step = layout.dp * (q.options.micro_batches or 1)
    sizes = batches(step, largest)
    if not sizes:
        raise CostcalcError(f"nothing fits: not even batch {step} with {held} tokens a sequence held")
    return q, sizes


def static(setup: Setup, request: Request, item: tuple, sized: Optional[tuple] = None, fast: Any = None) -> list[Row]:
    """The static-batching candidates of one (layout, weight format, draft): ``generate``'s generations
    (``fast``: from a ``steptimes.Search``, every batch at once, speculative ones too)."""
    layout, weight, draft = item
    q, sizes = sized or sizes_of(setup, request, item)
    n = len(sizes)
    if fast is not None:
        table = fast.generation(q, sizes)
        table["weight_dtype"] = [q.precision.labels(q.spec)["weight_dtype"]] * n
    elif draft is not None and draft.speculative:      # generate's speculative generation (costcalc.speculation)
        from .speculation import generation

        whole = generation(q, sizes, [request.isl] * n, [request.osl] * n)
        table = {key: whole[key][2::3] for key in ("ttft_s", "tpot_s", "batch_tokens_per_s")}
        table["weight_dtype"] = [q.precision.labels(q.spec)["weight_dtype"]] * n
    else:
        table = rates(q, sizes, [request.isl] * n, [request.osl] * n)     # generate's total rows' rates
    rows = []
    for b, label, ttft, tpot, rate in zip(sizes, table["weight_dtype"], table["ttft_s"], table["tpot_s"],
                                          table["batch_tokens_per_s"]):
        rows.append({"layout": layout.label, "devices": layout.devices, "batch": b, "weight_dtype": label,
                     "speculation": draft and draft.label, "ttft_s": ttft, "tpot_s": tpot,
                     "tokens_per_s_per_gpu": rate / layout.devices, "tokens_per_s_per_user": 1 / tpot,
                     "meets_targets": None, "pareto": None, "fits": True,   # every batch up to the largest fits
                     "timing": setup.machine.timing_mode,
                     "batching": "static", "command": command(setup, request, (layout, weight, draft), b)})
    return rows


def shape(setup: Setup, request: Request) -> Any:
    """serve's request shape and token budget."""
    from .serving import BUDGET, Shape

    return Shape(request.isl, request.osl, BUDGET if setup.budget is None else setup.budget)


def continuous(setup: Setup, request: Request, item: tuple) -> list[Row]:
    """The continuous-batching candidates of one (engine, weight format): ``serving.aggregated`` at
    concurrencies 2^k times its replicas up to serve's ``--concurrency max`` (an error where not one request
    fits)."""
    from . import serving

    layout, weight, _ = item
    q = engine_query(setup, layout, weight)
    asked = shape(setup, request)
    engine = serving.Engine(q)
    largest = layout.dp * serving.admitted(asked, engine.max_concurrency(asked) // layout.dp)
    sizes = batches(layout.dp, largest)
    table = serving.aggregated(q, asked, sizes)
    label = replace(setup.precision, weight=weight).labels(setup.spec)["weight_dtype"]
    rows = []
    for i, c in enumerate(sizes):
        tpot = table["tpot_s"][i]
        rows.append({"layout": layout.label, "devices": layout.devices, "batch": c, "weight_dtype": label,
                     "speculation": None, "ttft_s": table["ttft_s"][i], "tpot_s": tpot,
                     "tokens_per_s_per_gpu": table["tokens_per_s_per_gpu"][i],
                     "tokens_per_s_per_user": table["tokens_per_s_per_user"][i],
                     "meets_targets": None, "pareto": None, "fits": table["fits"][i], "timing": table["timing"][i],
                     "batching": "continuous", "command": serve_command(setup, request, item, c)})
    return rows


def command(setup: Setup, request: Request, item: tuple, batch: int) -> str:
    """The ``costcalc generate`` line that reproduces a candidate's numbers."""
    layout, weight, draft = item
    flag, value = setup.source
    parts = ["costcalc", "generate", flag, shlex.quote(str(value)), *setup.flags, "--prompt", str(request.isl),
             "--new", str(request.osl), "--batch", str(batch), layout.flags]
    if layout.pp > 1:
        parts += ["--micro-batches", str(layout.pp)]
    if weight is not None:
        parts += ["--weight-dtype", weight.name]
    if draft is not None:
        parts.append(draft.flags)
    return " ".join(parts)


def engine_query(setup: Setup, layout: Layout, weight: Any) -> Query:
    """serve's question of one engine (tp x ep, or tp x dp replicas with ep over them) in one weight format."""
    return Query(setup.spec, "decode", Options(tp=layout.tp, ep=layout.ep, dp=layout.dp),
                 replace(setup.precision, weight=weight), setup.machine)


def disaggregated(setup: Setup, request: Request, item: tuple, engines: dict) -> list[Row]:
    """The candidates of one split (``Split``) and weight format: ``serving.disaggregated`` at decode
    concurrencies 2^k up to the decode engine's ``--concurrency max``; an error where the prefill engine
    cannot hold its prompts or the decode engine not one request. ``engines``: each engine (and its
    fit) worked out once a search."""
    from . import serving

    split, weight, _ = item
    asked = shape(setup, request)

    def make(query: Query) -> Any:
        key = (query.options.layout, repr(query.precision))
        if key not in engines:
            engines[key] = serving.Engine(query)
        return engines[key]

    def known(key: tuple, work: Callable[[], Any]) -> Any:      # a fit or a refusal, kept per search
        if key not in engines:
            try:
                engines[key] = work()
            except CostcalcError as exc:
                engines[key] = exc
        if isinstance(engines[key], CostcalcError):
            raise engines[key]
        return engines[key]

    first = make(engine_query(setup, split.prefill, weight))
    second = make(engine_query(setup, split.decode, weight))
    prompts = serving.prompts_only(asked).prompts
    if known(("prefill fits", split.prefill, repr(weight)), lambda: first.fits(prompts, asked.isl)) is False:
        raise CostcalcError(f"the prefill engine {split.prefill.label} does not hold {prompts} prompts of "
                            f"{asked.isl} tokens")
    largest = known(("decode max", split.decode, repr(weight)), lambda: second.max_concurrency(asked))
    sizes = batches(1, largest)
    table = serving.disaggregated(serving.Pools(first.query, second.query, split.prefill_devices,
                                                split.decode_devices), asked, sizes, make)
    label = replace(setup.precision, weight=weight).labels(setup.spec)["weight_dtype"]
    return [{"layout": split.label, "devices": split.devices, "batch": c, "weight_dtype": label,
             "speculation": None, "ttft_s": table["ttft_s"][i], "tpot_s": table["tpot_s"][i],
             "tokens_per_s_per_gpu": table["tokens_per_s_per_gpu"][i],
             "tokens_per_s_per_user": table["tokens_per_s_per_user"][i], "meets_targets": None, "pareto": None,
             "fits": table["fits"][i], "timing": table["timing"][i], "batching": DISAGGREGATED,
             "command": serve_command(setup, request, item, c)} for i, c in enumerate(sizes)]


def serve_command(setup: Setup, request: Request, item: tuple, concurrency: int) -> str:
    """The ``costcalc serve`` line that reproduces a continuous candidate's numbers (``--disagg`` and its
    pools for a ``Split``)."""
    layout, weight, _ = item
    flag, value = setup.source
    parts = ["costcalc", "serve", flag, shlex.quote(str(value)), *setup.flags, "--isl", str(request.isl),
             "--osl", str(request.osl), "--concurrency", str(concurrency)]
    if isinstance(layout, Split):
        parts.append("--disagg")
        for name, engine, devices in (("prefill", layout.prefill, layout.prefill_devices),
                                      ("decode", layout.decode, layout.decode_devices)):
            parts += [f"--{name}-tp", str(engine.tp)] + ([f"--{name}-ep", str(engine.ep)] if engine.ep > 1 else [])
            parts += [f"--{name}-devices", str(devices)]
    else:
        parts.append(layout.flags)
    if weight is not None:
        parts += ["--weight-dtype", weight.name]
    if setup.budget is not None:
        parts += ["--max-batched-tokens", str(setup.budget)]
    return " ".join(parts)


FORK_FROM = 128     # (layout, format, draft) triples: a search of at least this many runs on every CPU (``forked``)


def search(setup: Setup, request: Request, progress: Optional[Callable[[int, int], None]] = None,
           workers: Optional[int] = None) -> Search:
    """Every candidate of the question (the module's rules), with ``meets_targets`` and ``pareto``; an
    error naming why where no layout is valid. ``progress(done, total)`` as this process works through its
    share; ``workers``: processes to share the layouts among (default: every CPU for a search of at least
    ``FORK_FROM`` triples, else one), the same candidates whatever their number."""
    from . import forked

    if request.mix:
        return _search_mix(setup, request, progress, workers)
    start = time.perf_counter()
    drafts = (None,) if setup.continuous else speculations(setup.spec) if setup.drafts is None else setup.drafts
    shapes = layouts(setup.spec, setup.devices, setup.continuous)
    if setup.disagg:
        shapes += splits(setup.spec, setup.devices)
    owner = [(k, (layout, weight, draft)) for k, layout in enumerate(shapes) for weight in setup.weights
             for draft in drafts]
    items = [item for _, item in owner]
    if workers is None:
        workers = forked.cpus() if len(items) >= FORK_FROM else 1
    workers = max(1, min(workers, len(shapes)))
    if workers > 1:
        _warm(setup, drafts)
    # the layouts of one tensor-parallel degree together (their groups at one device's sizes share their
    # arrays: ``steptimes``), dealt out longest first to the least loaded process (``_work``)
    kinds: dict[Any, list[int]] = {}
    for k, layout in enumerate(shapes):
        kinds.setdefault(_tp(layout), []).append(k)
    load, share = [0.0] * workers, {}
    for kind in sorted(kinds, key=lambda kind: -sum(_work(shapes[k]) for k in kinds[kind])):
        w = min(range(workers), key=load.__getitem__)
        for k in kinds[kind]:
            share[k] = w
        load[w] += sum(_work(shapes[k]) for k in kinds[kind])
    chunks = [[(i, item) for i, (k, item) in enumerate(owner) if share[k] == w] for w in range(workers)]
    done = forked.run(lambda chunk: _candidates(setup, request, chunk, progress if chunk is chunks[0] else None),
                      chunks)
    found = Search()
    for index, rows, reason in sorted((x for part in done for x in part), key=lambda x: x[0]):
        if reason is None:
            found.rows += rows
            found.evaluated += 1
        else:
            layout, weight, draft = items[index]
            name = " ".join([layout.label] + ([weight.name] if weight is not None else [])
                            + ([draft.label] if draft else []))
            found.skipped[name] = reason
    if not found.rows:      # the reason of the last layout tried: the most devices, the most memory
        name, reason = list(found.skipped.items())[-1]
        raise CostcalcError(f"no layout of {setup.spec.name} on {setup.devices} {setup.machine.device.name} is valid "
                            f"for --isl {request.isl} --osl {request.osl}: {name}: {reason}"
                            + (f" ({len(found.skipped) - 1} others left out too)" if len(found.skipped) > 1 else ""))
    return _judged(found, request, start)


def _judged(found: Search, request: Request, start: float) -> Search:
    """The candidates with ``meets_targets`` and ``pareto``, the fastest per GPU first."""
    for row in found.rows:
        row["meets_targets"] = row["ttft_s"] <= request.ttft and row["tpot_s"] <= request.tpot
    for row, on in zip(found.rows, front([r["tokens_per_s_per_gpu"] for r in found.rows],
                                         [r["tokens_per_s_per_user"] for r in found.rows])):
        row["pareto"] = on
    found.rows.sort(key=lambda r: (-r["tokens_per_s_per_gpu"], -r["tokens_per_s_per_user"]))
    found.seconds = time.perf_counter() - start
    return found


def _warm(setup: Setup, drafts: Sequence[Optional[Draft]]) -> None:
    """What every process of a search reads, loaded once before it forks: numpy and the steptimes module,
    each phase's recipes from the code cache (its FLOPs and bytes, with each draft), those of the memory
    a fit counts, and the model's weight plan in each format."""
    from . import steptimes  # noqa: F401 -- imported for the children

    if setup.continuous:
        return
    for draft in drafts:
        try:
            q = query(setup, Layout(), None, draft)
            q = q.but(draft_tokens=1, acceptance=None, draft_model=None, draft_tp=None)   # its phases' own
            for name in q.workload.phases:
                for kind in ("flops", "bytes"):
                    list(q.but(workload=name).recipes(kind))
            list(fitting.memory_query(q).recipes("bytes"))
        except CostcalcError:       # a draft this model refuses: its candidates are left out anyway
            continue
    for weight in setup.weights:
        replace(setup.precision, weight=weight).weights(setup.spec)


def _tp(layout: Any) -> Any:
    """What decides a layout's device sizes: its tensor parallelism (a split's, its two engines')."""
    return (layout.prefill.tp, layout.decode.tp) if isinstance(layout, Split) else layout.tp


def _work(layout: Any) -> float:
    """A layout's share of a search's time, roughly: a pipeline's distinct stages (first, middle, last)
    each timed, a split's two engines."""
    if isinstance(layout, Split):
        return 2.0
    return 1.0 if layout.pp == 1 else 3.0


def _candidates(setup: Setup, request: Request, items: list[tuple[int, tuple]],
                progress: Optional[Callable[[int, int], None]]) -> list[tuple[int, list[Row], Optional[str]]]:
    """(index, rows, None) or (index, [], why it was left out) for each (index, triple): static batching's
    fits first, then every batch of every layout timed at once (``steptimes``, under the roofline)."""
    out: dict[int, tuple] = {}
    sized: dict[int, tuple] = {}
    memo, total = Memo(), len(items) * (1 if setup.continuous else 2)
    if not setup.continuous:
        for done, (index, item) in enumerate(items, 1):
            try:
                sized[index] = sizes_of(setup, request, item)
            except CostcalcError as exc:
                out[index] = (index, [], str(exc))
            if progress is not None:
                progress(done, total)
        if setup.machine.timing is None:       # the roofline: every batch of every layout at once
            from .steptimes import Search as Batches

            memo.fast = Batches({b // (q.options.layout.dp * (q.options.micro_batches or 1))
                                 for q, sizes in sized.values() for b in sizes}, request.isl, request.osl)
    for done, (index, item) in enumerate(items, 1):
        if index not in out:
            try:
                out[index] = (index, evaluate(setup, request, item, memo, sized.get(index)), None)
            except CostcalcError as exc:
                out[index] = (index, [], str(exc))
        if progress is not None:
            progress(done + total - len(items), total)
    return [out[index] for index, _ in items]


MAX_CLASSES = 64     # request shapes a --requests file may give


@dataclass(frozen=True)
class RequestShape:
    """One class of a request mix (``--requests``): prompts of ``isl`` tokens, ``osl`` out, and its ``share``
    of the requests (an exact fraction of the whole)."""
    isl: int
    osl: int
    share: Fraction


def shapes(data: Any, origin: str) -> tuple[RequestShape, ...]:
    """A ``--requests`` file's classes: a JSON array (or ``{"requests": [...]}``) of objects with ``isl``,
    ``osl`` and optionally ``share`` (a positive number, default 1; the shares are normalised), at most
    ``MAX_CLASSES``; each problem one error naming the file and the entry."""
    from .jsonfile import kind

    if isinstance(data, dict) and "requests" in data and set(data) != {"requests"}:
        raise CostcalcError(f"{origin}: unknown key {quote(sorted(set(data) - {'requests'})[0])} beside \"requests\"")
    given = data.get("requests") if isinstance(data, dict) and set(data) == {"requests"} else data
    if not isinstance(given, list) or not given:
        got = "an empty array" if given == [] else kind(given)
        raise CostcalcError(f"{origin}: expected a non-empty array of request shapes ({{\"isl\": 4096, \"osl\": "
                            f"1024, \"share\": 0.5}}, ...), or {{\"requests\": [...]}}; got {got}")
    if len(given) > MAX_CLASSES:
        raise CostcalcError(f"{origin}: {len(given)} request shapes; at most {MAX_CLASSES}")
    out = []
    for i, entry in enumerate(given, 1):
        where = f"{origin}: request shape {i}"
        if not isinstance(entry, dict):
            raise CostcalcError(f"{where} is {kind(entry)}, not an object with isl, osl and share")
        unknown = set(entry) - {"isl", "osl", "share"}
        if unknown:
            raise CostcalcError(f"{where}: unknown field {quote(sorted(unknown)[0])} (isl, osl, share)")
        values = {}
        for name, least in (("isl", 1), ("osl", 2)):
            value = entry.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_VALUE:
                raise CostcalcError(f"{where}: {name} must be a whole number from {least} to {MAX_VALUE:,}, "
                                    f"got {quote(value)}")
            values[name] = value
        share = entry.get("share", 1)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < float("inf"):
            raise CostcalcError(f"{where}: share must be a positive number, got {quote(share)}")
        out.append((values["isl"], values["osl"], Fraction(repr(share)) if isinstance(share, float) else
                    Fraction(share)))
    total = sum(share for _, _, share in out)
    return tuple(RequestShape(isl, osl, share / total) for isl, osl, share in out)


def _search_mix(setup: Setup, targets: Request, progress: Optional[Callable[[int, int], None]],
                workers: Optional[int]) -> Search:
    """The candidates of a request mix (``targets.mix``; static batching): each (layout, weight format,
    draft, batch) that every class has (``search`` per class), one row: ``ttft_s`` and ``tpot_s`` the worst
    class's (every request is held to the targets' ttft and tpot), ``tokens_per_s_per_gpu`` the mixture's,
    sum_c w_c B N_c / sum_c w_c T_c / devices (each class's batches in proportion to its share w_c of the
    requests, T_c its batch's whole time, TTFT + (N_c - 1) TPOT), per user 1 / ``tpot_s``, ``command``
    each class's generate line, ``; ``-joined."""
    if setup.continuous:
        raise CostcalcError("--requests: continuous batching serves one request shape (serve); give --isl and "
                            "--osl, or --batching static")
    start = time.perf_counter()
    found, mix = Search(), targets.mix
    per: list[dict] = []
    for shape in mix:
        asked = Request(shape.isl, shape.osl, targets.ttft, targets.tpot)
        try:
            got = search(setup, asked, progress, workers)
        except CostcalcError as exc:
            raise CostcalcError(f"request shape isl {shape.isl} osl {shape.osl}: {exc}") from None
        per.append({(r["layout"], r["weight_dtype"], r["speculation"], r["batch"]): r for r in got.rows})
        for name, reason in got.skipped.items():      # each configuration once, the first shape's reason
            found.skipped.setdefault(name, f"isl {shape.isl} osl {shape.osl}: {reason}")
        found.evaluated = max(found.evaluated, got.evaluated)
    for key in (k for k in per[0] if all(k in rows for rows in per)):
        rows = [rows[key] for rows in per]
        first, batch, devices = rows[0], key[3], rows[0]["devices"]
        times = [batch * shape.osl / (r["tokens_per_s_per_gpu"] * devices) for shape, r in zip(mix, rows)]
        made = sum(float(shape.share) * batch * shape.osl for shape in mix)
        spent = sum(float(shape.share) * t for shape, t in zip(mix, times))
        tpot = max(r["tpot_s"] for r in rows)
        found.rows.append({**first, "ttft_s": max(r["ttft_s"] for r in rows), "tpot_s": tpot,
                           "tokens_per_s_per_gpu": made / spent / devices, "tokens_per_s_per_user": 1 / tpot,
                           "fits": all(r["fits"] for r in rows),
                           "command": "; ".join(r["command"] for r in rows)})
    if not found.rows:
        raise CostcalcError(f"no candidate of {setup.spec.name} on {setup.devices} {setup.machine.device.name} serves "
                            f"every request shape of the mix (each fits its own batches, none all of them)")
    return _judged(found, targets, start)


def front(gpu: Sequence[float], user: Sequence[float]) -> list[bool]:
    """Whether each point is on the Pareto front of (per-GPU, per-user) rates, both higher better: no
    other point at least as high on both and higher on one (equal points are all on it). Sorted once by
    per-GPU descending, a point is on the front where its per-user rate is the highest of its per-GPU
    value's and above every higher per-GPU value's."""
    order = sorted(range(len(gpu)), key=lambda i: (-gpu[i], -user[i]))
    out = [False] * len(gpu)
    best = float("-inf")        # the highest per-user rate of every strictly higher per-GPU rate
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and gpu[order[j]] == gpu[order[i]]:
            j += 1
        top = user[order[i]]     # the highest of this per-GPU value's
        for k in order[i:j]:
            out[k] = user[k] == top and user[k] > best
        best = max(best, top)
        i = j
    return out


def chosen(rows: Sequence[Row], request: Request) -> tuple[Row, bool]:
    """(the best candidate meeting the targets, True): the most tokens/s per GPU, then per user; or,
    where none meets them, (the closest, False): the smallest factor max(TTFT / target, TPOT / target)
    by which it misses them."""
    met = [r for r in rows if r["meets_targets"]]
    if met:
        return max(met, key=lambda r: (r["tokens_per_s_per_gpu"], r["tokens_per_s_per_user"])), True
    return min(rows, key=lambda r: (miss(r, request), -r["tokens_per_s_per_gpu"])), False


def miss(row: Row, request: Request) -> float:
    """The factor by which a candidate misses the targets (at most 1: it meets them)."""
    return max(row["ttft_s"] / request.ttft, row["tpot_s"] / request.tpot)
