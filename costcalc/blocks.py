"""Kinds of decoder block, by name (no sympy): what the core derives one formula for.

A block is an attention kind and an FFN kind:

- attention ``gqa``: grouped-query attention over every earlier token (MHA and MQA are
  its h_kv = h_q and h_kv = 1 cases);
- attention ``window``: the same projections, each query reading at most W keys (itself
  and the W-1 before it): sliding-window layers (Mistral, Gemma-2/3 local, gpt-oss);
- attention ``chunk``: the same projections, each query reading the keys of its own chunk
  of W_c positions (chunks aligned at the first position) up to itself: chunked local
  attention (Llama 4's RoPE layers);
- attention ``mla``: DeepSeek's multi-head latent attention -- Q directly or through a
  rank-r_q LoRA (``q_lora``), K and V from a rank-r_kv latent plus a shared RoPE key of
  d_rope; per head d_qk = d_nope + d_rope for scores and d_v for values. ``form`` is
  ``naive`` (up-project K and V for every token) or ``absorbed`` (fold the up-projections
  into the query and output: scores and values over the cached latent, as at decode) or
  ``expanded`` (the naive products, but the latent is what is cached, so ``kv_b_proj``
  expands every cached token again at each forward: what Hugging Face transformers 5 runs
  for DeepSeek-V2/V3); ``sparse`` (DeepSeek Sparse Attention, DeepSeek-V3.2 and GLM-5: key
  ``mla-sparse``): a lightning indexer of h_I heads of d_I scores every legal key of each query
  and the MLA reads only the k_I keys it selects (docs/cost-model.md, "DeepSeek Sparse Attention");
- attention ``swa``, ``hca``, ``csa``: DeepSeek-V4's layers as transformers 5.23 runs them
  (docs/cost-model.md, "DeepSeek-V4"): h_q query heads of d_h through a rank-r_q LoRA, one
  shared K=V head of d_h, a grouped low-rank output (G_o groups each to r_o, then to d), a
  rolling window of W keys; ``hca`` adds one compressed entry per R_c tokens (every legal one
  read), ``csa`` entries of two overlapping windows per R_c tokens of which a lightning indexer
  (h_I heads of d_I over compressed index keys) keeps k_I per query. Each layer also mixes its
  n_hc hyper-connection streams around the attention and the FFN;
- FFN ``dense`` (SwiGLU of width m), ``mlp`` (a non-gated MLP of width m: up d x m, down
  m x d -- GPT-NeoX, StarCoder2, Apertus) or ``moe`` (router over E experts of width m_e, k per
  token), optionally with E_s always-on ``shared`` experts of width m_s, and optionally
  a ``shared_gate`` (Qwen2-MoE: a d x 1 sigmoid gate on the shared expert); ``plain``
  experts (key ``moe_plain``) are non-gated MLPs, up and down only, shared ones too (Nemotron-H).

Token mixers that are not softmax attention (docs/cost-model.md, "Linear attention and
state-space mixers") take the attention's place; each keeps a fixed-size state per sequence
instead of a KV cache:

- ``gdn``: Gated DeltaNet (Qwen3-Next, Qwen3.5): h_lk key heads and h_lv value heads of widths
  d_lk, d_lv, a short convolution of K_c over q, k, v, a chunked scan of Q_c;
- ``kda``: Kimi Delta Attention (Kimi Linear): h_lv heads of d_lk = d_lv, per-channel decay;
- ``mamba2``: Mamba-2's SSD (Bamba, Granite 4, Nemotron-H, Falcon-H1, Zamba2): h_m heads of d_m
  channels, G groups of B and C, state N_s per channel, conv K_c, chunk Q_c;
- ``mamba1``: Mamba's selective scan (Mamba, Falcon-Mamba, Jamba, Zamba): inner width d_in,
  state N_s, dt rank r_dt, conv K_c;
- ``lightning``: MiniMax's lightning attention (h_q heads of d_h, blocks of Q_c);
- ``shortconv``: LFM2's gated short convolution (width d, kernel K_c);
- ``none``: no mixer (Nemotron-H's MLP-only and MoE-only layers).

A softmax attention may gate its output per head with a sigmoid of a second query-width
projection (``gated``: Qwen3-Next's and Qwen3.5's ``q_proj`` of twice the query width:
``gqa-gated.moe``), or per head with a sigmoid of its own ``g_proj`` of one output per head
(``head_gate``: Step-3.7's hidden_size -> heads: key ``gqa-hgated``), and may take its values from its key
projection (``k_eq_v``: Gemma 4's full-attention layers, ``attention_k_eq_v``: no ``v_proj``, the keys before
their norm and RoPE are the values: ``gqa-keqv.moe_shared``; the cache still holds both). A GQA kind's values may be
narrower or wider than its queries and keys (``dv``: v_proj and o_proj of d_v per head beside q_proj
and k_proj of d_h: MiMo-V2-Flash's 128 beside 192; key ``window-dv``). A softmax attention may run a mixer ``beside`` it in the same layer, their outputs summed
(Falcon-H1: ``gqa+mamba2``). The FFN may be ``none`` too (Nemotron-H's mixer-only layers).

A ``window`` layer's KV cache (``cache``) is ``whole`` or ``rolling`` (docs/cost-model.md,
"Sliding windows"): it changes what the shapes multiply, so only the ``full`` convention.

``Block.key`` names a block in one short string, e.g. ``gqa.dense``, ``window.moe``,
``mla_q-absorbed.moe_shared``, ``mtp:mla_q.moe_shared`` (a multi-token-prediction module of
that block: ``mtp``, never a preset's ``arch``); the seed's ``dense`` and ``moe`` are ``gqa.dense`` and
``gqa.moe``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import quote
from .vocab import ARCHS

V4 = ("swa", "hca", "csa")                                 # DeepSeek-V4: window, + compressed, + indexed compressed
SOFTMAX = ("gqa", "window", "mla", "chunk") + V4            # attention over a KV cache
MIXERS = ("gdn", "kda", "mamba2", "mamba1", "lightning", "shortconv")   # a fixed-size state instead
ATTENTIONS = SOFTMAX + MIXERS + ("none",)
FFNS = ("dense", "moe", "mlp", "none")
FORMS = ("naive", "absorbed", "expanded")
CACHES = ("whole", "rolling")
ALIASES = {"dense": "gqa.dense", "moe": "gqa.moe"}
SPARSE_TILED = ("the tiled convention does not apply to sparse attention (DeepSeek Sparse Attention): "
                "the keys its indexer selects are not tiles; use causal or full")
V4_TILED = ("the tiled convention does not apply to DeepSeek-V4's compressed attention: its compressed "
            "entries are not key tiles; use causal or full")


@dataclass(frozen=True)
class Block:
    attention: str = "gqa"
    ffn: str = "dense"
    q_lora: bool = False        # mla: Q through a rank-r_q LoRA
    form: str = "naive"         # mla: naive or absorbed
    shared: bool = False        # moe: E_s shared experts of width m_s
    shared_gate: bool = False   # moe with shared experts: a d x 1 gate
    cache: str = "whole"        # window: whole or rolling (docs/cost-model.md, Sliding windows)
    beside: str = ""            # a mixer run in parallel with the attention, outputs summed (Falcon-H1)
    gated: bool = False         # gqa kinds: q_proj also gives a per-head output gate (Qwen3-Next, Qwen3.5)
    plain: bool = False         # moe: non-gated MLP experts (up, down), shared ones too (Nemotron-H)
    sparse: bool = False        # mla: a lightning indexer selects k_I keys per query (DeepSeek Sparse Attention)
    head_gate: bool = False     # gqa kinds: a per-head sigmoid output gate, g_proj d -> h_q (Step-3.7)
    dv: bool = False            # gqa kinds: value heads of d_v (v_proj, o_proj), q and k heads of d_h (MiMo-V2-Flash)
    k_eq_v: bool = False        # gqa kinds: no v_proj, the key projection's output is also the values (Gemma 4)
    mtp: bool = False           # a multi-token-prediction module: eh_proj (2d -> d) before the block

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise ValueError(f"unknown attention kind {quote(self.attention)}; expected one of {', '.join(ATTENTIONS)}")
        if self.ffn not in FFNS:
            raise ValueError(f"unknown FFN kind {quote(self.ffn)}; expected one of {', '.join(FFNS)}")
        if self.form not in FORMS:
            raise ValueError(f"unknown MLA form {quote(self.form)}; expected one of {', '.join(FORMS)}")
        if self.attention != "mla" and (self.q_lora or self.form != "naive"):
            raise ValueError("q_lora and form apply to mla attention only")
        if self.sparse and self.attention != "mla":
            raise ValueError("sparse (a lightning indexer and top-k keys) applies to mla attention only")
        if self.ffn != "moe" and self.shared:
            raise ValueError("shared experts apply to a moe FFN only")
        if self.ffn != "moe" and self.plain:
            raise ValueError("plain (non-gated) experts apply to a moe FFN only")
        if self.shared_gate and not self.shared:
            raise ValueError("a shared-expert gate needs shared experts")
        if self.cache not in CACHES:
            raise ValueError(f"unknown window cache {quote(self.cache)}; expected one of {', '.join(CACHES)}")
        if self.cache != "whole" and self.attention != "window":
            raise ValueError("a rolling cache applies to window attention only")
        if self.beside and (self.beside not in MIXERS or self.attention not in SOFTMAX):
            raise ValueError(f"a mixer beside attention must be one of {', '.join(MIXERS)}, "
                             f"beside a softmax attention ({', '.join(SOFTMAX)})")
        if self.beside and self.v4:
            raise ValueError("a mixer beside attention does not apply to DeepSeek-V4's layers")
        if (self.gated or self.head_gate) and self.attention not in ("gqa", "window", "chunk"):
            raise ValueError("an output gate applies to gqa, window and chunk attention only")
        if self.k_eq_v and self.attention not in ("gqa", "window", "chunk"):
            raise ValueError("values from the key projection (k_eq_v) apply to gqa, window and chunk attention only")
        if self.gated and self.head_gate:
            raise ValueError("an output gate is per channel (gated) or per head (hgated), not both")
        if self.dv and self.attention not in ("gqa", "window", "chunk"):
            raise ValueError("a value head dim d_v apart from d_h applies to gqa, window and chunk attention only")
        if self.k_eq_v and self.dv:
            raise ValueError("values from the key projection (k_eq_v) have the keys' head dim: not dv")
        if self.attention == "none" and self.ffn == "none":
            raise ValueError("a block needs a mixer or an FFN")

    @property
    def attends(self) -> bool:
        """Whether the block runs softmax attention over a KV cache."""
        return self.attention in SOFTMAX

    @property
    def stateful(self) -> bool:
        """Whether the block keeps a recurrent state (a mixer other than the short convolution,
        whose only state is its window)."""
        return self.mixer not in ("", "shortconv")

    @property
    def v4(self) -> bool:
        """Whether the block is one of DeepSeek-V4's (hyper-connections, compressed attention)."""
        return self.attention in V4

    @property
    def compressed(self) -> bool:
        """Whether its attention also reads compressed entries (V4's ``hca`` and ``csa``)."""
        return self.attention in ("hca", "csa")

    @property
    def indexed(self) -> bool:
        """Whether a lightning indexer selects keys (DeepSeek Sparse Attention, V4's ``csa``)."""
        return self.sparse or self.attention == "csa"

    @property
    def mixer(self) -> str:
        """The state-keeping mixer the block runs (its own or beside its attention), or ""."""
        return self.attention if self.attention in MIXERS else self.beside

    @property
    def key(self) -> str:
        attn = self.attention + ("_q" if self.q_lora else "") + ("-sparse" if self.sparse else "")
        attn += "" if self.form == "naive" else f"-{self.form}"
        attn += "-dv" if self.dv else ""
        attn += "-gated" if self.gated else "-hgated" if self.head_gate else ""
        attn += "-keqv" if self.k_eq_v else ""
        attn += "-rolling" if self.cache == "rolling" else ""
        attn += f"+{self.beside}" if self.beside else ""
        ffn = self.ffn + ("_plain" if self.plain else "") + ("_shared" if self.shared else "") + \
            ("_gate" if self.shared_gate else "")
        return ("mtp:" if self.mtp else "") + f"{attn}.{ffn}"

    def with_form(self, form: str) -> "Block":
        """The same block under an MLA form (other attention kinds are unchanged)."""
        if self.attention != "mla" or self.form == form:
            return self
        return replace(self, form=form)

    def with_cache(self, cache: str) -> "Block":
        """The same block with a whole or rolling window cache (other attention kinds are unchanged)."""
        if self.attention != "window" or self.cache == cache:
            return self
        return replace(self, cache=cache)

    def with_mtp(self) -> "Block":
        """The same block as a multi-token-prediction module runs it: ``eh_proj`` (the main
        model's hidden state and the next token's embedding, 2d -> d) before it
        (docs/cost-model.md, "MTP layers")."""
        return replace(self, mtp=True)

    def sizes(self) -> tuple[str, ...]:
        """The size symbols this block's formulas use (besides L, d, V)."""
        out: list[str] = []
        if self.attention in ("gqa", "window", "chunk"):
            out += ["h_q", "h_kv", "d_h"] + (["W"] if self.attention == "window" else [])
            out += ["W_c"] if self.attention == "chunk" else []
            out += ["d_v"] if self.dv else []
        elif self.attention == "mla":
            out += ["h_q"] + (["r_q"] if self.q_lora else []) + ["r_kv", "d_nope", "d_rope", "d_v"]
            out += ["h_I", "d_I", "k_I"] if self.sparse else []
        elif self.v4:
            out += ["h_q", "d_h", "r_q", "G_o", "r_o", "W", "n_hc"] + (["R_c"] if self.compressed else [])
            out += ["h_I", "d_I", "k_I"] if self.attention == "csa" else []
        out += [x for x in MIXER_SIZES.get(self.mixer, ()) if x not in out]
        if self.ffn in ("dense", "mlp"):
            out += ["m"]
        elif self.ffn == "moe":
            out += ["E", "k", "m_e"] + (["E_s", "m_s"] if self.shared else [])
        return tuple(out)


    def matrices(self) -> tuple[str, ...]:
        """The operator names of this block's weight matrices (the naive MLA form: absorbed products use
        kv_b_proj's slices), as ``core.linear.block`` names them (``tests/test_weight_formats.py`` holds the
        two equal): what a weight format's exclusions are matched to (``hf/quant.py``), below the core."""
        out: list[str] = ["eh_proj"] if self.mtp else []
        if self.attention in ("gqa", "window", "chunk"):
            out += ["q_proj", "k_proj"] + ([] if self.k_eq_v else ["v_proj"]) + ["o_proj"]
            out += ["g_proj"] if self.head_gate else []
        elif self.v4:
            out += ["q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj"]
            out += ["compressor.kv_proj", "compressor.gate_proj"] if self.compressed else []
            out += ["indexer.kv_proj", "indexer.gate_proj", "indexer.q_b_proj",
                    "indexer.weights_proj"] if self.attention == "csa" else []
            out += ["attn_hc.fn", "ffn_hc.fn"]
        elif self.attention == "mla":
            out += (["q_a_proj", "q_b_proj"] if self.q_lora else ["q_proj"]) + ["kv_a_proj_with_mqa", "kv_b_proj",
                                                                                 "o_proj"]
            out += ["indexer.wq_b", "indexer.wk", "indexer.weights_proj"] if self.sparse else []
        out += list(MIXER_MATRICES.get(self.mixer, ()))
        if self.ffn == "dense":
            out += ["gate_proj", "up_proj", "down_proj"]
        elif self.ffn == "mlp":
            out += ["up_proj", "down_proj"]
        elif self.ffn == "moe":
            gated = [] if self.plain else ["gate_proj"]
            out += ["router"] + [f"experts.{p}" for p in gated + ["up_proj", "down_proj"]]
            out += [f"shared_experts.{p}" for p in gated + ["up_proj", "down_proj"]] if self.shared else []
            out += ["shared_expert_gate"] if self.shared_gate else []
        return tuple(out)


