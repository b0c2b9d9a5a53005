"""A training step on a layout: per-device FLOPs, collectives, memory and time
(docs/cost-model.md, "Training under a layout").

The step is the ``train`` workload (a forward with logits at every position, x3 for forward and
backward) of the B / D sequences of one data-parallel replica, evaluated at one device's sizes
(``layout.shard``: Megatron's column/row split under ``tp``; ``ep``: each device runs its E/ep experts).
What a device holds and moves is derived from the device's own weight matrices (the compiled
``matrices`` recipe on the sharded layer groups: matrices only, norms and biases not counted, as
``costcalc.params`` counts) and from the input shapes of the projections it runs:

- parameters ``Psi`` per device: every matrix at the device's sizes, E/ep routed experts, the
  vocabulary-parallel embedding and LM head (V/tp rows each; tied: once);
- memory: weights, gradients and optimizer state under a named optimizer convention (``Optimizer``)
  and a ZeRO stage (``Options.zero``: 1 shards the optimizer state over the data-parallel devices,
  2 also the gradients, 3 -- FSDP's full sharding -- also the weights), and the activations the
  backward needs (``Recompute``; ``saved`` says which tensors);
- collectives per step (``Step``): tensor parallel's all-reduces forward and backward (sequence
  parallel: reduce-scatter + all-gather, and the backward's re-gather of a sharded saved input), the
  expert-parallel all-to-alls forward and backward, and the data-parallel gradient and parameter
  collectives of the ZeRO stage, each with its group (the ranks it spans) for ``collectives.time``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Optional, Sequence

from . import collectives as comm, pipeline
from .errors import CostcalcError
from .evaluate import Query
from .layout import Layout, shard
from .memory import usable_bytes
from .parallel import link as parallel_link, span as group_span
from .parallel import (STAGE_TENSORS, Collective, _micro_point, expert_share, micro_batches, number, operator_columns,
                       peers_within, replica, stage_queries, step_time)
from .spec import Group
from .vocab import Choice


class Recompute(Choice):
    """What the backward finds saved (docs/cost-model.md, "Training under a layout"): ``none`` --
    every saved tensor (``saved``); ``selective`` -- the attention core recomputed from its saved
    Q, K and V (Korthikanti et al.'s selective recomputation: under a flash-attention kernel, the
    logsumexp is what it drops); ``full`` -- only each layer's input kept, the layer's forward run
    again in the backward."""
    none = "none"
    selective = "selective"
    full = "full"


@dataclass(frozen=True)
class Optimizer:
    """A training step's numeric convention, per parameter: the weights the step computes with
    (``weight_bits``), their gradients (``grad_bits``), and the optimizer state: fp32 master
    weights and ``moments`` fp32 moments. ``adam`` is mixed-precision Adam as the ZeRO paper
    (arXiv 1910.02054, section 3.1) counts it: 2 + 2 bytes and K = 12 bytes of state, 16 Psi in all.
    Activations are in ``activation_bits``; the flash-attention logsumexp in ``lse_bits``; the matmuls run
    at the device's ``compute_dtype`` peak (bf16: mixed precision)."""
    name: str
    compute_dtype: str = "bf16"
    weight_bits: int = 16
    grad_bits: int = 16
    master_bits: int = 32
    moment_bits: int = 32
    moments: int = 2
    activation_bits: int = 16
    lse_bits: int = 32

    @property
    def state_bits(self) -> int:
        return self.master_bits + self.moments * self.moment_bits


OPTIMIZERS = {"adam": Optimizer("adam")}


@dataclass(frozen=True)
class Plan:
    """How the step is asked about beyond its layout: recomputation, the optimizer convention and,
    for time and ``fits``, a device (``devices.Device``)."""
    recompute: Recompute = Recompute.none
    optimizer: Optimizer = OPTIMIZERS["adam"]
    device: Any = None
    schedule: Optional[str] = None   # a pipeline's (--pp) schedule: pipeline.SCHEDULES (None: 1f1b)
    virtual: int = 1                 # model chunks a rank (--virtual-stages; the interleaved schedule)

    @classmethod
    def of(cls, query: Query) -> "Plan":
        """The plan a training query asks for: its ``Options`` (recompute, optimizer, schedule,
        virtual_stages) and its machine's device -- the one question object, read in one place."""
        options = query.options
        try:
            recompute = Recompute(options.recompute)
        except ValueError:
            raise CostcalcError(f"--recompute must be one of {', '.join(r.value for r in Recompute)}, "
                                f"got {options.recompute!r}") from None
        if options.optimizer not in OPTIMIZERS:
            raise CostcalcError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {options.optimizer!r}")
        device = query.machine.device if query.machine is not None else None
        return cls(recompute, OPTIMIZERS[options.optimizer], device, options.schedule, options.virtual_stages)


