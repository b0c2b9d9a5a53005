"""The project's one vocabulary, as plain names: no sympy, so a fast start can read it.

- Sizes: a model symbol's name is its key in a preset file; a workload symbol has a row
  column / CLI option stem. ``costcalc.symbols`` makes the sympy symbols from these names.
- Choices: the attention conventions, logits modes and MLA forms, as str enums that the
  core, the rows and the command line share (a row holds the plain ``.value``).
- Terms: the breakdown terms in the order columns show them, and the sums they make.
"""
from __future__ import annotations

import enum
from typing import Mapping, NamedTuple

ARCHS = ("dense", "moe")


class Name(NamedTuple):
    name: str       # the symbol's name
    key: str        # preset key (model) or row column / CLI option stem (workload)
    meaning: str


MODEL = (
    Name("L", "L", "decoder layers"),
    Name("d", "d", "model width"),
    Name("h_q", "h_q", "query heads"),
    Name("h_kv", "h_kv", "key/value heads"),
    Name("d_h", "d_h", "head dim"),
    Name("m", "m", "dense FFN width (SwiGLU or non-gated MLP)"),
    Name("E", "E", "routed experts"),
    Name("k", "k", "experts per token"),
    Name("m_e", "m_e", "expert width"),
    Name("V", "V", "vocabulary"),
    Name("W", "W", "sliding window: keys a query reads at most, itself included"),
    Name("E_s", "E_s", "shared experts (always on)"),
    Name("m_s", "m_s", "shared expert width"),
    Name("r_q", "r_q", "MLA query LoRA rank"),
    Name("r_kv", "r_kv", "MLA key/value latent rank"),
    Name("d_nope", "d_nope", "MLA per-head query/key dim without RoPE"),
    Name("d_rope", "d_rope", "MLA per-head RoPE dim (one shared key)"),
    Name("d_v", "d_v", "per-head value dim: MLA's; a GQA kind's where it differs from d_h (dv)"),
    Name("W_c", "W_c", "attention chunk: a query reads the keys of its own aligned chunk of W_c up to itself"),
    Name("h_lk", "h_lk", "linear-attention key (and query) heads"),
    Name("h_lv", "h_lv", "linear-attention value heads"),
    Name("d_lk", "d_lk", "linear-attention key head dim"),
    Name("d_lv", "d_lv", "linear-attention value head dim"),
    Name("h_m", "h_m", "Mamba-2 heads"),
    Name("d_m", "d_m", "Mamba-2 head dim (channels per head)"),
    Name("G", "G", "Mamba-2 groups of B and C"),
    Name("N_s", "N_s", "SSM state per channel"),
    Name("d_in", "d_in", "Mamba-1 inner width"),
    Name("r_dt", "r_dt", "Mamba-1 time-step rank"),
    Name("K_c", "K_c", "short convolution kernel (positions)"),
    Name("Q_c", "Q_c", "chunk of a chunked scan (tokens)"),
    Name("h_I", "h_I", "sparse attention: lightning indexer heads (index_n_heads)"),
    Name("d_I", "d_I", "sparse attention: indexer head dim, the index key per token (index_head_dim)"),
    Name("k_I", "k_I", "sparse attention: keys each query selects (index_topk)"),
    Name("R_c", "R_c", "compressed attention: tokens per compressed KV entry (DeepSeek-V4's compress rate)"),
    Name("G_o", "G_o", "grouped output projection: head groups (o_groups)"),
    Name("r_o", "r_o", "grouped output projection: rank per group (o_lora_rank)"),
    Name("n_hc", "n_hc", "hyper-connections: residual streams per token (hc_mult)"),
)

DERIVED = (
    Name("d_q", "d_q", "query width h_q*d_h"),
    Name("d_kv", "d_kv", "K (or V) width h_kv*d_h"),
    Name("d_c", "d_c", "short-convolution channels: the model width d (one device's d / tp under a layout)"),
)

WORKLOAD = (
    Name("B", "batch", "sequences in the batch"),
    Name("S", "seq", "prompt length"),
    Name("T", "context", "tokens already in the KV cache (prefix for a chunk)"),
    Name("C", "chunk", "new tokens in a chunk"),
    Name("N", "new_tokens", "output tokens of a generation"),
    Name("b_q", "tile", "queries per attention tile (tiled convention)"),
    Name("b_k", "tile", "keys per attention tile (tiled convention)"),
)

ORDER = tuple(n.name for n in MODEL + DERIVED + WORKLOAD)  # argument order of compiled expressions


def derived(sizes: Mapping[str, int]) -> dict[str, int]:
    """The derived widths d_q and d_kv from a model's head counts (where it has d_h; d_kv where
    it has h_kv: a lightning layer has query heads only)."""
    if "d_h" not in sizes:
        return {}
    kv = {"d_kv": sizes["h_kv"] * sizes["d_h"]} if "h_kv" in sizes else {}
    return {"d_q": sizes["h_q"] * sizes["d_h"], **kv}


def meaning(name: str) -> str:
    return next(n.meaning for n in MODEL + DERIVED + WORKLOAD if n.name == name)


def ident(name: str) -> str:
    """An operator's name as a Python identifier (``experts.up_proj`` -> ``experts__up_proj``):
    how the compiled recipes name its expression."""
    return name.replace(".", "__")


# --- choices ---------------------------------------------------------------------------

class Choice(str, enum.Enum):
    """A named choice: compares equal to its value and prints as it."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: "str | Choice", what: str) -> "Choice":
        """The member named ``value``; anything else is a ValueError naming the choices."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{what} must be one of {', '.join(m.value for m in cls)}, got {value!r}") from None


