"""Counting what the decoder executes, operator by operator, under three attention conventions.

``torch.utils.flop_counter.FlopCounterMode`` counts every ``mm`` from shapes. Its gaps
(see docs/torch-counting.md) are closed here:

- every attention product goes through a ``verify.model.Attend`` module; the counter attaches
  an observer to each one for the time it counts, which sees the real tensors and mask and
  records three counts per call -- ``full`` (the Sq x Sk rectangle, torch's own convention),
  ``causal`` (the allowed pairs in the mask: sliding windows included) and ``tiled`` (the area
  of the b_q x b_k blocks holding at least one allowed pair, edge-aware, tiles aligned at key
  0 of the whole sequence, where a rolling window cache has dropped keys before these) -- at ``2 E + 2 Ev`` FLOPs a pair (score width E, value width Ev: they differ for MLA).
- the fused SDPA ops (on CPU ``_scaled_dot_product_flash_attention_for_cpu`` counts 0 in the
  stock registry) get a formula giving the full rectangle, so the counter's own total stays
  whole; where SDPA falls back to its math path (value width != score width) torch counts
  the two bmm itself, also the full rectangle.
- a sparse MLA layer's indexer scores go through its ``IndexScore`` module (``verify.model``): an
  observer records ``full`` (every key of the rectangle, what its two matmuls run) and ``causal``
  (the legal pairs) at ``2 h_I d_I + 2 h_I`` FLOPs a pair; its top-k reaches the attention as a
  mask, whose allowed pairs are the selected keys (``causal``: min(p, k_I) a query).
- linear FLOPs come from the counter's per-module keys: each ``nn.Linear`` (and each MLA
  absorb product) is the core's operator of the same name (``operator_of``: the module's
  path without layer and expert indices), so every projection is checked against the core's
  number for it; the operators plus the full attention must equal the counter's Global total.
  A linear operator's term is its layer's (``costcalc.core.linear``): two layer kinds may name
  an operator alike and charge it to different terms (Kimi Linear's KDA and MLA ``o_proj``).
- a linear-attention or state-space mixer's scan products and convolution go through its
  ``Scan`` and ``Conv`` modules, one of each per form (``verify.mixers``). While counting, each
  mixer runs both forms (the other on a copy of the state, its output dropped): the
  ``recurrent`` form's counts are the ``causal`` convention's scan and conv, the ``chunked``
  form's those of ``full`` and ``tiled`` (``costcalc.vocab.SCAN``).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import contextlib

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from costcalc.blocks import FORMS as MLA_FORMS
from costcalc.core import linear
from costcalc.vocab import CONVENTIONS, SCAN, SUMS

from .mixers import FORMS, Conv, Mixer, Scan
from .model import Absorb, Attend, IndexScore

aten = torch.ops.aten
_SDPA_NAMES = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
               "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention")
SDPA_OPS = [getattr(aten, n) for n in _SDPA_NAMES if hasattr(aten, n)]
_CONTAINERS = ("layers", "attn", "ffn", "mixer")   # module path parts that are not part of an operator's name


def operator_of(module: str) -> str:
    """The core's operator of a decoder module: ``layers.3.ffn.experts.5.up_proj`` is
    ``experts.up_proj``, ``layers.0.attn.q_proj`` is ``q_proj``, ``lm_head`` is ``lm_head``."""
    return ".".join(p for p in module.split(".") if not p.isdigit() and p not in _CONTAINERS)


def allowed_pairs(mask: torch.Tensor | None, sq: int, sk: int) -> torch.Tensor:
    """Boolean [.., Sq, Sk] of the pairs a query may attend (bool mask, or additive -inf bias)."""
    if mask is None:
        return torch.ones(sq, sk, dtype=torch.bool)
    return mask if mask.dtype == torch.bool else torch.isfinite(mask) & (mask > torch.finfo(mask.dtype).min)


def tiled_area(allowed: torch.Tensor, b_q: int, b_k: int) -> int:
    """Sum over (b_q x b_k) tiles holding any allowed pair of the tile's real area; last tiles may be short."""
    *lead, sq, sk = allowed.shape
    nq, nk = -(-sq // b_q), -(-sk // b_k)
    padded = torch.zeros(*lead, nq * b_q, nk * b_k, dtype=torch.bool, device=allowed.device)
    padded[..., :sq, :sk] = allowed
    occupied = padded.view(*lead, nq, b_q, nk, b_k).any(dim=-1).any(dim=-2)   # [.., nq, nk]
    rows = torch.full((nq,), b_q, device=allowed.device)
    rows[-1] = sq - (nq - 1) * b_q
    cols = torch.full((nk,), b_k, device=allowed.device)
    cols[-1] = sk - (nk - 1) * b_k
    return int((occupied * (rows[:, None] * cols[None, :])).sum())


@dataclass
class AttentionRecorder:
    """Collects the three conventions' counts of every attention product made while counting."""
    tile: tuple[int, int]
    flops: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONVENTIONS, 0))

    def record(self, query, key, value, mask, offset: int = 0) -> None:
        b, h, sq, dq = query.shape
        sk, dv = key.shape[-2], value.shape[-1]
        allowed = allowed_pairs(mask, sq, sk)
        allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
        # keys a rolling cache dropped (none allowed) come back for the tiles: aligned at key 0
        dropped = allowed.new_zeros(*allowed.shape[:-1], offset)
        copies = (b // allowed.shape[0]) * (h // allowed.shape[1])   # broadcast over batch, heads
        per_pair = 2 * dq + 2 * dv                                    # QK^T and AV
        self.flops["full"] += per_pair * b * h * sq * sk
        self.flops["causal"] += per_pair * copies * int(allowed.sum())
        self.flops["tiled"] += per_pair * copies * tiled_area(torch.cat([dropped, allowed], -1), *self.tile)


@dataclass
class IndexRecorder:
    """The indexer's scores per convention: ``full`` every key of the rectangle (the counter's own
    count of its matmuls), ``causal`` the legal pairs; ``tiled`` does not apply (refused)."""
    flops: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONVENTIONS, 0))

    def record(self, q, k, allowed) -> None:
        b, c, heads, width = q.shape
        per_pair = 2 * heads * width + 2 * heads              # q . k per head, then the weighted head sum
        self.flops["full"] += per_pair * b * c * k.shape[1]
        self.flops["causal"] += per_pair * b * int(allowed.sum())


