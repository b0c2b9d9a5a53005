"""State-space families: Mamba-2 mixers alone (mamba2), beside attention layers (bamba,
granitemoehybrid, nemotron_h) or in parallel with attention in every layer (falcon_h1).

A Mamba-2 mixer is ``mamba2`` with h_m heads of d_m channels (h_m x d_m is the mixer width), G
groups of B and C, state N_s, conv kernel K_c and the chunk Q_c the config gives (transformers'
torch path scans in chunks of it). transformers 5.23 keeps every family's recurrent state in
float32 (its chunked scan computes in float32; Nemotron-H's ``mamba_ssm_cache_dtype`` is not read)
and the convolution window in the model dtype: ``state_dtype`` fp32. Zamba2's shared attention
blocks (LoRA adapters per use, an input of twice the width) are no block costcalc has: refused
(``hf.OUT_OF_REACH``)."""
from __future__ import annotations

from ...errors import quote
from ..reader import Layer, Reader

_MAMBA, _ATTENTION = "linear_attention", "full_attention"
_LEGACY = {"mamba": _MAMBA, "attention": _ATTENTION, "hybrid": "hybrid"}


def _mixer(r: Reader, heads: str, head_dim: str, groups: str, state: str, conv: str, chunk: str, width: int,
           chunk_default: int = 256) -> dict:
    """The mamba2 sizes. Heads, head width, groups and state must be stated (their class defaults are
    the example model's); ``head_dim`` 'auto' is width // heads; heads x head_dim must be the mixer
    width (transformers refuses otherwise). The conv kernel (4) and the chunk take the class default."""
    h_m = r.need(heads)
    d_m = width // h_m if r.get(head_dim) == "auto" else r.need(head_dim)
    if h_m * d_m != width:
        raise r.error(f"{heads} x {head_dim} ({h_m} x {d_m}) must equal the mixer width ({width}): "
                      f"transformers refuses the config")
    sizes = {"h_m": h_m, "d_m": d_m, "G": r.need(groups), "N_s": r.need(state), "K_c": r.count(conv, 4, 1),
             "Q_c": r.count(chunk, chunk_default, 1)}
    if h_m % sizes["G"]:
        raise r.error(f"{heads} ({h_m}) must be divisible by {groups} ({sizes['G']})")
    return sizes


def _hf_mamba(r: Reader, width: int) -> dict:
    """bamba, granitemoehybrid, falcon_h1: the mamba_* keys (each with the class default where absent
    except the sizes the class takes from its example model)."""
    return _mixer(r, "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv",
                  "mamba_chunk_size", width)


def _layer_list(r: Reader, key: str, allowed: tuple[str, ...]) -> list[str]:
    kinds = r.get(key)
    if not isinstance(kinds, list) or len(kinds) != r.layer_count():
        raise r.error(f"{quote(key)} must list one type per layer (num_hidden_layers)")
    return _known_kinds(r, kinds, allowed)


def _known_kinds(r: Reader, kinds: list, allowed: tuple[str, ...]) -> list[str]:
    """The layer types with legacy names read as today's, each one the family runs."""
    kinds = [_LEGACY.get(k, k) if isinstance(k, str) else k for k in kinds]
    for kind in kinds:
        if kind not in allowed:
            raise r.error(f"layer type {quote(kind)} is not one this family runs (expected {', '.join(allowed)})")
    return kinds


def _mamba2(r: Reader) -> list[Layer]:
    d = r.need("hidden_size")
    sizes = _mixer(r, "num_heads", "head_dim", "n_groups", "state_size", "conv_kernel", "chunk_size",
                   r.count("expand", 2) * d)
    return [{"arch": "mamba2.none", **sizes} for _ in range(r.layer_count())]


def _bamba(r: Reader) -> list[Layer]:
    """attn_layer_indices attend, the other layers run the mixer; every layer has a SwiGLU of m."""
    n = r.layer_count()
    attend = set(r.indices("attn_layer_indices", []))
    kinds = [_ATTENTION if i in attend else _MAMBA for i in range(n)]
    for key in ("layer_types", "layers_block_type"):
        if r.has(key) and _layer_list(r, key, (_MAMBA, _ATTENTION)) != kinds:
            raise r.error(f"{quote(key)} disagrees with attn_layer_indices (transformers reads attn_layer_indices)")
    mixer = _hf_mamba(r, r.count("mamba_expand", 2) * r.need("hidden_size"))
    heads, m = r.heads("derive"), r.need("intermediate_size")
    return [{"arch": "gqa.dense", **heads, "m": m} if k == _ATTENTION else {"arch": "mamba2.dense", **mixer, "m": m}
            for k in kinds]


def _granitemoehybrid(r: Reader) -> list[Layer]:
    """layer_types (absent: every layer the mixer); every layer then runs a shared SwiGLU of
    shared_intermediate_size, beside E routed SwiGLU experts of intermediate_size when E > 0."""
    n = r.layer_count()
    kinds = _layer_list(r, "layer_types", (_MAMBA, _ATTENTION)) if r.has("layer_types") else [_MAMBA] * n
    mixer = _hf_mamba(r, r.count("mamba_expand", 2) * r.need("hidden_size")) if _MAMBA in kinds else {}
    heads = r.heads("derive") if _ATTENTION in kinds else {}
    experts = r.int("num_local_experts", 0) if r.has("num_local_experts") else r.need("num_local_experts")
    m_s = r.need("shared_intermediate_size")
    ffn = ({"ffn": "moe_shared", "E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size"),
            "E_s": 1, "m_s": m_s} if experts else {"ffn": "dense", "m": m_s})
    kind = ffn.pop("ffn")
    return [{"arch": f"gqa.{kind}", **heads, **ffn} if k == _ATTENTION else {"arch": f"mamba2.{kind}", **mixer, **ffn}
            for k in kinds]


