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

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

from .errors import CostcalcError
from .evaluate import Query, _group_columns, add
from .layout import kv_replicated, shard

ACT_BITS = 16   # the activations' dtype of a collective: bf16 (--act-dtype with a layout: not yet)


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
    reduce_scatter, all_to_all), ``where`` (after which operator), ``count`` (times per step) and ``bytes``, the
    message: the buffer each device passes in (all-reduce: the tensor reduced; all-gather: the
    gathered result; reduce-scatter: the tensor reduced, before it is scattered; all-to-all: the
    device's send buffer, its own share included). The fraction
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
    after each attention's o_proj and each FFN's down projection (a layer without an FFN: one; with
    sequence parallel a reduce-scatter and an all-gather of it: ``_tp_reduce``), and an all-gather of
    the vocabulary-parallel logits. EP (the all-to-all convention: each device
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
        if layout.sp and tokens % layout.tp:
            plural = "s" * (tokens != 1)
            raise CostcalcError(f"--sp: a forward of {tokens} token{plural} does not divide by --tp {layout.tp} "
                                f"(sequence parallel splits every forward's tokens evenly over the tensor-parallel "
                                f"devices)")
        for where, layers in (("o_proj", attention), ("ffn down_proj", ffn)):
            out += _tp_reduce(layout, where, steps * layers, tokens * d * a)
        out.append(Collective("all_gather", "lm_head", steps, rows * spec.sizes["V"] * a))
    if layout.ep > 1:
        moe = [g for g in spec.groups if g.block.ffn == "moe"]
        share = -(-tokens // layout.ep)
        for where in ("dispatch", "combine"):
            for k in sorted({g.sizes["k"] for g in moe}):
                layers = sum(g.count for g in moe if g.sizes["k"] == k)
                out.append(Collective("all_to_all", f"experts {where}", steps * layers, share * k * d * a))
    return [c for c in out if c.count]


def _tp_reduce(layout, where: str, count: int, message: int) -> list[Collective]:
    """The sum of the row-split projection's partial outputs: one all-reduce of the B n x d tensor;
    with sequence parallel (Korthikanti et al. 2022, arXiv 2205.05198) a reduce-scatter of it (each
    device keeps its B n / tp tokens for the residual add and the norm) and an all-gather of the same
    tensor before the next column-split projections (the next layer's, or the LM head's after the
    last layer): the same message each, the same bytes on the wire as the all-reduce."""
    if not layout.sp:
        return [Collective("all_reduce", where, count, message)]
    return [Collective("reduce_scatter", where, count, message), Collective("all_gather", where, count, message)]


def columns(query: Query, point: dict[str, Sequence[int]], n: int) -> dict[str, list]:
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