# The weight matrices of each mixer, by transformers' names (``core.linear.MIXER`` gives their shapes).
MIXER_MATRICES = {
    "gdn": ("in_proj_qkvz", "in_proj_ba", "out_proj"),
    "kda": ("q_proj", "k_proj", "v_proj", "f_a_proj", "f_b_proj", "b_proj", "g_a_proj", "g_b_proj", "o_proj"),
    "mamba2": ("in_proj", "out_proj"),
    "mamba1": ("in_proj", "x_proj", "dt_proj", "out_proj"),
    "lightning": ("qkv_proj", "output_gate", "out_proj"),
    "shortconv": ("in_proj", "out_proj"),
}

# The sizes each mixer's formulas use (docs/cost-model.md, "Linear attention and state-space mixers").
MIXER_SIZES = {
    "gdn": ("h_lk", "h_lv", "d_lk", "d_lv", "K_c", "Q_c"),
    "kda": ("h_lv", "d_lk", "d_lv", "K_c", "Q_c"),
    "mamba2": ("h_m", "d_m", "G", "N_s", "K_c", "Q_c"),
    "mamba1": ("d_in", "N_s", "r_dt", "K_c"),
    "lightning": ("h_q", "d_h", "Q_c"),
    "shortconv": ("K_c",),
}


