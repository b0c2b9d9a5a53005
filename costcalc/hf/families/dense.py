"""Families whose every layer attends to all keys (no sliding window) with a dense FFN: SwiGLU, or
a non-gated MLP (FFN ``mlp``: GPT-NeoX, Apertus, GPT-J, Phi, Nemotron, GPT-BigCode, OPT, Bloom,
MPT, Arcee). Fused projections cost the projections they fuse; parallel attention/MLP blocks
(Cohere, GPT-NeoX, GPT-J, Phi, StableLM) run the same matmuls as serial ones; learned positions and
ALiBi run no matmul."""
from __future__ import annotations

from ...errors import quote
from ..reader import Layer, Reader, dense_layers
from ..tables import SUBTABLES
from .common import Mapper, dense, divisible, hunyuan_keys, inner_width, no_windows


def _gptj(r: Reader) -> list[Layer]:
    """Multi-head attention (q, k, v, out_proj, each d x d; d_h = n_embd // n_head) and a
    non-gated MLP of n_inner (null: 4 * n_embd) in a parallel block; the LM head's bias is not counted."""
    divisible(r, "n_embd", "n_head")
    return [{"arch": "gqa.mlp", **r.heads("mha"), "m": inner_width(r)} for _ in range(r.layer_count())]


def _stablelm(r: Reader) -> list[Layer]:
    """d_h = hidden_size // heads, which transformers requires to divide exactly; SwiGLU."""
    divisible(r, "hidden_size", "num_attention_heads")
    return dense_layers(r, r.heads("derive", kv="stated"), no_windows(r))


def _nemotron(r: Reader) -> list[Layer]:
    """num_key_value_heads must be stated (the class default null makes the attention fail)."""
    r.need("num_key_value_heads")
    return dense_layers(r, r.heads("derive", kv="stated"), no_windows(r), ffn="mlp")


def _helium(r: Reader) -> list[Layer]:
    """Llama's layers, but o_proj is hidden_size x hidden_size: heads x head_dim must equal hidden_size."""
    heads = r.heads("require", kv="stated")
    if heads["h_q"] * heads["d_h"] != r.need("hidden_size"):
        raise r.error(f"num_attention_heads x head_dim ({heads['h_q']} x {heads['d_h']}) must equal hidden_size "
                      f"({r.need('hidden_size')}): Helium's o_proj is hidden_size x hidden_size")
    return dense_layers(r, heads, [False] * r.layer_count())


def _gpt_bigcode(r: Reader) -> list[Layer]:
    """Multi-query (multi_query true: one K/V head) or multi-head attention through one fused c_attn
    d x (d + 2 h_kv d_h), c_proj d x d, and a non-gated MLP of n_inner (null: 4 * n_embd). The learned
    position table (wpe) is a lookup: no matmul, its parameters not counted."""
    divisible(r, "n_embd", "n_head")
    if r.flag("add_cross_attention", False):
        raise r.error("add_cross_attention is true: cross-attention blocks are not modelled (decoder-only models)")
    heads = r.heads("mha")
    if r.flag("multi_query", True):
        heads["h_kv"] = 1
    r.same("num_key_value_heads", heads["h_kv"], f"multi_query is {str(r.flag('multi_query', True)).lower()} "
                                                  f"(transformers runs {heads['h_kv']} key/value heads)")
    return [{"arch": "gqa.mlp", **heads, "m": inner_width(r)} for _ in range(r.layer_count())]


def _opt(r: Reader) -> list[Layer]:
    """Multi-head attention (q, k, v, out_proj d x d), non-gated ReLU MLP of ffn_dim. A
    word_embed_proj_dim other than hidden_size adds project_in / project_out products and an LM head
    of that width, which costcalc does not model: refused."""
    divisible(r, "hidden_size", "num_attention_heads")
    d = r.need("hidden_size")
    if r.has("word_embed_proj_dim") and r.need("word_embed_proj_dim") != d:
        raise r.error(f"word_embed_proj_dim ({r.need('word_embed_proj_dim')}) != hidden_size ({d}): transformers "
                      f"then runs project_in/project_out products and a narrower LM head, which costcalc does not model")
    return dense_layers(r, r.heads("mha"), no_windows(r), ffn="mlp", width="ffn_dim")


