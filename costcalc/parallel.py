"""Many devices: a tensor- and expert-parallel layout, the FLOPs each device runs and the
collectives it takes part in (docs/cost-model.md, "Tensor and expert parallelism").

The layout is part of the question (``Options.tp``, ``Options.ep``; ``costcalc.layout``). Per-device FLOPs are the
workload's own compiled recipes evaluated at a device's sizes (``shard``): under tensor
parallelism (Megatron's column/row split) the query heads, the dense, shared-expert and (without
expert parallelism) expert widths and the vocabulary are divided by ``tp``; the KV heads too,
or, where ``h_kv < tp``, one KV head per device (vLLM's ``QKVParallelLinear`` replicates them).
Every projection whose shape holds none of these sizes -- the router, MLA's ``q_a_proj`` and
``kv_a_proj_with_mqa`` -- is then the whole matrix on every device: the replicated work, named
per row (``replicated``) and counted (``replicated_flops``). Under expert parallelism each rank
runs its E/ep experts over the expected routed (token, expert) pairs, n k / ep: the routed
experts' FLOPs divided by ``ep``.

Communication per device per step is a list of collectives (op, where, count, message bytes):
``Collective``. No time is given here (the time of a collective needs the links' bandwidths).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Sequence


from . import pipeline
from .collectives import SEND_RECV, link_for, time
from .errors import CostcalcError
from .evaluate import Options, Query, Recipe, _group_columns, add
from .layout import device_spec, kv_replicated, shard
from .spec import ModelSpec
from .stages import stages
from .vocab import Overlap
from .weights import EMBEDDING

ACT_BITS = 16   # the activations' dtype of a collective: bf16 (--act-dtype with a layout: not yet)
# Tensors of d a token a pipeline stage sends the next: 1, the residual stream (Megatron, torch.distributed.
# pipelining, verify's decoder); vLLM and SGLang send hidden_states and residual apart (2: not modelled).
STAGE_TENSORS = 1


def operator_columns(query: Query, point: dict[str, Sequence[int]], n: int,
                     sharded: bool) -> dict[str, list]:
    """FLOPs per operator at n points summed over the layer groups: of the whole model
    (``sharded`` False) or of one device (the recipes at ``shard`` sizes, the routed experts'
    expected pairs divided by ep: exact fractions where they do not divide)."""
    layout = query.options.layout
    out: dict[str, list] = {}
    for group, recipe in query.recipes():
        own = shard(group, layout) if sharded else group
        got = _group_columns(query, (own, recipe), point, n, list(recipe.operators))
        for op, column in got.items():
            if sharded and layout.ep > 1 and op.startswith("experts."):
                column = [_exact(Fraction(v, layout.ep)) for v in column]
            out[op] = add([out[op], column]) if op in out else column
    return out


def _exact(value: Fraction) -> Any:
    return int(value) if value.denominator == 1 else value


@dataclass(frozen=True)
class Collective:
    """One kind of collective a device runs in a step: ``op`` (all_reduce, all_gather,
    all_to_all), ``where`` (after which operator), ``count`` (times per step) and ``bytes``, the
    message: the buffer each device passes in (all-reduce: the tensor reduced; all-gather: the
    gathered result; all-to-all: the device's send buffer, its own share included). The fraction
    that leaves the device (2(n-1)/n, (n-1)/n) belongs to the time model, not to the message."""
    op: str
    where: str
    count: int
    bytes: int

    def row(self) -> dict[str, Any]:
        return {"op": self.op, "where": self.where, "count": self.count, "bytes": self.bytes}


def forwards(query: Query, point: dict[str, int]) -> tuple[int, int, int]:
    """(forward passes, tokens per pass, logit rows per pass) of one point of a compiled workload."""
    name, b = query.workload.name, point["B"]
    if name == "prefill":
        tokens = b * point["S"]
    elif name == "cached_prefill":
        tokens = b * point["C"]
    else:
        tokens = b
    steps = point["N"] - 1 if name == "decode_phase" else 1
    rows = tokens if query.logits.value == "all" else b
    return steps, tokens, rows


def collectives(query: Query, point: dict[str, int]) -> list[Collective]:
    """The collectives one device runs at one point. TP: an all-reduce of the B n x d activations
    after each attention's o_proj and each FFN's down projection (a layer without an FFN: one), and
    an all-gather of the vocabulary-parallel logits. EP (the all-to-all convention: each device
    dispatches the tokens of its share, ceil(B n / ep), the busiest device's): per MoE layer a
    dispatch and a combine all-to-all of its tokens' k copies x d, beside the all-reduce that sums
    the shared experts' partial outputs and gathers the routed ones back on every device."""
    layout, spec = query.options.layout, query.spec
    steps, tokens, rows = forwards(query, point)
    a = ACT_BITS // 8
    d = spec.sizes["d"]
    out: list[Collective] = []
    if layout.tp > 1:
        attention = sum(g.count for g in spec.groups if g.block.attention)
        ffn = sum(g.count for g in spec.groups if g.block.ffn != "none")
        out.append(Collective("all_reduce", "o_proj", steps * attention, tokens * d * a))
        if ffn:
            out.append(Collective("all_reduce", "ffn down_proj", steps * ffn, tokens * d * a))
        out.append(Collective("all_gather", "lm_head", steps, rows * spec.sizes["V"] * a))
    if layout.ep > 1:
        moe = [g for g in spec.groups if g.block.ffn == "moe"]
        share = -(-tokens // layout.ep)
        for where in ("dispatch", "combine"):
            for k in sorted({g.sizes["k"] for g in moe}):
                layers = sum(g.count for g in moe if g.sizes["k"] == k)
                out.append(Collective("all_to_all", f"experts {where}", steps * layers, share * k * d * a))
    return [c for c in out if c.count]


def columns(query: Query, point: dict[str, Sequence[int]], n: int) -> dict[str, list]:
    """The layout's columns of n rows: ``layout``, ``devices``, ``flops_per_device``, the
    replicated work (``replicated_flops``: FLOPs the devices run beyond the model's, and the
    operators that run it, ``replicated``), ``comm_bytes_per_device`` and ``collectives``."""
    layout = query.options.layout
    if layout.pp > 1:
        return pipeline_columns(query, point, n)
    whole = operator_columns(query, point, n, sharded=False)
    device = operator_columns(query, point, n, sharded=True)
    out: dict[str, list] = {"layout": [layout.label] * n, "devices": [layout.devices] * n,
                            "flops_per_device": [], "replicated_flops": [], "replicated": [],
                            "comm_bytes_per_device": [], "collectives": []}
    for i in range(n):
        extra = {op: device[op][i] * layout.devices - whole[op][i] for op in whole}
        out["flops_per_device"].append(number(sum(device[op][i] for op in device)))
        out["replicated_flops"].append(number(sum(extra.values())))
        named = [op for op, v in extra.items() if v]
        if kv_replicated(query.spec, layout):
            named = [f"{op} (KV heads replicated: h_kv < tp)" if op in ("k_proj", "v_proj") else op for op in named]
        out["replicated"].append(", ".join(named) or "none")
        found = collectives(query, {k: int(v[i]) for k, v in point.items()})
        out["comm_bytes_per_device"].append(sum(c.count * c.bytes for c in found))
        out["collectives"].append([c.row() for c in found])
    return out


def number(value: Any) -> Any:
    """An exact count as an int, an expected count that is a fraction as a float."""
    value = Fraction(value)
    return int(value) if value.denominator == 1 else float(value)


# --- pipeline parallelism (--pp): stages, send/recv, the schedule's makespan ---------------------------
# docs/cost-model.md, "Pipeline parallelism". Kept in one block: ``stage_traffic`` is the one place a
# stage's bytes and time are asked (roofline.point on the stage at one device's sizes), to be swapped for
# parallel.device_traffic (per-device bytes under tp/ep) where that lands.

@dataclass(frozen=True)
class Stage(Query):
    """A pipeline stage as a query: its layer groups only (``costcalc.stages``); ``last`` False --
    every stage but the last -- runs no LM head (the recipes charge it in the first group: left out)."""
    last: bool = True

    def recipes(self, kind: str = "flops"):
        for group, recipe in Query.recipes(self, kind):
            yield group, recipe if self.last or not isinstance(recipe, Recipe) else Recipe(recipe.code, False)


def stage_queries(query: Query) -> list[Stage]:
    """Each stage of the query's pipeline with its tensor/expert layout (no pp of its own)."""
    spec, layout = query.spec, query.options.layout
    parts = stages(spec, layout.pp)
    options = replace(query.options, pp=1, micro_batches=None)
    out = []
    for i, groups in enumerate(parts):
        own = replace(spec, groups=groups, sizes={**spec.sizes, "L": sum(g.count for g in groups)})
        out.append(Stage(replace(own, dtypes=_held(own)), query.workload, options, last=i == len(parts) - 1))
    return out


def _held(spec: ModelSpec) -> dict[str, str]:
    """A stage's weight formats: the model's ``dtypes`` less the keys that name no weight the stage holds
    (a stage of DeepSeek-V3's dense layers has no router): the formats of what it holds are unchanged."""
    weighted, terms = set(), set()
    for _, recipe in Query(replace(spec, dtypes={}), "prefill").recipes("matrices"):
        weighted |= {name.rsplit(".", 1)[0] for name in recipe.outputs}
    for _, recipe in Query(replace(spec, dtypes={}), "prefill", Options(mla="naive")).recipes():
        terms |= {term for op, term in recipe.term_of.items() if op in weighted}
    known = {"default", "lm_head", EMBEDDING} | weighted | terms
    return {key: value for key, value in spec.dtypes.items() if key in known}


def micro_batches(query: Query) -> int:
    """A step's micro-batches: ``--micro-batches``, else 1 (the batch passes the stages once: the
    latency of one step; docs/cost-model.md says why)."""
    return query.options.micro_batches or DEFAULT_MICRO_BATCHES


DEFAULT_MICRO_BATCHES = 1


def _micro_point(point: dict[str, int], m: int, flag: str) -> dict[str, int]:
    if point["B"] % m:
        raise CostcalcError(f"{flag} --micro-batches {m}: batch {point['B']} does not divide into {m} micro-batches")
    return {**point, "B": point["B"] // m}


def stage_collectives(stage: Stage, point: dict[str, int], m: int) -> list[Collective]:
    """One device of a stage, a step of m micro-batches of ``point`` (B already B/m): its tensor- and
    expert-parallel collectives (the logits gather on the last stage only) and, on every stage but the
    last, the activation it sends on: per micro-batch B/m x tokens x d in bf16 (``ACT_BITS``; ``STAGE_TENSORS``
    of them), every tensor-parallel rank its whole copy (no scatter/gather of the message across the TP ranks)."""
    found = [Collective(c.op, c.where, c.count * m, c.bytes) for c in collectives(stage, point)
             if stage.last or c.where != "lm_head"]
    if not stage.last:
        steps, tokens, _ = forwards(stage, point)
        message = STAGE_TENSORS * tokens * stage.spec.sizes["d"] * ACT_BITS // 8
        found.append(Collective(SEND_RECV, "stage boundary", steps * m, message))
    return found


def boundary_link(query: Query, index: int):
    """The link stage ``index`` sends over to the next: devices placed tensor-parallel innermost (stage
    s, TP rank t is device s tp + t), so a boundary inside one scale-up domain for every t is NVLink,
    else the scale-out hop (``collectives.link_for``)."""
    tp, device = query.options.layout.tp, query.machine.device
    up = device.scale_up
    domain = up.domain if up is not None and up.domain else None
    within = domain is None or all((index * tp + t) // domain == ((index + 1) * tp + t) // domain for t in range(tp))
    return link_for(2, up, device.scale_out, within=within)


def stage_traffic(stage: Stage, query: Query, point: dict[str, int]) -> dict[str, Any]:
    """Bytes (and, with a device, times) of one micro-batch on one device of a stage under the query's
    dtypes and device: ``roofline.point`` on the stage at one tensor-parallel device's sizes
    (``layout.device_spec``), as a one-device question. Marked to be swapped for
    ``parallel.device_traffic`` (H1) at merge."""
    from .roofline import Precision, point as traffic   # bytes and time load only when asked for

    own = replace(stage, spec=device_spec(stage.spec, stage.options.layout), precision=query.precision or Precision(),
                  machine=query.machine, options=replace(stage.options, tp=1, ep=1, sp=False))
    return traffic(own, point)


def _comm_time(query: Query, found: list[Collective], index: int) -> float:
    layout, device = query.options.layout, query.machine.device
    total = 0.0
    for c in found:
        if c.op == SEND_RECV:
            total += c.count * time(SEND_RECV, 2, c.bytes, boundary_link(query, index))
        else:
            n = layout.ep if c.op == "all_to_all" else layout.tp
            total += c.count * time(c.op, n, c.bytes, link_for(n, device.scale_up, device.scale_out))
    return total


def pipeline_columns(query: Query, point: dict[str, Sequence[int]], n: int) -> dict[str, list]:
    """The layout's columns under pp: per stage (per device of it, per step) ``stage_layers``,
    ``stage_flops``; ``flops_per_device`` the busiest stage's; ``micro_batches``, the forward-only
    GPipe table's ``bubble``; the collectives of every stage (``stage`` in each); with dtypes or a
    device each stage's bytes (``stage_bytes``), with a device its time (``stage_time_s``, compute or
    memory plus its collectives under --overlap none, the larger under full) and the step's
    ``time_s``: the schedule's makespan over those stage times (pipeline.makespan)."""
    layout = query.options.layout
    m, flag = micro_batches(query), layout.flags
    parts = stage_queries(query)
    whole = operator_columns(query, point, n, sharded=False)
    keys = ["layout", "devices", "micro_batches", "bubble", "stage_layers", "stage_flops", "flops_per_device",
            "replicated_flops", "replicated", "comm_bytes_per_device", "collectives"]
    if query.traffic:
        keys += ["stage_bytes", "weight_bytes_per_device", "kv_read_bytes_per_device"]
    if query.machine is not None:
        keys += ["stage_time_s", "comm_time_s", "time_s"]
    out: dict[str, list] = {key: [] for key in keys}
    bubble = float(pipeline.bubble(pipeline.GPIPE, layout.pp, m, backward=False))
    for i in range(n):
        one = _micro_point({k: int(v[i]) for k, v in point.items()}, m, flag)
        per_op: dict[str, Any] = {}
        flops, comm, listed, moved, durations, comm_s = [], [], [], [], [], []
        for index, stage in enumerate(parts):
            got = operator_columns(stage, {k: [v] for k, v in one.items()}, 1, sharded=True)
            for op, column in got.items():
                per_op[op] = per_op.get(op, 0) + column[0] * m * layout.tp
            flops.append(number(m * sum(column[0] for column in got.values())))
            found = stage_collectives(stage, one, m)
            comm.append(sum(c.count * c.bytes for c in found))
            listed += [{**c.row(), "stage": index} for c in found]
            if query.traffic:
                moved.append(stage_traffic(stage, query, one))
            if query.machine is not None:
                sends = [c for c in found if c.op == SEND_RECV]
                own = _comm_time(query, [c for c in found if c.op != SEND_RECV], index) / m   # a micro-batch's
                send = _comm_time(query, sends, index) / m
                work = moved[-1]["time_s"]
                durations.append((work + own if query.options.overlap == Overlap.none else max(work, own)) + send)
                comm_s.append(m * (own + send))
        extra = {op: per_op[op] - whole[op][i] for op in whole}
        row = {"layout": layout.label, "devices": layout.devices, "micro_batches": m, "bubble": bubble,
               "stage_layers": [sum(g.count for g in s.spec.groups) for s in parts], "stage_flops": flops,
               "flops_per_device": max(flops), "replicated_flops": number(sum(extra.values())),
               "replicated": ", ".join(op for op, v in extra.items() if v) or "none",
               "comm_bytes_per_device": max(comm), "collectives": listed}
        if query.traffic:
            row["stage_bytes"] = [m * got["total_bytes"] for got in moved]
            row["weight_bytes_per_device"] = max(m * got["weight_bytes"] for got in moved)
            row["kv_read_bytes_per_device"] = max(m * got["kv_read_bytes"] for got in moved)
        if query.machine is not None:
            row["stage_time_s"] = [m * t for t in durations]
            row["comm_time_s"] = max(comm_s)
            row["time_s"] = pipeline.makespan(pipeline.GPIPE, durations, m)
        for key in keys:
            out[key].append(row[key])
    return out