def coerce(arch: "str | Block") -> Block:
    """A block kind from a ``Block`` or its key (the one place a key becomes a ``Block``)."""
    return arch if isinstance(arch, Block) else parse(arch)


def parse_arch(arch: object) -> Block:
    """An ``arch`` as a preset or ``--arch`` gives it -> its Block; else a ValueError with the
    one message of a bad arch, for the caller to prefix with where it came from."""
    if not isinstance(arch, str):
        raise ValueError(f"must be one of {', '.join(ARCHS)} or a block kind like window.dense, "
                         f"got {'null' if arch is None else quote(arch)}")
    try:
        return parse(arch)
    except ValueError as exc:
        raise ValueError(f"must be one of {', '.join(ARCHS)} or a block kind ATTENTION.FFN: {exc}") from None


def parse(key: str) -> Block:
    """``"mla_q-absorbed.moe_shared"``, ``"mla_q-sparse-absorbed.moe_shared"``,
    ``"window-rolling.dense"``, ``"gqa-keqv.moe_shared"`` -> Block(...); also the
    aliases ``dense``, ``moe``."""
    key = ALIASES.get(key, key)
    mtp = key.startswith("mtp:")
    key = key.removeprefix("mtp:")
    try:
        attn, ffn = key.split(".")
    except ValueError:
        raise ValueError(f"block {quote(key)} is not ATTENTION.FFN (e.g. gqa.dense, window.moe)") from None
    attn, _, beside = attn.partition("+")
    cache = "rolling" if attn.endswith("-rolling") else "whole"
    attn = attn.removesuffix("-rolling")
    k_eq_v = attn.endswith("-keqv")
    attn = attn.removesuffix("-keqv")
    head_gate = attn.endswith("-hgated")
    attn = attn.removesuffix("-hgated")
    gated = attn.endswith("-gated")
    attn = attn.removesuffix("-gated")
    dv = attn.endswith("-dv")
    attn = attn.removesuffix("-dv")
    form = next((f for f in FORMS if attn.endswith(f"-{f}")), "naive")
    attn = attn.removesuffix(f"-{form}")
    sparse = attn.endswith("-sparse")
    attn = attn.removesuffix("-sparse")
    q_lora = attn.endswith("_q")
    attn = attn.removesuffix("_q")
    gate = ffn.endswith("_gate")
    ffn = ffn.removesuffix("_gate")
    shared = ffn.endswith("_shared")
    ffn = ffn.removesuffix("_shared")
    plain = ffn.endswith("_plain")
    ffn = ffn.removesuffix("_plain")
    return Block(attn, ffn, q_lora, form, shared, gate, cache, beside, gated, plain, sparse, head_gate, dv, k_eq_v, mtp)
