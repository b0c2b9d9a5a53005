"""Hugging Face ``config.json`` -> a costcalc preset, field by field, per model family.

A config is read as transformers 5.23 reads it (``docs/hf-import.md``): every key is one the
family's configuration class defines (``tables.py``, held against the class by
``tests/test_hf_transformers.py``) or an alias, legacy spelling or published extra the family
accepts -- used to size the layers and decide their kinds, or ignored with its reason. Any other
key stops the import with an error naming it: a cost calculator must not guess. Families whose
layers costcalc does not model (shared attention blocks, gated KDA variants) are
refused naming the block kind. Families with linear-attention or state-space mixers carry the dtype
transformers keeps their recurrent state in (``state_dtype``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import jsonfile
from ..blocks import parse
from ..errors import CostcalcError, quote
from ..spec import MAX_GROUPS, ModelSpec, check_name, from_dict
from . import quant
from .families import MAPPERS, MTP_LAYERS, STATE_DTYPES
from .reader import Layer, Reader
from .tables import SUBTABLES, TABLES

# Remote-code model types whose keys describe a structure transformers 5.23 ships, read as that family:
# family -> (the family read, keys whose remote-code default differs from that family's, so must be stated).
# Kimi-K2's config is DeepSeek-V3's remote-code DeepseekV3Config (its first_k_dense_replace defaults to 0,
# transformers' to 3).
REMOTE_CODE = {"kimi_k2": ("deepseek_v3", ("first_k_dense_replace",))}
FAMILIES = tuple(MAPPERS) + tuple(name for name, table in TABLES.items() if table.decoder) + tuple(REMOTE_CODE)
OUT_OF_REACH = {
    "bailing_hybrid": "Kimi Delta Attention with full-rank forget and output gates (f_proj, g_proj) and MLA with a "
                      "per-head output gate (g_proj), which the kda and mla kinds do not have",
    "zamba": "a shared attention block over the hidden state concatenated with the embeddings (2 x hidden_size "
             "wide) plus a per-layer hidden_size x hidden_size linear, beside Mamba mixers with per-head x/dt projections",
    "zamba2": "Mamba-2 mixers with shared attention blocks (a LoRA adapter per use, an input of twice the "
              "width)",
    "lfm3": "a per-head sigmoid attention output gate (g_proj, hidden_size -> heads) beside short gated convolutions",
    "rwkv": "RWKV time mixing (no attention)",
    "recurrent_gemma": "RG-LRU recurrent blocks beside local attention",
    "xlstm": "mLSTM matrix-memory blocks (no attention)",
    "kimi_k3": "Kimi Delta Attention with full-rank gates (use_full_rank_gate), MLA with an output gate "
               "(mla_use_output_gate), routed experts in a latent width (routed_expert_hidden_size) and block "
               "attention residuals (attn_res_block_size), in remote code transformers 5.23 does not ship",
}

# Wrappers whose __post_init__ ties when either their own flag or their text config's is true.
EITHER_TIES = ("minimax_m3_vl",)


def load(path: str | Path, name: str | None = None) -> ModelSpec:
    """A model from a config.json file."""
    path = Path(path)
    config = jsonfile.read(path, "config")
    if name is None:     # the file's name (its folder's, for a config.json) names the model
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        check_name(name, f"config {quote(str(path))}: the name taken from its file name")
    spec = from_dict(to_preset(config, name, str(path)), origin=f"config {str(path)!r}")
    return replace(spec, dtypes_from="quantization_config") if spec.dtypes else spec


def to_preset(config: Any, name: str, origin: str | None = None) -> dict[str, Any]:
    """The preset mapping of a config (validated by ``spec.from_dict`` afterwards); ``origin`` is
    its file's path (None: a config built in memory), named in errors and in ``source``."""
    where = "config" if origin is None else f"config {origin!r}"
    if not isinstance(config, dict):
        raise CostcalcError(f"{where}: expected a JSON object")
    family = config.get("model_type")
    if family is None:
        raise CostcalcError(f"{where}: missing field 'model_type' (the model family; supported: "
                            f"{', '.join(FAMILIES)})")
    if not isinstance(family, str):
        raise CostcalcError(f"{where}: field 'model_type' must be a string (the model family), got {quote(family)}")
    if family in OUT_OF_REACH:
        raise CostcalcError(f"{where}: model_type {quote(family)} is not supported: its layers use "
                            f"{OUT_OF_REACH[family]}, a block kind costcalc does not model")
    if family in REMOTE_CODE:
        remote, (family, stated) = family, REMOTE_CODE[family]
        where = f"{where} ({remote}, read as {family})"
        for key in stated:
            if key not in config:
                raise CostcalcError(f"{where}: needs field {quote(key)} (its remote-code default differs from "
                                    f"transformers' {family}: state it)")
    if family not in TABLES:
        raise CostcalcError(f"{where}: model_type {quote(family)} is not supported; supported: "
                            f"{', '.join(FAMILIES)}")
    tied = None
    quantization = config.get("quantization_config")   # a wrapper's applies to its decoder
    if TABLES[family].decoder:   # a multimodal wrapper: its text decoder is what costs
        outer = _reader(config, family, where)
        if not isinstance(config.get("text_config"), dict):
            raise CostcalcError(f"{where}: {family} without a text_config")
        if "tie_word_embeddings" in TABLES[family].rows:                # the wrapper's flag ties (Step-3.7's
            tied = outer.flag("tie_word_embeddings", TABLES[family].tied)   # has none: its text config's does)
            if family in EITHER_TIES and not tied:      # MiniMax-M3: false defers to the text config's flag
                tied = None
        family = TABLES[family].decoder
        config = {**config["text_config"], "model_type": family}
        quantization = quantization if quantization is not None else config.get("quantization_config")
    reader = _reader(config, family, where)
    layers = MAPPERS[family](reader)
    dtypes = quant.dtypes(quant.moved(quantization, config, family), family, layers, where)
    groups = _groups(layers)
    if len(groups) > MAX_GROUPS:
        raise CostcalcError(f"{where}: its layers are of {len(groups):,} different kinds (at most {MAX_GROUPS:,})")
    preset: dict[str, Any] = {"name": name, "title": name, "d": reader.need("hidden_size"),
                              "V": reader.need("vocab_size"), "layers": groups}
    preset["tied_embeddings"] = tied if tied is not None else reader.flag("tie_word_embeddings", TABLES[family].tied)
    if family in STATE_DTYPES and any(parse(layer["arch"]).mixer for layer in layers):
        preset["state_dtype"] = STATE_DTYPES[family]     # what transformers keeps the recurrent state in
    mtp = _mtp(reader, family, layers)
    if mtp is not None:   # the last group's kind (the spec's default), or named with its sizes
        last = {k: v for k, v in groups[-1].items() if k != "count"}
        preset["mtp"] = {"count": mtp["count"]} if last == {k: v for k, v in mtp.items() if k != "count"} else mtp
    if dtypes:
        preset["dtypes"] = dtypes                        # the formats its checkpoint stores
    preset["source"] = {"model_type": family} if origin is None else {"config": origin, "model_type": family}
    return _flatten(preset)