def sdpa_full(query, key, value, *args, out_val=None, **kwargs) -> int:
    """The fused SDPA ops' FLOPs as torch's convention has them: the full rectangle."""
    b, h, sq, dq = query.shape
    return (2 * dq + 2 * value.shape[-1]) * b * h * sq * key.shape[-2]


sdpa_full._get_raw = True


# What FlopCounterMode does not count inside a mixer, counted by ``Uncounted``: elementwise
# arithmetic (one FLOP an output element; a reduction one an input element) and the unit
# triangular solves of the chunked delta rule (n - 1 multiply-adds an output element on average).
_POINTWISE = ("add", "sub", "mul", "div", "exp", "log", "neg", "reciprocal", "sigmoid", "silu", "softplus",
              "rsqrt", "sqrt", "pow", "tanh", "exp2", "addcmul", "addcdiv", "lerp", "rsub")
_REDUCTIONS = ("sum", "mean", "cumsum", "prod", "cumprod", "logsumexp")
POINTWISE = {getattr(torch.ops.aten, n) for n in _POINTWISE if hasattr(torch.ops.aten, n)}
REDUCTIONS = {getattr(torch.ops.aten, n) for n in _REDUCTIONS if hasattr(torch.ops.aten, n)}
SOLVES = {torch.ops.aten.linalg_solve_triangular}


class Uncounted(TorchDispatchMode):
    """A second counter, over what FlopCounterMode does not see while a mixer's scan and
    convolution run (``watch(form)``): ``elementwise`` FLOPs and ``solve`` FLOPs per form. The
    formulas leave both out (docs/cost-model.md); verify reports their measured size."""

    def __init__(self) -> None:
        super().__init__()
        self.form = None
        self.flops = {f: {"elementwise": 0, "solve": 0} for f in FORMS}

    @contextlib.contextmanager
    def watch(self, form: str):
        outer, self.form = self.form, form
        try:
            yield
        finally:
            self.form = outer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.form is not None:
            packet = func.overloadpacket
            if packet in SOLVES:
                n = args[0].shape[-1]       # n (n - 1) / 2 multiply-adds a column: n - 1 FLOPs an element
                self.flops[self.form]["solve"] += (n - 1) * out.numel()
            elif packet in POINTWISE and isinstance(out, torch.Tensor):
                self.flops[self.form]["elementwise"] += out.numel()
            elif packet in REDUCTIONS and isinstance(args[0], torch.Tensor):
                self.flops[self.form]["elementwise"] += args[0].numel()
        return out