@dataclass(frozen=True)
class Place:
    """A device's part of a pipeline (``--pp``): whether it holds the first stage (the embedding) and the
    last (the LM head), the step's ``micro`` micro-batches, the pipeline's ``pp`` stages (its data-parallel
    groups span tp x pp x dp devices). The default: the whole model, one pass, no pipeline."""
    first: bool = True
    last: bool = True
    micro: int = 1
    pp: int = 1


WHOLE = Place()


@dataclass(frozen=True)
class Step:
    """A collective of the step with the group it runs over: ``ranks`` devices among ``span``
    consecutive ones (a data-parallel group's ranks are strided by tp: it spans tp x dp devices),
    inside one scale-up domain while the span fits it (``collectives.link_for``)."""
    collective: Collective
    ranks: int
    span: int
    within: Optional[bool] = None   # placed inside one scale-up domain (None: while ``span`` fits one)

    def seconds(self, device: Any) -> float:
        if self.within is None:        # the inference rule: inside one domain while the span fits it
            link = parallel_link(device, self.ranks, self.span)
        else:
            if device.scale_up is None and device.scale_out is None:
                device.link("scale_up")     # refused in one line, naming the fields
            link = comm.link_for(self.ranks, device.scale_up, device.scale_out, self.within)
        c = self.collective
        return c.count * comm.time(c.op, self.ranks, c.bytes, link)


# The projections that read one tensor (saved once for the backward): the attention's input and
# the FFN's input (each the normed hidden state), the routed experts' dispatched token copies.
# Every other projection reads its own input.
SHARED_INPUT = {
    **dict.fromkeys(("q_proj", "k_proj", "v_proj", "g_proj", "q_a_proj", "kv_a_proj_with_mqa"), "attention input"),
    **dict.fromkeys(("gate_proj", "up_proj", "router", "shared_experts.gate_proj", "shared_experts.up_proj",
                     "shared_expert_gate"), "ffn input"),
    **dict.fromkeys(("experts.gate_proj", "experts.up_proj"), "routed input"),
}
HIDDEN = ("attention input", "ffn input")   # d wide: sharded over the sequence under sequence parallel
CROSS_ENTROPY_BITS = 32   # Megatron's vocabulary-parallel cross-entropy reduces fp32 values, one per token


# The note under a table of training columns.
NOTE = ("per device: one data-parallel replica's B/D sequences at the device's sizes; memory = bf16 weights and "
        "gradients + Adam's fp32 master weights and two moments (16 bytes a parameter, sharded by --zero) + "
        "activations (each matmul's saved input, once where shared, and flash attention's Q, K, V, O and "
        "logsumexp; norms, activation functions, dropout and the logits not counted); time_s = compute (with "
        "recomputation) and communication, the larger (--overlap full, the default: a floor) or added (none).")
PIPELINE_NOTE = ("--pp: stage_* lists are per pipeline rank (a stage's device), the per-device columns the busiest "
                 "rank's; activations are those of the micro-batches in flight at once (the schedule's F+B table: "
                 "1f1b holds p - s on stage s, gpipe m); bubble = the unit-slot table's idle share; time_s = the "
                 "schedule's makespan (forward 1/3 of a stage's train FLOPs, backward 2/3 + recomputation, each "
                 "with its collectives under --overlap, then its send), and the data-parallel collectives after it, "
                 "under --overlap.")
TRAINED = ("gqa", "window", "chunk", "mla")   # the attentions whose saved tensors are derived (attention_widths)


def check_kinds(query: Query) -> None:
    """A model whose layers ``saved`` can derive: softmax attention (GQA kinds, MLA) without an
    indexer, a mixer beside it or an MTP module; dense, MLP, MoE or no FFN."""
    for group in query.spec.groups:
        block = group.block
        if block.attention not in TRAINED or block.sparse or block.beside or block.mtp:
            raise CostcalcError(f"train: {query.spec.name}'s {block.key} layers: per-device memory and collectives "
                                f"are modelled for softmax attention ({', '.join(TRAINED)}) without an indexer or "
                                f"a mixer")


def replica_batch(batch: int, layout: Layout) -> int:
    """B / D sequences a data-parallel replica runs (``parallel.replica``: B must divide by D)."""
    return replica({"B": batch}, layout)["B"]


def expert_dp(layout: Layout) -> int:
    """The data-parallel degree of the routed experts' weights: dp where each replica holds the
    same experts (ep 1 or tp), 1 where the experts spread over the data-parallel devices
    (ep = tp x dp: each expert on one device)."""
    return layout.dp if layout.ep in (1, layout.tp) else layout.tp * layout.dp // layout.ep


