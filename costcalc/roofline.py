"""Bytes, memory and time: the roofline beside the FLOPs.

The core counts, per operator, the elements a forward moves (``core.traffic``); here they
become bytes under the dtypes asked for (``Precision``), and, on a device, time: each
operator takes ``max(FLOPs / peak, bytes / bandwidth)`` (peak for the compute dtype, both
scaled by the ``--efficiency`` factors), summed over operators and layer groups. The
compute-only and memory-only times are given beside it; ``bound`` says which of the two is
larger for the whole forward. A routed expert's weights are read once per forward for each
expert the forward touches: for n routed tokens under uniform top-k routing the expected
number of distinct experts ``E (1 - (1 - k/E)^n)`` (``--routing expected``, a rational), or
``min(E, n k)`` (``--routing worst``). Byte columns are whole bytes (an expected count is
rounded, and the row says ``routing``).

For the decode phase of a generation (N-1 steps summed in closed form) each operator's
time is ``max`` of its summed compute and memory times: a floor of the per-step sum, equal
to it when an operator keeps the same bound over the steps (as it does: its FLOPs and bytes
grow together with the context).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Optional

from .devices import Device
from .errors import CostcalcError, quote
from .evaluate import Options, Query, positive
from .spec import Group, ModelSpec
from . import weights
from .vocab import INDEX_SCALE_BITS, INDEX_SCALE_GROUP, ONCE, TERMS, TRAFFIC, Dtype, Routing
from .weights import Format

EXACT_BITS = 1 << 16   # expected experts exactly (a Fraction) while E^n stays below this many bits
MAX_LOOKED_UP_STEPS = 100_000   # --timing measured: a decode phase's attention looked up step by step (~20 us each)


@dataclass(frozen=True)
class Plan:
    """Every matrix of a model with its format: per layer group ``{op: (fan_in, fan_out, instances, Format)}``
    (one layer); the matrices a model holds once (``vocab.ONCE``: the LM head, DeepSeek-V4's ``hc_head``)
    ``{op: (fan_in, fan_out, Format)}``; the embedding's; one MTP module's matrices (``draft``, as a
    group's; empty without MTP modules) and their count; the ``label`` a row shows and its ``source``."""
    groups: tuple
    layers: tuple            # layers per group
    once: dict               # op -> (fan_in, fan_out, Format): lm_head, hc_head
    embedding: tuple         # (V, d, Format)
    tied: bool
    label: str
    source: str              # quantization_config | preset | --weight-dtype | default
    group_size: int = 128
    draft: Optional[dict] = None   # one MTP module: op -> (fan_in, fan_out, instances, Format)
    modules: int = 0               # MTP modules the model holds

    def rate(self, index: int, op: str) -> Fraction:
        """Bytes per weight element of operator ``op`` in layer group ``index`` (its matrix's bytes over
        its elements; an absorbed MLA slice at kv_b_proj's rate; index ``len(groups)``: the MTP draft's
        ``mtp.<op>``, its LM head the model's): exact for every format."""
        known = self.__dict__.setdefault("_rates", {})     # worked out once per plan (a search asks at every point)
        if (index, op) not in known:
            known[index, op] = self._rate(index, op)
        return known[index, op]

    def _rate(self, index: int, op: str) -> Fraction:
        if index == len(self.groups):
            op = op.removeprefix("mtp.")
        if op in self.once:
            fan_in, fan_out, fmt = self.once[op]
        else:
            ops = self.draft if index == len(self.groups) else self.groups[index]
            fan_in, fan_out, _, fmt = ops[weights.SLICES.get(op, op)]
        return fmt.bytes(fan_in, fan_out, self.group_size) / (fan_in * fan_out)

    def resident(self) -> Fraction:
        """Bytes of every matrix held (all experts, the embedding, an untied LM head, hc_head)."""
        total = sum(count * self._layer(ops) for count, ops in zip(self.layers, self.groups))
        rows, width, fmt = self.embedding
        total += fmt.bytes(width, rows, self.group_size)
        for op, (fan_in, fan_out, fmt) in self.once.items():
            if op != "lm_head" or not self.tied:
                total += fmt.bytes(fan_in, fan_out, self.group_size)
        return total

    def drafts(self) -> Fraction:
        """Bytes of the MTP modules' matrices (they share the embedding and the LM head)."""
        return self.modules * self._layer(self.draft or {})

    def _layer(self, ops: dict) -> Fraction:
        return sum(n * fmt.bytes(i, o, self.group_size) for i, o, n, fmt in ops.values())


def weight_plan(spec: ModelSpec, override: Optional[Format] = None, group_size: int = 128) -> Plan:
    """Each matrix of ``spec`` with its format: ``override`` (``--weight-dtype``) for every module,
    else the model's ``dtypes`` (bf16 where they say nothing). A ``dtypes`` key that names no module
    of the model is an error."""
    terms: dict[str, str] = {}
    for _, recipe in Query(spec, "prefill", Options(mla="naive")).recipes():
        terms.update(recipe.term_of)
    dtypes = {} if override is not None else dict(spec.dtypes)
    weighted = {name.rsplit(".", 1)[0] for _, recipe in Query(spec, "prefill").recipes("matrices")
                for name in recipe.outputs}          # operators with a weight matrix (not attention's products)
    known = {"default", "lm_head", weights.EMBEDDING} | weighted | {terms[op] for op in weighted if op in terms}
    for key in dtypes:
        if key not in known:
            raise CostcalcError(f"{spec.name}: field 'dtypes' names {quote(key)}, which is no weight of this model "
                                f"(its weighted operators and terms: {', '.join(sorted(known - {'default'}))})")

    def fmt(op: str, term: str) -> Format:
        return override if override is not None else weights.parse(weights.resolve(dtypes, op, term))

    def shapes(group: Group, recipe) -> dict:
        got = recipe.evaluate(group.numbers())
        return {op: (got[f"{op}.fan_in"], got[f"{op}.fan_out"], got[f"{op}.instances"],
                     fmt(op, terms.get(op, "draft")))       # an MTP module's eh_proj: the term draft
                for op in dict.fromkeys(k.rsplit(".", 1)[0] for k in got)}

    d, V = spec["d"], spec["V"]
    table = fmt(weights.EMBEDDING, weights.EMBEDDING)
    once = {"lm_head": (d, V, table if spec.tied_embeddings else fmt("lm_head", "lm_head"))}  # tied: the table itself
    groups = []
    for group, recipe in Query(spec, "prefill").recipes("matrices"):
        ops = shapes(group, recipe)
        for op in ONCE:          # a matrix the model holds once, whatever its groups
            if op in ops:
                fan_in, fan_out, _, kind = ops.pop(op)
                once.setdefault(op, (fan_in, fan_out, kind))
        groups.append(ops)
    draft = {op: m for module, recipe in Query(spec, "prefill").modules("matrices")
             for op, m in shapes(module, recipe).items() if op not in ONCE}
    if override is not None:
        label, source = override.name, "--weight-dtype"
    elif dtypes:
        label, source = weights.summary(dtypes), spec.dtypes_from
    else:
        label, source = weights.DEFAULT, "default"
    return Plan(tuple(groups), tuple(g.count for g in spec.groups), once, (V, d, table),
                spec.tied_embeddings, label, source, group_size, draft or None,
                spec.mtp.count if spec.mtp is not None else 0)


_PLANS: dict = {}   # (id(spec), weight format, group size) -> (spec, its weight plan): the spec kept, its id its own
_ALIKE: dict = {}   # the same, by what a plan depends on but the layer counts


@dataclass(frozen=True)
class Precision:
    """Dtypes of weights, KV cache and activations (compute runs in the activation dtype),
    the group size of the generic integer weights' fp16 scales, how MoE routing touches experts,
    and the dtype of a mixer's recurrent state (None: the model's ``state_dtype``, else the KV dtype)
    and of a lightning indexer's key cache (``index``; None: the KV dtype, as transformers keeps it;
    fp8 carries an fp32 scale per 128 elements, as DeepSeek's reference and vLLM keep it).
    ``weight``: a weight format (``costcalc.weights``) for every module (``--weight-dtype``), or None:
    the formats the model ships in (its ``dtypes``; bf16 where they say nothing)."""
    weight: Optional[Format] = None
    kv: Dtype = Dtype.bf16
    act: Dtype = Dtype.bf16
    group_size: int = 128
    routing: Routing = Routing.expected
    state: Optional[Dtype] = None
    index: Optional[Dtype] = None

    def __post_init__(self) -> None:
        try:
            for key, what in (("kv", "kv dtype"), ("act", "act dtype")):
                object.__setattr__(self, key, Dtype.parse(getattr(self, key), what))
            object.__setattr__(self, "routing", Routing.parse(self.routing, "routing"))
            if self.state is not None:
                object.__setattr__(self, "state", Dtype.parse(self.state, "state dtype"))
            if self.index is not None:
                object.__setattr__(self, "index", Dtype.parse(self.index, "index dtype"))
        except ValueError as exc:
            raise CostcalcError(str(exc)) from None
        if self.weight is not None and not isinstance(self.weight, Format):
            object.__setattr__(self, "weight", weights.parse(self.weight))
        if self.act == Dtype.int4:
            raise CostcalcError("act dtype int4 is not a compute dtype; use one of "
                                + ", ".join(d.value for d in Dtype if d != Dtype.int4))
        positive("group size", self.group_size)

    def state_dtype(self, spec: ModelSpec) -> Dtype:
        """The dtype a model's recurrent states are kept in: the one asked for, else the model's."""
        return self.state or Dtype(spec.state_dtype or self.kv.value)

    def weights(self, spec: ModelSpec) -> "Plan":
        """Every matrix of the model with the format it is read in (``weight_plan``), worked out
        once per model (a sweep asks at every point)."""
        key = (id(spec), repr(self.weight), self.group_size)    # what a plan depends on besides the model
        hit = _PLANS.get(key)
        if hit is None or hit[0] is not spec:
            if len(_PLANS) >= 4096:
                _PLANS.clear()
                _ALIKE.clear()
            # a model of the same groups at the same sizes (a pipeline's stages) has the same matrices: its plan
            # but for the layer counts
            alike = (tuple((g.block, tuple(g.sizes.items())) for g in spec.groups), spec["d"], spec["V"],
                     spec.tied_embeddings, repr(spec.mtp), tuple(spec.dtypes.items()), spec.dtypes_from, key[1:])
            if alike not in _ALIKE:
                _ALIKE[alike] = weight_plan(spec, self.weight, self.group_size)
            plan = replace(_ALIKE[alike], layers=tuple(g.count for g in spec.groups))
            hit = _PLANS[key] = (spec, plan)
        return hit[1]

    def bits(self, kind: str, spec: Optional[ModelSpec] = None) -> Fraction:
        """Bits per element moved of a traffic kind other than weights (whose bytes are per matrix:
        ``weights``): a state in ``state_dtype``, the KV cache, activations."""
        if kind.startswith("state"):
            return Fraction(self.state.bits if spec is None else self.state_dtype(spec).bits)
        if kind == "weight":
            raise ValueError("weights have a rate per matrix: Precision.weights(spec).rate")
        if kind == "index":     # an indexer's key cache: the KV dtype unless asked; fp8 keys with their scales
            dtype = self.index or self.kv
            if dtype != Dtype.fp8 or spec is None:
                return Fraction(dtype.bits)
            width = next(g.sizes["d_I"] for g in spec.groups if g.block.indexed)   # one scale per 128 of a key
            return dtype.bits + Fraction(INDEX_SCALE_BITS * -(-width // INDEX_SCALE_GROUP), width)
        return Fraction((self.kv if kind.startswith("kv") else self.act).bits)

    def key_bits(self, op: str, spec: ModelSpec) -> Fraction:
        """Bits per K/V element an operator moves (``<op>.kv_read``, ``<op>.kv_write``): a sparse-attention
        indexer's keys (``indexer``, an MTP module's ``mtp.indexer``) in the index dtype, the rest in the KV
        dtype -- the one rule bytes, memory and the time crossover use."""
        indexer = op.removeprefix("mtp.").split(".")[0] == "indexer"
        return self.bits("index", spec) if indexer and any(g.block.indexed for g in spec.groups) else self.bits("kv")

    def labels(self, spec: ModelSpec) -> dict[str, Any]:
        plan = self.weights(spec)
        out: dict[str, Any] = {"weight_dtype": plan.label, "weight_dtype_source": plan.source,
                               "kv_dtype": self.kv.value, "act_dtype": self.act.value}
        if self.weight is not None and self.weight.name in ("int8", "int4"):
            out["group_size"] = self.group_size
        if any(g.block.ffn == "moe" for g in spec.groups):
            out["routing"] = self.routing.value
        if spec.has_states:
            out["state_dtype"] = self.state_dtype(spec).value
        if any(g.block.indexed for g in spec.groups):
            out["index_dtype"] = (self.index or self.kv).value
        return out


@dataclass(frozen=True)
class Machine:
    """A device and the fractions of its peaks a user has calibrated (1: the datasheet)."""
    device: Device
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    timing: Optional[Any] = None      # measured.Timing: --timing measured (None: the roofline floor)

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "memory_efficiency"):
            check_efficiency(name.replace("_", " "), getattr(self, name))

    def peak(self, precision: Precision) -> float:
        return self.device.peak(precision.act.value) * self.compute_efficiency

    def bandwidth(self) -> float:
        return self.device.mem_bw * self.memory_efficiency

    @property
    def timing_mode(self) -> str:
        """The timing a row says it used: ``measured`` (the tables' latencies) or ``roofline`` (the floor)."""
        return "measured" if self.timing is not None else "roofline"


EFFICIENCY_MIN = 1e-3   # a tenth of a percent of a peak: below it a time is noise (or, subnormal, infinite)


def check_efficiency(name: str, value: float) -> float:
    """A fraction of a peak reached: in [``EFFICIENCY_MIN``, 1] (NaN fails too)."""
    if not EFFICIENCY_MIN <= value <= 1:
        raise CostcalcError(f"{name} must be between {EFFICIENCY_MIN:g} and 1, got {value}")
    return value


def experts_touched(E: int, k: int, tokens: int, routing: Routing) -> Fraction:
    """Distinct experts a forward routing ``tokens`` tokens (k each) reads, per MoE layer."""
    if routing == Routing.worst:
        return Fraction(min(E, tokens * k))
    if k >= E:      # every expert, whatever the tokens (and log1p(-1) below has no value)
        return Fraction(E)
    if tokens * math.log2(max(E, 2)) <= EXACT_BITS:
        return E * (1 - Fraction(E - k, E) ** tokens)
    return Fraction(E * -math.expm1(tokens * math.log1p(-k / E)))   # beyond exact: a double, ~1e-16 relative


@dataclass(frozen=True)
class Share:
    """One expert-parallel device's part of the routed experts (``parallel.device_traffic``): it holds
    E / ``ep`` of each MoE layer's experts, runs 1 / ``runs`` of the routed (token, expert) pairs of the
    point it is evaluated at, and its experts are routed the tokens of ``replicas`` such points (its
    expert-parallel group's: more than 1 where the group spans data-parallel replicas). The whole model
    on one device: ``Share()``."""
    ep: int = 1
    runs: int = 1
    replicas: int = 1

    def touched(self, group: Group, routed: int, precision: "Precision") -> Fraction:
        """The routed experts of its own a forward reads in a layer of ``group``: of the E / ep it holds,
        the expected share ``experts_touched(E, k, n) / ep`` (``--routing expected``: uniform routing
        spreads them evenly) or ``min(E / ep, n k)`` (worst), n = the group's routed tokens."""
        if group.block.ffn != "moe" or self.ep == 1:
            return group_experts_touched(group, routed * self.replicas, precision)
        E, k, n = group.sizes["E"], group.sizes["k"], routed * self.replicas
        if precision.routing == Routing.worst:
            return min(Fraction(E, self.ep), Fraction(n * k))
        return experts_touched(E, k, n, precision.routing) / self.ep


def point(query: Query, values: dict[str, int], share: Share = Share(),
          per_operator: bool = False) -> dict[str, Any]:
    """Bytes (and, with a machine, times) of one point of a compiled workload, over the groups; with
    ``share``, of one expert-parallel device's part of the routed experts; with ``per_operator``, each
    operator's FLOPs, bytes (``weight_bytes``: its weights' share) and times too (``operators``: op -> {flops,
    bytes, weight_bytes, compute_s, memory_s, time_s})."""
    wl, precision, machine = query.workload, query.precision, query.machine
    if not wl.traffic:
        raise CostcalcError(f"{wl.name}: no memory-traffic model (bytes are modelled for prefill, chunks, "
                            f"decode steps and generations)")
    routed = math.prod(values[x] for x in wl.routed)
    kinds = {kind: _Sum() for kind in TRAFFIC}      # exact sums (``_Sum``)
    compute = memory = total = 0.0
    term_times = {t.name: [0.0, 0.0, 0.0] for t in TERMS}   # compute, memory, roofline time
    term_bytes = {t.name: _Sum() for t in TERMS}
    plan = precision.weights(query.spec)
    per_element = {kind: _exact(element_bytes(query, plan, 0, "", kind)) for kind in TRAFFIC
                   if kind != "weight" and not kind.startswith("kv")}   # bytes, exact (K/V: by operator)
    key_bytes = {}      # by operator: K/V elements in the KV dtype, an indexer's keys in the index dtype
    rates: dict = {}    # (group index, op) -> bytes per weight element
    each: dict[str, dict[str, Any]] = {}     # per operator, over the groups (``per_operator``)
    timing = machine.timing if machine is not None else None   # --timing measured: the tables' times beside
    estimate, term_estimate, notes = 0.0, {t.name: 0.0 for t in TERMS}, {}

    def matrices(index: int) -> dict:
        """A group's matrices in the weight plan: index len(groups) is the MTP module a draft runs (its
        operators named ``mtp.<op>``)."""
        return plan.groups[index] if index < len(plan.groups) else (plan.draft or {})

    def phases(group: Group) -> Optional[list[tuple[str, int]]]:
        """--timing measured, MLA: the (phase, length) of each forward a point runs (a decode phase: one a
        step); None where the tables hold no such forward (a cached chunk) or costcalc's MLA form is not the
        engine's for that phase (measured_fused.MLA_FORMS)."""
        kind, n = wl.traffic, values.get("N", 0) - 1
        if kind == "0,S":
            out = [("context", values["S"])]
        elif kind == "T,1":
            out = [("generation", values["T"] + 1)]
        elif kind == "steps" and 1 <= n <= MAX_LOOKED_UP_STEPS:
            out = [("generation", keys) for keys in range(values["S"] + 1, values["S"] + values["N"])]
        else:
            return None
        block = group.block
        if block.v4 or block.mixer or not fused.mla_shape(group.sizes, block.sparse) or not block.q_lora \
                or query.form.value != fused.MLA_FORMS[out[0][0]]:
            return None
        return out

    def mla_kernels(index: int, group: Group, op: str) -> tuple[Optional[float], str]:
        """--timing measured: MLA's attention kernel (context or generation) or an absorbed per-head product
        (q_absorb, v_absorb: one a token and head), all its layers, from the engine's kernel tables."""
        runs = phases(group)
        if runs is None or group.block.sparse:      # the kernel tables are dense MLA's
            return None, "no table for this MLA"
        total, said = 0.0, []
        for phase, length in runs:
            if op == "attention":
                got, note = fused.mla_attention(timing, phase, values["B"], length, group.sizes["h_q"],
                                                precision.kv.value)
            else:
                got, note = fused.mla_bmm(timing, op, values["B"], group.sizes["h_q"],
                                          matrices(index)[weights.SLICES[op]][3].name)
            if got is None:
                return None, note
            total, said = total + got, said + [note]
        return total * group.count, "; ".join(dict.fromkeys(filter(None, said)))

    def gdn_kernels(group: Group, op: str) -> tuple[Optional[float], str]:
        """--timing measured: a Gated DeltaNet layer's scan or convolution, all its layers: an uncached prompt
        (the chunked kernels) or decode steps (the recurrent ones), from the engine's GDN table."""
        kind, sizes = wl.traffic, group.sizes
        if kind == "0,S":
            phase, length, times = "context", values["S"], 1
        elif kind in ("T,1", "steps"):
            phase, length, times = "generation", 1, values["N"] - 1 if kind == "steps" else 1
        else:
            return None, f"no Gated DeltaNet table for {wl.name}"
        if times < 1:
            return None, "no decode step"
        shape = (sizes["h_lk"], sizes["d_lk"], sizes["h_lv"], sizes["d_lv"], sizes["K_c"])
        got, note = fused.gdn(timing, op, phase, values["B"], length, shape)
        return (None if got is None else got * group.count * times), note

    def together(index: int, group: Group) -> list[dict]:
        """--timing measured: the lookups of one group that stand for several operators at once -- a MoE
        layer's fused experts kernel, vLLM's whole MLA module -- each {ops, got, note, label}; a lookup the
        tables do not hold is left out (its operators are looked up one by one, or keep their floor)."""
        out, block, sizes, own = [], group.block, group.sizes, matrices(index)
        kind, steps = wl.traffic, values["N"] - 1 if wl.traffic == "steps" else 1
        experts = fused.PLAIN_MOE_OPS if block.plain else fused.MOE_OPS
        if block.ffn == "moe" and all(op in own for op in experts) and kind in ("0,S", "T,1", "T,C", "steps") \
                and steps >= 1 and share.ep == 1:       # expert parallelism: not looked up (the floor)
            fmt = {own[op][3].name for op in experts}
            if len(fmt) == 1:
                got, note = fused.moe(timing, routed, (sizes["d"], sizes["m_e"], sizes["k"], sizes["E"]), fmt.pop(),
                                      gated=not block.plain)
                if got is not None:
                    out.append({"ops": experts, "got": got * group.count * steps, "note": note,
                                "label": "experts (fused MoE)"})
        runs = phases(group) if block.attention == "mla" and timing.engine == "vllm" else None
        if runs is not None:
            ops = [op for op in fused.MLA_MODULE_OPS if op in own or op in weights.SLICES or op == "attention"]
            formats = {own[op][3].name for op in ops if op in own}      # the MLA projections' (not the indexer's)
            ops += list(fused.INDEXER_OPS) if block.sparse else []
            if len(formats) == 1:
                gemm, total, said = formats.pop(), 0.0, []
                for phase, length in runs:
                    got, note = fused.mla_module(timing, phase, values["B"], length, sizes["h_q"],
                                                 precision.kv.value, gemm, sparse=block.sparse)
                    if got is None:
                        break
                    total, said = total + got, said + [note]
                else:
                    out.append({"ops": tuple(ops), "got": total * group.count,
                                "note": "; ".join(dict.fromkeys(filter(None, said))),
                                "label": "DSA module" if block.sparse else "MLA module"})
        return out

    def looked_up(index: int, group: Group, op: str, flops) -> tuple[Optional[float], str]:
        """``--timing measured``: the seconds the tables give operator ``op`` of ``group`` (all its layers)
        at this point, and a note; None (and why) where no table holds it (it keeps its floor). A plain
        GEMM is a projection of one matrix (not a routed expert, not an absorbed MLA slice) whose FLOPs are
        2 m fan_in fan_out a layer for a whole m; GQA attention without a window, at the heads it has."""
        kind, steps = wl.traffic, values["N"] - 1 if wl.traffic == "steps" else 1   # a decode phase: N-1 steps
        if op in ("scan", "conv") and group.block.mixer == "gdn" and not group.block.beside:
            return gdn_kernels(group, op)
        if op == "attention" and group.block.attention == "mla":
            return mla_kernels(index, group, op)
        if op in weights.SLICES and group.block.attention == "mla":
            return mla_kernels(index, group, op)
        if op == "attention":
            block, sizes = group.block, group.sizes
            if block.attention not in ("gqa", "window") or block.dv or block.sparse or block.v4 or block.mixer:
                return None, "no table for this attention"
            shape = (sizes["h_q"], sizes["h_kv"], sizes["d_h"], precision.kv.value)
            if kind == "0,S":
                lengths = [("context", values["S"])]
            elif kind == "T,1":
                lengths = [("generation", values["T"] + 1)]
            elif kind == "steps" and 1 <= steps <= MAX_LOOKED_UP_STEPS:    # step j reads S + j keys
                lengths = [("generation", keys) for keys in range(values["S"] + 1, values["S"] + values["N"])]
            else:
                return None, f"no attention table for {wl.name}"
            # a sliding window no shorter than the last position reached masks no key: every query reads
            # what it reads without one (core.attention: p keys while p <= W), the window-0 tables' kernels
            if block.attention == "window" and max(length for _, length in lengths) > sizes["W"]:
                return None, "no table for a window shorter than the positions reached"
            total, said = 0.0, []
            for phase, length in lengths:
                got, note = timing.attention(phase, values["B"], length, shape)
                if got is None:
                    return None, note
                total, said = total + got, said + [note]
            return total * group.count, "; ".join(dict.fromkeys(filter(None, said)))
        if kind not in ("0,S", "T,1", "T,C", "steps") or steps < 1 or routed_expert(op) or op in weights.SLICES:
            return None, "no GEMM lookup"
        if op in plan.once:
            (fan_in, fan_out, fmt), layers = plan.once[op], 1
        elif op.removeprefix("mtp.") in matrices(index) and matrices(index)[op.removeprefix("mtp.")][2] == 1:
            fan_in, fan_out, _, fmt = matrices(index)[op.removeprefix("mtp.")]
            layers = group.count
        else:
            return None, "no GEMM lookup"
        rows, rest = divmod(int(flops), 2 * fan_in * fan_out * layers * steps)
        if rest or rows < 1:            # not a plain GEMM over whole rows
            return None, "not a plain GEMM"
        got, note = timing.gemm(rows, fan_out, fan_in, fmt.name, precision.act.value)
        return (None if got is None else got * layers * steps), note
    if timing is not None:
        from . import measured_fused as fused
    for index, ((group, recipe), (_, flops_recipe)) in enumerate(zip(query.recipes("bytes"), query.recipes())):
        base = {**group.numbers(), **query.options.values(), **values}
        sets = together(index, group) if timing is not None else []
        set_of = {op: s for s in sets for op in s["ops"]}     # op -> the lookup standing for it
        for s in sets:
            s["floors"] = {}
        elements: dict[str, dict[str, int]] = {}      # op -> kind -> elements, ops in order: float sums repeat
        for key, count in recipe.evaluate(base).items():
            op, kind = key.rsplit(".", 1) if "." in key else (key, "")
            elements.setdefault(op, {})[kind] = count
        operators = list(elements)
        flops = flops_recipe.evaluate(base, operators)
        term_of = flops_recipe.term_of
        touched = _exact(share.touched(group, routed, precision))
        for op in operators:
            moved = read = 0
            expert = routed_expert(op)
            runs = share.runs if expert else 1     # a device's share of the routed pairs
            own = elements[op]
            for kind in TRAFFIC:
                count = own.get(kind, 0)
                if not count:        # nothing moved: exact sums, so skipping a zero changes no number
                    continue
                if kind == "weight":    # each matrix in its own format: bytes exact per matrix
                    if (index, op) not in rates:
                        rates[index, op] = _exact(element_bytes(query, plan, index, op, kind))
                    rate = rates[index, op]
                    if isinstance(rate, float):     # a float's rounding, in its order
                        part = count * (touched if expert else 1) * rate
                    else:       # exact: the matrix's whole bytes an int, times the share of experts touched
                        part = _exact(count * rate)
                        part = _exact(part * touched) if expert else part
                    read += part
                elif kind.startswith("kv"):     # a routed expert moves no K/V
                    if op not in key_bytes:
                        key_bytes[op] = _exact(element_bytes(query, plan, index, op, kind))
                    part = count * key_bytes[op]
                elif runs > 1:
                    part = _ratio(count, runs) * per_element[kind]
                else:
                    part = count * per_element[kind]
                kinds[kind].add(part)
                moved += part
            # an operator that moves bytes but runs no counted product (Gated DeltaNet's chunked
            # step reads its state elementwise: no scan FLOPs) is its own term (scan, conv)
            term = term_of.get(op, op)
            term_bytes[term].add(moved)
            ran = flops.get(op, 0) if runs == 1 else _ratio(flops.get(op, 0), runs)
            if per_operator:
                mine = each.setdefault(op, {"flops": 0, "bytes": 0, "weight_bytes": 0})    # Fractions at the end
                mine["flops"] += ran
                mine["bytes"] += moved
                mine["weight_bytes"] += read
            if machine is None:
                continue
            t_c, t_m = float(ran) / machine.peak(precision), float(moved) / machine.bandwidth()
            compute, memory, total = compute + t_c, memory + t_m, total + max(t_c, t_m)
            term_times[term][0] += t_c
            term_times[term][1] += t_m
            term_times[term][2] += max(t_c, t_m)
            if timing is not None and op in set_of:      # shared below, once the group's floors are known
                set_of[op]["floors"][op] = (term, max(t_c, t_m))
            elif timing is not None:
                got, note = looked_up(index, group, op, ran)
                if got is None and (ran or moved):
                    notes.setdefault(op, "floor")
                elif got is not None and note:
                    notes[op] = note
                est = max(got or 0.0, max(t_c, t_m))    # an interpolation under the floor is raised to it
                estimate += est
                term_estimate[term] += est
            if per_operator:
                for key, t in (("compute_s", t_c), ("memory_s", t_m), ("time_s", max(t_c, t_m))):
                    mine[key] = mine.get(key, 0.0) + t
        for s in sets:      # a lookup for several operators: shared in proportion to their floors
            floor = sum(f for _, f in s["floors"].values())
            for op, (term, f) in s["floors"].items():
                est = max(s["got"] * f / floor if floor else 0.0, f)
                estimate += est
                term_estimate[term] += est
            if s["note"] and s["floors"]:
                notes[s["label"]] = s["note"]
    out: dict[str, Any] = {f"{kind}_bytes": kinds[kind].rounded_value() for kind in traffic_kinds(query.spec)}
    out["total_bytes"] = sum(out[f"{kind}_bytes"] for kind in traffic_kinds(query.spec))
    out.update({f"{t}_bytes": moved.rounded_value() for t, moved in term_bytes.items() if moved})
    if machine is not None:
        out.update(compute_time_s=compute, memory_time_s=memory, time_s=total, bound=bound(compute, memory))
        out.update({f"{t}_bound": bound(c, m) for t, (c, m, _) in term_times.items() if c or m})
        out.update({f"{t}_time_s": time for t, (c, m, time) in term_times.items() if c or m})
        if timing is not None:
            # the norms, residual adds, activations and embedding gather costcalc counts no FLOPs or bytes
            # for (no floor): aiconfigurator's mem ops (measured.Timing.mem_ops), each forward's
            forwards = values["N"] - 1 if wl.traffic == "steps" else 1
            mem_ops = timing.mem_ops(query.spec.groups, routed) * forwards if forwards >= 1 else 0.0
            estimate += mem_ops
            out.update(floor_time_s=total, time_s=estimate, efficiency=round(total / estimate, 4) if estimate else None,
                       measured_coverage=coverage(notes), mem_ops_time_s=mem_ops)
            for t, (c, m, time) in term_times.items():
                if c or m:
                    out.update({f"{t}_floor_time_s": time, f"{t}_time_s": term_estimate[t],
                                f"{t}_efficiency": round(time / term_estimate[t], 4) if term_estimate[t] else None})
    if per_operator:     # the exact sums as Fractions (ints while summed: the same values, fewer gcds)
        for mine in each.values():
            for key in ("flops", "bytes", "weight_bytes"):
                if isinstance(mine[key], int):
                    mine[key] = Fraction(mine[key])
        out["operators"] = each
    return out


def efficiencies(table: dict[str, list]) -> None:
    """A measured table's ``efficiency`` and ``<term>_efficiency`` columns again from its floor and time
    columns (a composite's total rows add times, and a ratio is not added), in place."""
    for name in [k for k in table if k.endswith("efficiency") and k not in ("compute_efficiency", "memory_efficiency")]:
        term = name.removesuffix("efficiency")
        floors, times = table.get(f"{term}floor_time_s"), table.get(f"{term}time_s")
        if floors is not None and times is not None:
            table[name] = [round(f / t, 4) if f is not None and t else None for f, t in zip(floors, times)]


def coverages(*values: str) -> str:
    """The ``measured_coverage`` of several forwards added up: each distinct note once."""
    parts = [p for v in values if v and v != "measured" for p in v.split(" | ")]
    return " | ".join(dict.fromkeys(parts)) or "measured"


def coverage(notes: dict[str, str]) -> str:
    """``measured_coverage``: ``measured`` where every operator's shape lies inside the tables; else the
    operators kept at their floor (no table) and those outside what was measured, with the sizes."""
    floor = [op for op, note in notes.items() if note == "floor"]
    outside = [f"{op}: {note}" for op, note in notes.items() if note != "floor"]
    parts = ([f"roofline floor (no table): {', '.join(floor)}"] if floor else []) + outside
    return " | ".join(parts) if parts else "measured"


def element_bytes(query: Query, plan: Plan, index: int, op: str, kind: str) -> Fraction:
    """Bytes an element of traffic ``kind`` of operator ``op`` (layer group ``index``) moves: a weight at its
    matrix's format (``Plan.rate``), a K/V element in the KV dtype (an indexer's keys in the index dtype:
    ``Precision.key_bits``), any other kind in its own dtype (``Precision.bits``) -- the one rule ``point``
    and a search's arrays (``steptimes``) count bytes by."""
    if kind == "weight":
        return plan.rate(index, op)
    if kind.startswith("kv"):
        return query.precision.key_bits(op, query.spec) / 8
    return query.precision.bits(kind, query.spec) / 8


def routed_expert(op: str) -> bool:
    """Whether an operator is a routed expert's (its weights read once per expert touched); an MTP
    module's too (``mtp.experts.*``)."""
    return op.removeprefix("mtp.").startswith("experts.")


def traffic_kinds(spec: ModelSpec) -> tuple[str, ...]:
    """The traffic kinds a model's rows show: the states only where a layer keeps one."""
    return TRAFFIC if spec.has_states else tuple(k for k in TRAFFIC if not k.startswith("state"))


def bound(compute_s: float, memory_s: float) -> Optional[str]:
    """Which time is the larger: ``memory`` (ties too) or ``compute``; None where neither is spent."""
    if not (compute_s or memory_s):
        return None
    return "memory" if memory_s >= compute_s else "compute"


def group_experts_touched(group: Group, routed: int, precision: Precision) -> Fraction:
    """The routed experts whose weights a forward of ``routed`` tokens reads in a layer of
    ``group``: ``experts_touched`` for a MoE layer; 1 (the weight counted once) otherwise."""
    if group.block.ffn != "moe":
        return Fraction(1)
    return experts_touched(group.sizes["E"], group.sizes["k"], routed, precision.routing)


class _Sum:
    """An exact sum (ints and Fractions) of many parts, its Fractions added by denominator (numerators as
    ints: the expected experts' shares of a point share a few large denominators) and normalised once at
    the end: the value ``0 + p1 + p2 + ...`` has. A float part makes it a float, as in that sum: from then
    on each part is added in order, so every rounding is the same."""
    __slots__ = ("whole", "parts", "rounded")

    def __init__(self) -> None:
        self.whole, self.parts, self.rounded = 0, {}, None

    def add(self, part: Any) -> None:
        if self.rounded is not None:
            self.rounded = self.rounded + part
        elif type(part) is int:
            self.whole += part
        elif isinstance(part, Fraction):
            self.parts[part.denominator] = self.parts.get(part.denominator, 0) + part.numerator
        else:       # float(exact sum so far) + part: what ``sum + part`` gives
            self.rounded = self.value() + part

    def value(self) -> Any:
        if self.rounded is not None:
            return self.rounded
        total = self.whole
        for denominator, numerator in self.parts.items():
            total = total + Fraction(numerator, denominator)
        return total

    def _ratio(self) -> tuple[int, int]:
        """The exact sum as numerator and denominator (not reduced: no gcd of its large numbers)."""
        top, bottom = self.whole, 1
        for denominator, numerator in self.parts.items():
            top, bottom = top * denominator + numerator * bottom, bottom * denominator
        return top, bottom

    def rounded_value(self) -> int:
        """``round(value())`` (half to even, as ``round`` rounds a Fraction), from the unreduced ratio."""
        if self.rounded is not None:
            return round(self.rounded)
        top, bottom = self._ratio()
        floor, rest = divmod(top, bottom)
        if 2 * rest != bottom:
            return floor + (2 * rest > bottom)
        return floor + floor % 2

    def __bool__(self) -> bool:
        return bool(self.rounded) if self.rounded is not None else self._ratio()[0] != 0


def _exact(value: Fraction) -> Any:
    """An exact number as an int where it is whole (the same value; int sums skip Fraction's gcds)."""
    return value.numerator if isinstance(value, Fraction) and value.denominator == 1 else value


def _ratio(count: int, runs: int) -> Any:
    """count / runs exactly: an int where it divides, else a Fraction."""
    return count // runs if count % runs == 0 else Fraction(count, runs)


def intensity(flops: int, moved: int) -> Optional[float]:
    """FLOPs per byte moved, four decimals (None where nothing moves)."""
    return round(flops / moved, 4) if moved else None


MAX_TRAFFIC_POINTS = 50_000   # points x layer groups of one bytes-and-time table (about 15 s)


def labels(query: Query) -> dict[str, Any]:
    """What a row of bytes or time says it was worked out on: the device, the dtypes (weight formats and
    their source), the timing mode and engine, efficiencies other than 1."""
    machine = query.machine
    precision = query.precision if query.precision is not None else Precision()
    out = {**({"device": machine.device.name} if machine else {}), **precision.labels(query.spec)}
    if machine is not None and machine.timing is not None:
        out.update(machine.timing.labels())
    if machine is not None and (machine.compute_efficiency, machine.memory_efficiency) != (1, 1):
        out.update(compute_efficiency=machine.compute_efficiency, memory_efficiency=machine.memory_efficiency)
    return out


def row_columns(query: Query, points: dict[str, list[int]], flops: list[int]) -> dict[str, list]:
    """The labels (device, dtypes, routing, efficiencies) and the bytes/time columns of rows."""
    if query.precision is None:
        query = query.but(precision=Precision())
    spec, machine = query.spec, query.machine
    n = len(flops)
    if n * len(spec.groups) > MAX_TRAFFIC_POINTS:
        raise CostcalcError(f"bytes and time are worked out point by point (~0.3 ms a point and layer group): "
                            f"{n:,} points x {len(spec.groups)} group(s) is too many, at most "
                            f"{MAX_TRAFFIC_POINTS:,}; narrow the ranges, or drop --device and the dtypes for FLOPs")
    out: dict[str, list] = {key: [value] * n for key, value in labels(query).items()}
    out.update(columns(query, points, flops))
    return out


def columns(query: Query, points: dict[str, list[int]], flops: list[int]) -> dict[str, list]:
    """``point`` at every point of the input columns (symbol -> values), with each point's
    arithmetic intensity (total FLOPs / total bytes) beside its bytes; then each term's
    bytes, time and bound (``attention_bytes``, ``attention_time_s``, ``attention_bound``). On a layout
    these are the whole model's on one device, roofline only: ``--timing measured`` looks its device's
    shard and collectives up (``parallel.traffic_columns``), not the whole model."""
    n = len(flops)
    machine = query.machine
    if machine is not None and machine.timing is not None and not query.options.layout.single:
        query = query.but(machine=replace(machine, timing=None))
    rows = [point(query, {k: int(v[i]) for k, v in points.items()}) for i in range(n)]
    names = set(name for r in rows for name in r)   # a term may be absent at some points
    table = {name: [r[name] for r in rows]
             for name in [f"{kind}_bytes" for kind in traffic_kinds(query.spec)] + ["total_bytes"]}
    table["intensity"] = [intensity(f, b) for f, b in zip(flops, table["total_bytes"])]
    for name in ("compute_time_s", "memory_time_s", "floor_time_s", "time_s", "efficiency", "bound",
                 "measured_coverage", "mem_ops_time_s"):
        if name in names:
            table[name] = [r[name] for r in rows]
    for term in TERMS:      # each term's bytes and time (0 where it moves nothing), and its bound
        for name, absent in ((f"{term.name}_bytes", 0), (f"{term.name}_floor_time_s", 0.0),
                             (f"{term.name}_time_s", 0.0), (f"{term.name}_efficiency", None),
                             (f"{term.name}_bound", None)):
            if name in names:
                table[name] = [r.get(name, absent) for r in rows]
    return table


def term_times(query: Query, points: dict[str, list[int]]) -> dict[str, list[float]]:
    """Each term's roofline time (its operators' max(compute, memory), summed) at every point."""
    n = len(next(iter(points.values())))
    rows = [point(query, {k: int(v[i]) for k, v in points.items()}) for i in range(n)]
    names = [f"{t.name}_time_s" for t in TERMS if any(f"{t.name}_time_s" in r for r in rows)]
    return {name.removesuffix("_time_s"): [r.get(name, 0.0) for r in rows] for name in names}