def _bloom(r: Reader) -> list[Layer]:
    """Multi-head attention through a fused query_key_value d x 3d (ALiBi: elementwise), dense d x d,
    and a non-gated GELU MLP of 4 x hidden_size (n_inner is not read)."""
    divisible(r, "hidden_size", "n_head")
    d = r.need("hidden_size")
    r.same("n_inner", 4 * d, "transformers 5.23 builds an MLP of 4 x hidden_size whatever it says")
    return [{"arch": "gqa.mlp", **r.heads("mha"), "m": 4 * d} for _ in range(r.layer_count())]


def _mpt(r: Reader) -> list[Layer]:
    """Multi-head attention through a fused Wqkv d x 3d (ALiBi: elementwise), out_proj d x d, and a
    non-gated GELU MLP of 4 x d_model: 5.23 reads neither expansion_ratio nor attn_type, so a config
    that says otherwise is refused (its checkpoint is not the model transformers builds)."""
    divisible(r, "d_model", "n_heads")
    attn = r.get("attn_config", {})
    if not isinstance(attn, dict):
        raise r.error(f"field 'attn_config' must be an object, got {quote(attn)}")
    known = SUBTABLES["mpt"]["attn_config"].known()
    for key, value in attn.items():
        if value is not None and key not in known:
            raise r.error(f"field 'attn_config.{key}' is not understood and may change the cost; costcalc does "
                          f"not guess -- remove it if it does not")
    kind = attn.get("attn_type") or "multihead_attention"
    if kind != "multihead_attention":
        raise r.error(f"attn_config.attn_type is {quote(kind)}: transformers 5.23 builds multi-head attention (Wqkv "
                      f"d x 3d) whatever it says, which is not this checkpoint's model")
    r.same("expansion_ratio", 4, "transformers 5.23 builds an MLP of 4 x d_model whatever it says")
    return [{"arch": "gqa.mlp", **r.heads("mha"), "m": 4 * r.need("d_model")} for _ in range(r.layer_count())]


def _hunyuan_v1_dense(r: Reader) -> list[Layer]:
    """Llama's layers with per-head QK norms; head_dim must be a number (the class default null
    cannot build); the remote-code keys held to what 5.23 runs (``hunyuan_keys``)."""
    heads = r.heads("require")
    hunyuan_keys(r, heads["d_h"])
    return dense_layers(r, heads, no_windows(r))


def _arcee(r: Reader) -> list[Layer]:
    """Llama's attention with a non-gated ReLU^2 MLP (up_proj, down_proj); transformers refuses a
    hidden_size that is not a multiple of the heads."""
    divisible(r, "hidden_size", "num_attention_heads")
    return dense_layers(r, r.heads("derive"), no_windows(r), ffn="mlp")

MAPPERS: dict[str, Mapper] = {
    "llama": dense(),
    "granite": dense(),
    "olmo": dense(),
    "olmo2": dense(),
    "gemma": dense("require", "stated", causal=True),
    "cohere": dense(),
    "glm4": dense("require", "stated"),
    "glm": dense("require", "stated"),
    "seed_oss": dense("stated", "stated"),
    "ernie4_5": dense("stated", "stated"),
    "helium": _helium,
    "stablelm": _stablelm,
    "hunyuan_v1_dense": _hunyuan_v1_dense,
    "gpt_neox": dense("mha", ffn="mlp"),
    "apertus": dense(ffn="mlp"),
    "gptj": _gptj,
    "phi": dense(ffn="mlp"),
    "nemotron": _nemotron,
    "gpt_bigcode": _gpt_bigcode,
    "opt": _opt,
    "bloom": _bloom,
    "mpt": _mpt,
    "arcee": _arcee,
}
