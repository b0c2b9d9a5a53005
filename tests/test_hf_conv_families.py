"""The Mamba-1 and short-convolution families (mamba, falcon_mamba, jamba, lfm2, lfm2_moe): how their
configs import, and -- where transformers is installed -- costcalc held to what transformers 5.23
builds and runs on small configs that keep each family's structure:

- total_params equals the matrix parameters of the model it builds (``hf_models.matrix_params``:
  Mamba-1's ``A_log`` and the depthwise convolution taps are not products, left out by name);
- the FLOPs torch's FlopCounterMode counts per module kind -- the mixer's projections (``mm`` inside
  the mixer module: Mamba-1's dt projection runs as a raw matmul of ``dt_proj.weight`` at the mixer's
  level, not inside ``dt_proj``), its convolution, its scan (Mamba-1's read of the state, a ``bmm`` at
  the mixer's level), the attention's projections and scores, the FFN, router, experts and LM head --
  equal costcalc's terms under ``full`` exactly, for a prefill of 100 tokens, a decode step after it
  and a forward of 4 tokens over that cache;
- the bytes of every cache tensor after a bf16 forward (B=2, S=10) equal costcalc's memory: the KV
  cache plus the recurrent states and convolution windows, in the preset's state dtype.

CPU in float32 (their forwards read tensor values, so the meta device cannot run them), eager
attention, eager experts (transformers' default ``grouped_mm`` is invisible to the counter).
"""
import json

import pytest

from costcalc import calc, hf, memory
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.roofline import Precision
from costcalc.spec import from_dict
from hf_rules import CONFIGS, kinds

BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128)
SMALL = {
    "mamba": dict(hidden_size=64, num_hidden_layers=2, vocab_size=128, state_size=16, conv_kernel=4, expand=2),
    # intermediate_size wins over expand (as in Falcon-Mamba-7B's file); dt rank and kernel not the defaults
    "falcon_mamba": dict(hidden_size=64, num_hidden_layers=2, vocab_size=128, state_size=8, conv_kernel=3, expand=16,
                         intermediate_size=96, time_step_rank=6, tie_word_embeddings=False),
    # layer 0 Mamba + MoE, 1 attention + dense, 2 Mamba + dense, 3 attention + MoE
    "jamba": dict(BASE, num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=3,
                  expert_layer_offset=0, num_experts=4, num_experts_per_tok=2, mamba_d_state=16, mamba_d_conv=4,
                  mamba_expand=2, use_mamba_kernels=False),
    # MLP width adjusted: int(2/3 x 96) = 64, a multiple of 16
    "lfm2": dict(BASE, num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"], block_multiple_of=16,
                 conv_L_cache=3),
    "lfm2_moe": dict(BASE, num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "full_attention"],
                     num_dense_layers=1, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, conv_L_cache=3),
}
FAST = ("mamba", "lfm2")          # the others are @slow (a few seconds each)
FAMILIES = [f if f in FAST else pytest.param(f, marks=pytest.mark.slow) for f in SMALL]


def config(family: str) -> dict:
    return {"model_type": family, **SMALL[family]}


def spec_of(cfg: dict, name: str = "small"):
    return from_dict(hf.to_preset(cfg, name), name)


