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
  for DeepSeek-V2/V3);
- FFN ``dense`` (SwiGLU of width m), ``mlp`` (a non-gated MLP of width m: up d x m, down
  m x d -- GPT-NeoX, StarCoder2, Apertus) or ``moe`` (router over E experts of width m_e, k per
  token), optionally with E_s always-on ``shared`` experts of width m_s, and optionally
  a ``shared_gate`` (Qwen2-MoE: a d x 1 sigmoid gate on the shared expert).

A ``window`` layer's KV cache (``cache``) is ``whole`` or ``rolling`` (docs/cost-model.md,
"Sliding windows"): it changes what the shapes multiply, so only the ``full`` convention.

``Block.key`` names a block in one short string, e.g. ``gqa.dense``, ``window.moe``,
``mla_q-absorbed.moe_shared``; the seed's ``dense`` and ``moe`` are ``gqa.dense`` and
``gqa.moe``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import quote
from .vocab import ARCHS

ATTENTIONS = ("gqa", "window", "mla", "chunk")
FFNS = ("dense", "moe", "mlp")
FORMS = ("naive", "absorbed", "expanded")
CACHES = ("whole", "rolling")
ALIASES = {"dense": "gqa.dense", "moe": "gqa.moe"}


@dataclass(frozen=True)
class Block:
    attention: str = "gqa"
    ffn: str = "dense"
    q_lora: bool = False        # mla: Q through a rank-r_q LoRA
    form: str = "naive"         # mla: naive or absorbed
    shared: bool = False        # moe: E_s shared experts of width m_s
    shared_gate: bool = False   # moe with shared experts: a d x 1 gate
    cache: str = "whole"        # window: whole or rolling (docs/cost-model.md, Sliding windows)

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise ValueError(f"unknown attention kind {quote(self.attention)}; expected one of {', '.join(ATTENTIONS)}")
        if self.ffn not in FFNS:
            raise ValueError(f"unknown FFN kind {quote(self.ffn)}; expected one of {', '.join(FFNS)}")
        if self.form not in FORMS:
            raise ValueError(f"unknown MLA form {quote(self.form)}; expected one of {', '.join(FORMS)}")
        if self.attention != "mla" and (self.q_lora or self.form != "naive"):
            raise ValueError("q_lora and form apply to mla attention only")
        if self.ffn != "moe" and self.shared:
            raise ValueError("shared experts apply to a moe FFN only")
        if self.shared_gate and not self.shared:
            raise ValueError("a shared-expert gate needs shared experts")
        if self.cache not in CACHES:
            raise ValueError(f"unknown window cache {quote(self.cache)}; expected one of {', '.join(CACHES)}")
        if self.cache != "whole" and self.attention != "window":
            raise ValueError("a rolling cache applies to window attention only")

    @property
    def key(self) -> str:
        attn = self.attention + ("_q" if self.q_lora else "") + ("" if self.form == "naive" else f"-{self.form}")
        attn += "-rolling" if self.cache == "rolling" else ""
        ffn = self.ffn + ("_shared" if self.shared else "") + ("_gate" if self.shared_gate else "")
        return f"{attn}.{ffn}"

    def with_form(self, form: str) -> "Block":
        """The same block under an MLA form (other attention kinds are unchanged)."""
        if self.attention != "mla":
            return self
        return Block(self.attention, self.ffn, self.q_lora, form, self.shared, self.shared_gate)

    def with_cache(self, cache: str) -> "Block":
        """The same block with a whole or rolling window cache (other attention kinds are unchanged)."""
        if self.attention != "window":
            return self
        return Block(self.attention, self.ffn, self.q_lora, self.form, self.shared, self.shared_gate, cache)

    def sizes(self) -> tuple[str, ...]:
        """The size symbols this block's formulas use (besides L, d, V)."""
        out: list[str] = []
        if self.attention in ("gqa", "window", "chunk"):
            out += ["h_q", "h_kv", "d_h"] + (["W"] if self.attention == "window" else [])
            out += ["W_c"] if self.attention == "chunk" else []
        else:
            out += ["h_q"] + (["r_q"] if self.q_lora else []) + ["r_kv", "d_nope", "d_rope", "d_v"]
        if self.ffn in ("dense", "mlp"):
            out += ["m"]
        else:
            out += ["E", "k", "m_e"] + (["E_s", "m_s"] if self.shared else [])
        return tuple(out)


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
    """``"mla_q-absorbed.moe_shared"``, ``"window-rolling.dense"`` -> Block(...); also the
    aliases ``dense``, ``moe``."""
    key = ALIASES.get(key, key)
    try:
        attn, ffn = key.split(".")
    except ValueError:
        raise ValueError(f"block {quote(key)} is not ATTENTION.FFN (e.g. gqa.dense, window.moe)") from None
    cache = "rolling" if attn.endswith("-rolling") else "whole"
    attn = attn.removesuffix("-rolling")
    form = next((f for f in FORMS if attn.endswith(f"-{f}")), "naive")
    attn = attn.removesuffix(f"-{form}")
    q_lora = attn.endswith("_q")
    attn = attn.removesuffix("_q")
    gate = ffn.endswith("_gate")
    ffn = ffn.removesuffix("_gate")
    shared = ffn.endswith("_shared")
    ffn = ffn.removesuffix("_shared")
    return Block(attn, ffn, q_lora, form, shared, gate, cache)
