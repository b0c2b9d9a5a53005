"""Throughput under continuous batching (``costcalc serve``): the steady state of an engine that runs,
every iteration, one decode token for each decoding request and prefill chunks within a token budget
(vLLM's, SGLang's and TensorRT-LLM's schedulers with chunked prefill), on one pool of devices
(aggregated) or with the prompts on a prefill pool and the decode steps on a decode pool
(disaggregated, the KV cache of each request moved between them). docs/cost-model.md, "Serving under
continuous batching", derives every rule; in short:

- ``C`` requests are in flight. A *mixed* iteration runs ``m`` prompts' next chunk (``mix``: whole
  prompts while ``isl`` fits the room the budget leaves beside the other ``C - 1`` decode tokens, as many
  as arrive an iteration, else one prompt cut into chunks of that room) beside ``C - m`` decode tokens; a *decode* iteration runs
  ``C`` decode tokens. A request lives ``L = n_p + osl - 1`` iterations (its ``n_p`` chunks, the last
  giving its first token, then ``osl - 1`` decode steps); staggered evenly, every ``L`` iterations hold
  ``C n_p / m`` mixed ones and ``L - C n_p / m`` decode ones (``cycle``).
- A decode token's context is each of ``isl .. isl + osl - 2`` equally often: the decode share of an
  iteration is the generation's decode phase (the exact sum over the ``osl - 1`` positions) divided by
  ``osl - 1``; the prefill share is the chunk's cached prefill. Their FLOPs and bytes add per operator,
  the weights read once for all the iteration's tokens (``Engine.iteration``); time: the roofline
  per operator (one device's under a layout, beside the collectives of both shares), or, with
  ``--timing measured``, the two shares' measured times added.
- TTFT = the request's own mixed iterations; TPOT = the rest of the cycle over ``osl - 1``; requests/s
  = ``C`` over the cycle (Little's law: ``requests_per_s x (ttft + (osl - 1) tpot) = C``). Where the
  prefill cannot keep up (``C n_p / m > L``) the largest ``C`` that can is admitted and the rest
  queue: their wait, ``queued / requests_per_s``, is added to TTFT.

Every function takes a list of concurrencies and returns columns (``plan`` may sweep them).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional, Sequence

from .composites import chunk_schedule
from .errors import CostcalcError
from .evaluate import Query, Table, positive
from .vocab import Logits

BUDGET = 8192   # --max-batched-tokens: vLLM's max_num_batched_tokens for its OpenAI server on a GPU of >= 70 GiB
                # (vllm/engine/arg_utils.py; 2048 on smaller GPUs and the A100)


@dataclass(frozen=True)
class Shape:
    """The request shape and the engine's token budget per iteration (prompt and decode tokens)."""
    isl: int
    osl: int
    budget: int = BUDGET

    def __post_init__(self) -> None:
        for name, value in (("--isl", self.isl), ("--osl", self.osl), ("--max-batched-tokens", self.budget)):
            positive(name, value)

    @property
    def held(self) -> int:
        """Tokens a request's cache holds after its last decode step (what ``fits`` counts)."""
        return self.isl + self.osl - 1


@dataclass(frozen=True)
class Mix:
    """The prefill share of the mixed iterations at concurrency ``concurrency``: ``prompts`` (m) prompts
    a mixed iteration carries, each in ``chunks`` (sizes) over ``prefixes`` (tokens already cached)."""
    concurrency: int
    prompts: int
    chunks: tuple
    prefixes: tuple

    @property
    def decoding(self) -> int:
        """Decode tokens beside the prompts in a mixed iteration: the other requests."""
        return self.concurrency - self.prompts


