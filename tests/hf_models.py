"""What transformers itself builds and runs for a config: its matrix parameters and the prefill FLOPs
torch's FlopCounterMode counts (the optional HF test group; needs the ``hf`` extra).

- Parameters: every parameter tensor with two or more dimensions whose name is not a bias, each
  tensor once (tied ones once), built on the meta device. Cohere's QK LayerNorm weights are
  [heads, d_h] matrices but not operands of a product, GPT-BigCode's and OPT's learned position
  tables ([positions, d], a lookup), and Mamba-1's ``A_log`` [d_in, N_s] (an elementwise decay) and the
  depthwise convolution taps of the Mamba and LFM2 mixers ([channels, 1, K_c]: K_c weights per channel,
  not a matrix; costcalc counts their FLOPs, ``conv``, but no parameters) are not counted by costcalc:
  they are left out by name (``NOT_MATMUL``); so is a multimodal model's vision tower (``VISION``).
  torch is imported by the functions that build or run a model: the configuration checks run
  with transformers alone.
- FLOPs: one forward of ``seq`` tokens, batch 1, logits at every position, eager attention (every
  query times every key: the ``full`` convention), on the meta device (a 2-D attention mask of
  ones is passed: without it the mask code reads a value). MoE experts run as ``batched_mm``: one
  bmm over the k routed (token, expert) pairs, which the counter sees exactly (transformers'
  default ``grouped_mm`` is not in torch 2.13's FLOP registry and would count 0).
"""
from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

transformers.logging.set_verbosity_error()
_MAMBA1 = ("A_log", "conv1d.weight")       # the scan's decay (elementwise exp) and the depthwise conv taps [d_in, 1, K_c]
NOT_MATMUL = {"cohere": ("q_norm.weight", "k_norm.weight"),   # per-head LayerNorm weights [h, d_h]
              "gpt_bigcode": ("wpe.weight",), "opt": ("embed_positions.weight",),   # learned position tables
              "mamba": _MAMBA1, "falcon_mamba": _MAMBA1, "jamba": _MAMBA1,
              "lfm2": ("conv.conv.weight",), "lfm2_moe": ("conv.conv.weight",),   # depthwise conv taps [d, 1, K_c]
              **{f: ("conv1d.weight",) for f in ("mamba2", "bamba", "granitemoehybrid", "falcon_h1", "nemotron_h")},
              # depthwise convolutions [channels, 1, K_c] and KDA's decay [1, 1, heads, 1]: no product's operand
              **{f: ("conv1d.weight", "A_log") for f in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
                                                         "olmo_hybrid", "kimi_linear")}}
# Remote-code families transformers 5.23 does not ship: the transformers family their code subclasses
# and builds, and the keys their own configuration class adds (MiMo-7B: MiMoConfig(Qwen2Config) adds
# num_nextn_predict_layers; its MiMoModel is Qwen2Model plus MTP layers its forward does not run).
REMOTE = {"mimo": ("qwen2", {"num_nextn_predict_layers"}),
          # Kimi-K2: remote code whose keys describe DeepSeek-V3 (costcalc.hf.REMOTE_CODE), built as it
          "kimi_k2": ("deepseek_v3", set())}
WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text", "qwen3_5": "qwen3_5_text",
            "qwen3_5_moe": "qwen3_5_moe_text", "gemma4": "gemma4_text", "step3p7": "step3p5"}
# Families with no configuration or modelling code in transformers 5.23 at all (not even a class their
# remote code subclasses): held to their own format's rules instead (tests/test_hf_nas.py).
UNSHIPPED = {"nemotron-nas"}
# Multimodal wrappers built whole (their text decoders have no causal-LM class of their own, or the
# wrapper's flag ties the head): the image-text model transformers builds, less its vision tower and
# projector, named by these parameter-name prefixes (the decoder and the LM head are what costcalc costs).
VISION = {"qwen3_vl": ("model.visual.",), "qwen3_vl_moe": ("model.visual.",),
          "kimi_k25": ("model.vision_tower.", "model.mm_projector.")}


def rewrite(config: dict) -> dict:
    """The config as transformers writes it: ``AutoConfig.for_model(...).save_pretrained``."""
    fields = {k: v for k, v in config.items() if k != "model_type"}
    with tempfile.TemporaryDirectory() as tmp:
        AutoConfig.for_model(REMOTE.get(config["model_type"], (config["model_type"],))[0], **fields).save_pretrained(tmp)
        return json.loads((Path(tmp) / "config.json").read_text())


# Text decoders transformers builds only inside their multimodal model (no causal LM of their own):
# the wrapper's class and the parameters that are not the decoder's (the vision tower, the projector).
INSIDE = {"step3p5": ("step3p7", ("model.vision_model.", "model.multi_modal_projector."))}


def build(config: dict, experts: bool):
    """The causal LM transformers builds from a config dict (a wrapper: its text decoder), on meta."""
    family = config["model_type"]
    if family in WRAPPERS:
        config, family = {**config["text_config"]}, WRAPPERS[family]
    added: set = set()
    if family in REMOTE:
        family, added = REMOTE[family]
    fields = {k: v for k, v in config.items() if k != "model_type" and k not in added}
    import torch

    kwargs = {"attn_implementation": "eager"}
    if experts:
        kwargs["experts_implementation"] = "batched_mm"
    with torch.device("meta"):
        if family in INSIDE:       # the whole multimodal model; matrix_params leaves out what is not the decoder
            from transformers import AutoModelForImageTextToText

            outer = CONFIG_MAPPING[INSIDE[family][0]](text_config=fields)
            model = AutoModelForImageTextToText.from_config(outer, **kwargs)
        elif family in VISION:
            from transformers import AutoModelForImageTextToText

            model = AutoModelForImageTextToText.from_config(CONFIG_MAPPING[family](**fields), **kwargs)
        else:
            model = AutoModelForCausalLM.from_config(CONFIG_MAPPING[family](**fields), **kwargs)
    return model.eval(), family


def matrix_params(model, family: str) -> int:
    skip = NOT_MATMUL.get(family, ())
    outside = INSIDE.get(family, ("", ()))[1] + VISION.get(family, ())
    total = 0
    for name, p in model.named_parameters():          # a tied tensor once
        if p.ndim >= 2 and "bias" not in name.rsplit(".", 1)[-1] and not name.endswith(skip) \
                and not name.startswith(outside):
            total += p.numel()
    return total


def prefill_flops(model, seq: int) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros(1, seq, dtype=torch.long, device="meta")
    mask = torch.ones(1, seq, dtype=torch.long, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=0)
    assert tuple(out.logits.shape[:2]) == (1, seq)
    return counter.get_total_flops()
