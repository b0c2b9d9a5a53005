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

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional, Sequence

from . import collectives as comm
from .errors import CostcalcError
from .evaluate import Query
from .layout import Layout, shard
from .parallel import Collective, expert_share, number, operator_columns, replica, step_time
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
    Activations are in ``activation_bits``; the flash-attention logsumexp in ``lse_bits``."""
    name: str
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


@dataclass(frozen=True)
class Step:
    """A collective of the step with the group it runs over: ``ranks`` devices among ``span``
    consecutive ones (a data-parallel group's ranks are strided by tp: it spans tp x dp devices),
    inside one scale-up domain while the span fits it (``collectives.link_for``)."""
    collective: Collective
    ranks: int
    span: int

    def seconds(self, device: Any) -> float:
        up = device.link("scale_up")
        within = up.domain is None or self.span <= up.domain
        link = comm.link_for(self.ranks, up, device.scale_out, within)
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


def parameters(query: Query) -> tuple[int, int]:
    """(Psi outside the routed experts, Psi of the routed experts) one device holds: its matrices,
    and the vocabulary-parallel embedding and LM head (d x V/tp each; a tied LM head once)."""
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
    return dense + table * (1 if spec.tied_embeddings else 2), experts


def saved(query: Query, recompute: Recompute, tokens: int, optimizer: Optimizer,
          held: Optional[list] = None) -> Fraction:
    """Activation bytes one device keeps for the backward of ``tokens`` tokens (its replica's B/D x S).

    Convention (named, docs/cost-model.md): each matmul's saved input, once where projections share
    it (``SHARED_INPUT``), and what a flash-attention kernel saves: Q, K, V, the output O (also
    o_proj's input, counted once; a gated attention's o_proj reads the gated output: its own) and
    the logsumexp (one fp32 per head and token). Not counted: norms' inputs, activation functions'
    inputs, dropout masks, the loss's logits. Under tensor parallelism every tensor is at the
    device's sizes; the d-wide ones (a layer's input, the attention's and FFN's inputs, the LM
    head's input) are whole on every device, or 1/tp under sequence parallel. ``selective``: no
    logsumexp (the core is recomputed from Q, K, V); ``full``: a layer's input only."""
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
    return total + tokens * d * hidden * act            # the LM head's input


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


def steps(query: Query, batch: int, seq: int, psi: tuple[int, int], optimizer: Optimizer) -> list[Step]:
    """The collectives one device runs in a training step of B sequences of S tokens."""
    layout, spec = query.options.layout, query.spec
    tokens = replica_batch(batch, layout) * seq
    a = optimizer.activation_bits // 8
    d = spec["d"]
    out: list[Step] = []
    tp = layout.tp
    if tp > 1:
        attention = sum(g.count for g in spec.groups if g.block.attention != "none")
        ffn = sum(g.count for g in spec.groups if g.block.ffn != "none")
        layers = attention + ffn + 1          # each layer's, and the embedding's / the LM head's
        message = tokens * d * a
        column, row = "q/k/v, gate/up and LM head inputs", "o_proj, down_proj and embedding outputs"
        if layout.sp:   # Korthikanti et al.: each all-reduce as reduce-scatter + all-gather of the same tensor
            plan = [("all_gather", f"tp forward: {column}"), ("reduce_scatter", f"tp forward: {row}"),
                    ("all_gather", f"tp backward: gradients of the {row}"),
                    ("reduce_scatter", f"tp backward: gradients of the {column}"),
                    ("all_gather", f"tp backward: {column} re-gathered (saved sharded)")]
        else:           # Megatron's g (forward) and f (backward) operators
            plan = [("all_reduce", f"tp forward: {row}"), ("all_reduce", f"tp backward: gradients of the {column}")]
        out += [Step(Collective(op, where, layers, message), tp, tp) for op, where in plan]
        out.append(Step(Collective("all_reduce", "tp: vocabulary-parallel cross-entropy (max, target logit, sum "
                                   "of exponentials; fp32)", 3, tokens * CROSS_ENTROPY_BITS // 8), tp, tp))
    if layout.ep > 1:
        moe = [g for g in spec.groups if g.block.ffn == "moe"]
        share = -(-tokens // tp)
        for k in sorted({g.sizes["k"] for g in moe}):
            layers = sum(g.count for g in moe if g.sizes["k"] == k)
            for where in ("forward: experts dispatch", "forward: experts combine", "backward: combine gradient",
                          "backward: dispatch gradient"):
                out.append(Step(Collective("all_to_all", f"ep {where}", layers, share * k * d * a), layout.ep,
                                layout.ep))
    if layout.dp > 1:
        out += _data_parallel(query, psi, optimizer)
    return [s for s in out if s.collective.count]


def _data_parallel(query: Query, psi: tuple[int, int], optimizer: Optimizer) -> list[Step]:
    """The gradient and parameter collectives of the ZeRO stage over the data-parallel devices
    (ranks strided by tp: inside one scale-up domain while tp x dp fits it). ZeRO 0 (DDP): an
    all-reduce of the gradients; 1 and 2: a reduce-scatter of the gradients and an all-gather of
    the updated weights; 3 (FSDP2, reshard_after_forward): all-gathers of the weights in forward
    and in backward, a reduce-scatter of the gradients. The routed experts reduce over their own
    data-parallel group (``expert_dp``): none where each expert lives on one device."""
    layout, zero = query.options.layout, query.options.zero
    g, w = optimizer.grad_bits // 8, optimizer.weight_bits // 8
    dense, experts = psi
    groups = [("", dense + experts, layout.dp)] if expert_dp(layout) == layout.dp else \
        [("", dense, layout.dp)] + ([(" (routed experts)", experts, expert_dp(layout))] if expert_dp(layout) > 1 else [])
    out: list[Step] = []
    span = layout.tp * layout.dp
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
        found = steps(query, int(b), int(s), psi, optimizer)
        activations = saved(query, plan.recompute, own * int(s), optimizer, shapes)
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
            compute = float(Fraction(flops + extra)) / plan.device.peak("bf16")
            talk = sum(x.seconds(plan.device) for x in found)
            overlap = query.options.overlap
            row.update({"device": plan.device.name, "fits": total <= plan.device.mem_bytes,
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
    return query.but(tp=1, ep=1, dp=1, sp=False, zero=0)


def extend(query: Query, plan: Plan, whole: dict[str, list]) -> dict[str, list]:
    """``whole`` (the step's table on one device: ``calc.answer(single(query))``) with the training
    columns of ``query``'s layout beside it."""
    check_kinds(query)
    whole.update(columns(query, plan, whole["batch"], whole["seq"], len(whole["total_flops"])))
    return whole