def matrices(query: Query) -> list[tuple[Group, dict[str, tuple[int, int, int]]]]:
    """Each layer group at one device's sizes with its matrices {op: (fan_in, fan_out, instances)}
    (the compiled ``matrices`` recipe; routed experts: E / ep instances a device)."""
    layout = query.options.layout
    out = []
    for group, recipe in query.recipes("matrices"):
        own = shard(group, layout)
        got = recipe.evaluate(own.numbers())
        ops = {}
        for op in dict.fromkeys(k.rsplit(".", 1)[0] for k in got):
            count = got[f"{op}.instances"]
            if op.startswith("experts.") and layout.ep > 1:
                count //= layout.ep
            ops[op] = (got[f"{op}.fan_in"], got[f"{op}.fan_out"], count)
        out.append((own, ops))
    return out


def parameters(query: Query, place: Place = WHOLE) -> tuple[int, int]:
    """(Psi outside the routed experts, Psi of the routed experts) one device holds: its matrices,
    and the vocabulary-parallel embedding and LM head (d x V/tp each; a tied LM head once). ``place``:
    whether the device holds the first stage (the embedding) and the last (the LM head) of a pipeline;
    a tied table is held by both (Megatron keeps a copy on the last stage)."""
    spec, tp = query.spec, query.options.layout.tp
    dense = experts = 0
    for group, ops in matrices(query):
        for op, (fan_in, fan_out, count) in ops.items():
            held = group.count * fan_in * fan_out * count
            if op.startswith("experts."):
                experts += held
            else:
                dense += held
    table = spec["d"] * (spec["V"] // tp)
    if place.first and place.last:
        return dense + table * (1 if spec.tied_embeddings else 2), experts
    return dense + table * (place.first + place.last), experts


def saved(query: Query, plan: Plan, tokens: int, held: Optional[list] = None, head: bool = True) -> Fraction:
    """Activation bytes one device keeps for the backward of ``tokens`` tokens (its replica's B/D x S).

    Convention (named, docs/cost-model.md): each matmul's saved input, once where projections share
    it (``SHARED_INPUT``), and what a flash-attention kernel saves: Q, K, V, the output O (also
    o_proj's input, counted once; a gated attention's o_proj reads the gated output: its own) and
    the logsumexp (one fp32 per head and token). Not counted: norms' inputs, activation functions'
    inputs, dropout masks, the loss's logits. Under tensor parallelism every tensor is at the
    device's sizes; the d-wide ones (a layer's input, the attention's and FFN's inputs, the LM
    head's input) are whole on every device, or 1/tp under sequence parallel. ``selective``: no
    logsumexp (the core is recomputed from Q, K, V); ``full``: a layer's input only (``plan``: the
    recomputation and the optimizer's activation dtypes). ``head`` False: a pipeline stage without the LM
    head (its input not saved)."""
    recompute, optimizer = plan.recompute, plan.optimizer
    layout = query.options.layout
    hidden = Fraction(1, layout.tp) if layout.sp else Fraction(1)
    d = query.spec["d"]
    act, lse = Fraction(optimizer.activation_bits, 8), Fraction(optimizer.lse_bits, 8)
    routed = Fraction(tokens, expert_share(layout).runs)   # (token, expert) pairs per k: k copies each
    total = Fraction(0)
    for group, ops in held if held is not None else matrices(query):
        block, sizes = group.block, group.sizes
        if recompute == Recompute.full:
            total += group.count * tokens * d * hidden * act
            continue
        inputs: dict[str, Fraction] = {}                 # elements of each saved input, by what it is
        for op, (fan_in, _, count) in ops.items():
            key = SHARED_INPUT.get(op, op)
            if key == "routed input" or op == "experts.down_proj":
                inputs[key] = routed * sizes["k"] * fan_in
            elif op == "o_proj" and not (block.gated or block.head_gate):
                continue                                 # O: the attention's own saved output
            elif key in HIDDEN:
                inputs[key] = tokens * fan_in * hidden
            else:                                        # its own input: one per shared expert
                inputs[key] = tokens * fan_in * count
        layer = sum(inputs.values()) * act
        q, k, v, o, heads = attention_widths(block, sizes)
        layer += tokens * (q + k + v + o) * act
        if recompute == Recompute.none:
            layer += tokens * heads * lse
        total += group.count * layer
    return total + (tokens * d * hidden * act if head else 0)           # the LM head's input


def attention_widths(block: Any, sizes: dict[str, int]) -> tuple[int, int, int, int, int]:
    """Per token: the widths of Q, K, V and O a flash-attention kernel saves, and its heads
    (one logsumexp each), at a device's sizes."""
    h = sizes["h_q"]
    if block.attention == "mla":
        qk = sizes["d_nope"] + sizes["d_rope"]
        return h * qk, h * qk, h * sizes["d_v"], h * sizes["d_v"], h
    d_h, h_kv = sizes["d_h"], sizes["h_kv"]
    d_v = sizes["d_v"] if block.dv else d_h
    return h * d_h, h_kv * d_h, h_kv * d_v, h * d_v, h


def steps(query: Query, tokens: int, psi: tuple[int, int], optimizer: Optimizer, place: Place = WHOLE) -> list[Step]:
    """The collectives one device runs in a training step whose (micro-)batch is ``tokens`` of its
    replica. A pipeline stage (``place``): its layers' TP and EP collectives, the embedding's on the
    first stage and the LM head's on the last, each of the ``place.micro`` micro-batches, and the
    data-parallel ones of its parameters once, over groups that span the stages' devices (replicas of
    the pipeline placed outermost)."""
    layout, spec = query.options.layout, query.spec
    first, last, micro = place.first, place.last, place.micro
    a = optimizer.activation_bits // 8
    d = spec["d"]
    out: list[Step] = []
    tp = layout.tp
    if tp > 1:
        attention = sum(g.count for g in spec.groups if g.block.attention != "none")
        ffn = sum(g.count for g in spec.groups if g.block.ffn != "none")
        # each layer's, and the embedding's output (first stage) / the LM head's input (last stage)
        layers = {"column": attention + ffn + last, "row": attention + ffn + first}
        message = tokens * d * a
        column, row = "q/k/v, gate/up and LM head inputs", "o_proj, down_proj and embedding outputs"
        if layout.sp:   # Korthikanti et al.: each all-reduce as reduce-scatter + all-gather of the same tensor
            plan = [("all_gather", f"tp forward: {column}", "column"), ("reduce_scatter", f"tp forward: {row}", "row"),
                    ("all_gather", f"tp backward: gradients of the {row}", "row"),
                    ("reduce_scatter", f"tp backward: gradients of the {column}", "column"),
                    ("all_gather", f"tp backward: {column} re-gathered (saved sharded)", "column")]
        else:           # Megatron's g (forward) and f (backward) operators
            plan = [("all_reduce", f"tp forward: {row}", "row"),
                    ("all_reduce", f"tp backward: gradients of the {column}", "column")]
        out += [Step(Collective(op, where, layers[side] * micro, message), tp, tp) for op, where, side in plan]
        if last:
            out.append(Step(Collective("all_reduce", "tp: vocabulary-parallel cross-entropy (max, target logit, "
                                       "sum of exponentials; fp32)", 3 * micro, tokens * CROSS_ENTROPY_BITS // 8),
                            tp, tp))
    if layout.ep > 1:
        moe = [g for g in spec.groups if g.block.ffn == "moe"]
        share = -(-tokens // tp)
        for k in sorted({g.sizes["k"] for g in moe}):
            layers = sum(g.count for g in moe if g.sizes["k"] == k)
            for where in ("forward: experts dispatch", "forward: experts combine", "backward: combine gradient",
                          "backward: dispatch gradient"):
                out.append(Step(Collective("all_to_all", f"ep {where}", layers * micro, share * k * d * a),
                                layout.ep, group_span(replace(layout, pp=place.pp), layout.ep)))
    if layout.dp > 1:
        out += _data_parallel(query, psi, optimizer, layout.tp * place.pp * layout.dp)
    return [s for s in out if s.collective.count]


def _data_parallel(query: Query, psi: tuple[int, int], optimizer: Optimizer, span: int) -> list[Step]:
    """The gradient and parameter collectives of the ZeRO stage over the data-parallel devices
    (ranks strided by tp: inside one scale-up domain while tp x dp fits it). ZeRO 0 (DDP): an
    all-reduce of the gradients; 1 and 2: a reduce-scatter of the gradients and an all-gather of
    the updated weights; 3 (FSDP2, reshard_after_forward): all-gathers of the weights in forward
    and in backward, a reduce-scatter of the gradients. The routed experts reduce over their own
    data-parallel group (``expert_dp``): none where each expert lives on one device. ``span``: the
    devices the group's ranks spread over (tp x dp; a pipeline's replicas: tp x pp x dp)."""
    layout, zero = query.options.layout, query.options.zero
    g, w = optimizer.grad_bits // 8, optimizer.weight_bits // 8
    dense, experts = psi
    groups = [("", dense + experts, layout.dp)] if expert_dp(layout) == layout.dp else \
        [("", dense, layout.dp)] + ([(" (routed experts)", experts, expert_dp(layout))] if expert_dp(layout) > 1 else [])
    out: list[Step] = []
    for label, held, ranks in groups:
        if zero == 0:
            plan = [("all_reduce", "dp: gradients (DDP)", held * g)]
        elif zero in (1, 2):
            plan = [("reduce_scatter", f"dp: gradients (ZeRO-{zero})", held * g),
                    ("all_gather", f"dp: updated weights (ZeRO-{zero})", held * w)]
        else:
            plan = [("all_gather", "dp: weights before forward (ZeRO-3/FSDP)", held * w),
                    ("all_gather", "dp: weights before backward (ZeRO-3/FSDP)", held * w),
                    ("reduce_scatter", "dp: gradients (ZeRO-3/FSDP)", held * g)]
        out += [Step(Collective(op, where + label, 1, size), ranks, span) for op, where, size in plan]
    return out


def memory(query: Query, psi: tuple[int, int], optimizer: Optimizer) -> dict[str, int]:
    """Weight, gradient and optimizer bytes per device under the ZeRO stage: stage 1 shards the
    optimizer state over the data-parallel devices, 2 also the gradients, 3 also the weights
    (each shard rounded up: a flat buffer padded to divide)."""
    layout, zero = query.options.layout, query.options.zero
    dense, experts = psi
    out = {"weight": 0, "grad": 0, "optimizer": 0}
    for held, ranks in ((dense, layout.dp), (experts, expert_dp(layout))):
        for kind, bits, stage in (("weight", optimizer.weight_bits, 3), ("grad", optimizer.grad_bits, 2),
                                  ("optimizer", optimizer.state_bits, 1)):
            share = -(-held // ranks) if zero >= stage else held
            out[kind] += share * bits // 8
    return out


def columns(query: Query, plan: Plan, batch: Sequence[int], seq: Sequence[int], n: int) -> dict[str, list]:
    """The training columns of n rows (B = ``batch``, S = ``seq``): per device FLOPs (and the
    recomputation's), collectives, memory, and with a device ``fits`` and the times."""
    layout, optimizer = query.options.layout, plan.optimizer
    if layout.pp > 1:
        return pipeline_columns(query, plan, batch, seq)
    psi, shapes = parameters(query), matrices(query)
    keys = ["layout", "devices", "zero", "recompute", "optimizer", "flops_per_device", "recompute_flops",
            "replicated_flops", "params_per_device", "comm_bytes_per_device", "collectives",
            "weight_bytes_per_device", "grad_bytes_per_device", "optimizer_bytes_per_device",
            "activation_bytes_per_device", "total_bytes_per_device"]
    if plan.device is not None:
        keys += ["device", "fits", "compute_time_s", "comm_time_s", "time_s", "overlap"]
    out: dict[str, list] = {k: [] for k in keys}
    held = memory(query, psi, optimizer)
    for b, s in zip(batch, seq):
        own = replica_batch(int(b), layout)
        point = {"B": [int(b)], "S": [int(s)]}
        device = _device_operators(query, point)
        whole = operator_columns(query, point, 1, sharded=False)
        flops = sum(device.values())
        extra = recompute_flops(device, plan.recompute)
        found = steps(query, own * int(s), psi, optimizer)
        activations = saved(query, plan, own * int(s), shapes)
        total = held["weight"] + held["grad"] + held["optimizer"] + _bytes(activations)
        row = {"layout": layout.label, "devices": layout.devices, "zero": query.options.zero,
               "recompute": plan.recompute.value, "optimizer": optimizer.name, "flops_per_device": number(flops),
               "recompute_flops": number(extra),
               "replicated_flops": number(flops * layout.devices - sum(v[0] for v in whole.values())),
               "params_per_device": sum(psi),
               "comm_bytes_per_device": sum(x.collective.count * x.collective.bytes for x in found),
               "collectives": [x.collective.row() for x in found],
               "weight_bytes_per_device": held["weight"], "grad_bytes_per_device": held["grad"],
               "optimizer_bytes_per_device": held["optimizer"], "activation_bytes_per_device": _bytes(activations),
               "total_bytes_per_device": total}
        if plan.device is not None:
            compute = float(Fraction(flops + extra)) / plan.device.peak(plan.optimizer.compute_dtype)
            talk = sum(x.seconds(plan.device) for x in found)
            overlap = query.options.overlap
            row.update({"device": plan.device.name, "fits": total <= usable_bytes(plan.device),
                        "compute_time_s": compute, "comm_time_s": talk,
                        "time_s": step_time(compute, talk, overlap),
                        "overlap": overlap.value})
        for k in keys:
            out[k].append(row[k])
    return out


def _device_operators(query: Query, point: dict[str, list[int]]) -> dict[str, Fraction]:
    """One device's FLOPs per operator at a point of the whole batch (``parallel.operator_columns``:
    the recipes at the device's sizes and its replica's batch, its part of the routed pairs)."""
    return {op: Fraction(column[0]) for op, column in operator_columns(query, point, 1, sharded=True).items()}


def recompute_flops(device: dict[str, Any], recompute: Recompute) -> Fraction:
    """FLOPs the recomputation adds (the train workload counts a forward x3): ``full`` runs every
    layer's forward again (all but the LM head: a third of their train FLOPs), ``selective`` the
    attention core's forward (a third of ``attention``); ``none`` nothing."""
    if recompute == Recompute.full:
        return sum((Fraction(v) for op, v in device.items() if op != "lm_head"), Fraction(0)) / 3
    if recompute == Recompute.selective:
        return Fraction(device.get("attention", 0)) / 3
    return Fraction(0)


def _bytes(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


def single(query: Query) -> Query:
    """The same step on one device: the whole step's FLOPs (``calc.answer`` of it), which
    ``extend`` puts the per-device columns beside."""
    return query.but(tp=1, ep=1, pp=1, dp=1, sp=False, zero=0, micro_batches=None, recompute="none",
                     schedule=None, virtual_stages=1, machine=None)


def extend(query: Query, whole: dict[str, list]) -> dict[str, list]:
    """``whole`` (the step's table on one device: ``calc.answer(single(query))``) with the training
    columns of ``query``'s layout, recomputation, optimizer and device beside it (``Plan.of``)."""
    check_kinds(query)
    plan = Plan.of(query)
    if query.options.layout.pp == 1 and (plan.schedule is not None or plan.virtual != 1):
        raise CostcalcError("--schedule and --virtual-stages order a pipeline's micro-batches: they need --pp > 1")
    whole.update(columns(query, plan, whole["batch"], whole["seq"], len(whole["total_flops"])))
    return whole


# --- a pipeline's training step (--pp): stages, send/recv forward and backward, the F+B schedule ------------
# docs/cost-model.md, "Training under a layout", "Pipeline parallel".

# The extra columns of a pipeline's rows: per rank (a stage's device) lists, and the schedule.
PIPELINE_KEYS = ("schedule", "micro_batches", "virtual_stages", "bubble", "stage_layers", "stage_flops",
                 "stage_in_flight", "stage_activation_bytes", "stage_total_bytes")


def chunks(query: Query, v: int) -> list:
    """The pipeline's p v model chunks (``parallel.stage_queries``: vLLM's split of the layers), first to
    last; chunk c runs on rank c mod p (v 1: chunk = stage)."""
    p = query.options.layout.pp
    layers = sum(g.count for g in query.spec.groups)
    if p * v > layers:
        raise CostcalcError(f"--pp {p} --virtual-stages {v}: {p * v} model chunks, more than the model's {layers} "
                            f"layers")
    return stage_queries(query if v == 1 else query.but(pp=p * v))


def _micro(batch: int, layout: Layout, m: int) -> int:
    """The sequences of one micro-batch of one replica: B / D / m (B must divide by D m)."""
    return _micro_point({"B": batch}, m, layout.flags, layout.dp)["B"] // layout.dp


def boundary(query: Query, device: Any, low: int, high: int) -> Optional[bool]:
    """Whether every device of rank ``low``'s stage and its peer on rank ``high`` (same TP rank, same
    replica) sit in one scale-up domain. Placement: tensor-parallel innermost, then the stages, then the
    data-parallel replicas (``parallel.peers_within``)."""
    if device is None:
        return None
    return peers_within(query.options.layout, device.link("scale_up").domain, low, high)


def _pipeline_steps(query: Query, plan: Plan, index: int, place: Place, tokens: int) -> list[Step]:
    """The send/recv of model chunk ``index`` (``place``: whether it is the first, the last) per step: its
    output activation to the next chunk (every chunk but the last) and the gradient of its input to the
    one before (every chunk but the first), one each a micro-batch, of a micro-batch's ``tokens`` x d in
    bf16 (``STAGE_TENSORS``; 1/tp of the tokens under sequence parallel: the tensor is sharded over the
    sequence), between peers of the same TP rank; with tied embeddings, on the first and the last, the
    table's gradient all-reduce (``_tied``)."""
    layout, d = query.options.layout, query.spec["d"]
    own = -(-tokens // layout.tp) if layout.sp else tokens
    message = STAGE_TENSORS * own * d * plan.optimizer.activation_bits // 8
    p, m, out = layout.pp, place.micro, []
    if not place.last:
        out.append(Step(Collective(comm.SEND_RECV, "pp forward: activation to the next stage", m, message), 2, 2,
                        boundary(query, plan.device, index % p, (index + 1) % p)))
    if not place.first:
        out.append(Step(Collective(comm.SEND_RECV, "pp backward: activation gradient to the previous stage", m,
                                   message), 2, 2, boundary(query, plan.device, index % p, (index - 1) % p)))
    return out + (_tied(query, plan) if place.first or place.last else [])


def _tied(query: Query, plan: Plan) -> list[Step]:
    """Megatron's embedding group: with tied embeddings the first and last stages each hold the table
    and all-reduce its gradient (d x V/tp, once a step) -- the first rank's and the last's."""
    spec, layout = query.spec, query.options.layout
    if not spec.tied_embeddings:
        return []
    size = spec["d"] * (spec["V"] // layout.tp) * plan.optimizer.grad_bits // 8
    return [Step(Collective("all_reduce", "pp: tied embedding and LM head gradients (first and last stage)", 1,
                            size), 2, 2, boundary(query, plan.device, 0, layout.pp - 1))]


def pipeline_columns(query: Query, plan: Plan, batch: Sequence[int], seq: Sequence[int]) -> dict[str, list]:
    """A training step's columns under --pp: per rank (a stage's device; its v chunks under the
    interleaved schedule) its FLOPs, parameters, collectives (TP/EP per micro-batch, the send/recv
    forward and backward, DP of its own parameters once), memory with the activations of the
    micro-batches in flight (``pipeline.in_flight`` on the F+B table), and with a device the step's
    time: the schedule's makespan over each chunk's forward and backward (``pipeline.makespan``) and
    the data-parallel collectives after it. Per-device columns are the busiest rank's."""
    layout, optimizer, recompute = query.options.layout, plan.optimizer, plan.recompute
    schedule, v = _schedule(plan), plan.virtual
    p, m = layout.pp, micro_batches(query)
    for b in batch:                                      # before any table of m micro-batches is built
        _micro(int(b), layout, m)
    parts = chunks(query, v)                             # p v chunks at most the layers: before the table
    pipeline.order(schedule, p, m, v)                    # the schedule's own checks, one line each
    count = len(parts)
    places = [Place(i == 0, i == count - 1, m, p) for i in range(count)]
    psis = [parameters(stage, places[i]) for i, stage in enumerate(parts)]
    shapes = [matrices(stage) for stage in parts]
    ranks = [[i for i in range(count) if i % p == r] for r in range(p)]
    keys = ["layout", "devices", "zero", "recompute", "optimizer", *PIPELINE_KEYS, "flops_per_device",
            "recompute_flops", "replicated_flops", "params_per_device", "comm_bytes_per_device", "collectives",
            "weight_bytes_per_device", "grad_bytes_per_device", "optimizer_bytes_per_device",
            "activation_bytes_per_device", "total_bytes_per_device"]
    if plan.device is not None:
        keys += ["device", "fits", "compute_time_s", "comm_time_s", "stage_time_s", "time_s", "overlap"]
    out: dict[str, list] = {k: [] for k in keys}
    held = [memory(parts[0], tuple(sum(psis[i][j] for i in own) for j in (0, 1)), optimizer) for own in ranks]
    bubble = float(pipeline.bubble(schedule, p, m, v, backward=True))
    for b, s in zip(batch, seq):
        size = _micro(int(b), layout, m)
        point = {"B": [int(b) // m], "S": [int(s)]}     # one micro-batch of every replica (``replica``: / D)
        whole = operator_columns(query, {"B": [int(b)], "S": [int(s)]}, 1, sharded=False)
        ops = [_device_operators(stage, point) for stage in parts]
        flops = [sum(o.values(), Fraction(0)) for o in ops]           # one micro-batch, forward x3
        extra = [recompute_flops(o, recompute) for o in ops]
        found = [steps(stage, size * int(s), psis[i], optimizer, places[i])
                 + _pipeline_steps(query, plan, i, places[i], size * int(s)) for i, stage in enumerate(parts)]
        acts = [saved(stage, plan, size * int(s), shapes[i], head=places[i].last) for i, stage in enumerate(parts)]
        flight = pipeline.in_flight(schedule, p, m, v, acts)
        depth = pipeline.in_flight(schedule, p, m, v, [1] * count)
        rank_flops = [m * sum(flops[i] for i in own) for own in ranks]
        rank_extra = [m * sum(extra[i] for i in own) for own in ranks]
        rank_found = [[x for i in own for x in found[i]] for own in ranks]
        rank_comm = [sum(x.collective.count * x.collective.bytes for x in f) for f in rank_found]
        totals = [h["weight"] + h["grad"] + h["optimizer"] + _bytes(Fraction(a)) for h, a in zip(held, flight)]
        busy = max(range(p), key=lambda r: totals[r])
        row = {"layout": layout.label, "devices": layout.devices, "zero": query.options.zero,
               "recompute": recompute.value, "optimizer": optimizer.name, "schedule": schedule, "micro_batches": m,
               "virtual_stages": v, "bubble": bubble,
               "stage_layers": [sum(g.count for i in own for g in parts[i].spec.groups) for own in ranks],
               "stage_flops": [number(f) for f in rank_flops], "stage_in_flight": depth,
               "stage_activation_bytes": [_bytes(Fraction(a)) for a in flight], "stage_total_bytes": totals,
               "flops_per_device": number(max(rank_flops)), "recompute_flops": number(max(rank_extra)),
               "replicated_flops": number(sum(rank_flops) * layout.tp * layout.dp
                                          - sum(Fraction(c[0]) for c in whole.values())),
               "params_per_device": max(sum(sum(psis[i]) for i in own) for own in ranks),
               "comm_bytes_per_device": max(rank_comm),
               "collectives": [{**x.collective.row(), "stage": r} for r, f in enumerate(rank_found) for x in f],
               "weight_bytes_per_device": max(h["weight"] for h in held),
               "grad_bytes_per_device": max(h["grad"] for h in held),
               "optimizer_bytes_per_device": max(h["optimizer"] for h in held),
               "activation_bytes_per_device": max(_bytes(Fraction(a)) for a in flight),
               "total_bytes_per_device": totals[busy]}
        if plan.device is not None:
            row.update(_pipeline_time(query, plan, flops, extra, found))
            row.update(device=plan.device.name, fits=max(totals) <= usable_bytes(plan.device),
                       overlap=query.options.overlap.value)
        for k in keys:
            out[k].append(row[k])
    return out


def _schedule(plan: Plan) -> str:
    """A pipeline's schedule: the plan's, else 1F1B (Megatron's and torch.distributed.pipelining's default)."""
    return plan.schedule or pipeline.ONE_F_ONE_B


def _pipeline_time(query: Query, plan: Plan, flops: list, extra: list, found: list[list[Step]]) -> dict[str, Any]:
    """The step's times: chunk c's forward of a micro-batch takes a third of its FLOPs at the compute_dtype peak
    and its forward TP/EP collectives (under --overlap), then its send; its backward two thirds (the
    train workload's x3: backward = 2 x forward) plus the recomputation's forward, its backward
    collectives, then its gradient's send. ``time_s``: the schedule's makespan over those, then the
    data-parallel (and tied-embedding) collectives of the busiest rank, under --overlap."""
    device, overlap, v = plan.device, query.options.overlap, plan.virtual
    schedule, m, p = _schedule(plan), micro_batches(query), query.options.layout.pp
    ranks = [[i for i in range(len(flops)) if i % p == r] for r in range(p)]
    peak = device.peak(plan.optimizer.compute_dtype)
    fwd, bwd, after = [], [], [0.0] * len(ranks)
    for i, (f, r, listed) in enumerate(zip(flops, extra, found)):
        parts = {"forward": 0.0, "backward": 0.0, "pp forward": 0.0, "pp backward": 0.0, "after": 0.0}
        for x in listed:
            where = x.collective.where
            if where.startswith(("dp:", "pp: tied")):
                parts["after"] += x.seconds(device)
            elif where.startswith("pp "):
                parts["pp forward" if "forward" in where else "pp backward"] += x.seconds(device) / m
            else:
                parts["backward" if "backward" in where else "forward"] += x.seconds(device) / m
        fwd.append(step_time(float(f / 3) / peak, parts["forward"], overlap) + parts["pp forward"])
        bwd.append(step_time(float(f * 2 / 3 + r) / peak, parts["backward"], overlap) + parts["pp backward"])
        after[i % len(ranks)] += parts["after"]
    span = pipeline.makespan(schedule, fwd, m, bwd, v)
    rank_compute = [m * sum(float(flops[i] + extra[i]) for i in own) / peak for own in ranks]
    rank_comm = [sum(x.seconds(device) for i in own for x in found[i]) for own in ranks]
    return {"compute_time_s": max(rank_compute), "comm_time_s": max(rank_comm),
            "stage_time_s": [m * sum(fwd[i] + bwd[i] for i in own) for own in ranks],
            "time_s": step_time(span, max(after), overlap)}
