"""Dense-FFN families with sliding-window layers: every layer (mistral, phi3, starcoder2) or those
``layer_types`` names (where a family writes it, the source of truth; older fields must agree)."""
from __future__ import annotations

from functools import partial

from ...errors import quote
from ..reader import Layer, Reader, dense_layers
from .common import (Mapper, causal_only, dense, divisible, every_layer, head_dim_number, qwen_windows,
                     stated_window)


def _mistral(r: Reader) -> list[Layer]:
    stated_window(r)
    return dense_layers(r, r.heads("derive", kv="stated"), every_layer(r))


def _gemma2(r: Reader) -> list[Layer]:
    causal_only(r)
    r.same("sliding_window_size", r.get("sliding_window"), "it must equal sliding_window")
    n = r.layer_count()
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed([i % 2 == 0 for i in range(n)], ()))


def _gemma3_text(r: Reader) -> list[Layer]:
    causal_only(r)
    keys = ("sliding_window_pattern", "_sliding_window_pattern")
    given = {r.count(k, 6, minimum=1) for k in keys if r.has(k)}
    if len(given) > 1:
        raise r.error(f"fields {keys[0]!r} and {keys[1]!r} disagree")
    every = given.pop() if given else 6
    derived = [(i + 1) % every != 0 for i in range(r.layer_count())]
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed(derived, keys))


def _olmo3_windows(r: Reader) -> list[bool]:
    return r.windowed([(i + 1) % 4 != 0 for i in range(r.layer_count())], ())


def _exaone4_windows(r: Reader) -> list[bool]:
    """layer_types, else the pattern: an int p (layer i global iff (i+1) % p == 0) or, as
    published files write it, a string such as 'LLLG' (read only to check layer_types)."""
    n = r.layer_count()
    pattern = r.get("sliding_window_pattern", 4)
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise r.error(f"sliding_window_pattern {quote(pattern)} is not a string of L (local) and G (global)")
        derived = [pattern[i % len(pattern)] == "L" for i in range(n)]
    else:
        every = r.count("sliding_window_pattern", 4, minimum=1)
        derived = [(i + 1) % every != 0 for i in range(n)]
    if r.get("layer_types") is None and (isinstance(pattern, str) or not r.has("sliding_window")):
        raise r.error("needs field 'layer_types': transformers 5.23 cannot derive it from a string "
                      "sliding_window_pattern or without a sliding_window")
    return r.windowed(derived, ("sliding_window_pattern",) if r.has("sliding_window_pattern") else ())


def _smollm3_windows(r: Reader) -> list[bool]:
    n = r.layer_count()
    on = r.flag("use_sliding_window", False) and r.has("sliding_window")
    interval = r.count("no_rope_layer_interval", 4, minimum=1)
    nope = r.indices("no_rope_layers", [int((i + 1) % interval != 0) for i in range(n)])
    if len(nope) != n:
        raise r.error("'no_rope_layers' must list one flag per layer")
    local = r.windowed([on and not nope[i] for i in range(n)],
                       tuple(k for k in ("use_sliding_window", "no_rope_layers") if r.has(k)))
    if any(local) and not on:
        raise r.error("'layer_types' windows layers but use_sliding_window is not true or sliding_window is null")
    return local


def _ministral(r: Reader) -> list[Layer]:
    """layer_types decides (absent: every layer windowed when sliding_window is set, as the class
    derives it); head_dim must be a number (5.23 reads it as is: null cannot build)."""
    stated_window(r)
    n = r.layer_count()
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed([r.has("sliding_window")] * n, ()))


def _cohere2(r: Reader) -> list[Layer]:
    """Windows per layer_types (absent: sliding_window_pattern p, default 4, layer i global iff
    (i+1) % p == 0); d_h = head_dim when the config carries it, else hidden_size // heads; a
    parallel SwiGLU block. Keys of the original release that 5.23 does not read must say what it runs."""
    head_dim_number(r)
    r.same("order_of_interleaved_layers", "local_attn_first", "transformers 5.23 puts the sliding layers first")
    r.same("use_gated_activation", True, "transformers 5.23 always runs the gated (SwiGLU) MLP")
    r.same("use_embedding_sharing", r.flag("tie_word_embeddings", True),
           "it must equal tie_word_embeddings (which transformers 5.23 reads)")
    every = r.count("sliding_window_pattern", 4, minimum=1)
    n = r.layer_count()
    local = r.windowed([(i + 1) % every != 0 for i in range(n)],
                       ("sliding_window_pattern",) if r.has("sliding_window_pattern") else ())
    stated_window(r, any(local))
    return dense_layers(r, r.heads("derive"), local)


def _vaultgemma(r: Reader) -> list[Layer]:
    """Gemma 2's layers without its extra norms: windows per layer_types (absent: the even layers);
    head_dim and num_key_value_heads must be stated (fixed class defaults); transformers refuses a
    hidden_size that is not a multiple of the heads."""
    divisible(r, "hidden_size", "num_attention_heads")
    n = r.layer_count()
    local = r.windowed([i % 2 == 0 for i in range(n)], ())
    stated_window(r, any(local))
    return dense_layers(r, r.heads("require", kv="stated"), local)

MAPPERS: dict[str, Mapper] = {
    "mistral": _mistral,
    "qwen2": dense(kv="stated", windows=partial(qwen_windows, below=False)),
    "mimo": dense(kv="stated", windows=partial(qwen_windows, below=False)),   # remote code: Qwen2's decoder
    "qwen3": dense("require", "stated", windows=partial(qwen_windows, below=False)),
    "phi3": dense(windows=every_layer),
    "starcoder2": dense(kv="stated", ffn="mlp", windows=every_layer),
    "olmo3": dense(windows=_olmo3_windows),
    "exaone4": dense(kv="stated", windows=_exaone4_windows),
    "smollm3": dense(kv="stated", windows=_smollm3_windows),
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    "ministral": _ministral,
    "cohere2": _cohere2,
    "vaultgemma": _vaultgemma,
}


def _mimo_mtp(r: Reader, layers: list[Layer]) -> Layer:
    """MiMo-7B's MTP module (remote ``MiMoMTPLayers``: input_proj 2d -> d, then ``Qwen2Attention(config,
    layer_idx=0)`` and ``Qwen2MLP``): a decoder layer of layer 0's kind (windowed as layer 0 is)."""
    return layers[0]


# The decoder block of a family's MTP module where it is not the last layer's (hf.MTP_KEYS).
MTP_LAYERS = {"mimo": _mimo_mtp}
