"""A parallel layout (tensor parallel ``tp``, expert parallel ``ep``) as part of the question, checked
against a model, and a layer group at one device's sizes (``shard``). What the layout costs per
device is ``costcalc.parallel``'s (docs/cost-model.md, "Tensor and expert parallelism")."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from .errors import CostcalcError
from .spec import Group, ModelSpec
from .stages import partition

# The compiled workloads a layout is modelled for (generate: its two phases).
WORKLOADS = ("prefill", "cached_prefill", "decode", "decode_phase")
ATTENTIONS = ("gqa", "window", "chunk", "mla")   # split by heads; the others are refused by name
# The mixers split by heads or channels under inference's tensor parallelism (vLLM's model files; the table
# in docs/cost-model.md, "Tensor and expert parallelism"), and a layer without attention (``none``).
MIXERS = ("gdn", "kda", "mamba1", "mamba2", "lightning", "shortconv")
# DeepSeek-V4's blocks (vllm/model_executor/models/deepseek_v4.py, ``DeepseekV4Attention``): wq_b column-parallel
# (h_q / tp heads), the grouped wo_a over o_groups / tp groups, wo_b row-parallel; the rest replicated.
V4 = ("swa", "hca", "csa")
SPLIT = ("h_q", "m", "m_s", "h_lk", "h_lv", "h_m", "d_in", "G_o")   # sizes divided by tp (m_e without ep; V: ``vocab``)
# vLLM's vocabulary-parallel embedding and LM head (vllm/model_executor/layers/vocab_parallel_embedding.py):
# ``pad_vocab_size`` rounds V up to a multiple of DEFAULT_VOCAB_PADDING_SIZE = 64, and each of tp devices
# holds and runs padded / tp rows (``divide`` asserts they divide). vLLM pads at tp 1 too; costcalc keeps one
# device's numbers exact to the model (V) and pads only under a layout.
VOCAB_PADDING = 64


@dataclass(frozen=True)
class Layout:
    """How a model is placed on devices: tensor parallel ``tp`` (Megatron's column/row split),
    expert parallel ``ep``, pipeline parallel ``pp`` (stages of consecutive layers), data parallel
    ``dp`` (replicas, each with its own requests or micro-batches) and sequence parallel ``sp``
    (Korthikanti et al.: the TP all-reduces as reduce-scatter + all-gather; needs ``tp`` > 1); 1 and
    False: none. The experts run over the tensor-parallel group (``ep`` = ``tp``; vLLM's expert parallel
    at data parallel 1) or over every tensor- and data-parallel device of a stage (``ep`` = ``tp * dp``:
    vLLM's expert parallel with data-parallel attention); ``ep`` 1: every device holds every expert.
    The layout has ``tp * pp * dp`` devices."""
    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    sp: bool = False

    def __post_init__(self) -> None:
        for name in DEGREES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CostcalcError(f"--{name} must be a positive integer, got {value!r}")
        if not isinstance(self.sp, bool):
            raise CostcalcError(f"--sp is a switch (on or off), got {self.sp!r}")
        if self.ep not in (1, self.tp, self.tp * self.dp):
            over = (f"--ep {self.tp * self.dp}" if self.dp > 1 else "--ep T x D with --dp D")
            raise CostcalcError(f"--ep {self.ep} with --tp {self.tp}" + (f" --dp {self.dp}" if self.dp > 1 else "")
                                + f": the experts run over the tensor-parallel devices (--ep {self.tp}), over every "
                                f"tensor- and data-parallel device of a stage ({over}: vLLM's expert parallel with "
                                f"data-parallel attention), or are not split (--ep 1)")
        if self.sp and self.tp == 1:
            raise CostcalcError("--sp (sequence parallel) splits the tensor-parallel all-reduces: it needs --tp > 1")

    @property
    def single(self) -> bool:
        return self.devices == 1

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def flags(self) -> str:
        """The CLI options that give this layout (``--tp 1`` for one device)."""
        parts = [f"--{name} {getattr(self, name)}" for name in DEGREES if name == "tp" or getattr(self, name) > 1]
        return " ".join(parts + (["--sp"] if self.sp else []))

    @property
    def label(self) -> str:
        """``tp2``, ``tp4.ep8``, ``tp2.pp2.dp2.sp``: the degrees above 1 (tp always), in this order."""
        parts = [f"{name}{getattr(self, name)}" for name in DEGREES if name == "tp" or getattr(self, name) > 1]
        return ".".join(parts + (["sp"] if self.sp else []))


DEGREES = ("tp", "ep", "pp", "dp")


def check(query: Any) -> None:
    """A query's layout (``evaluate.Query``) checked against its model and workload: one error naming
    what does not divide or what is not modelled."""
    layout, spec, options = query.options.layout, query.spec, query.options
    trained = {"--recompute": options.recompute != "none", "--optimizer": options.optimizer != "adam",
               "--schedule": options.schedule is not None, "--virtual-stages": options.virtual_stages != 1}
    if query.workload.name != "train" and any(trained.values()):
        raise CostcalcError(f"{', '.join(k for k, v in trained.items() if v)}: a training step's, not "
                            f"{query.workload.name}'s")
    if options.zero and query.workload.name != "train":
        raise CostcalcError(f"--zero {options.zero} shards a training step's optimizer state: it applies to train, "
                            f"not {query.workload.name}")
    if options.zero and layout.dp == 1:
        raise CostcalcError(f"--zero {options.zero} shards over the data-parallel devices: it needs --dp > 1")
    if options.micro_batches is not None and layout.pp == 1:
        raise CostcalcError("--micro-batches splits a step for a pipeline's stages: it needs --pp > 1")
    if options.acceptance is not None:      # a speculative query's own layout (memory's carry theirs apart)
        check_draft_tp(options)
    if layout.single:
        return
    flag = layout.flags
    if query.workload.name == "train":
        _check_train(query, flag)
        return
    if query.workload.name not in WORKLOADS + ("generate", "chunked"):
        raise CostcalcError(f"{flag}: per-device costs are modelled for prefill, chunked, decode and generate, "
                            f"not {query.workload.name} yet")
    if layout.pp > 1:
        _check_pipeline(query, layout, flag)
    check_draft(spec, query.options, flag)
    for group in spec.groups:
        _check_group(spec, group, layout, flag)
    check_vocab(spec, layout)
    if layout.sp and spec.has_mixers:
        raise CostcalcError(f"{flag}: --sp with {spec.name}'s mixer layers is not modelled (their convolution and "
                            f"scan run over the whole sequence; the mixers' own all-reduces are not sequence-split)")
    if layout.ep > 1 and not any(g.block.ffn == "moe" for g in spec.groups):
        raise CostcalcError(f"--ep {layout.ep}: {spec.name} has no MoE layers (expert parallelism splits experts)")


def check_draft(spec: ModelSpec, options: Any, flag: str) -> None:
    """A draft under a parallel layout, with neither --pp nor --sp (one error): the model's MTP module
    (``--draft mtp``) sharded as its layers are, its sizes dividing; a draft model (speculative decoding) at
    ``--draft-tp`` 1 or the target's tp, its heads, widths and vocabulary dividing it."""
    model = options.draft_model
    if options.draft.value == "none" and model is None:
        return
    if options.pp > 1 or options.sp:
        what = "--draft mtp" if model is None else "a draft model"
        raise CostcalcError(f"{flag}: {what} with {'--pp' if options.pp > 1 else '--sp'} is not modelled "
                            f"(a draft runs on a tensor-, expert- or data-parallel layout)")
    if model is None:
        if spec.mtp is not None:        # its block is a layer's with eh_proj before it: the layer's rules
            _check_group(spec, Group(1, replace(spec.mtp.block, mtp=False), spec.mtp.sizes), options.layout, flag)
        return
    check_draft_tp(options)
    own = options.draft_layout
    try:
        for group in model.groups:
            _check_group(model, group, own, own.flags)
        check_vocab(model, own)
    except CostcalcError as exc:
        raise CostcalcError(f"--draft {model.name}: {exc}") from None


def check_draft_tp(options: Any) -> None:
    """``--draft-tp``: the target's tensor parallelism or 1 (the whole draft on every device), as vLLM's
    draft_tensor_parallel_size; on one device, 1."""
    if options.draft_tp is not None and options.draft_tp not in (1, options.tp):
        raise CostcalcError(f"--draft-tp {options.draft_tp}: a draft model runs at the target's tensor parallelism "
                            f"({options.tp}) or at 1 (whole on every device), as vLLM's draft_tensor_parallel_size")


def padded(vocab: int, padding: int = VOCAB_PADDING) -> int:
    """vLLM's ``pad_vocab_size``: the vocabulary rounded up to a multiple of ``padding``."""
    return -(-vocab // padding) * padding


def vocab(spec: ModelSpec, layout: Layout) -> int:
    """The vocabulary rows one device holds and runs: V on one device, padded(V) / tp under tensor
    parallelism (vLLM's ``VocabParallelEmbedding`` and ``ParallelLMHead``)."""
    return spec.sizes["V"] if layout.tp == 1 else padded(spec.sizes["V"]) // layout.tp


def check_vocab(spec: ModelSpec, layout: Layout) -> None:
    """The padded vocabulary divides by tp (vLLM's ``divide`` asserts it)."""
    if layout.tp > 1 and padded(spec.sizes["V"]) % layout.tp:
        raise CostcalcError(f"--tp {layout.tp}: {spec.name}'s vocabulary V {spec.sizes['V']}, padded to "
                            f"{padded(spec.sizes['V'])} (a multiple of {VOCAB_PADDING}, as vLLM pads it), does not "
                            f"divide by {layout.tp}")


def _check_pipeline(query: Any, layout: Layout, flag: str) -> None:
    """What a pipeline needs: no more stages than layers (``stages.partition`` says so). With --dp each
    replica is a whole pipeline; a chunk schedule runs each chunk as a pipeline forward."""
    partition(sum(g.count for g in query.spec.groups), layout.pp)


def _check_train(query: Any, flag: str) -> None:
    """A training step's layout (``costcalc.training``): tp, ep, pp, dp, sp and --zero. Under --pp: no more
    stages than layers, and ZeRO 0 or 1 (the gradients accumulate whole over the micro-batches: DeepSpeed's
    pipeline engine refuses ZeRO-2 and 3, Megatron's distributed optimizer is ZeRO-1's sharding)."""
    layout, spec, zero = query.options.layout, query.spec, query.options.zero
    if layout.pp > 1:
        partition(sum(g.count for g in spec.groups), layout.pp)
        if zero > 1:
            raise CostcalcError(f"{flag} --zero {zero}: ZeRO-{zero} with pipeline parallelism is not modelled (the "
                                f"gradients accumulate whole over the micro-batches; DeepSpeed's pipeline engine "
                                f"takes ZeRO 0 or 1 only): use --zero 0 or 1")
    for group in spec.groups:
        _check_group(spec, group, layout, flag, train=True)
    if "V" in spec.sizes and spec.sizes["V"] % layout.tp:
        raise CostcalcError(f"--tp {layout.tp}: {spec.name}'s vocabulary V {spec.sizes['V']} does not divide by "
                            f"{layout.tp} (Megatron pads it to a multiple of 128 tp for training: not modelled)")
    if layout.ep > 1 and not any(g.block.ffn == "moe" for g in spec.groups):
        raise CostcalcError(f"--ep {layout.ep}: {spec.name} has no MoE layers (expert parallelism splits experts)")


def _check_group(spec: ModelSpec, group: Group, layout: Layout, flag: str, train: bool = False) -> None:
    """One layer group under a layout: a block kind modelled (a training step: softmax attention and the
    FFNs only) and every split size dividing."""
    block, sizes, tp = group.block, group.sizes, layout.tp
    name = spec.name
    kinds = ATTENTIONS if train else ATTENTIONS + MIXERS + V4 + ("none",)
    beside = block.beside and (train or block.beside not in MIXERS)
    if (block.attention not in kinds or (block.sparse and train) or beside or block.mtp
            or (block.ffn not in ("dense", "mlp", "moe", "none"))):
        what = ("softmax attention gqa, window, chunk, mla without an indexer or a mixer, dense, MLP or MoE FFNs"
                if train else f"softmax attention {', '.join(ATTENTIONS)} (mla: with or without DeepSeek's indexer), "
                f"DeepSeek-V4's {', '.join(V4)}, the mixers {', '.join(MIXERS)}, none; dense, MLP or MoE FFNs")
        raise CostcalcError(f"{flag}: {name}'s {block.key} layers are not modelled under parallelism"
                            f"{' for a training step' if train else ''} yet ({what})")
    for key, what in (("h_q", "query head count h_q"), ("m", "FFN width m"), ("m_s", "shared expert width m_s"),
                      ("h_lk", "linear-attention key head count h_lk"),
                      ("h_lv", "linear-attention value head count h_lv"), ("h_m", "Mamba-2 head count h_m"),
                      ("d_in", "Mamba inner width d_in"), ("G_o", "output-projection group count G_o")):
        if key in sizes and sizes[key] % tp:
            raise CostcalcError(f"--tp {tp}: {name}'s {what} {sizes[key]} does not divide by {tp}")
    if block.mixer == "shortconv" and sizes["d"] % tp:
        raise CostcalcError(f"--tp {tp}: {name}'s short-convolution channels d {sizes['d']} do not divide by {tp}")
    if "G" in sizes and sizes["G"] % tp and sizes["G"] != 1:
        raise CostcalcError(f"--tp {tp}: {name}'s {sizes['G']} Mamba-2 groups do not divide by {tp} and are not "
                            f"1 (vLLM's MambaMixer2 replicates a single group on every device, else asserts "
                            f"n_groups % tp == 0)")
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


def shard(group: Group, layout: Layout, rows: Optional[int] = None) -> Group:
    """A layer group at one device's sizes: every size in ``SPLIT`` divided by tp, the KV heads
    by tp or one a device where h_kv < tp (replicated), Mamba-2's groups G by tp or the one group on
    every device (G = 1: vLLM's ``MambaMixer2`` replicates it), a short convolution's channels d_c = d / tp
    (vLLM's ``ShortConv``: in_proj, conv column-parallel, out_proj row-parallel), the expert width by tp
    without ep, and
    the vocabulary ``rows`` (default V / tp, a training step's: Megatron's split of a V that divides;
    inference passes ``vocab``'s padded rows)."""
    tp, sizes = layout.tp, dict(group.sizes)
    for key in SPLIT:
        if key in sizes:
            sizes[key] //= tp
    if "V" in sizes:
        sizes["V"] = sizes["V"] // tp if rows is None else rows
    if group.block.mixer == "shortconv":      # its d channels (d_c), not the residual's d
        sizes["d_c"] = sizes["d"] // tp
    for key in ("h_kv", "G"):
        if key in sizes:
            sizes[key] = max(sizes[key] // tp, 1)
    if "m_e" in sizes and layout.ep == 1:
        sizes["m_e"] //= tp
    return Group(group.count, group.block, sizes)


def device_spec(spec: ModelSpec, layout: Layout) -> ModelSpec:
    """The model at one tensor-parallel device's sizes: every layer group ``shard``-ed and the
    vocabulary padded and divided by tp (``vocab``: vLLM's vocabulary-parallel embedding and LM head), so a recipe or a
    weight plan evaluated on it gives one device's FLOPs, bytes and matrices. What no size holds is
    the consumer's: under expert parallelism a device runs 1/ep of the routed experts' work and holds
    E/ep experts (the router stays whole: replicated); a stage of a pipeline holds its layers only
    (``costcalc.stages``)."""
    if layout.tp == 1:
        return spec
    key = (id(spec), layout.tp, layout.ep)
    hit = _SHARDED.get(key)
    if hit is not None and hit[0] is spec:      # the same model object: the same device spec (its weight plan
        return hit[1]                           # is then worked out once, ``Precision.weights``)
    rows = vocab(spec, layout)
    out = replace(spec, sizes={**spec.sizes, "V": rows}, groups=tuple(shard(g, layout, rows) for g in spec.groups),
                  mtp=None if spec.mtp is None else shard(spec.mtp, layout, rows))     # its module as a layer
    if len(_SHARDED) >= MEMO:
        _SHARDED.clear()
    _SHARDED[key] = (spec, out)
    return out


MEMO = 512          # models remembered by identity (a search asks the same few again and again)
_SHARDED: dict = {}  # (id(spec), tp, ep) -> (spec, its device spec); the spec kept so its id stays its own


def kv_replicated(spec: ModelSpec, layout: Layout) -> bool:
    return any("h_kv" in g.sizes and g.sizes["h_kv"] < layout.tp for g in spec.groups)


def groups_replicated(spec: ModelSpec, layout: Layout) -> bool:
    """Whether a Mamba-2 layer's single group (G = 1) is held whole by every tensor-parallel device."""
    return any("G" in g.sizes and g.sizes["G"] < layout.tp for g in spec.groups)