@dataclass
class Counted:
    """Executed FLOPs per linear operator (``lm_head`` included) and per term its layers charge
    them to; attention per convention; the mixers' ``scan`` and ``conv`` per form."""
    operators: dict[str, int]
    attention: dict[str, int]
    terms: dict[str, int] = field(default_factory=dict)
    mixers: dict[str, dict[str, int]] = field(default_factory=lambda: {f: {"scan": 0, "conv": 0} for f in FORMS})
    uncounted: dict[str, dict[str, int]] = field(default_factory=dict)   # per form: elementwise, solve FLOPs
    indexer: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONVENTIONS, 0))   # per convention

    def term(self, name: str, convention: str, term_of: dict[str, str] | None = None) -> int:
        """A breakdown term (or ``linear``/``total``) from the operators its layers charge to it."""
        mixer = self.mixers[SCAN[convention]]
        if name == "attention":
            return self.attention[convention]
        if name == "indexer":
            return self.indexer[convention]
        if name in mixer:
            return mixer[name]
        if name == "total":
            return (sum(self.operators.values()) + self.attention[convention] + self.indexer[convention]
                    + sum(mixer.values()))
        if name == "linear":
            return sum(v for t, v in self.terms.items() if t in SUMS["linear"])
        return self.terms.get(name, 0)


class Counter:
    """``with Counter(model, tile) as c: model(...)``; then ``c.result()``. The attention
    observers live on the model's ``Attend`` modules only while counting."""

    def __init__(self, model: nn.Module, tile: tuple[int, int] = (128, 128)) -> None:
        self.model = model
        self.recorder = AttentionRecorder(tile)
        self.index_recorder = IndexRecorder()
        self.mode = FlopCounterMode(display=False, custom_mapping={op: sdpa_full for op in SDPA_OPS})
        root = type(model).__name__
        self.keys = {f"{root}.{name}": (operator_of(name), term_in(model, name))
                     for name, mod in model.named_modules() if isinstance(mod, (nn.Linear, Absorb))}
        # a mixer's products and convolution: ``layers.0.mixer.scan.chunked`` -> (scan, chunked)
        self.parts = {f"{root}.{name}": tuple(name.split(".")[-2:])
                      for name, mod in model.named_modules() if isinstance(mod, (Scan, Conv))}
        self.attends = [mod for mod in model.modules() if isinstance(mod, Attend)]
        self.scores = [mod for mod in model.modules() if isinstance(mod, IndexScore)]
        self.mixers = [mod for mod in model.modules() if isinstance(mod, Mixer)]
        self.uncounted = Uncounted() if self.mixers else None

    def __enter__(self) -> "Counter":
        for mod in self.attends:
            mod.observers.append(self.recorder.record)
        for mod in self.scores:
            mod.observers.append(self.index_recorder.record)
        for mod in self.mixers:
            mod.also = FORMS
            mod.watchers.append(self.uncounted.watch)
        self.mode.__enter__()
        if self.uncounted is not None:
            self.uncounted.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.uncounted is not None:
            self.uncounted.__exit__(*exc)
        self.mode.__exit__(*exc)
        for mod in self.attends:
            mod.observers.remove(self.recorder.record)
        for mod in self.scores:
            mod.observers.remove(self.index_recorder.record)
        for mod in self.mixers:
            mod.also = ()
            mod.watchers.remove(self.uncounted.watch)

    def result(self) -> Counted:
        counts = self.mode.get_flop_counts()
        operators: dict[str, int] = defaultdict(int)
        terms: dict[str, int] = defaultdict(int)
        for key, (op, term) in self.keys.items():
            got = sum(counts.get(key, {}).values())
            operators[op] += got
            terms[term] += got
        mixers = {f: {"scan": 0, "conv": 0} for f in FORMS}
        for key, (part, form) in self.parts.items():
            mixers[form][part] += sum(counts.get(key, {}).values())
        total = self.mode.get_total_flops()
        accounted = (sum(operators.values()) + self.recorder.flops["full"] + self.index_recorder.flops["full"]
                     + sum(sum(m.values()) for m in mixers.values()))
        if accounted != total:
            raise AssertionError(f"counter total {total} != operators {accounted}: an op was not attributed")
        return Counted(dict(operators), dict(self.recorder.flops), dict(terms), mixers,
                       self.uncounted.flops if self.uncounted is not None else {}, dict(self.index_recorder.flops))


def term_in(model: nn.Module, name: str) -> str:
    """The term the core charges a linear module to, by its layer's block kind (any MLA form)."""
    parts = name.split(".")
    if parts[0] != "layers" or not hasattr(model, "c"):
        return linear.LM_HEAD.term if operator_of(name) == linear.LM_HEAD.name else "?"
    block = model.c.layers[int(parts[1])].block
    terms = {p.name: p.term for form in MLA_FORMS for p in linear.block(block.with_form(form))}
    return terms.get(operator_of(name), "?")