def _falcon_h1(r: Reader) -> list[Layer]:
    """Every layer: attention and the mixer side by side on the same input, outputs summed, then
    a SwiGLU of m (gqa+mamba2.dense). The mixer width is mamba_d_ssm (null: mamba_expand x d)."""
    n = r.layer_count()
    for key in ("layer_types", "layers_block_type"):
        if r.has(key) and _layer_list(r, key, ("hybrid",)) != ["hybrid"] * n:
            raise r.error(f"{quote(key)} must say hybrid for every layer (transformers builds only those)")
    width = r.need("mamba_d_ssm") if r.has("mamba_d_ssm") else r.count("mamba_expand", 2) * r.need("hidden_size")
    mixer = _hf_mamba(r, width)
    return [{"arch": "gqa+mamba2.dense", **r.heads("derive"), **mixer, "m": r.need("intermediate_size")}
            for _ in range(n)]


def _nemotron_h_kinds(r: Reader) -> list[str]:
    """layers_block_type, else hybrid_override_pattern (M * - E); num_hidden_layers is not read but
    must agree where written."""
    if r.has("layers_block_type"):
        kinds = r.get("layers_block_type")
    elif r.has("hybrid_override_pattern"):
        pattern = r.get("hybrid_override_pattern")
        letters = {"M": _MAMBA, "*": _ATTENTION, "-": "mlp", "E": "moe"}
        if not isinstance(pattern, str) or any(c not in letters for c in pattern):
            raise r.error(f"field 'hybrid_override_pattern' must be a string of M, *, - and E, got {quote(pattern)}")
        kinds = [letters[c] for c in pattern]
    else:
        raise r.error("needs field 'layers_block_type' (or the legacy 'hybrid_override_pattern'): the class "
                      "default is only its example model")
    if not isinstance(kinds, list) or not kinds:
        raise r.error("'layers_block_type' must list one type per layer")
    from ...spec import MAX_LAYERS

    if len(kinds) > MAX_LAYERS:
        raise r.error(f"too many layers (at most {MAX_LAYERS:,})")
    if r.has("num_hidden_layers") and r.layer_count() != len(kinds):
        raise r.error(f"num_hidden_layers ({r.layer_count()}) is not the number of layers the layer list gives "
                      f"({len(kinds)}): transformers reads the list")
    return _known_kinds(r, kinds, (_MAMBA, _ATTENTION, "mlp", "moe"))


def _nemotron_h(r: Reader) -> list[Layer]:
    """Each layer is ONE sublayer: the mixer (mamba2.none), attention (gqa.none), a non-gated relu2
    MLP of intermediate_size (none.mlp) or an MoE of non-gated experts with one non-gated shared
    expert (none.moe_plain_shared). A latent projection around the experts is not modelled."""
    kinds = _nemotron_h_kinds(r)
    cache_dtype = r.get("mamba_ssm_cache_dtype")      # not read by 5.23 (the state is fp32), but must be a dtype
    if cache_dtype is not None and cache_dtype not in ("float32", "bfloat16", "float16"):
        raise r.error(f"field 'mamba_ssm_cache_dtype' must be float32, bfloat16 or float16, got {quote(cache_dtype)}")
    out_of_reach = r.get("moe_latent_size")
    if out_of_reach is not None and "moe" in kinds:
        raise r.error(f"moe_latent_size ({quote(out_of_reach)}) puts a latent projection around the experts "
                      f"(fc1_latent_proj/fc2_latent_proj, experts of the latent width), which costcalc does not model")
    layers: list[Layer] = []
    sizes: dict[str, dict] = {}
    if _MAMBA in kinds:
        sizes[_MAMBA] = _mixer(r, "mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel",
                               "chunk_size", r.need("mamba_num_heads") * r.need("mamba_head_dim"), chunk_default=128)
    if _ATTENTION in kinds:
        if "head_dim" not in r.config and not r.has("attention_head_dim"):
            raise r.error("needs field 'head_dim' (its class default is a fixed number, not derived from the other sizes)")
        if r.has("attention_head_dim") and r.has("head_dim"):
            r.same("attention_head_dim", r.get("head_dim"), "it must equal head_dim")
        heads = r.heads("derive", kv="stated") if r.has("head_dim") else \
            {**r.heads("derive", kv="stated"), "d_h": r.need("attention_head_dim")}
        sizes[_ATTENTION] = heads
    if "mlp" in kinds:
        sizes["mlp"] = {"m": r.need("intermediate_size")}
    if "moe" in kinds:
        r.same("n_shared_experts", 1, "transformers 5.23 builds one shared expert")
        sizes["moe"] = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"),
                        "m_e": r.need("moe_intermediate_size"), "E_s": 1,
                        "m_s": r.need("moe_shared_expert_intermediate_size")}
    arch = {_MAMBA: "mamba2.none", _ATTENTION: "gqa.none", "mlp": "none.mlp", "moe": "none.moe_plain_shared"}
    for kind in kinds:
        layers.append({"arch": arch[kind], **sizes[kind]})
    return layers


MAPPERS = {
    "mamba2": _mamba2,
    "bamba": _bamba,
    "granitemoehybrid": _granitemoehybrid,
    "falcon_h1": _falcon_h1,
    "nemotron_h": _nemotron_h,
}
# the recurrent state's dtype in transformers 5.23 (every family here: the scan allocates it in fp32)
STATE_DTYPES = {family: "fp32" for family in MAPPERS}
