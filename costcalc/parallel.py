"""Many devices: a tensor- and expert-parallel layout, the FLOPs each device runs and the
collectives it takes part in (docs/cost-model.md, "Tensor and expert parallelism").

The layout is part of the question (``Options.tp``, ``Options.ep``). Per-device FLOPs are the
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

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Sequence

from .errors import CostcalcError
from .spec import Group, ModelSpec

if TYPE_CHECKING:
    from .evaluate import Query

# The compiled workloads a layout is modelled for (generate: its two phases).
WORKLOADS = ("prefill", "cached_prefill", "decode", "decode_phase")
ATTENTIONS = ("gqa", "window", "chunk", "mla")   # split by heads; the others are refused by name
SPLIT = ("h_q", "m", "m_s", "V")                  # sizes divided by tp (the expert width m_e without ep)
ACT_BITS = 16   # the activations' dtype of a collective: bf16 (--act-dtype with a layout: not yet)


@dataclass(frozen=True)
class Layout:
    """Tensor parallel ``tp`` and expert parallel ``ep`` (1: none). The experts run over the
    tensor-parallel group (vLLM's expert parallel at data parallel 1): ``ep`` is 1 or ``tp``,
    and the layout has ``tp`` devices."""
    tp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "ep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CostcalcError(f"--{name} must be a positive integer, got {value!r}")
        if self.ep not in (1, self.tp):
            raise CostcalcError(f"--ep {self.ep} with --tp {self.tp}: the experts run over the tensor-parallel "
                                f"devices (vLLM's expert parallel at data parallel 1), so --ep is 1 or equal to "
                                f"--tp; other layouts need data parallelism (--dp), not modelled yet")

    @property
    def single(self) -> bool:
        return self.tp == 1 and self.ep == 1

    @property
    def devices(self) -> int:
        return self.tp

    @property
    def flags(self) -> str:
        return f"--tp {self.tp}" + (f" --ep {self.ep}" if self.ep > 1 else "")

    @property
    def label(self) -> str:
        return f"tp{self.tp}" + (f".ep{self.ep}" if self.ep > 1 else "")


def check(query: "Query") -> None:
    """A layout's question checked against the model and the workload: one error naming what
    does not divide or what is not modelled."""
    layout, spec = query.options.layout, query.spec
    if layout.single:
        return
    flag = layout.flags
    if query.workload.name not in WORKLOADS + ("generate",):
        raise CostcalcError(f"{flag}: per-device costs are modelled for prefill, decode and generate, "
                            f"not {query.workload.name} yet")
    if query.traffic:
        raise CostcalcError(f"{flag}: bytes and time per device (--device, the dtypes) are not modelled yet; "
                            f"per-device FLOPs and communication only")
    if query.options.draft.value != "none":
        raise CostcalcError(f"{flag}: --draft with a parallel layout is not modelled yet")
    for group in spec.groups:
        _check_group(spec, group, layout, flag)
    if layout.ep > 1 and not any(g.block.ffn == "moe" for g in spec.groups):
        raise CostcalcError(f"--ep {layout.ep}: {spec.name} has no MoE layers (expert parallelism splits experts)")


def _check_group(spec: ModelSpec, group: Group, layout: Layout, flag: str) -> None:
    block, sizes, tp = group.block, group.sizes, layout.tp
    name = spec.name
    if (block.attention not in ATTENTIONS or block.sparse or block.beside or block.mtp
            or (block.ffn not in ("dense", "mlp", "moe", "none"))):
        raise CostcalcError(f"{flag}: {name}'s {block.key} layers are not modelled under parallelism yet "
                            f"(softmax attention {', '.join(ATTENTIONS)} without an indexer or a mixer, "
                            f"dense, MLP or MoE FFNs)")
    for key, what in (("h_q", "query head count h_q"), ("m", "FFN width m"), ("m_s", "shared expert width m_s"),
                      ("V", "vocabulary V (vLLM pads it to a multiple of 64 tp: not modelled)")):
        if key in sizes and sizes[key] % tp:
            raise CostcalcError(f"--tp {tp}: {name}'s {what} {sizes[key]} does not divide by {tp}")
    if "h_kv" in sizes:
        h_kv = sizes["h_kv"]
        if h_kv >= tp and h_kv % tp:
            raise CostcalcError(f"--tp {tp}: {name}'s {h_kv} KV heads do not divide by {tp}")
        if h_kv < tp and tp % h_kv:
            raise CostcalcError(f"--tp {tp}: {name}'s {h_kv} KV heads are fewer than {tp} and {tp} is not a "
                                f"multiple of them (vLLM replicates each KV head on tp / h_kv devices)")
    if block.ffn == "moe":
        if layout.ep > 1 and sizes["E"] % layout.ep:
            raise CostcalcError(f"--ep {layout.ep}: {name}'s {sizes['E']} experts do not divide by {layout.ep}")
        if layout.ep == 1 and sizes["m_e"] % tp:
            raise CostcalcError(f"--tp {tp}: {name}'s expert width m_e {sizes['m_e']} does not divide by {tp} "
                                f"(experts split by tensor parallelism without --ep)")


def shard(group: Group, layout: Layout) -> Group:
    """A layer group at one device's sizes: every size in ``SPLIT`` divided by tp, the KV heads
    by tp or one a device where h_kv < tp (replicated), the expert width by tp without ep."""
    tp, sizes = layout.tp, dict(group.sizes)
    for key in SPLIT:
        if key in sizes:
            sizes[key] //= tp
    if "h_kv" in sizes:
        sizes["h_kv"] = max(sizes["h_kv"] // tp, 1)
    if "m_e" in sizes and layout.ep == 1:
        sizes["m_e"] //= tp
    return Group(group.count, group.block, sizes)


def kv_replicated(spec: ModelSpec, layout: Layout) -> bool:
    return any("h_kv" in g.sizes and g.sizes["h_kv"] < layout.tp for g in spec.groups)


def operator_columns(query: "Query", point: dict[str, Sequence[int]], n: int,
                     sharded: bool) -> dict[str, list]:
    """FLOPs per operator at n points summed over the layer groups: of the whole model
    (``sharded`` False) or of one device (the recipes at ``shard`` sizes, the routed experts'
    expected pairs divided by ep: exact fractions where they do not divide)."""
    from .evaluate import _group_columns, add

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


def forwards(query: "Query", point: dict[str, int]) -> tuple[int, int, int]:
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


def collectives(query: "Query", point: dict[str, int]) -> list[Collective]:
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


def columns(query: "Query", point: dict[str, Sequence[int]], n: int) -> dict[str, list]:
    """The layout's columns of n rows: ``layout``, ``devices``, ``flops_per_device``, the
    replicated work (``replicated_flops``: FLOPs the devices run beyond the model's, and the
    operators that run it, ``replicated``), ``comm_bytes_per_device`` and ``collectives``."""
    layout = query.options.layout
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
