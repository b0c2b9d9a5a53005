"""Hugging Face ``config.json`` -> a costcalc preset, field by field, per model family.

Every field of the config is either mapped to a size, read to decide a layer's kind
(windows, dense vs MoE layers), or known not to change matmul FLOPs (token ids, norms,
RoPE, dtypes, quantisation, softcapping, routing details ...). Anything else stops the
import with an error naming the field: a cost calculator must not guess. Defaults are
used only where the family's own modeling code defines them (``head_dim`` =
``hidden_size // num_attention_heads`` for the Llama-style families; ``num_key_value_heads``
= ``num_attention_heads``; the family's ``tie_word_embeddings`` default) -- never invented.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from . import jsonfile
from .errors import CostcalcError
from .spec import ModelSpec, from_dict

# Fields that never change matmul FLOPs or weights counted here.
HARMLESS = {
    "architectures", "model_type", "_name_or_path", "transformers_version", "torch_dtype", "dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "rms_norm_eps",
    "layer_norm_eps", "norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq",
    "max_position_embeddings", "original_max_position_embeddings", "initial_context_length",
    "hidden_act", "hidden_activation", "attention_dropout", "hidden_dropout", "mlp_dropout",
    "attention_bias", "mlp_bias", "pretraining_tp", "quantization_config", "tie_word_embeddings",
    "auto_map", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
    "norm_topk_prob", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
    "cache_implementation", "use_bidirectional_attention", "bos_token", "eos_token", "use_qk_norm",
    "clip_qkv", "swiglu_limit", "n_group", "topk_group", "topk_method", "scoring_func",
    "routed_scaling_factor", "aux_loss_alpha", "seq_aux", "ep_size",
    "num_nextn_predict_layers", "unsloth_fixed", "model_name", "torchscript", "return_dict",
    "qk_layernorm", "rope_interleave", "partial_rotary_factor",
}
# Read by the mappers below (so not "unknown"), family by family.
# A field set to null says nothing, so only fields with a value are checked.
COMMON = {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
          "intermediate_size", "head_dim"}
_MOE = {"num_experts_per_tok"}
_SPARSE = {"decoder_sparse_step", "mlp_only_layers"}
_WINDOW = {"sliding_window"}
_QWEN_WINDOW = _WINDOW | {"use_sliding_window", "max_window_layers"}
_TYPED = _WINDOW | {"layer_types", "sliding_window_pattern"}
FAMILY_FIELDS = {
    "llama": set(_WINDOW),           # read only to refuse a window llama does not have
    "mistral": set(_WINDOW), "qwen2": set(_QWEN_WINDOW), "qwen3": set(_QWEN_WINDOW),
    "mixtral": {"num_local_experts"} | _MOE | _WINDOW,
    "qwen2_moe": {"num_experts", "moe_intermediate_size", "shared_expert_intermediate_size"} | _MOE | _SPARSE
                 | _QWEN_WINDOW,
    "qwen3_moe": {"num_experts", "moe_intermediate_size"} | _MOE | _SPARSE | _QWEN_WINDOW,
    "olmoe": {"num_experts"} | _MOE,
    "deepseek_v2": {"n_routed_experts", "n_shared_experts", "moe_intermediate_size", "q_lora_rank",
                    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                    "first_k_dense_replace", "moe_layer_freq"} | _MOE,
    "gpt_oss": {"num_local_experts", "experts_per_token"} | _MOE | _TYPED,
    "gemma2": _TYPED | {"sliding_window_size"}, "gemma3_text": set(_TYPED),
}
FAMILY_FIELDS["deepseek_v3"] = FAMILY_FIELDS["deepseek_v2"]
FAMILIES = tuple(FAMILY_FIELDS) + ("gemma3",)
TIED_DEFAULT = {"gemma2": True, "gemma3_text": True}   # the family configs' own defaults


def load(path: str | Path, name: str | None = None) -> ModelSpec:
    """A model from a config.json file."""
    path = Path(path)
    config = jsonfile.read(path, "config")
    default = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return from_dict(to_preset(config, name or default, str(path)), origin=repr(str(path)))


def to_preset(config: Any, name: str, origin: str = "config") -> dict[str, Any]:
    """The preset mapping of a config (validated by ``spec.from_dict`` afterwards)."""
    if not isinstance(config, dict):
        raise CostcalcError(f"config {origin}: expected a JSON object")
    family = config.get("model_type")
    if family == "gemma3":   # the multimodal wrapper: the text model is what costs
        if not isinstance(config.get("text_config"), dict):
            raise CostcalcError(f"config {origin}: gemma3 without a text_config")
        config = {"model_type": "gemma3_text", **config["text_config"]}
        family = "gemma3_text"
    if family not in FAMILY_FIELDS:
        raise CostcalcError(f"config {origin}: model_type {family!r} is not supported; supported: "
                            f"{', '.join(FAMILIES)}")
    known = HARMLESS | COMMON | FAMILY_FIELDS[family]
    for key, value in config.items():
        if value is not None and key not in known and not _harmless_prefix(key):
            raise CostcalcError(f"config {origin}: field {key!r} ({family}) is not understood and may change "
                                f"the cost; costcalc does not guess -- remove it if it does not")
    reader = Reader(config, family, origin)
    layers = MAPPERS[family](reader)
    preset: dict[str, Any] = {"name": name, "title": name, "d": reader.need("hidden_size"),
                              "V": reader.need("vocab_size")}
    preset["layers"] = _groups(layers)
    preset["tied_embeddings"] = bool(config.get("tie_word_embeddings", TIED_DEFAULT.get(family, False)))
    preset["source"] = {"config": origin, "model_type": family}
    return _flatten(preset)


def _harmless_prefix(key: str) -> bool:
    return key.startswith(("vision_", "audio_", "mm_", "image_", "boi_", "eoi_", "text_config", "id2label",
                           "label2id", "task_specific", "_attn_implementation"))


class Reader:
    """Field access with errors that name the config and the field."""

    def __init__(self, config: dict, family: str, origin: str) -> None:
        self.config, self.family, self.origin = config, family, origin

    def need(self, key: str) -> int:
        if key not in self.config or self.config[key] is None:
            raise CostcalcError(f"config {self.origin}: {self.family} needs field {key!r}")
        return self.int(key)

    def int(self, key: str) -> int:
        value = self.config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CostcalcError(f"config {self.origin}: field {key!r} must be a positive integer, got {value!r}")
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self.config.get(key)
        return default if value is None else value

    def heads(self, head_dim_default: bool) -> dict[str, int]:
        """h_q, h_kv, d_h: head_dim from the config, else (where the family's code does so)
        hidden_size // num_attention_heads."""
        h_q = self.need("num_attention_heads")
        h_kv = self.int("num_key_value_heads") if self.config.get("num_key_value_heads") is not None else h_q
        if self.config.get("head_dim") is not None:
            d_h = self.int("head_dim")
        elif head_dim_default:
            d_h = self.need("hidden_size") // h_q
        else:
            raise CostcalcError(f"config {self.origin}: {self.family} needs field 'head_dim' (no default is assumed)")
        return {"h_q": h_q, "h_kv": h_kv, "d_h": d_h}

    def layer_count(self) -> int:
        return self.need("num_hidden_layers")

    def types(self) -> list[str] | None:
        kinds = self.config.get("layer_types")
        if kinds is None:
            return None
        if not isinstance(kinds, list) or len(kinds) != self.layer_count():
            raise CostcalcError(f"config {self.origin}: 'layer_types' must list one type per layer")
        for kind in kinds:
            if kind not in ("sliding_attention", "full_attention"):
                raise CostcalcError(f"config {self.origin}: layer type {kind!r} is not understood")
        return kinds


Layer = dict   # one layer: {"arch": ..., sizes...}


def _attention(r: Reader, windowed: bool, heads: dict[str, int]) -> tuple[str, dict]:
    if windowed:
        return "window", {**heads, "W": r.need("sliding_window")}
    return "gqa", dict(heads)


def _dense_family(head_dim_default: bool, windows: Callable[[Reader], list[bool]]):
    def mapper(r: Reader) -> list[Layer]:
        heads = r.heads(head_dim_default)
        m = r.need("intermediate_size")
        out = []
        for windowed in windows(r):
            attn, sizes = _attention(r, windowed, heads)
            out.append({"arch": f"{attn}.dense", **sizes, "m": m})
        return out
    return mapper


def _no_windows(r: Reader) -> list[bool]:
    if r.get("sliding_window") is not None and r.family == "llama":
        raise CostcalcError(f"config {r.origin}: llama with a sliding_window is not understood")
    return [False] * r.layer_count()


def _every_layer_window(r: Reader) -> list[bool]:      # Mistral, Mixtral: sliding_window or null
    return [r.get("sliding_window") is not None] * r.layer_count()


def _qwen_windows(r: Reader) -> list[bool]:
    """Qwen2/3: sliding windows only with use_sliding_window, on layers >= max_window_layers."""
    n = r.layer_count()
    if not r.get("use_sliding_window", False):
        return [False] * n
    first = r.get("max_window_layers", 0)
    return [i >= first for i in range(n)]


def _typed_windows(period: int | None, local_when: Callable[[int, int], bool]):
    """Gemma / gpt-oss: layer_types if given, else the family's pattern."""
    def windows(r: Reader) -> list[bool]:
        kinds = r.types()
        if kinds is not None:
            return [k == "sliding_attention" for k in kinds]
        if r.family == "gpt_oss":
            raise CostcalcError(f"config {r.origin}: gpt_oss needs field 'layer_types'")
        every = r.get("sliding_window_pattern", period)
        return [local_when(i, every) for i in range(r.layer_count())]
    return windows


def _moe_layers(r: Reader, moe: Callable[[int], bool], expert: dict[str, int], shared: dict[str, int],
                windows: list[bool], heads: dict[str, int], gate: bool = False) -> list[Layer]:
    out = []
    for i, windowed in enumerate(windows):
        attn, sizes = _attention(r, windowed, heads)
        if moe(i):
            ffn = "moe" + ("_shared" if shared else "") + ("_gate" if gate else "")
            out.append({"arch": f"{attn}.{ffn}", **sizes, **expert, **shared})
        else:
            out.append({"arch": f"{attn}.dense", **sizes, "m": r.need("intermediate_size")})
    return out


def _sparse_step(r: Reader) -> Callable[[int], bool]:
    """Qwen2/3-MoE: layer i is MoE unless listed in mlp_only_layers, every decoder_sparse_step-th."""
    step = r.get("decoder_sparse_step", 1)
    dense_only = set(r.get("mlp_only_layers", []))
    return lambda i: i not in dense_only and (i + 1) % step == 0


def _mixtral(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    return _moe_layers(r, lambda i: True, expert, {}, _every_layer_window(r), r.heads(True))


def _qwen2_moe(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")}
    shared = {"E_s": 1, "m_s": r.need("shared_expert_intermediate_size")}
    return _moe_layers(r, _sparse_step(r), expert, shared, _qwen_windows(r), r.heads(True), gate=True)


def _qwen3_moe(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")}
    return _moe_layers(r, _sparse_step(r), expert, {}, _qwen_windows(r), r.heads(False))


def _olmoe(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    return _moe_layers(r, lambda i: True, expert, {}, [False] * r.layer_count(), r.heads(True))


def _gpt_oss(r: Reader) -> list[Layer]:
    k = r.get("num_experts_per_tok", r.get("experts_per_token"))
    if k is None:
        raise CostcalcError(f"config {r.origin}: gpt_oss needs field 'num_experts_per_tok'")
    expert = {"E": r.need("num_local_experts"), "k": k, "m_e": r.need("intermediate_size")}
    windows = _typed_windows(None, lambda i, p: False)(r)
    return _moe_layers(r, lambda i: True, expert, {}, windows, r.heads(False))


def _deepseek(r: Reader) -> list[Layer]:
    h_q = r.need("num_attention_heads")
    q_lora = r.get("q_lora_rank") is not None
    mla = {"h_q": h_q, "r_kv": r.need("kv_lora_rank"), "d_nope": r.need("qk_nope_head_dim"),
           "d_rope": r.need("qk_rope_head_dim"), "d_v": r.need("v_head_dim")}
    if q_lora:
        mla["r_q"] = r.need("q_lora_rank")
    attn = "mla_q" if q_lora else "mla"
    routed = r.get("n_routed_experts")
    first = r.get("first_k_dense_replace", 0)
    every = r.get("moe_layer_freq", 1)
    out = []
    for i in range(r.layer_count()):
        if routed and i >= first and i % every == 0:
            shared = r.get("n_shared_experts")
            ffn = "moe_shared" if shared else "moe"
            sizes = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"),
                     "m_e": r.need("moe_intermediate_size")}
            if shared:
                sizes.update(E_s=shared, m_s=r.need("moe_intermediate_size"))
            out.append({"arch": f"{attn}.{ffn}", **mla, **sizes})
        else:
            out.append({"arch": f"{attn}.dense", **mla, "m": r.need("intermediate_size")})
    return out


MAPPERS: dict[str, Callable[[Reader], list[Layer]]] = {
    "llama": _dense_family(True, _no_windows),
    "mistral": _dense_family(True, _every_layer_window),
    "qwen2": _dense_family(True, _qwen_windows),
    "qwen3": _dense_family(False, _qwen_windows),
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "qwen3_moe": _qwen3_moe,
    "olmoe": _olmoe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss,
    # Gemma-2: even layers local (HF: is_sliding = not bool(layer_idx % 2)).
    "gemma2": _dense_family(False, _typed_windows(2, lambda i, p: i % p == 0)),
    # Gemma-3: every sliding_window_pattern-th layer global, the others local.
    "gemma3_text": _dense_family(False, _typed_windows(6, lambda i, p: (i + 1) % p != 0)),
}


def _groups(layers: list[Layer]) -> list[dict]:
    """Layers -> groups of identical layers, in order of first appearance, with counts."""
    groups: list[dict] = []
    for layer in layers:
        for group in groups:
            if {k: v for k, v in group.items() if k != "count"} == layer:
                group["count"] += 1
                break
        else:
            groups.append({"count": 1, **layer})
    return groups


def _flatten(preset: dict) -> dict:
    """Sizes shared by every group move to the top level; a single group becomes ``arch`` + ``L``."""
    groups = preset["layers"]
    shared_keys = set.intersection(*(set(g) for g in groups)) - {"count", "arch"}
    common = {k: groups[0][k] for k in sorted(shared_keys) if all(g[k] == groups[0][k] for g in groups)}
    preset.update(common)
    preset["layers"] = [{k: v for k, v in g.items() if k not in common} for g in groups]
    if len(groups) == 1:
        group = preset.pop("layers")[0]
        preset["arch"] = group.pop("arch")
        preset["L"] = group.pop("count")
        preset.update(group)
    head = ["name", "title", "arch", "L", "d", "V"]
    tail = ["layers", "tied_embeddings", "stated", "source"]
    middle = [k for k in preset if k not in head and k not in tail]
    return {k: preset[k] for k in head + middle + tail if k in preset}