# The key a family's config counts its multi-token-prediction layers with (docs/hf-import.md, "MTP
# layers"). transformers 5.23 builds none of them (the causal LM drops them on load); costcalc counts
# them apart and runs them only as a decode step's draft (``--draft mtp``). Absent: none.
MTP_KEYS = {family: "num_nextn_predict_layers" for family in ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa")}
MTP_KEYS.update({family: "mtp_num_hidden_layers" for family in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")})
# MiMo-7B's remote code (MiMoMTPLayers), MiMo-V2-Flash's and Step-3.5/3.7's serving code (vLLM, SGLang): 5.23
# builds none of them in the causal LM either; each module's block is the family's ``MTP_LAYERS`` rule.
MTP_KEYS.update({family: "num_nextn_predict_layers" for family in ("mimo", "mimo_v2_flash", "step3p5")})


def _mtp(reader: Reader, family: str, layers: list[Layer]) -> dict[str, Any] | None:
    """The ``mtp`` field of a family whose config counts MTP layers: that many modules, each
    (eh_proj, or Qwen's fc, MiMo's input_proj, and) a decoder block of the model's last layer's kind and
    sizes, or of the kind the family's ``MTP_LAYERS`` rule reads (MiMo-V2-Flash, Step-3.5/3.7, MiMo)."""
    key = MTP_KEYS.get(family)
    count = reader.count(key, 0) if key is not None else 0
    if count == 0:
        return None
    if key == "mtp_num_hidden_layers" and count > 1:
        raise reader.error(f"field {quote(key)} is {count}: one MTP module of {count} decoder layers behind one fc "
                           f"projection is not modelled (costcalc's MTP modules are one layer each, DeepSeek's)")
    return {"count": count, **(MTP_LAYERS[family](reader, layers) if family in MTP_LAYERS else layers[-1])}


def _reader(config: dict, family: str, where: str) -> Reader:
    """Every key with a value known to the family (a null says nothing), then a Reader (``where``:
    the config as errors name it)."""
    table = TABLES[family]
    known = table.known()
    for key, value in config.items():
        if value is not None and key not in known:
            raise CostcalcError(f"{where}: field {quote(key)} ({family}) is not understood and may change "
                                f"the cost; costcalc does not guess -- remove it if it does not")
    if config.get("is_encoder_decoder"):
        raise CostcalcError(f"{where}: is_encoder_decoder is true: only decoder-only models are costed")
    if config.get("per_layer_config") and "per_layer_config" not in table.rows:   # families that read it (gemma4_text, step3p5)
        raise CostcalcError(f"{where}: per_layer_config gives layers their own sizes, which is not read")
    return Reader(config, family, where, table.aliases)


def _groups(layers: list[Layer]) -> list[dict]:
    """Layers -> groups of identical layers, in order of first appearance, with counts (one
    look-up a layer: linear in the layer count, whatever the number of groups)."""
    groups: dict[frozenset, dict] = {}
    for layer in layers:
        key = frozenset(layer.items())
        if key in groups:
            groups[key]["count"] += 1
        else:
            groups[key] = {"count": 1, **layer}
    return list(groups.values())


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
    tail = ["layers", "mtp", "tied_embeddings", "state_dtype", "dtypes", "stated", "source"]
    middle = [k for k in preset if k not in head and k not in tail]
    return {k: preset[k] for k in head + middle + tail if k in preset}
