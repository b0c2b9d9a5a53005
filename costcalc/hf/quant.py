"""A config's ``quantization_config`` -> the weight format of each module (a preset's ``dtypes``).

Each method converts the modules its quantizer converts (docs/hf-import.md, "Weight formats"):

- ``fp8`` (transformers ``FineGrainedFP8Config``): every linear projection but the LM head (transformers'
  default skip) and the modules a family keeps out of it (``_keep_in_fp32_modules``: DeepSeek-V3.2's and
  GLM-5's ``indexer.weights_proj``; DeepSeek-V4's compressor and indexer ``kv_proj``, ``gate_proj`` and
  ``weights_proj``, which its checkpoint ships in bf16); ``weight_block_size`` [O, I] -> ``fp8-block{O}x{I}``
  (``fp8-block128``), none -> ``fp8-tensor``; ``scale_fmt: ue8m0`` -> one-byte scales. ``expert_dtype: fp4``
  (DeepSeek-V4; its configuration class moves a top-level ``expert_dtype`` into quantization_config, and
  so does ``moved``) stores the routed experts as ``fp4-block1x32`` (``FP8Experts``: packed e2m1 and a scale
  per row per 32 inputs, ``-ue8m0`` with ``scale_fmt: ue8m0``); ``fp8`` (the default) as the rest.
- ``mxfp4`` (gpt-oss): the routed experts only (transformers replaces ``GptOssExperts``).
- ``modelopt`` with ``quant_algo: NVFP4`` (``group_size`` 16): every linear projection, the LM head included.
- ``gptq`` / ``awq``: every block projection (the LM head only with GPTQ's ``lm_head: true``).
- ``compressed-tensors`` ``pack-quantized`` (one config group of integer weights on ``Linear``): every
  linear projection, the LM head included.

No method converts a router (transformers' routers are parameters, not ``nn.Linear``: DeepseekV3TopkRouter,
GptOssTopKRouter), a shared-expert gate, DeepSeek-V4's hyper-connection matrices (``attn_hc.fn``, ``ffn_hc.fn``,
``hc_head``: parameters 5.23 keeps in fp32, ``_keep_in_fp32_modules_strict``, so fp32 here) or the embedding:
they stay in the checkpoint's dtype (bf16), as do
the modules the config leaves out -- ``modules_to_not_convert`` (matched as transformers'
``should_convert_module`` does), compressed-tensors' ``ignore`` (``re:`` regexes, else exact names) and
ModelOpt's ``exclude_modules`` (shell wildcards) -- held against the module names transformers gives each
costed matrix. A pattern that names no costed module (a vision tower or MTP layer aside), a method or key
not listed here, or an exclusion that splits one operator across layers or experts is refused by name.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any, Callable, Optional

from ..blocks import parse as parse_block
from ..errors import CostcalcError, quote
from ..weights import DEFAULT, EMBEDDING

NEVER = ("router", "shared_expert_gate", "attn_hc.fn", "ffn_hc.fn", "hc_head")   # not nn.Linear: no method converts
KEEP_FP32 = {"deepseek_v32": ("indexer.weights_proj",), "glm_moe_dsa": ("indexer.weights_proj",),
             "deepseek_v4": ("compressor.kv_proj", "compressor.gate_proj", "indexer.kv_proj", "indexer.gate_proj",
                             "indexer.weights_proj")}   # _keep_in_fp32_modules (not strict): bf16 in a bf16 model
STRICT_FP32 = {"deepseek_v4": ("attn_hc.fn", "ffn_hc.fn", "hc_head")}   # _keep_in_fp32_modules_strict: fp32
MOVED = {"deepseek_v4": ("expert_dtype",)}   # top-level keys the configuration class moves into quantization_config
EXPERT_FORMATS = {"fp4": "fp4-block1x32"}    # fp8's expert_dtype other than fp8 -> the experts' format
MAX_BLOCK = 1 << 20   # a weight block's side: larger is a typo (published blocks are 128)
OUTSIDE = ("vision", "visual", "mm_projector", "multi_modal", "mtp")   # parts costcalc leaves out of the decoder
VECTORS = ("bias", "norm")     # parameters no format converts and costcalc counts no bytes of (MiniMax's
                               # e_score_correction_bias): a pattern naming one changes nothing

# Keys each method's config may carry (anything else: refused); the values that matter are read below.
KEYS = {
    "fp8": {"quant_method", "fmt", "activation_scheme", "weight_block_size", "modules_to_not_convert",
            "scale_fmt", "dequantize", "expert_dtype"},
    "mxfp4": {"quant_method", "modules_to_not_convert", "dequantize"},
    "modelopt": {"quant_method", "quant_algo", "group_size", "exclude_modules", "kv_cache_quant_algo", "producer"},
    "gptq": {"quant_method", "bits", "group_size", "desc_act", "sym", "true_sequential", "damp_percent",
             "static_groups", "checkpoint_format", "format", "modules_to_not_convert", "lm_head", "dynamic",
             "model_name_or_path", "model_file_base_name", "pack_dtype", "meta", "tokenizer", "dataset",
             "use_exllama", "exllama_config", "use_cuda_fp16", "max_input_length", "cache_block_outputs",
             "batch_size", "module_name_preceding_first_block", "block_name_to_quantize", "backend"},
    "awq": {"quant_method", "bits", "w_bit", "group_size", "q_group_size", "zero_point", "version",
            "modules_to_not_convert", "backend", "do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config"},
    "compressed-tensors": {"quant_method", "format", "config_groups", "ignore", "kv_cache_scheme",
                           "quantization_status", "global_compression_ratio", "sparsity_config", "version",
                           "transform_config"},
}


def moved(qc: Any, config: dict, family: str) -> Any:
    """``quantization_config`` as the family's configuration class leaves it: DeepSeek-V4's moves a top-level
    ``expert_dtype`` in (transformers 5.23 ``DeepseekV4Config.__post_init__``: a dict without its own)."""
    if isinstance(qc, dict):
        extra = {k: config[k] for k in MOVED.get(family, ()) if config.get(k) is not None and k not in qc}
        return {**qc, **extra} if extra else qc
    return qc


def dtypes(qc: Any, family: str, layers: list[dict], where: str) -> Optional[dict[str, str]]:
    """The ``dtypes`` of a config whose ``quantization_config`` is ``qc`` (None: unquantized)."""
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise CostcalcError(f"{where}: quantization_config must be an object")
    method = qc.get("quant_method")
    if method not in KEYS:
        raise CostcalcError(f"{where}: quantization_config quant_method {quote(method)} is not a weight format "
                            f"costcalc reads (it reads {', '.join(KEYS)})")
    for key, value in qc.items():
        if value is not None and key not in KEYS[method]:
            raise CostcalcError(f"{where}: quantization_config ({method}): key {quote(key)} is not understood and "
                                f"may change the bytes stored; costcalc does not guess")
    fmt, converts, patterns, matcher = READERS[method](qc, family, where)
    ops = _operators(layers)
    quantized = {op for op in ops if converts(op)} - set(KEEP_FP32.get(family, ()))
    excluded = _excluded(patterns, matcher, layers, ops, where)
    quantized -= excluded
    experts = _experts(qc, fmt, where) if method == "fp8" else fmt
    kept = {op: "fp32" if op in STRICT_FP32.get(family, ()) else DEFAULT for op in ops}
    return _mapping({op: (experts if op.startswith("experts.") else fmt) if op in quantized else kept[op]
                     for op in ops})


# --- the methods ---------------------------------------------------------------------------------------

def _linear(op: str) -> bool:
    return op not in NEVER and op != EMBEDDING


def _fp8(qc: dict, family: str, where: str):
    if qc.get("fmt", "e4m3") not in ("e4m3", "float8_e4m3fn"):      # MiniMax-M2 writes torch's name
        raise CostcalcError(f"{where}: quantization_config fmt {quote(qc['fmt'])}: only e4m3 fp8 weights are read")
    if qc.get("activation_scheme", "dynamic") != "dynamic":
        raise CostcalcError(f"{where}: quantization_config activation_scheme {quote(qc['activation_scheme'])}: a "
                            f"stored activation scale per matrix is not modelled (dynamic only)")
    if qc.get("dequantize"):
        raise CostcalcError(f"{where}: quantization_config dequantize is true: the weights are widened on load")
    scale = qc.get("scale_fmt") or "float"
    if scale not in ("float", "ue8m0"):
        raise CostcalcError(f"{where}: quantization_config scale_fmt {quote(scale)} is not float or ue8m0")
    block = qc.get("weight_block_size")
    if block is None:
        fmt = "fp8-tensor"
    else:
        if not (isinstance(block, list) and len(block) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= MAX_BLOCK for b in block)):
            raise CostcalcError(f"{where}: quantization_config weight_block_size must be [out, in], got {quote(block)}")
        fmt = f"fp8-block{block[0]}" if block[0] == block[1] else f"fp8-block{block[0]}x{block[1]}"
        fmt += "-ue8m0" if scale == "ue8m0" else ""
    return fmt, lambda op: _linear(op) and op != "lm_head", _list(qc, "modules_to_not_convert", where), _transformers


def _experts(qc: dict, fmt: str, where: str) -> str:
    """The routed experts' format under fp8's ``expert_dtype`` (FP8Experts: fp8 as the rest, or fp4)."""
    kind = qc.get("expert_dtype") or "fp8"
    if kind == "fp8":
        return fmt
    if not isinstance(kind, str) or kind not in EXPERT_FORMATS:
        raise CostcalcError(f"{where}: quantization_config expert_dtype {quote(kind)}: fp8 or fp4 is read")
    return EXPERT_FORMATS[kind] + ("-ue8m0" if qc.get("scale_fmt") == "ue8m0" else "")


def _mxfp4(qc: dict, family: str, where: str):
    if qc.get("dequantize"):
        raise CostcalcError(f"{where}: quantization_config dequantize is true: the weights are widened on load")
    return "mxfp4", lambda op: op.startswith("experts."), _list(qc, "modules_to_not_convert", where), _transformers


def _modelopt(qc: dict, family: str, where: str):
    algo = qc.get("quant_algo")
    if algo != "NVFP4":
        raise CostcalcError(f"{where}: quantization_config (modelopt) quant_algo {quote(algo)}: only NVFP4 is read")
    if qc.get("group_size", 16) != 16:
        raise CostcalcError(f"{where}: quantization_config (modelopt) group_size {quote(qc['group_size'])}: NVFP4 "
                            f"scales groups of 16")
    return "nvfp4", _linear, _list(qc, "exclude_modules", where), _wildcard


def _integer(qc: dict, where: str, bits_key: str = "bits", group_key: str = "group_size") -> tuple[int, str]:
    bits = qc.get(bits_key, qc.get("w_bit"))
    group = qc.get(group_key, qc.get("q_group_size", 128))
    if bits not in (4, 8):
        raise CostcalcError(f"{where}: quantization_config bits {quote(bits)}: 4 or 8 is read")
    if not isinstance(group, int) or isinstance(group, bool) or group == 0 or group < -1:
        raise CostcalcError(f"{where}: quantization_config group_size {quote(group)} is not a group size (or -1)")
    return bits, "channel" if group == -1 else str(group)


def _gptq(qc: dict, family: str, where: str):
    bits, group = _integer(qc, where)
    form = (qc.get("checkpoint_format") or qc.get("format") or "gptq").lower()
    if form not in ("gptq", "gptq_v2"):
        raise CostcalcError(f"{where}: quantization_config (gptq) format {quote(form)}: the gptq layout only")
    if qc.get("dynamic"):
        raise CostcalcError(f"{where}: quantization_config (gptq) dynamic: per-module bits and groups are not read")
    head = bool(qc.get("lm_head"))
    return (f"gptq-int{bits}-g{group}", lambda op: _linear(op) and (head or op != "lm_head"),
            _list(qc, "modules_to_not_convert", where), _transformers)


def _awq(qc: dict, family: str, where: str):
    bits, group = _integer(qc, where)
    if bits != 4 or group == "channel":
        raise CostcalcError(f"{where}: quantization_config (awq): 4-bit weights in groups are read")
    if (qc.get("version") or "gemm").lower() != "gemm":
        raise CostcalcError(f"{where}: quantization_config (awq) version {quote(qc['version'])}: the gemm layout only")
    if qc.get("zero_point") is False:
        raise CostcalcError(f"{where}: quantization_config (awq) zero_point false is not read")
    return (f"awq-int4-g{group}", lambda op: _linear(op) and op != "lm_head",
            _list(qc, "modules_to_not_convert", where), _transformers)


def _compressed(qc: dict, family: str, where: str):
    if qc.get("format") != "pack-quantized":
        raise CostcalcError(f"{where}: quantization_config (compressed-tensors) format {quote(qc.get('format'))}: "
                            f"pack-quantized only")
    if qc.get("sparsity_config"):
        raise CostcalcError(f"{where}: quantization_config (compressed-tensors) sparsity_config is not read")
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise CostcalcError(f"{where}: quantization_config (compressed-tensors): one config group is read, got "
                            f"{quote(groups)}")
    (name, group), = groups.items()
    w = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(w, dict) or group.get("targets") != ["Linear"]:
        raise CostcalcError(f"{where}: quantization_config config_groups.{name}: weights targeting ['Linear'] are read")
    if group.get("input_activations") or group.get("output_activations"):
        raise CostcalcError(f"{where}: quantization_config config_groups.{name}: activation quantization is not read")
    if w.get("type") != "int" or w.get("dynamic") or w.get("strategy") not in ("group", "channel") \
            or w.get("num_bits") not in (4, 8):
        raise CostcalcError(f"{where}: quantization_config config_groups.{name}.weights: static int4/int8 weights by "
                            f"group or channel are read, got {quote(w)}")
    size = "channel" if w["strategy"] == "channel" else w.get("group_size")
    if size != "channel" and not (isinstance(size, int) and size > 0):
        raise CostcalcError(f"{where}: quantization_config config_groups.{name}.weights.group_size {quote(size)}")
    fmt = f"ct-int{w['num_bits']}-g{size}" + ("" if w.get("symmetric", True) else "-asym")
    return fmt, _linear, _list(qc, "ignore", where), _regex


READERS: dict[str, Callable] = {"fp8": _fp8, "mxfp4": _mxfp4, "modelopt": _modelopt, "gptq": _gptq, "awq": _awq,
                                "compressed-tensors": _compressed}


def _list(qc: dict, key: str, where: str) -> list[str]:
    """A list of module patterns; each that is a regular expression where its method reads one
    (transformers' patterns all are; compressed-tensors' ``re:`` ones) must compile, as the method's
    own code would fail on it."""
    value = qc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CostcalcError(f"{where}: quantization_config {key} must be a list of module names")
    for pattern in value:
        regex = pattern[3:] if pattern.startswith("re:") else pattern if key == "modules_to_not_convert" else None
        try:
            if regex is not None:
                re.compile(regex)
        except re.error as exc:
            raise CostcalcError(f"{where}: quantization_config {key}: {quote(pattern)} is not a regular expression "
                                f"({exc})") from None
    return value


# --- patterns against module names -------------------------------------------------------------------

_BOUNDARY = r"(?:(?<=\.)|(?=\.|$))"


def _transformers(pattern: str, name: str) -> bool:
    """transformers' ``should_convert_module``: from the start to a module boundary, as a regex, or a suffix."""
    try:
        return bool(re.match(rf"(?:{pattern}){_BOUNDARY}", name)) or name.endswith(pattern)
    except re.error:
        return name.endswith(pattern)