def mix(shape: Shape, concurrency: int) -> Mix:
    """A mixed iteration's prompts at ``concurrency``: where a prompt fits the room the budget leaves
    beside the other ``C - 1`` requests' decode tokens, whole prompts -- as many as arrive in an
    iteration of the staggered steady state, ``ceil(C / osl)`` (a request lives osl iterations: one
    mixed, osl - 1 decoding), at most ``room // isl`` --; else one prompt in chunks of the room (the last
    may be shorter)."""
    positive("--concurrency", concurrency)
    room = shape.budget - (concurrency - 1)
    if room < 1:
        raise CostcalcError(f"--max-batched-tokens {shape.budget} leaves no room for a prompt beside the decode tokens "
                            f"of {concurrency - 1} other requests (concurrency {concurrency}): give a concurrency "
                            f"of at most {shape.budget}, or a larger --max-batched-tokens")
    if shape.isl <= room:       # the prompts a request's life of osl iterations sees arrive, staggered: C / osl
        arriving = -(-concurrency // shape.osl)
        return Mix(concurrency, min(concurrency, room // shape.isl, arriving), (shape.isl,), (0,))
    sizes = chunk_schedule(shape.isl, room)
    return Mix(concurrency, 1, tuple(sizes), tuple(i * room for i in range(len(sizes))))


def prompts_only(shape: Shape) -> Mix:
    """A prefill engine's iteration (no decode tokens): the budget's whole prompts, or one in chunks."""
    if shape.isl <= shape.budget:
        prompts = shape.budget // shape.isl
        return Mix(prompts, prompts, (shape.isl,), (0,))
    return mix(shape, 1)


def cycle(shape: Shape, mixed: Mix) -> tuple[Fraction, Fraction]:
    """(mixed, decode) iterations in the ``L = n_p + osl - 1`` iterations of one request's life: the C
    requests' prompts, m to an iteration, each in n_p chunks: ``C n_p / m`` mixed; the rest decode."""
    n_p = len(mixed.chunks)
    many = Fraction(mixed.concurrency * n_p, mixed.prompts)
    return many, n_p + shape.osl - 1 - many


def sustained(shape: Shape, concurrency: int) -> bool:
    """Whether the prompts of ``concurrency`` requests fit their mixed iterations into the cycle."""
    if shape.budget - (concurrency - 1) < 1:
        return False
    return cycle(shape, mix(shape, concurrency))[1] >= 0


def admitted(shape: Shape, concurrency: int) -> int:
    """The largest concurrency up to ``concurrency`` whose prefill keeps up (``sustained``; one request
    always does), by bisection: the mixed iterations a cycle needs only grow with C."""
    if sustained(shape, concurrency):
        return concurrency
    lo, hi = 1, concurrency          # sustained(lo), not sustained(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if sustained(shape, mid) else (lo, mid)
    return lo


@dataclass(frozen=True)
class Step:
    """One iteration on one device: FLOPs and bytes (exact), and its times."""
    flops: Fraction
    bytes: Fraction
    compute_s: float
    memory_s: float
    comm_s: float
    floor_s: float     # the roofline (with the collectives under a layout)
    time_s: float      # the floor, or --timing measured's estimate


class Engine:
    """One engine -- a pool's replica: the query's model, layout, dtypes and device -- and the parts of
    its iterations (``roofline.point`` per operator, one device's under a layout), each worked out once."""

    def __init__(self, query: Query) -> None:
        from .roofline import Precision

        if query.machine is None:
            raise CostcalcError("serve needs a device: --device NAME (see 'costcalc devices') or --device-file PATH")
        layout = query.options.layout
        if layout.pp > 1 or layout.sp:
            raise CostcalcError(f"serve models one engine on --tp/--ep/--dp devices; {layout.flags} is not modelled "
                                f"yet (a pipeline's iterations, or tokens split over the tensor-parallel devices)")
        self.query = query if query.precision is not None else query.but(precision=Precision())
        self.replicas = layout.dp
        self._seen: dict[tuple, Any] = {}

    @property
    def devices(self) -> int:
        return self.query.options.layout.devices

    def per_replica(self, concurrency: int, flag: str = "--concurrency") -> int:
        """Requests in flight on each data-parallel replica (each schedules its own, vLLM's data-parallel
        engines): ``concurrency`` over ``replicas``, which must divide it."""
        if concurrency % self.replicas:
            raise CostcalcError(f"{flag} {concurrency} does not divide over the {self.replicas} data-parallel "
                                f"replicas (--dp {self.replicas}: each runs its own requests)")
        return concurrency // self.replicas

    def part(self, workload: str, point: dict[str, int], logits: Logits = Logits.last) -> dict[str, Any]:
        """``roofline.point`` of one compiled workload at ``point`` (one replica's: its batch B is every
        replica's, B x ``replicas``, in the layout's terms) with per-operator numbers (one device's under a
        layout: ``parallel.device_traffic``, whose experts see every replica's tokens under --ep tp x dp),
        its collectives' seconds, ``comm_s``, and under ``--timing measured`` the share's estimate,
        ``estimate_s`` (its collectives looked up too, met under ``--overlap``)."""
        key = (workload, tuple(sorted(point.items())), logits)
        if key not in self._seen:
            from . import parallel, roofline

            point = {**point, "B": point["B"] * self.replicas}
            query = self.query.but(workload=workload, logits=logits)
            layout, machine = query.options.layout, query.machine
            if layout.single:
                got = roofline.point(query, point, per_operator=True)
                got["comm_s"] = 0.0
                got["estimate_s"] = got["time_s"]
            else:
                got = parallel.device_traffic(query, point)
                found = parallel.collectives(query, point)
                got["comm_s"] = parallel.comm_time(found, layout, machine.device)
                got["estimate_s"] = got["time_s"]
                if machine.timing is not None:     # the device's looked-up time and its collectives looked up
                    comm, _ = parallel.measured_comm_time(found, layout, machine.device, machine.timing)
                    got["estimate_s"] = parallel.step_time(got["time_s"], comm, query.options.overlap)
            self._seen[key] = got
        return self._seen[key]

    def iteration(self, shape: Shape, decoding: int, chunk: Optional[tuple[int, int, int, bool]] = None) -> Step:
        """An iteration of one replica (every replica runs the same): ``decoding`` decode tokens (their contexts each of isl .. isl + osl - 2 equally:
        the decode phase's sum over ``osl - 1``) and, with ``chunk`` = (prompts, size, prefix, last), that
        cached prefill of each prompt (logits on the last chunk only). Per operator the shares' FLOPs and
        non-weight bytes add; its weights are read once: a routed expert's for every expert the iteration's
        tokens touch (a decode step over that many tokens), any other matrix's once."""
        parts: list[tuple[dict, Fraction]] = []
        tokens = 0
        if decoding:
            if shape.osl < 2:
                raise CostcalcError("a decode token needs --osl of at least 2")
            steps = self.part("decode_phase", {"B": decoding, "S": shape.isl, "N": shape.osl})
            parts.append((steps, Fraction(1, shape.osl - 1)))
            tokens += decoding
        if chunk is not None:
            prompts, size, prefix, last = chunk
            logits = Logits.last if last else Logits.none
            parts.append((self.part("cached_prefill", {"B": prompts, "C": size, "T": prefix}, logits), Fraction(1)))
            tokens += prompts * size
        if not parts:
            raise CostcalcError("an iteration runs at least one token")
        touched = self.part("decode", {"B": tokens, "T": shape.isl})["operators"]   # routed experts at all tokens
        return self._fused(parts, touched)

    def _fused(self, parts: list[tuple[dict, Fraction]], touched: dict) -> Step:
        from .parallel import step_time
        from .roofline import routed_expert

        machine, precision = self.query.machine, self.query.precision
        peak, bandwidth = machine.peak(precision), machine.bandwidth()
        flops = moved = Fraction(0)
        compute = memory = floor = 0.0
        names = dict.fromkeys(op for got, _ in parts for op in got["operators"])
        for op in names:
            mine = [(got["operators"][op], scale) for got, scale in parts if op in got["operators"]]
            f = sum((o["flops"] * s for o, s in mine), Fraction(0))
            rest = sum(((o["bytes"] - o["weight_bytes"]) * s for o, s in mine), Fraction(0))
            read = touched[op]["weight_bytes"] if routed_expert(op) and op in touched else \
                max(o["weight_bytes"] * s for o, s in mine)
            b = rest + read
            t_c, t_m = float(f) / peak, float(b) / bandwidth
            flops, moved = flops + f, moved + b
            compute, memory, floor = compute + t_c, memory + t_m, floor + max(t_c, t_m)
        comm = float(sum(got["comm_s"] * s for got, s in parts))
        if not self.query.options.layout.single:
            floor = step_time(floor, comm, self.query.options.overlap)
        measured = floor
        if machine.timing is not None:      # the shares' own estimates (each raised to its floor), added
            measured = max(floor, float(sum(got["estimate_s"] * s for got, s in parts)))
        return Step(flops, moved, compute, memory, comm, floor, measured)

    def prefill(self, shape: Shape, mixed: Mix) -> list[Step]:
        """The mixed iterations of one prompt: each of its chunks beside ``mixed.decoding`` decode tokens."""
        n = len(mixed.chunks)
        return [self.iteration(shape, mixed.decoding, (mixed.prompts, size, prefix, i == n - 1))
                for i, (size, prefix) in enumerate(zip(mixed.chunks, mixed.prefixes))]

    def fits(self, batch: int, context: int) -> Optional[bool]:
        from .fitting import fits

        return fits(self.query, batch, context)

    def max_concurrency(self, shape: Shape) -> int:
        """The most requests whose weights and caches, each at ``isl + osl - 1`` tokens, fit
        (``fitting.max_batch``: every replica's, a multiple of them); an error where not one does."""
        from .fitting import RESERVE, max_batch

        found = max_batch(self.query, shape.held)
        if found < 1:
            query = self.query
            where = f" under {query.options.layout.label}" if not query.options.layout.single else ""
            raise CostcalcError(f"--concurrency max: {query.spec.name} does not fit on {query.machine.device.name}"
                                f"{where} even with one request of {shape.held} tokens held (weights + KV cache over "
                                f"{1 - RESERVE:.0%} of its memory; see 'costcalc memory')")
        return found


def _labels(engine: Engine, shape: Shape) -> dict[str, Any]:
    query = engine.query
    timing = query.machine.timing_mode
    return {"preset": query.spec.name, "device": query.machine.device.name, "timing": timing,
            "isl": shape.isl, "osl": shape.osl, "max_batched_tokens": shape.budget}


def _flops(query: Query, shape: Shape, mixed: Mix) -> int:
    """One request's FLOPs, whole model: its prompt's chunks (cached prefills) and its decode phase."""
    from .evaluate import table

    total = 0
    for i, (size, prefix) in enumerate(zip(mixed.chunks, mixed.prefixes)):
        logits = Logits.last if i == len(mixed.chunks) - 1 else Logits.none
        chunk = query.but(workload="cached_prefill", logits=logits, tp=1, ep=1)
        total += table(chunk, batch=[1], chunk=[size], prefix=[prefix])["total_flops"][0]
    if shape.osl > 1:
        phase = query.but(workload="decode_phase", tp=1, ep=1)
        total += table(phase, batch=[1], seq=[shape.isl], new_tokens=[shape.osl])["total_flops"][0]
    return total


def aggregated(query: Query, shape: Shape, concurrency: Sequence[Any]) -> Table:
    """Rows of one engine serving ``concurrency`` requests in flight (each an int, or ``"max"``: the
    most whose weights and caches fit, ``Engine.max_concurrency``, then the most whose prefill keeps up)."""
    engine = Engine(query)
    d = engine.replicas         # data-parallel replicas: each runs 1/d of the requests, its own iterations
    rows = []
    for asked in concurrency:
        if asked == "max":
            asked = d * admitted(shape, engine.max_concurrency(shape) // d)
        asked = positive("--concurrency", asked)
        running = admitted(shape, engine.per_replica(asked))     # one replica's
        mixed = mix(shape, running)
        many, rest = cycle(shape, mixed)
        chunks = engine.prefill(shape, mixed)
        decode = engine.iteration(shape, running) if rest else None
        first = sum(s.time_s for s in chunks)
        per_cycle = float(Fraction(running, mixed.prompts)) * first + (float(rest) * decode.time_s if decode else 0.0)
        rate = d * running / per_cycle
        wait = (asked - d * running) / rate
        tpot = (per_cycle - first) / (shape.osl - 1) if shape.osl > 1 else None
        flops = _flops(engine.query, shape, mixed)
        layout = engine.query.options.layout
        rows.append({
            **_labels(engine, shape), "mode": "aggregated", "layout": layout.label, "devices": engine.devices,
            "concurrency": asked, "ttft_s": first + wait, "tpot_s": tpot,
            "tokens_per_s_per_gpu": rate * shape.osl / engine.devices,
            "tokens_per_s_per_user": 1 / tpot if tpot else None,
            "requests_per_s": rate, "fits": engine.fits(d * running, shape.held),
            "queued": asked - d * running, "prompts_per_mixed": mixed.prompts, "chunks": len(mixed.chunks),
            "mixed_share": round(float(many / (many + rest)), 4),
            "mixed_time_s": first / len(chunks), "decode_time_s": decode.time_s if decode else None,
            "flops_per_request": flops,
            "flops_per_iteration": _number(Fraction(d * running * flops) / (many + rest))})
    return _columns(rows)


@dataclass(frozen=True)
class Pools:
    """A disaggregated deployment: the prefill pool's engine (its query: layout, dtypes, device) and
    devices, the decode pool's; each pool's devices a whole number of its engine's."""
    prefill: Query
    decode: Query
    prefill_devices: int
    decode_devices: int


def transfer(pools: Pools, shape: Shape) -> tuple[int, float]:
    """(bytes, seconds) of one request's KV cache moved from the prefill pool to the decode pool: memory's
    count of what the serving cache holds after ``isl`` tokens (every layer group's K/V in the KV dtype,
    a window layer's last W tokens, recurrent states), each prefill device sending its own shard (memory's
    per-device count: h_kv/tp heads, one where h_kv < tp) over its point-to-point link, the scale-up
    link while both pools fit one scale-up domain (``parallel.link``), else the scale-out network."""
    from . import collectives, memory, parallel
    from .fitting import memory_query

    query = pools.prefill if pools.prefill.precision is not None else Engine(pools.prefill).query
    held = memory_query(query)
    moved = memory.kv_cache_bytes(held, 1, shape.isl) + memory.state_bytes(held, 1)
    layout = query.options.layout       # one device's shard of one request (its replica's)
    own = memory.per_device(held, layout, memory.Held(layout.dp, shape.isl, 0))[0]
    shard = own["kv_cache_bytes"] + own.get("state_bytes", 0)
    device = query.machine.device
    link = parallel.link(device, 2, pools.prefill_devices + pools.decode_devices)
    return moved, collectives.time(collectives.SEND_RECV, 2, shard, link)


def disaggregated(pools: Pools, shape: Shape, concurrency: Sequence[Any], make: Any = None) -> Table:
    """Rows of a prefill pool and a decode pool matched at their rates: the prefill engines run only
    prompts (the budget's whole prompts an iteration, or one in chunks), the decode engines ``C`` decode
    tokens an iteration (``"max"``: the most whose caches fit); throughput is the slower pool's; TTFT =
    the prompt's iterations + its KV transfer; TPOT = the decode engine's iteration. ``make(query)``:
    the ``Engine`` of a pool's query (default a new one; ``plan`` passes one that keeps its engines, so
    a pool met in several splits is worked out once)."""
    if shape.osl < 2:
        raise CostcalcError("--disagg: with --osl 1 there is no decode step for the decode pool (give --osl 2 or more)")
    make = make or Engine
    first, second = make(pools.prefill), make(pools.decode)
    for name, engine, devices in (("prefill", first, pools.prefill_devices), ("decode", second, pools.decode_devices)):
        positive(f"--{name}-devices", devices)
        if devices % engine.devices:
            raise CostcalcError(f"--{name}-devices {devices} is not a whole number of {name} engines of "
                                f"{engine.devices} devices ({engine.query.options.layout.label})")
    own = prompts_only(shape)           # each prefill replica's
    chunks = first.prefill(shape, own)
    ttft = sum(s.time_s for s in chunks)
    prefill_rate = first.replicas * own.prompts / ttft * (pools.prefill_devices // first.devices)
    moved, seconds = transfer(Pools(first.query, second.query, pools.prefill_devices, pools.decode_devices), shape)
    rows = []
    for asked in concurrency:
        running = second.max_concurrency(shape) if asked == "max" else positive("--concurrency", asked)
        step = second.iteration(shape, second.per_replica(running))
        decode_rate = running / ((shape.osl - 1) * step.time_s) * (pools.decode_devices // second.devices)
        rate = min(prefill_rate, decode_rate)
        devices = pools.prefill_devices + pools.decode_devices
        fits = [first.fits(first.replicas * own.prompts, shape.isl), second.fits(running, shape.held)]
        rows.append({
            **_labels(second, shape), "mode": "disaggregated",
            "prefill_layout": first.query.options.layout.label, "prefill_devices": pools.prefill_devices,
            "decode_layout": second.query.options.layout.label, "decode_devices": pools.decode_devices,
            "devices": devices, "concurrency": running, "ttft_s": ttft + seconds, "tpot_s": step.time_s,
            "tokens_per_s_per_gpu": rate * shape.osl / devices, "tokens_per_s_per_user": 1 / step.time_s,
            "requests_per_s": rate, "fits": None if None in fits else all(fits),
            "bottleneck": "prefill" if prefill_rate < decode_rate else "decode",
            "kv_transfer_bytes": moved, "kv_transfer_time_s": seconds,
            "prefill_requests_per_s": prefill_rate, "decode_requests_per_s": decode_rate,
            "prompts_per_prefill": own.prompts, "chunks": len(own.chunks)})
    return _columns(rows)


def _number(value: Fraction) -> Any:
    return int(value) if value.denominator == 1 else float(value)


def _columns(rows: list[dict[str, Any]]) -> Table:
    names = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k) for r in rows] for k in names}