class Convention(Choice):
    causal = "causal"   # legal query-key pairs only
    full = "full"       # the whole rectangle the shapes imply
    tiled = "tiled"     # the tiles a block-skipping kernel visits


# Names the CLI's --convention takes beside the conventions: several at once.
CONVENTION_SETS = {"both": ("causal", "full"), "all": ("causal", "full", "tiled")}


# How a linear-attention or state-space mixer's scan is counted under each convention
# (docs/cost-model.md, "Linear attention and state-space mixers"): causal the ideal recurrence
# (each token updates and reads the state once); full and tiled the chunked algorithm as
# transformers' torch path executes it (whole chunks of Q_c, padding and inter-chunk terms).
SCAN = {"causal": "recurrent", "full": "chunked", "tiled": "chunked"}


class Logits(Choice):
    last = "last"       # one LM-head row per sequence
    all = "all"         # a row per new token
    none = "none"       # no LM head: a chunk that is not the prompt's last (no command offers it)


class MlaForm(Choice):
    auto = "auto"           # by the workload's phase (docs/cost-model.md, MLA)
    naive = "naive"
    absorbed = "absorbed"
    expanded = "expanded"   # naive, with kv_b_proj over every cached latent at each forward


class WindowCache(Choice):
    whole = "whole"         # a window layer keeps (and masks) every past key
    rolling = "rolling"     # it keeps the window's keys only (docs/cost-model.md, sliding windows)


class Draft(Choice):
    """What drafts a token at each decode step (docs/cost-model.md, "MTP layers"): nothing, or
    the model's own multi-token-prediction module (issue 23 adds a draft model beside it)."""
    none = "none"
    mtp = "mtp"


class Overlap(Choice):
    """How a layout's communication meets its compute and memory time (docs/cost-model.md, "Tensor
    and expert parallelism"): ``full`` (the default: a floor) -- hidden behind the step's compute and
    memory time wherever it is shorter (the step takes the larger); ``none`` -- each collective waits
    for the operator before it and the next waits for it (added, as serving engines run tensor-parallel
    all-reduces on the critical path).
    """
    none = "none"
    full = "full"


MEMORY_RESERVE = 0.1       # the share of a device's memory kept back from weights and KV (runtime, activations)
DEFAULT_TILE = (128, 128)   # the tiled convention's query x key tile when --tile is not given
CONVENTIONS = tuple(c.value for c in Convention)
LOGITS = tuple(x.value for x in Logits)


# --- terms -----------------------------------------------------------------------------

class Term(NamedTuple):
    name: str
    label: str              # for figures and prose
    linear: bool            # a block linear part: summed into ``linear``
    color: str              # its colour in figures


TERMS = (
    Term("attn_proj", "attention projections", True, "#4C72B0"),
    Term("mixer_proj", "linear-attention / SSM projections", True, "#2A9D8F"),
    Term("indexer_proj", "sparse-attention indexer projections", True, "#6A4C93"),
    Term("hyper", "hyper-connection mixing", True, "#9C6644"),
    Term("ffn", "FFN (SwiGLU or MLP)", True, "#55A868"),
    Term("router", "router", True, "#8172B2"),
    Term("experts", "routed experts", True, "#64B5CD"),
    Term("shared_experts", "shared experts", True, "#937860"),
    Term("attention", "attention (QK^T, AV)", False, "#C44E52"),
    Term("indexer", "sparse-attention indexer scores", False, "#B5179E"),
    Term("scan", "linear-attention / SSM scan", False, "#E76F51"),
    Term("conv", "short convolution", False, "#F4A261"),
    Term("hc_head", "hyper-connection head (once per model)", False, "#7F5539"),
    Term("lm_head", "LM head", False, "#CCB974"),
    Term("draft", "MTP draft (eh_proj, the MTP block, its logits)", False, "#8C8C8C"),
)
# Operators a model runs once, whatever its layer groups: charged in its first group only.
ONCE = ("hc_head", "lm_head")
LINEAR_PARTS = tuple(t.name for t in TERMS if t.linear)
# Columns in order: the linear parts, their sum ``linear``, the other terms, ``total``.
TERM_ORDER = LINEAR_PARTS + ("linear",) + tuple(t.name for t in TERMS if not t.linear) + ("total",)
SUMS = {"linear": LINEAR_PARTS, "total": tuple(t.name for t in TERMS)}
LABELS = {t.name: t.label for t in TERMS}


# --- memory traffic ----------------------------------------------------------------------

class Dtype(Choice):
    """Element types of weights, KV cache and activations, with their bits."""
    fp64 = "fp64"
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"

    @property
    def bits(self) -> int:
        return {"fp64": 64, "fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[self.value]

    @property
    def grouped(self) -> bool:
        """Integer weights carry one fp16 scale per group of ``--group-size`` weights."""
        return self.value in ("int8", "int4")


class Routing(Choice):
    expected = "expected"   # uniform top-k: E (1 - (1 - k/E)^n) distinct experts for n routed tokens
    worst = "worst"         # min(E, n k): every routed token hits a new expert


# Bytes a forward moves, by kind: the columns <kind>_bytes, summed into total_bytes. ``state``: a
# mixer's recurrent state (in the state dtype); its convolution window moves as ``kv`` (the KV dtype).
TRAFFIC = ("weight", "kv_read", "kv_write", "state_read", "state_write", "activation")
# An fp8 index key (DeepSeek Sparse Attention's indexer cache) carries an fp32 scale per 128 elements,
# as DeepSeek-V3.2's reference inference code and vLLM keep it: 128 + 4 bytes per key of d_I = 128.
INDEX_SCALE_BITS, INDEX_SCALE_GROUP = 32, 128