def _regex(pattern: str, name: str) -> bool:
    """compressed-tensors' ``ignore``: ``re:`` a regex matched at the start, else the exact name."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    return pattern == name


def _wildcard(pattern: str, name: str) -> bool:
    """ModelOpt's ``exclude_modules``: shell wildcards, on the module or a module above it."""
    parts = name.split(".")
    return any(fnmatch.fnmatchcase(".".join(parts[:i]), pattern) for i in range(1, len(parts) + 1))


def _operators(layers: list[dict]) -> list[str]:
    """Every weight operator of the model's layers (the naive form), DeepSeek-V4's ``hc_head`` (once a
    model), then ``lm_head`` and ``embedding``."""
    ops: dict[str, None] = {}
    for layer in layers:
        ops.update(dict.fromkeys(parse_block(layer["arch"]).matrices()))
    once = ["hc_head"] if any(parse_block(layer["arch"]).v4 for layer in layers) else []
    return list(ops) + once + ["lm_head", EMBEDDING]


def _paths(op: str, layer: dict) -> list[list[str]]:
    """The transformers module names of ``op`` in one layer, as variants that must agree (an expert:
    the first and the last): each a list of spellings (per-expert, fused, shared spelled two ways)."""
    if op.startswith("experts."):
        proj = op.split(".", 1)[1]
        fused = "gate_up_proj" if proj in ("gate_proj", "up_proj") else proj
        last = layer.get("E", 1) - 1
        return [[f"mlp.experts.{e}.{proj}", f"mlp.experts.{fused}"] for e in (0, last)]
    if op.startswith("shared_experts."):
        proj = op.split(".", 1)[1]
        return [[f"mlp.shared_experts.{proj}", f"mlp.shared_expert.{proj}"]]
    if op == "router":
        return [["mlp.gate", "mlp.router"]]
    if op == "shared_expert_gate":
        return [["mlp.shared_expert_gate"]]
    if op in ("gate_proj", "up_proj", "down_proj"):
        return [[f"mlp.{op}"]]
    if parse_block(layer["arch"]).v4:     # transformers 5.23's DeepSeek-V4 modules
        if op.startswith("indexer."):     # the indexer inside the compressor; weights_proj in its scorer
            return [[f"self_attn.compressor.{op}", f"self_attn.compressor.indexer.scorer.{op.split('.', 1)[1]}"]]
        if op.endswith("_hc.fn"):         # the hyper-connections sit on the layer
            return [[op, op.removesuffix(".fn")]]
        return [[f"self_attn.{op}"]]
    return [[f"self_attn.{op}", f"linear_attn.{op}", f"mixer.{op}", f"mamba.{op}"]]