def real(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


# --- how the configs import (no transformers) ---------------------------------------------------

def test_real_configs_read_as_their_layers():
    assert kinds(real("mamba-2.8b-hf")) == [(64, "mamba1.none")]
    assert kinds(real("falcon-mamba-7b")) == [(64, "mamba1.none")]
    assert kinds(real("ai21-jamba-1.5-mini")) == [(12, "mamba1.dense"), (16, "mamba1.moe"), (4, "gqa.dense")]
    assert kinds(real("lfm2-1.2b")) == [(10, "shortconv.dense"), (6, "gqa.dense")]
    assert kinds(real("lfm2-8b-a1b")) == [(2, "shortconv.dense"), (6, "gqa.moe"), (16, "shortconv.moe")]


def test_mamba_inner_width_dt_rank_and_fp32_state():
    falcon = hf.to_preset(real("falcon-mamba-7b"), "x")
    assert (falcon["d_in"], falcon["r_dt"], falcon["N_s"], falcon["K_c"]) == (8192, 256, 16, 4)   # not 16 x 4096
    assert falcon["state_dtype"] == "fp32" and falcon["tied_embeddings"] is False
    mamba = real("mamba-2.8b-hf")
    no_width = {k: v for k, v in mamba.items() if k not in ("intermediate_size", "time_step_rank")}
    preset = hf.to_preset({**no_width, "expand": 3}, "x")
    assert (preset["d_in"], preset["r_dt"]) == (3 * 2560, 2560 // 16)      # int(expand x d), 'auto' = ceil(d / 16)
    assert hf.to_preset({**mamba, "time_step_rank": "auto", "hidden_size": 2570}, "x")["r_dt"] == 161
    with pytest.raises(CostcalcError, match="'n_layer' is 64 but transformers 5.23 reads num_hidden_layers"):
        hf.to_preset({**mamba, "num_hidden_layers": 32}, "x")
    assert "state_dtype" not in hf.to_preset(real("lfm2-1.2b"), "x")       # a convolution window: the KV dtype


def test_jamba_places_attention_and_experts_by_period_and_offset():
    jamba = dict(BASE, model_type="jamba", num_hidden_layers=8, num_experts=4, num_experts_per_tok=2)
    # the class defaults: attention at i % 8 == 4 (layer 4), MoE at odd i (1, 3, 5, 7)
    assert kinds(jamba) == [(3, "mamba1.dense"), (4, "mamba1.moe"), (1, "gqa.dense")]
    assert kinds({**jamba, "attn_layer_offset": 1}) == [(4, "mamba1.dense"), (1, "gqa.moe"), (3, "mamba1.moe")]
    assert kinds({**jamba, "num_experts": 1}) == [(7, "mamba1.dense"), (1, "gqa.dense")]   # one expert: dense
    with pytest.raises(CostcalcError, match="attn_layer_offset .8. must be smaller than attn_layer_period .8."):
        hf.to_preset({**jamba, "attn_layer_offset": 8}, "x")
    with pytest.raises(CostcalcError, match="needs field 'num_key_value_heads'"):
        hf.to_preset({k: v for k, v in jamba.items() if k != "num_key_value_heads"}, "x")   # the class's 8


def test_lfm2_width_rule_and_layer_kinds():
    lfm2 = dict(BASE, model_type="lfm2", num_hidden_layers=3, intermediate_size=1000)
    assert hf.to_preset(lfm2, "x")["m"] == 256 * -(-666 // 256)                   # int(2000/3) up to 256: 768
    assert hf.to_preset({**lfm2, "block_ffn_dim_multiplier": 1.5}, "x")["m"] == 1024   # int(1.5 x 666) = 999 up to 1024
    assert hf.to_preset({**lfm2, "block_ffn_dim_multiplier": None}, "x")["m"] == 666   # null: no rounding
    assert hf.to_preset({**lfm2, "block_auto_adjust_ff_dim": False}, "x")["m"] == 1000
    assert kinds(lfm2) == [(3, "gqa.dense")]                                        # no layer kinds: all attend
    assert kinds({**lfm2, "full_attn_idxs": [1]}) == [(2, "shortconv.dense"), (1, "gqa.dense")]
    with pytest.raises(CostcalcError, match="'layer_types' and 'full_attn_idxs' disagree"):
        hf.to_preset({**lfm2, "full_attn_idxs": [1], "layer_types": ["conv", "conv", "full_attention"]}, "x")
    trimmed = real("lfm2-1.2b")
    assert hf.to_preset(trimmed, "x")["m"] == 8192                                 # block_ff_dim 12288
    with pytest.raises(CostcalcError, match="disagree"):
        hf.to_preset({**trimmed, "intermediate_size": 8192}, "x")                 # block_ff_dim is its alias
    for key, value in (("conv_dim", 1024), ("num_heads", 16), ("block_use_swiglu", False)):
        with pytest.raises(CostcalcError, match=key):
            hf.to_preset({**trimmed, key: value}, "x")
    moe = real("lfm2-8b-a1b")
    with pytest.raises(CostcalcError, match="needs field 'layer_types'"):
        hf.to_preset({k: v for k, v in moe.items() if k != "layer_types"}, "x")


@pytest.mark.parametrize("family, named", [
    ("zamba", "shared attention block"), ("lfm3", "per-head sigmoid attention output gate (g_proj"),
    ("recurrent_gemma", "RG-LRU"), ("xlstm", "mLSTM"), ("rwkv", "RWKV time mixing")])
def test_families_not_modelled_are_one_line_refusals_naming_what(family, named):
    with pytest.raises(CostcalcError, match="not supported") as err:
        hf.to_preset({"model_type": family, **BASE, "num_hidden_layers": 2}, "x")
    assert named in str(err.value) and "\n" not in str(err.value)


# --- held to transformers ------------------------------------------------------------------------

def build(family: str, dtype: str = "float32"):
    pytest.importorskip("transformers")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    transformers.logging.set_verbosity_error()
    moe = "num_experts" in SMALL[family]
    kwargs = {"attn_implementation": "eager", **({"experts_implementation": "eager"} if moe else {})}
    model = AutoModelForCausalLM.from_config(CONFIG_MAPPING[family](**SMALL[family]), dtype=getattr(torch, dtype),
                                             **kwargs)
    return model.eval()


MIXERS, ATTENTION, FFN = ("mixer", "mamba", "conv"), "self_attn", "feed_forward"


def kinds_counted(counts: dict) -> dict[str, int]:
    """FlopCounterMode's per-module counts -> costcalc's terms, by module kind: everything a layer's
    mixer module runs (its Linear children and its raw matmuls) is mixer_proj (mm), conv
    (convolution) or scan (bmm); the attention module's mm and bmm are attn_proj and attention; an
    FFN module's experts and router are theirs, the rest ffn; lm_head's mm is lm_head."""
    out: dict[str, int] = {}

    def add(term, n):
        if n:
            out[term] = out.get(term, 0) + n

    for name, ops in counts.items():
        ops = {str(op).removeprefix("aten."): int(n) for op, n in ops.items()}
        parts = name.split(".")
        if name.endswith(".lm_head"):
            add("lm_head_flops", ops.pop("mm", 0))
        if "layers" not in parts or len(parts) != parts.index("layers") + 3:
            continue                                   # only a layer's direct children
        child = parts[-1]
        if child in MIXERS:
            add("mixer_proj_flops", ops.pop("mm", 0))
            add("conv_flops", ops.pop("convolution", 0))
            add("scan_flops", ops.pop("bmm", 0))
        elif child == ATTENTION:
            add("attn_proj_flops", ops.pop("mm", 0))
            add("attention_flops", ops.pop("bmm", 0))
        elif child == FFN:
            experts = counts.get(f"{name}.experts", {})
            router = counts.get(f"{name}.router", counts.get(f"{name}.gate", {}))
            e = sum(int(n) for n in experts.values())
            r = sum(int(n) for n in router.values()) if experts else 0     # a dense MLP's "gate" is not a router
            add("experts_flops", e)
            add("router_flops", r)
            add("ffn_flops", ops.pop("mm", 0) - e - r)
        assert not ops, (name, ops)                    # nothing else runs there
    return out


def terms(row: dict) -> dict[str, int]:
    keys = ("mixer_proj_flops", "conv_flops", "scan_flops", "attn_proj_flops", "attention_flops", "ffn_flops",
            "router_flops", "experts_flops", "lm_head_flops")
    return {k: row[k] for k in keys if row.get(k)}


def counted(model, **inputs):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(**inputs)
    got = kinds_counted(counter.get_flop_counts())
    assert sum(got.values()) == counter.get_total_flops()       # every counted FLOP has a kind
    return out, got


def cache_of(out):
    return out.cache_params if getattr(out, "cache_params", None) is not None else out.past_key_values


def cache_arg(family: str) -> str:
    return "cache_params" if family in ("mamba", "falcon_mamba") else "past_key_values"


@pytest.mark.parametrize("family", FAMILIES)
def test_parameters_equal_the_matrices_transformers_builds(family):
    import hf_models

    model = build(family)
    assert calc.parameters(spec_of(config(family)))["total_params"] == hf_models.matrix_params(model, family)


@pytest.mark.parametrize("family", FAMILIES)
def test_executed_flops_per_module_kind_equal_full(family):
    """Prefill of 100 tokens, one decode step over it, and 4 tokens over a fresh 100-token cache."""
    import torch

    model, spec = build(family), spec_of(config(family))
    ids = torch.randint(0, 128, (1, 104), generator=torch.Generator().manual_seed(0))
    out, prefill = counted(model, input_ids=ids[:, :100], use_cache=True)
    assert prefill == terms(calc.prefill(spec, 100, 1, "full", logits="all"))
    _, decode = counted(model, input_ids=ids[:, 100:101], use_cache=True, cache_position=torch.tensor([100]),
                        **{cache_arg(family): cache_of(out)})
    assert decode == terms(calc.decode(spec, 100, 1, "full"))
    with torch.no_grad():
        out = model(input_ids=ids[:, :100], use_cache=True)
    _, four = counted(model, input_ids=ids[:, 100:104], use_cache=True, cache_position=torch.arange(100, 104),
                      **{cache_arg(family): cache_of(out)})
    assert four == terms(calc.cached_prefill(spec, 4, 100, 1, "full", logits="all"))


def tensors(value):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors(v)


@pytest.mark.parametrize("family", FAMILIES)
def test_cache_bytes_after_a_bf16_forward_equal_costcalc_memory(family):
    """Every tensor the cache holds after B=2 prompts of 10 tokens in a bf16 model (Mamba-1's
    recurrent state is float32 there: the presets' state_dtype) == KV cache + state bytes."""
    import torch

    model, spec = build(family, "bfloat16"), spec_of(config(family))
    with torch.no_grad():
        out = model(input_ids=torch.ones(2, 10, dtype=torch.long), use_cache=True)
    held = sum(t.numel() * t.element_size() for layer in cache_of(out).layers for t in tensors(vars(layer)))
    query = Query(spec, "decode", Options(convention="full"), Precision())
    assert held == memory.kv_cache_bytes(query, 2, 10) + memory.state_bytes(query, 2)


# --- where transformers runs something else (docs/hf-import.md) ---------------------------------

@pytest.mark.parametrize("family", ["mamba", "lfm2"])
def test_a_cached_prompt_shorter_than_the_kernel_is_left_padded_to_it(family):
    """Named difference, not modelled: with a cache, transformers pads a prompt of S < K_c tokens on
    the left to K_c before the convolution (2 K_c - 1 outputs), so it counts the convolution of a
    K_c-token prompt where costcalc's ``full`` counts S + K_c - 1 outputs."""
    import torch

    model, spec = build(family), spec_of(config(family))
    _, got = counted(model, input_ids=torch.ones(1, 2, dtype=torch.long), use_cache=True)
    K_c = spec.groups[0].sizes["K_c"]
    assert K_c > 2
    assert got["conv_flops"] == calc.prefill(spec, K_c, 1, "full")["conv_flops"] != \
        calc.prefill(spec, 2, 1, "full")["conv_flops"]
    assert {k: v for k, v in got.items() if k != "conv_flops"} == \
        {k: v for k, v in terms(calc.prefill(spec, 2, 1, "full", logits="all")).items() if k != "conv_flops"}


@pytest.mark.slow
def test_several_tokens_over_a_cache_restart_the_mamba_scan_from_zeros():
    """Named difference: a forward of several tokens over a cache does not read the cached recurrent
    state (the scan starts from zeros); its FLOPs are those counted above, but a zeroed state leaves
    its logits unchanged, where one decode step's change."""
    import torch

    model = build("mamba")
    ids = torch.randint(0, 128, (1, 104), generator=torch.Generator().manual_seed(1))

    def logits(new, scale):
        with torch.no_grad():
            cache = model(input_ids=ids[:, :100], use_cache=True).cache_params
            for layer in cache.layers:
                for t in tensors(layer.recurrent_states):
                    t.mul_(scale)
            n = new.shape[1]
            return model(input_ids=new, cache_params=cache, use_cache=True,
                         cache_position=torch.arange(100, 100 + n)).logits

    assert torch.equal(logits(ids[:, 100:104], 1.0), logits(ids[:, 100:104], 0.0))
    assert not torch.equal(logits(ids[:, 100:101], 1.0), logits(ids[:, 100:101], 0.0))
