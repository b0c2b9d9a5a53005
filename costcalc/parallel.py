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
``Collective``. Data parallelism (``dp``) runs D replicas, each with B / D of the batch and its own
tensor-parallel group: one device's numbers are a replica's at B / D, except the routed experts under
``ep = tp * dp``, which are routed the tokens of every replica.

Bytes and time per device (``device_traffic``): the workload's bytes recipes evaluated by
``roofline.point`` on the groups one device holds (``layout.device_spec``), its share of the routed
experts given by ``roofline.Share``; each collective takes ``collectives.time`` over the link its group
spans (``link``), and ``--overlap`` says how the two meet (``step_time``). Under ``--timing measured`` the
device's operators are looked up at its shard's shapes (``roofline.point`` on its query) and each collective
in the measured tables (``measured_comm_time``), the floor beside (``traffic_columns``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Optional, Sequence

from . import collectives as links_model, pipeline
from .errors import CostcalcError
from .evaluate import Options, Query, Recipe, _group_columns, add
from .roofline import routed_expert
from .layout import MEMO, MIXERS, device_spec, groups_replicated, kv_replicated, padded, shard, vocab
from .spec import ModelSpec
from .stages import stages
from .vocab import TERMS, Logits, Overlap
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
    runs = expert_share(layout).runs
    if sharded:
        point = replica(point, layout)
    # inference's vocabulary rows are vLLM's padded ones; a training step's Megatron's V / tp (check_train)
    rows = None if query.workload.name == "train" else vocab(query.spec, layout)
    out: dict[str, list] = {}
    for group, recipe in query.recipes():
        own = shard(group, layout, rows) if sharded else group
        got = _group_columns(query, (own, recipe), point, n, list(recipe.operators))
        for op, column in got.items():
            if sharded and runs > 1 and routed_expert(op):       # the MTP module's too (mtp.experts.*)
                column = [_exact(Fraction(v, runs)) for v in column]
            out[op] = add([out[op], column]) if op in out else column
    return out


def replica(point: dict[str, Any], layout: Any) -> dict[str, Any]:
    """A point at one data-parallel replica's batch, B / D (B must divide by D)."""
    if layout.dp == 1 or "B" not in point:
        return point
    values = point["B"]
    if hasattr(values, "dtype"):
        bad = [int(b) for b in values[values % layout.dp != 0][:1]]
        own = values // layout.dp
    else:
        bad = [b for b in values if b % layout.dp] if isinstance(values, (list, tuple)) else \
            ([values] if values % layout.dp else [])
        own = [b // layout.dp for b in values] if isinstance(values, (list, tuple)) else values // layout.dp
    if bad:
        raise CostcalcError(f"--dp {layout.dp}: batch {bad[0]} does not divide by {layout.dp} (each data-parallel "
                            f"replica runs B / {layout.dp} of the sequences)")
    return {**point, "B": own}


def expert_share(layout: Any) -> "Share":
    """One device's part of the routed experts (``roofline.Share``), for recipes evaluated at one
    replica's batch: E / ep experts held; without ep, all of them at 1/tp of their width (``shard``);
    with ep, its experts run 1/tp of the replica's routed pairs (ep = tp: the replica's tokens over its tp
    devices; ep = tp x dp: every replica's tokens over tp x dp devices, B n k / ep, that is the
    replica's B/D n k / tp), and are routed the tokens of ep / tp replicas."""
    from .roofline import Share

    if layout.ep == 1:
        return Share()
    return Share(ep=layout.ep, runs=layout.tp, replicas=layout.ep // layout.tp)


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
    ranks: Optional[int] = None   # the group it runs over (None: tp, or ep for an all-to-all)

    def row(self) -> dict[str, Any]:
        return {"op": self.op, "where": self.where, "count": self.count, "bytes": self.bytes}


def forwards(query: Query, point: dict[str, int]) -> tuple[int, int, int]:
    """(forward passes, tokens per pass, logit rows per pass) of one point of a compiled workload."""
    name, b = query.workload.name, replica(point, query.options.layout)["B"]
    if name == "prefill":
        tokens = b * point["S"]
    elif name == "cached_prefill":
        tokens = b * point["C"]
    else:
        tokens = b
    steps = point["N"] - 1 if name == "decode_phase" else 1
    rows = tokens if query.logits == Logits.all else 0 if query.logits == Logits.none else b
    return steps, tokens, rows


def collectives(query: Query, point: dict[str, int]) -> list[Collective]:
    """The collectives one device runs at one point (B: the whole batch; a replica's B / D under dp).
    TP: an all-reduce of the B n x d activations after the vocabulary-parallel embedding (each device
    looks up the tokens of its V / tp rows, zeros elsewhere: vLLM's ``VocabParallelEmbedding``), after
    each attention's o_proj and after each FFN's down projection (a layer without an FFN: one; with
    sequence parallel a reduce-scatter and an all-gather of it: ``_tp_reduce``), and an all-gather of the vocabulary-parallel logits (none where the forward
    runs no LM head). EP (the all-to-all convention: each device dispatches the tokens of its share of
    its replica, ceil(B n / tp), the busiest device's; over ep devices): per MoE layer a dispatch and a
    combine all-to-all of its tokens' k copies x d, beside the all-reduce that sums the shared experts'
    partial outputs and gathers the routed ones back on every device of the tensor-parallel group."""
    layout, spec = query.options.layout, query.spec
    steps, tokens, rows = forwards(query, point)
    a = ACT_BITS // 8
    d = spec.sizes["d"]
    out: list[Collective] = []
    if layout.tp > 1:
        attention = sum(g.count for g in spec.groups if g.block.attention not in MIXERS + ("none",))
        mixer = sum(g.count for g in spec.groups if g.block.mixer)
        ffn = sum(g.count for g in spec.groups if g.block.ffn != "none")
        if layout.sp and tokens % layout.tp:
            plural = "s" * (tokens != 1)
            raise CostcalcError(f"--sp: a forward of {tokens} token{plural} does not divide by --tp {layout.tp} "
                                f"(sequence parallel splits every forward's tokens evenly over the tensor-parallel "
                                f"devices)")
        for where, layers in (("embedding", 1), ("o_proj", attention), ("mixer out_proj", mixer),
                              ("ffn down_proj", ffn)):
            out += _tp_reduce(layout, where, steps * layers, tokens * d * a)
        out += mixer_reduces(spec, layout, steps, tokens)
        if query.logits != Logits.none:   # the padded rows' logits are gathered too, then cut off (vLLM's LogitsProcessor)
            out.append(Collective("all_gather", "lm_head", steps, rows * padded(spec.sizes["V"]) * a, layout.tp))
    if layout.ep > 1:
        moe = [g for g in spec.groups if g.block.ffn == "moe"]
        share = -(-tokens // layout.tp)
        for where in ("dispatch", "combine"):
            for k in sorted({g.sizes["k"] for g in moe}):
                layers = sum(g.count for g in moe if g.sizes["k"] == k)
                out.append(Collective("all_to_all", f"experts {where}", steps * layers, share * k * d * a, layout.ep))
    mtp = mtp_collectives(query, steps, tokens, replica(point, layout)["B"])
    return [c for c in out + mtp if c.count]


def mtp_collectives(query: Query, steps: int, tokens: Any, batch: Any) -> list[Collective]:
    """The MTP module's own collectives where a step drafts with it (``--draft mtp``), each forward: vLLM's
    ``DeepSeekMultiTokenPredictor`` (vllm/model_executor/models/deepseek_mtp.py) looks its input token up in
    a ``VocabParallelEmbedding`` (an all-reduce), runs its decoder layer as the model's (the all-reduces
    after o_proj and the FFN's down projection, and under EP the experts' dispatch and combine), its
    ``eh_proj`` a plain ``nn.Linear`` on every device (no collective), and gathers its ``ParallelLMHead``'s
    logits of the draft token (one row a sequence of the replica's ``batch``). Each is named ``mtp ...``
    (``MTP_WHERE``)."""
    block = query.draft
    layout = query.options.layout
    if block is None or layout.single:
        return []
    d, a = query.spec.sizes["d"], ACT_BITS // 8
    out: list[Collective] = []
    if layout.tp > 1:
        for where in ("embedding", "o_proj", "ffn down_proj"):
            out += _tp_reduce(layout, f"{MTP_WHERE}{where}", steps, tokens * d * a)
        out.append(Collective("all_gather", f"{MTP_WHERE}lm_head", steps, batch * padded(query.spec.sizes["V"]) * a,
                              layout.tp))
    if layout.ep > 1 and block.block.ffn == "moe":
        share = -(-tokens // layout.tp)
        for where in ("dispatch", "combine"):
            out.append(Collective("all_to_all", f"{MTP_WHERE}experts {where}", steps, share * block.sizes["k"] * d * a,
                                  layout.ep))
    return out


MTP_WHERE = "mtp "      # the prefix of the MTP module's collectives (``mtp_collectives``)


def draft_comm(query: Query, point: dict[str, int]) -> float:
    """Seconds a step's MTP module spends in its own collectives on one device (``mtp_collectives``):
    looked up under --timing measured (``measured_comm_time``), else their roofline time (``comm_time``)."""
    found = [c for c in collectives(query, point) if c.where.startswith(MTP_WHERE)]
    device, layout = query.machine.device, query.options.layout
    if query.machine.timing is not None:
        return measured_comm_time(found, layout, device, query.machine.timing)[0]
    return comm_time(found, layout, device)


NORM_BITS = 32   # a norm's partial sums, reduced in fp32 (vLLM's Mixer2RMSNormGated, MiniMaxText01RMSNormTP)


def mixer_reduces(spec: ModelSpec, layout: Any, steps: int, tokens: int) -> list[Collective]:
    """The all-reduces a mixer runs beside its out_proj's, per layer of a forward of ``tokens`` tokens
    (vLLM's model files, docs/cost-model.md's table):

    - mamba1: ``x_proj`` is a ``RowParallelLinear`` (d_in / tp -> r_dt + 2 N_s: vllm/model_executor/layers/
      mamba/mamba_mixer.py, ``MambaMixer``): its partial dt, B and C summed, tokens x (r_dt + 2 N_s) in bf16;
    - mamba2 with one group (G = 1): ``Mixer2RMSNormGated`` normalises over the whole inner width, so each
      device's sum of squares is all-reduced, one fp32 a token (mamba_mixer2.py; with G divided by tp
      each device normalises its own groups: none);
    - lightning: ``MiniMaxText01RMSNormTP`` all-reduces each token's variance, one fp32 a token
      (vllm/model_executor/layers/mamba/linear_attn.py)."""
    found: dict[tuple[str, int], int] = {}      # (where, bytes a token) -> layers
    for g in spec.groups:
        mixer, where, per_token = g.block.mixer, "", 0
        if mixer == "mamba1":
            where, per_token = "mamba1 x_proj", (g.sizes["r_dt"] + 2 * g.sizes["N_s"]) * ACT_BITS // 8
        elif mixer == "mamba2" and g.sizes["G"] == 1:
            where, per_token = "mamba2 gated norm", NORM_BITS // 8
        elif mixer == "lightning":
            where, per_token = "lightning norm", NORM_BITS // 8
        if where:
            found[(where, per_token)] = found.get((where, per_token), 0) + g.count
    return [Collective("all_reduce", where, steps * layers, tokens * per_token, layout.tp)
            for (where, per_token), layers in found.items()]


def replicated_name(op: str, spec: ModelSpec, layout: Any) -> str:
    """An operator run beyond the model's count, named with why where a size decides it: KV heads or a
    Mamba-2 group held by several devices, the vocabulary's padded rows."""
    if op in ("k_proj", "v_proj") and kv_replicated(spec, layout):
        return f"{op} (KV heads replicated: h_kv < tp)"
    if op in ("in_proj", "conv") and groups_replicated(spec, layout):
        return f"{op} (groups replicated: G < tp)"
    if op == "lm_head" and padded(spec.sizes["V"]) != spec.sizes["V"]:
        return f"lm_head (vocabulary padded to {padded(spec.sizes['V'])})"
    return op


def ranks(collective: Collective, layout: Any) -> int:
    """The devices a collective runs over: its own ``ranks``, else tp (ep for an all-to-all)."""
    if collective.ranks is not None:
        return collective.ranks
    return layout.ep if collective.op == links_model.ALL_TO_ALL else layout.tp


def _tp_reduce(layout, where: str, count: int, message: int) -> list[Collective]:
    """The sum of the row-split projection's partial outputs: one all-reduce of the B n x d tensor;
    with sequence parallel (Korthikanti et al. 2022, arXiv 2205.05198) a reduce-scatter of it (each
    device keeps its B n / tp tokens for the residual add and the norm) and an all-gather of the same
    tensor before the next column-split projections (the next layer's, or the LM head's after the
    last layer): the same message each, the same bytes on the wire as the all-reduce."""
    if not layout.sp:
        return [Collective("all_reduce", where, count, message, layout.tp)]
    return [Collective("reduce_scatter", where, count, message, layout.tp),
            Collective("all_gather", where, count, message, layout.tp)]


def columns(query: Query, point: dict[str, Sequence[int]], n: int) -> dict[str, list]:
    """The layout's columns of n rows: ``layout``, ``devices``, ``flops_per_device``, the
    replicated work (``replicated_flops``: FLOPs the devices run beyond the model's, and the
    operators that run it, ``replicated``), ``comm_bytes_per_device`` and ``collectives``; with the
    dtypes, one device's bytes (``traffic_columns``)."""
    layout = query.options.layout
    if layout.pp > 1:
        return pipeline_columns(query, point, n)
    whole = operator_columns(query, point, n, sharded=False)
    device = operator_columns(query, point, n, sharded=True)
    out: dict[str, list] = {"layout": [layout.label] * n, "devices": [layout.devices] * n,
                            "flops_per_device": [], "replicated_flops": [], "replicated": [],
                            "comm_bytes_per_device": [], "collectives": []}
    found = []
    for i in range(n):
        extra = {op: device[op][i] * layout.devices - whole[op][i] for op in whole}
        out["flops_per_device"].append(number(sum(device[op][i] for op in device)))
        out["replicated_flops"].append(number(sum(extra.values())))
        named = [replicated_name(op, query.spec, layout) for op, v in extra.items() if v]
        out["replicated"].append(", ".join(named) or "none")
        found.append(collectives(query, {k: int(v[i]) for k, v in point.items()}))
        out["comm_bytes_per_device"].append(sum(c.count * c.bytes for c in found[-1]))
        out["collectives"].append([c.row() for c in found[-1]])
    if query.traffic:
        collectives_list = out.pop("collectives")
        out.update(traffic_columns(query, point, n, found))
        out["collectives"] = collectives_list      # the longest cell last
    return out


def device_query(query: Query, spec: ModelSpec) -> Query:
    """The question about one device: ``spec`` (the groups it holds, at its sizes) on one device."""
    return query.but(spec=spec, tp=1, ep=1, pp=1, dp=1, sp=False, micro_batches=None, zero=0)


def device_traffic(query: Query, point: dict[str, int], spec: Optional[ModelSpec] = None) -> dict[str, Any]:
    """One device's bytes (and, with a device, times) at one point of the whole question (B: the
    whole batch): ``roofline.point`` on the groups the device holds, ``spec`` (default
    ``layout.device_spec``: every layer at one tensor-parallel device's sizes), at its replica's batch
    B / D, with its share of the routed experts (``expert_share``). Returns roofline.point's keys
    (``<kind>_bytes``, ``total_bytes``, ``<term>_bytes``; ``compute_time_s``, ``memory_time_s``,
    ``time_s`` -- the device's roofline time, no communication --, ``bound``, ``<term>_time_s``,
    ``<term>_bound``) and ``operators``: op -> {flops, bytes, compute_s, memory_s, time_s}."""
    from . import roofline
    from .roofline import Precision

    layout = query.options.layout
    if query.precision is None:
        query = query.but(precision=Precision())
    own = device_query(query, device_spec(query.spec, layout) if spec is None else spec)
    return roofline.point(own, replica(point, layout), expert_share(layout), per_operator=True)


_LINKS: dict = {}   # (id(device), n, span) -> (device, its link): a search asks the same few again and again


def link(device: Any, n: int, span: Optional[int] = None) -> links_model.Link:
    """The link a group of n devices spans (``collectives.link_for``): placed inside one scale-up
    domain while the devices it is spread over (``span``, default n: consecutive) fit one, else across
    domains; a device without interconnect fields is refused (``Device.link``). Kept per device object."""
    key = (id(device), n, span)
    hit = _LINKS.get(key)
    if hit is None or hit[0] is not device:
        if len(_LINKS) >= MEMO:
            _LINKS.clear()
        hit = _LINKS[key] = (device, _link(device, n, span))
    return hit[1]


def _link(device: Any, n: int, span: Optional[int]) -> links_model.Link:
    if device.scale_up is None and device.scale_out is None:
        device.link("scale_up")
    up = device.scale_up
    within = up is None or not up.domain or (span or n) <= up.domain
    return links_model.link_for(n, up, device.scale_out, within=within)


def span(layout: Any, n: int) -> int:
    """The devices a group of n ranks is spread over, placed tensor-parallel innermost, then the
    pipeline's stages, then the data-parallel replicas: a group over every replica (``--ep T x D``)
    strides by T x P, so it spans T x P x D devices; any other group is n consecutive ones."""
    if layout.dp > 1 and n == layout.tp * layout.dp and n > layout.tp:
        return layout.tp * layout.pp * layout.dp
    return n


def comm_time(found: Sequence[Collective], layout: Any, device: Any) -> Any:
    """Seconds of a step's collectives on one device: each ``collectives.time(op, n, bytes, link)``
    (alpha + factor(n) bytes / B) x its count, n the group it runs over; over arrays of message bytes (a
    search's batches: ``steptimes``) ``collectives.times``."""
    return sum(c.count * (links_model.times if hasattr(c.bytes, "shape") else links_model.time)(
                   c.op, ranks(c, layout), c.bytes, link(device, ranks(c, layout), span(layout, ranks(c, layout))))
               for c in found)


def measured_comm_time(found: Sequence[Collective], layout: Any, device: Any, timing: Any) -> tuple[float, dict]:
    """``--timing measured``: seconds of a step's collectives on one device, each looked up in the measured
    tables at its group's ranks and message (``measured_comm.latency``) x its count,
    and the notes for ``measured_coverage`` ("op (where, ...)" -> note). A collective keeps its roofline time
    (``collectives.time``, as ``comm_time``) where no table holds it (a send/recv, a rank count not measured),
    where its group spans scale-up domains (the tables were measured inside one node), and where the table
    times it under the roofline (raised to it, as an operator's lookup is): each is named."""
    from . import measured_comm

    total, said = 0.0, {}
    for c in found:
        n = ranks(c, layout)
        if n == 1:
            continue
        used = link(device, n, span(layout, n))
        floor = links_model.time(c.op, n, c.bytes, used)
        if used is not device.scale_up:
            got, note = None, "its group spans scale-up domains (the tables were measured inside one node)"
        else:
            got, note = measured_comm.latency(timing, c.op, n, c.bytes, ACT_BITS // 8)
        if got is None:
            note = f"{note}: roofline time kept"
        elif got < floor:
            note = f"the table's {got:.3g} s is under the roofline's {floor:.3g} s: roofline time kept"
        if note:        # one note per op and text: all_reduce (o_proj, ffn down_proj): ...
            said.setdefault((c.op, note), []).append(c.where)
        total += c.count * max(got or 0.0, floor)
    return total, {f"{op} ({', '.join(dict.fromkeys(wheres))})": note for (op, note), wheres in said.items()}


def links(layout: Any, device: Any) -> str:
    """The links a layout's groups use, one short phrase each (groups on the same link together)."""
    groups = {}
    for name, n in (("tp", layout.tp), ("ep", layout.ep)):
        if n > 1:
            groups.setdefault(_phrase(device, link(device, n, span(layout, n)), n), []).append(f"{name}{n}")
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in groups.items()) or "none"


def _phrase(device: Any, used: links_model.Link, n: int) -> str:
    """A link as a row says it: its class (the profile's scale_up or scale_out, or across domains: the
    slowest hop), its bandwidth for a group of n each way, and its alpha."""
    kind = "scale_up" if used is device.scale_up else "scale_out" if used is device.scale_out else \
        "scale_out across domains"
    return f"{kind} {used.bandwidth(n):.3g} B/s each way, alpha {used.latency_s:.3g} s"


def step_time(roofline_s: float, comm_s: float, overlap: Overlap) -> float:
    """A step's time on the layout: its device's roofline time and its communication, added
    (``--overlap none``) or the larger of the two (``full``)."""
    if overlap == Overlap.none:
        return roofline_s + comm_s
    if hasattr(roofline_s, "shape") or hasattr(comm_s, "shape"):    # arrays of a search's batches (steptimes)
        import numpy

        return numpy.maximum(roofline_s, comm_s)
    return max(roofline_s, comm_s)


PER_DEVICE = ("weight", "kv_read", "total")   # <kind>_bytes_per_device columns


def traffic_columns(query: Query, point: dict[str, Sequence[int]], n: int,
                    found: list[list[Collective]]) -> dict[str, list]:
    """One device's bytes of n rows (``weight_bytes_per_device``, ``kv_read_bytes_per_device``,
    ``total_bytes_per_device``) and, with a device, its times: ``compute_time_s``, ``memory_time_s``,
    each term's ``<term>_time_s`` and ``<term>_bound`` and ``bound`` (one device's roofline), the
    step's ``comm_time_s`` (``found``: each row's collectives), ``time_s`` (the step on the layout),
    ``overlap`` and the ``links`` used."""
    from .vocab import TERMS

    layout, machine = query.options.layout, query.machine
    spec = device_spec(query.spec, layout)     # once: the weight plan is worked out once per spec
    rows = [device_traffic(query, {k: int(v[i]) for k, v in point.items()}, spec) for i in range(n)]
    out: dict[str, list] = {f"{kind}_bytes_per_device": [r[f"{kind}_bytes"] for r in rows] for kind in PER_DEVICE}
    if machine is None:
        return out
    comm = [comm_time(f, layout, machine.device) for f in found]
    overlap = query.options.overlap
    for name in ("compute_time_s", "memory_time_s"):
        out[name] = [r[name] for r in rows]
    out["bound"] = [bound(r["compute_time_s"], r["memory_time_s"], c) for r, c in zip(rows, comm)]
    if machine.timing is None:
        out["comm_time_s"] = comm
        out["time_s"] = [step_time(r["time_s"], c, overlap) for r, c in zip(rows, comm)]
    else:       # --timing measured: the device's looked-up time and the looked-up collectives, the floor beside
        from .roofline import coverage, coverages

        looked = [measured_comm_time(f, layout, machine.device, machine.timing) for f in found]
        out["comm_time_s"] = [t for t, _ in looked]
        out["comm_floor_time_s"] = comm
        out["comm_efficiency"] = [_ratio(f, t) for f, t in zip(comm, out["comm_time_s"])]
        out["floor_time_s"] = [step_time(r["floor_time_s"], c, overlap) for r, c in zip(rows, comm)]
        out["time_s"] = [step_time(r["time_s"], t, overlap) for r, (t, _) in zip(rows, looked)]
        out["efficiency"] = [_ratio(f, t) for f, t in zip(out["floor_time_s"], out["time_s"])]
        out["measured_coverage"] = [coverages(r["measured_coverage"], coverage(notes))
                                    for r, (_, notes) in zip(rows, looked)]
        out["mem_ops_time_s"] = [r["mem_ops_time_s"] for r in rows]    # the device's (part of its time_s)
    out["overlap"] = [overlap.value] * n
    out["links"] = [links(layout, machine.device)] * n
    names = {name for r in rows for name in r}
    for term in TERMS:
        for name, absent in ((f"{term.name}_floor_time_s", 0.0), (f"{term.name}_time_s", 0.0),
                             (f"{term.name}_efficiency", None), (f"{term.name}_bound", None)):
            if name in names:
                out[name] = [r.get(name, absent) for r in rows]
    return out


def _ratio(floor: float, time: float) -> Optional[float]:
    """``efficiency``: floor / time, four decimals (None where no time is spent)."""
    return round(floor / time, 4) if time else None


def bound(compute_s: float, memory_s: float, comm_s: float) -> Optional[str]:
    """Which of one device's times is the largest: ``communication`` where the collectives take longer
    than both the compute and the memory time, else the roofline's ``memory`` (ties too) or ``compute``."""
    if comm_s > max(compute_s, memory_s):
        return "communication"
    if not (compute_s or memory_s):
        return None
    return "memory" if memory_s >= compute_s else "compute"


COMM_COLUMNS = ("comm_time_s", "comm_floor_time_s", "comm_efficiency")   # after memory_time_s


def beside(table: dict[str, list]) -> dict[str, list]:
    """A table with the communication time right after the compute and memory times (a layout's
    rows on a device: the three side by side; under --timing measured its floor and efficiency after it,
    and the step's ``floor_time_s`` and ``efficiency`` either side of ``time_s``), every other column where
    it was."""
    if "comm_time_s" not in table or "memory_time_s" not in table:
        return table
    placed = {*COMM_COLUMNS, "floor_time_s", "efficiency"} if "time_s" in table else set(COMM_COLUMNS)
    out: dict[str, list] = {}
    for key, column in table.items():
        if key == "time_s" and "floor_time_s" in table:
            out["floor_time_s"] = table["floor_time_s"]
        if key not in placed:
            out[key] = column
        if key == "time_s" and "efficiency" in table:
            out["efficiency"] = table["efficiency"]
        if key == "memory_time_s":
            out.update({name: table[name] for name in COMM_COLUMNS if name in table})
    return out


# --- pipeline parallelism (--pp): stages, send/recv, the schedule's makespan ---------------------------
# docs/cost-model.md, "Pipeline parallelism".

@dataclass(frozen=True)
class Stage(Query):
    """A pipeline stage as a query: its layer groups only (``costcalc.stages``); ``last`` False --
    every stage but the last -- runs no LM head (the recipes charge it in the first group: left out);
    ``first`` False -- every stage but the first -- looks up no embedding (nor reduces it)."""
    last: bool = True
    first: bool = True

    def recipes(self, kind: str = "flops"):
        for group, recipe in Query.recipes(self, kind):
            yield group, recipe if self.last or not isinstance(recipe, Recipe) else Recipe.of(recipe.code, False)


def stage_queries(query: Query) -> list[Stage]:
    """Each stage of the query's pipeline, with its tensor/expert layout (no pp of its own), its dtypes
    and its device."""
    spec, layout = query.spec, query.options.layout
    options = replace(query.options, pp=1, micro_batches=None)
    parts = stage_specs(spec, layout.pp)
    return [Stage(own, query.workload, options, query.precision, query.machine, last=i == len(parts) - 1, first=i == 0)
            for i, own in enumerate(parts)]


_STAGED: dict = {}   # (id(spec), pp) -> (spec, its stages' specs): the same objects each time asked


def stage_specs(spec: ModelSpec, pp: int) -> list[ModelSpec]:
    """Each stage's model (``stages``: vLLM's split of the layers; the weight formats it holds), the same
    objects for the same model object and pp, so their weight plans are worked out once."""
    hit = _STAGED.get((id(spec), pp))
    if hit is not None and hit[0] is spec:
        return hit[1]
    out = []
    for groups in stages(spec, pp):
        own = replace(spec, groups=groups, sizes={**spec.sizes, "L": sum(g.count for g in groups)})
        out.append(replace(own, dtypes=_held(own)))
    if len(_STAGED) >= MEMO:
        _STAGED.clear()
    _STAGED[(id(spec), pp)] = (spec, out)
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


DEFAULT_MICRO_BATCHES = 1


def micro_batches(query: Query) -> int:
    """A step's micro-batches: ``--micro-batches``, else 1 (the batch passes the stages once: the
    latency of one step; docs/cost-model.md says why)."""
    return query.options.micro_batches or DEFAULT_MICRO_BATCHES


def _micro_point(point: dict[str, int], m: int, flag: str, dp: int = 1) -> dict[str, int]:
    """A micro-batch of every replica: B / m (``replica`` then takes a replica's B / D / m; B must divide by D m)."""
    if point["B"] % (m * dp):
        into = " of ".join(([f"{dp} replicas"] if dp > 1 else []) + ([f"{m} micro-batches"] if m > 1 else []))
        raise CostcalcError(f"{flag} --micro-batches {m}: batch {point['B']} does not divide into {into}")
    return {**point, "B": point["B"] // m}


def stage_collectives(stage: Stage, point: dict[str, int], m: int) -> list[Collective]:
    """One device of a stage, a step of m micro-batches of ``point`` (B already B/m): its tensor- and
    expert-parallel collectives (the logits gather on the last stage only) and, on every stage but the
    last, the activation it sends on: per micro-batch B/m x tokens x d in bf16 (``ACT_BITS``; ``STAGE_TENSORS``
    of them), every tensor-parallel rank its whole copy (no scatter/gather of the message across the TP ranks);
    under sequence parallel each rank's own B/m x tokens / tp (Megatron's p2p tensor is sequence-split, as
    training's sends are)."""
    found = [replace(c, count=c.count * m) for c in collectives(stage, point)
             if (stage.last or c.where != "lm_head") and (stage.first or c.where != "embedding")]
    if not stage.last:
        steps, tokens, _ = forwards(stage, point)
        shard = stage.options.layout.tp if stage.options.layout.sp else 1   # --sp: each TP rank its tokens/tp
        message = STAGE_TENSORS * tokens // shard * stage.spec.sizes["d"] * ACT_BITS // 8
        found.append(Collective(links_model.SEND_RECV, "stage boundary", steps * m, message, 2))
    return found


def boundary_link(query: Query, index: int) -> links_model.Link:
    """The link stage ``index`` sends over to the next: devices placed tensor-parallel innermost, then the
    stages, then the data-parallel replicas (replica r, stage s, TP rank t is device (r pp + s) tp + t), so a
    boundary inside one scale-up domain for every t and r is the scale-up link, else the scale-out hop
    (``collectives.link_for``)."""
    device = query.machine.device
    if device.scale_up is None and device.scale_out is None:
        device.link("scale_up")      # refused in one line, naming the fields
    up = device.scale_up
    domain = up.domain if up is not None and up.domain else None
    within = peers_within(query.options.layout, domain, index, index + 1)
    return links_model.link_for(2, up, device.scale_out, within=within)


def peers_within(layout: Any, domain: Optional[int], a: int, b: int) -> bool:
    """Whether every device of pipeline rank ``a`` and its peer on rank ``b`` (same TP rank, same replica)
    sit in one scale-up domain of ``domain`` devices (None: no domain, one link): replica r, stage s, TP rank
    t is device (r pp + s) tp + t."""
    tp, pp = layout.tp, layout.pp
    return domain is None or all(((r * pp + a) * tp + t) // domain == ((r * pp + b) * tp + t) // domain
                                 for r in range(layout.dp) for t in range(tp))


def stage_traffic(stage: Stage, point: dict[str, int]) -> dict[str, Any]:
    """One micro-batch on one device of a stage: ``device_traffic`` on the stage's groups at one
    tensor-parallel device's sizes (its share of the routed experts under --ep)."""
    return device_traffic(stage, point, device_spec(stage.spec, stage.options.layout))


def _stage_times(query: Query, found: list[Collective], index: int, own: float,
                 measured: bool = False) -> tuple[float, float, dict]:
    """(a micro-batch's time on stage ``index``, the step's communication on its device, the notes): its
    time ``own`` and its TP/EP collectives (of the step's ``micro_batches``) under --overlap (``step_time``),
    then its send; ``measured``: the collectives looked up (``measured_comm_time``; a send keeps its roofline
    time: no table holds it)."""
    device, m = query.machine.device, micro_batches(query)
    sends = [c for c in found if c.op == links_model.SEND_RECV]
    rest = [c for c in found if c.op != links_model.SEND_RECV]
    comm, notes = measured_comm_time(rest, query.options.layout, device, query.machine.timing) if measured else \
        (comm_time(rest, query.options.layout, device), {})
    comm /= m
    send = sum(c.count * links_model.time(c.op, 2, c.bytes, boundary_link(query, index)) for c in sends) / m
    if measured and sends:
        notes["send_recv (stage boundary)"] = "no table (aiconfigurator times P2P from bandwidths): roofline time kept"
    return step_time(own, comm, query.options.overlap) + send, m * (comm + send), notes


def pipeline_columns(query: Query, point: dict[str, Sequence[int]], n: int) -> dict[str, list]:
    """The layout's columns under pp: per stage (per device of it, per step) ``stage_layers``,
    ``stage_flops``; ``flops_per_device`` the busiest stage's; ``micro_batches``, the forward-only
    GPipe table's ``bubble``; the collectives of every stage (``stage`` in each); with the dtypes each
    stage's bytes (``stage_bytes``) and the per-device bytes (the largest of any stage's); with a device
    each stage's time (``stage_time_s``: its roofline time, its collectives under --overlap, its sends)
    and the step's ``time_s``: the schedule's makespan over them (``pipeline.makespan``)."""
    layout = query.options.layout
    m, flag = micro_batches(query), layout.flags
    parts = stage_queries(query)
    whole = operator_columns(query, point, n, sharded=False)
    keys = ["layout", "devices", "micro_batches", "bubble", "stage_layers", "stage_flops", "flops_per_device",
            "replicated_flops", "replicated", "comm_bytes_per_device"]
    if query.traffic:
        keys += ["stage_bytes"] + [f"{kind}_bytes_per_device" for kind in PER_DEVICE]
    timing = query.machine.timing if query.machine is not None else None
    if query.machine is not None:
        keys += ["compute_time_s", "memory_time_s", "bound", "comm_time_s", "stage_time_s", "time_s", "overlap",
                 "links"]
    if timing is not None:
        keys += ["comm_floor_time_s", "comm_efficiency", "floor_time_s", "efficiency", "measured_coverage"]
    out: dict[str, list] = {key: [] for key in keys + ["collectives"]}
    for i in range(n):          # every point's batch divides into its micro-batches before any table is built
        _micro_point({k: int(v[i]) for k, v in point.items()}, m, flag, layout.dp)
    bubble = float(pipeline.bubble(pipeline.GPIPE, layout.pp, m, backward=False))
    alike = same_stages(parts)
    for i in range(n):
        one = _micro_point({k: int(v[i]) for k, v in point.items()}, m, flag, layout.dp)
        per_op: dict[str, Any] = {}
        flops, comm, listed, moved, durations, comm_s, looked, said = [], [], [], [], [], [], [], {}
        done: dict[int, tuple] = {}     # a stage's FLOPs, collectives and bytes, by the first stage alike
        for index, stage in enumerate(parts):
            if alike[index] not in done:
                done[alike[index]] = (operator_columns(stage, {k: [v] for k, v in one.items()}, 1, sharded=True),
                                      stage_collectives(stage, one, m),
                                      stage_traffic(stage, one) if query.traffic else None)
            got, found, traffic = done[alike[index]]
            for op, column in got.items():
                per_op[op] = per_op.get(op, 0) + column[0] * m * layout.tp * layout.dp
            flops.append(number(m * sum(column[0] for column in got.values())))
            comm.append(sum(c.count * c.bytes for c in found))
            listed += [{**c.row(), "stage": index} for c in found]
            if query.traffic:
                moved.append(traffic)
            if query.machine is not None:
                duration, spent, _ = _stage_times(query, found, index, moved[-1].get("floor_time_s",
                                                                                     moved[-1]["time_s"]))
                durations.append(duration)
                comm_s.append(spent)
            if timing is not None:      # --timing measured: the stage's looked-up time and collectives
                duration, spent, notes = _stage_times(query, found, index, moved[-1]["time_s"], measured=True)
                looked.append((duration, spent))
                said.update(notes)
        extra = {op: per_op[op] - whole[op][i] for op in whole}
        row = {"layout": layout.label, "devices": layout.devices, "micro_batches": m, "bubble": bubble,
               "stage_layers": [sum(g.count for g in s.spec.groups) for s in parts], "stage_flops": flops,
               "flops_per_device": max(flops), "replicated_flops": number(sum(extra.values())),
               "replicated": ", ".join(replicated_name(op, query.spec, layout) for op, v in extra.items() if v)
               or "none",
               "comm_bytes_per_device": max(comm), "collectives": listed}
        if query.traffic:
            row["stage_bytes"] = [m * got["total_bytes"] for got in moved]
            row.update({f"{kind}_bytes_per_device": max(m * got[f"{kind}_bytes"] for got in moved)
                        for kind in PER_DEVICE})
        if query.machine is not None:
            compute, memory = (max(m * got[key] for got in moved) for key in ("compute_time_s", "memory_time_s"))
            row.update(compute_time_s=compute, memory_time_s=memory, bound=bound(compute, memory, max(comm_s)),
                       comm_time_s=max(comm_s), stage_time_s=[m * t for t in durations],
                       time_s=pipeline.makespan(pipeline.GPIPE, durations, m), overlap=query.options.overlap.value,
                       links=_pipeline_links(query))
            for term in TERMS:      # each term's time on its busiest stage's device, and that stage's bound
                times = [m * got.get(f"{term.name}_time_s", 0.0) for got in moved]
                busiest = max(range(len(times)), key=times.__getitem__)
                row[f"{term.name}_time_s"] = times[busiest]
                row[f"{term.name}_bound"] = moved[busiest].get(f"{term.name}_bound")
                if timing is not None:      # the floor of that same stage's term
                    floor = m * moved[busiest].get(f"{term.name}_floor_time_s", 0.0)
                    row[f"{term.name}_floor_time_s"] = floor
                    row[f"{term.name}_efficiency"] = _ratio(floor, times[busiest])
        if timing is not None:      # the schedule over the looked-up stage times, the floor's beside
            from .roofline import coverage, coverages

            row.update(comm_floor_time_s=row["comm_time_s"], floor_time_s=row["time_s"],
                       comm_time_s=max(spent for _, spent in looked),
                       stage_time_s=[m * t for t, _ in looked],
                       time_s=pipeline.makespan(pipeline.GPIPE, [t for t, _ in looked], m))
            row.update(comm_efficiency=_ratio(row["comm_floor_time_s"], row["comm_time_s"]),
                       efficiency=_ratio(row["floor_time_s"], row["time_s"]),
                       measured_coverage=coverages(*(got["measured_coverage"] for got in moved), coverage(said)),
                       mem_ops_time_s=max(m * got["mem_ops_time_s"] for got in moved))   # the busiest stage's
        for key in keys + ["collectives"]:
            out[key].append(row[key])
        for key in (k for k in row if k.endswith(("_time_s", "_bound", "_efficiency")) and k not in keys):
            out.setdefault(key, []).append(row[key])
    return {k: v for k, v in out.items() if any(x not in (0.0, None) for x in v) or k in keys + ["collectives"]}


def same_stages(parts: Sequence[Stage]) -> list[int]:
    """For each stage of one pipeline, the index of the first stage alike: the same layer groups (counts,
    blocks, sizes), weight formats, first and last (what its FLOPs, collectives and bytes depend on besides
    the query they share), so a pipeline's many like middle stages are evaluated once at each point."""
    first: dict[tuple, int] = {}
    out = []
    for index, stage in enumerate(parts):
        key = (stage.first, stage.last, repr(stage.spec.groups), repr(sorted(stage.spec.dtypes.items())),
               repr(stage.spec.sizes))
        out.append(first.setdefault(key, index))
    return out


def _pipeline_links(query: Query) -> str:
    """``links`` with the stage boundaries' link beside the tensor/expert groups'."""
    device, layout = query.machine.device, query.options.layout
    used = {boundary_link(query, s) for s in range(layout.pp - 1)}
    text = "; ".join(sorted({_phrase(device, link, 2) for link in used}))
    own = links(layout, device)
    return (own + "; " if own != "none" else "") + f"pp{layout.pp} boundaries: {text}"


def number(value: Any) -> Any:
    """An exact count as an int, an expected count that is a fraction as a float."""
    value = Fraction(value)
    return int(value) if value.denominator == 1 else float(value)