PREFIXES = ("model.", "model.language_model.", "language_model.model.")


def _excluded(patterns: list[str], matcher, layers: list[dict], ops: list[str], where: str) -> set[str]:
    """The operators the patterns leave unconverted in every layer (and every expert) that has them."""
    if not patterns:
        return set()
    covered: dict[str, set[bool]] = {}
    used = set()

    def hit(names: list[str]) -> bool:
        got = False
        for pattern in patterns:
            if any(matcher(pattern, n) for n in names):
                used.add(pattern)
                got = True
        return got

    for op, names in (("lm_head", ["lm_head"]), (EMBEDDING, [p + "embed_tokens" for p in PREFIXES])):
        covered[op] = {hit(names)}
    for index, layer in enumerate(layers):
        for op in parse_block(layer["arch"]).matrices():
            for variant in _paths(op, layer):
                names = [f"{p}layers.{index}.{v}" for p in PREFIXES for v in variant]
                covered.setdefault(op, set()).add(hit(names))
    for pattern in patterns:
        past = [int(i) for i in re.findall(r"layers\.(\d+)\b", pattern)]   # DeepSeek names its MTP layers L, L+1 ...
        if pattern not in used and not any(part in pattern for part in OUTSIDE + VECTORS) \
                and not (past and min(past) >= len(layers)):
            raise CostcalcError(f"{where}: quantization_config pattern {quote(pattern)} names no module costcalc "
                                f"counts (the decoder's projections, lm_head, model.embed_tokens)")
    split = [op for op, seen in covered.items() if seen == {True, False}]
    if split:
        raise CostcalcError(f"{where}: quantization_config leaves {', '.join(split)} unconverted in some layers or "
                            f"experts only; per-layer weight formats are not modelled")
    return {op for op, seen in covered.items() if seen == {True}}


def _mapping(formats: dict[str, str]) -> dict[str, str]:
    """``dtypes`` in few keys: the format most operators take as ``default``, then the others, a whole
    term (``experts``) where every operator of it shares the format."""
    ops = list(formats)
    counts: dict[str, int] = {}
    for value in formats.values():
        counts[value] = counts.get(value, 0) + 1
    top = max(counts.values())
    default = DEFAULT if counts.get(DEFAULT) == top else next(v for v in formats.values() if counts[v] == top)
    out = {"default": default}
    families: dict[str, list[str]] = {}
    for op in ops:
        if formats[op] != default:
            families.setdefault(op.split(".")[0] if "." in op else op, []).append(op)
    for head, members in families.items():
        whole = [op for op in ops if op.split(".")[0] == head and "." in op]
        if head in ("experts", "shared_experts") and sorted(whole) == sorted(members) \
                and len({formats[op] for op in members}) == 1:
            out[head] = formats[members[0]]         # the term's own name
        else:
            out.update({op: formats[op] for op in members})
    return out
