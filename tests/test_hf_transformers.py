"""The HF group: costcalc's import held against transformers itself (the `test` extra installs it
with torch; skipped only where transformers is not installed).

1. Each family's field table has exactly the keys its configuration class defines and writes.
2. Every real config in tests/data/hf-configs, re-written by transformers' own configuration class,
   imports and reads the same as the original.
3. For every family, on a small config keeping its structure (windows, chunks, MoE layouts,
   shared experts, dense-first layers, MLA, non-gated MLPs, fused projections, parallel blocks):
   costcalc's total_params equals the matrix parameters of the model transformers builds, and
   costcalc's prefill under ``full`` with all-position logits equals what FlopCounterMode counts on
   it with eager attention -- exactly. Llama 4 runs all E experts on every token where costcalc
   counts the k routed ones: the difference is stated and computed from costcalc's own experts term.
"""
import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import hf_models  # noqa: E402  (tests/hf_models.py: transformers; torch where a model is built)
import test_hf_linear_families as linear  # noqa: E402  (the linear-attention families: run on the CPU there)
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

from costcalc import calc, hf  # noqa: E402
from costcalc.spec import from_dict  # noqa: E402

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def class_keys(family: str) -> set[str]:
    """The keys a configuration class defines (its fields, under the names save_pretrained writes)
    and the keys its __post_init__ adds and writes."""
    if family in hf_models.REMOTE:       # remote code: the class it subclasses, plus the fields it adds
        base, added = hf_models.REMOTE[family]
        return keys_of(CONFIG_MAPPING[base]) | added
    return keys_of(CONFIG_MAPPING[family])


def keys_of(cls) -> set[str]:
    from transformers import PreTrainedConfig

    base = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    fields = {cls.attribute_map.get(f.name, f.name) for f in dataclasses.fields(cls) if f.name not in base}
    written = set(json.loads(cls().to_json_string(use_diff=True)))
    return fields | (written - base - {"model_type", "transformers_version"})


@pytest.mark.parametrize("family", sorted(set(hf.TABLES) - hf_models.UNSHIPPED))
def test_each_table_holds_its_configuration_class(family):
    table = hf.TABLES[family]
    assert set(table.rows) == class_keys(family), family
    assert not set(table.extra) & set(table.rows), "an extra key is a class key"
    assert set(CONFIG_MAPPING[hf_models.REMOTE.get(family, (family,))[0]].attribute_map) <= set(table.known())


@pytest.mark.parametrize("family, key", [(f, k) for f in sorted(hf.SUBTABLES) for k in sorted(hf.SUBTABLES[f])])
def test_each_sub_table_holds_its_configuration_class(family, key):
    table = hf.SUBTABLES[family][key]
    assert set(table.rows) == keys_of(CONFIG_MAPPING[family].sub_configs[key]), (family, key)
    assert key in hf.TABLES[family].rows


IN_TRANSFORMERS = sorted(p.stem for p in CONFIGS.glob("*.json")
                         if json.loads(p.read_text())["model_type"] not in hf_models.UNSHIPPED)


@pytest.mark.parametrize("name", IN_TRANSFORMERS)
def test_a_config_rewritten_by_transformers_reads_the_same(name):
    original = json.loads((CONFIGS / f"{name}.json").read_text())
    written = hf_models.rewrite(original)
    a = from_dict(hf.to_preset(original, name), name)
    b = from_dict(hf.to_preset(written, name), name)
    assert [(g.count, g.arch, dict(g.sizes)) for g in a.groups] == [(g.count, g.arch, dict(g.sizes)) for g in b.groups]
    assert a.tied_embeddings == b.tied_embeddings


_MROPE_SMALL = {"mrope_interleaved": True, "mrope_section": [4, 4, 4], "rope_type": "default"}
_VISION_SMALL = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=64,
                     deepstack_visual_indexes=[0])
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128,
            max_position_embeddings=256)
MOE = dict(num_experts_per_tok=2)
SMALL = {
    "llama": dict(BASE, num_hidden_layers=2, attention_bias=True, mlp_bias=True),
    "mistral": dict(BASE, num_hidden_layers=2, sliding_window=8),
    "qwen2": dict(BASE, num_hidden_layers=4, use_sliding_window=True, sliding_window=8, max_window_layers=2),
    "mimo": dict(BASE, num_hidden_layers=4, use_sliding_window=True, sliding_window=8, max_window_layers=2,
                 num_nextn_predict_layers=1, attention_bias=True),
    "qwen3": dict(BASE, num_hidden_layers=4, head_dim=24, use_sliding_window=True, sliding_window=8, max_window_layers=3),
    "mixtral": dict(BASE, **MOE, num_hidden_layers=2, intermediate_size=32, num_local_experts=4, sliding_window=8),
    "qwen2_moe": dict(BASE, **MOE, num_hidden_layers=4, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                      num_experts=4, decoder_sparse_step=2, use_sliding_window=True, sliding_window=8,
                      max_window_layers=3),
    "qwen3_moe": dict(BASE, **MOE, num_hidden_layers=4, head_dim=24, moe_intermediate_size=32, num_experts=4,
                      mlp_only_layers=[1], use_sliding_window=True, sliding_window=8),
    "olmoe": dict(BASE, **MOE, num_hidden_layers=2, intermediate_size=32, num_experts=4),
    "deepseek_v2": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96,
                        vocab_size=128, kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=4,
                        v_head_dim=8, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=2,
                        first_k_dense_replace=1, **MOE),
    "deepseek_v3": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=3, intermediate_size=96,
                        vocab_size=128, kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=4,
                        v_head_dim=8, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=1,
                        first_k_dense_replace=1, n_group=1, topk_group=1, **MOE),
    "gpt_oss": dict(BASE, **MOE, num_hidden_layers=4, head_dim=16, intermediate_size=32, num_local_experts=4,
                    sliding_window=8),
    "gemma2": dict(BASE, num_hidden_layers=4, head_dim=24, sliding_window=8),
    "gemma3_text": dict(BASE, num_hidden_layers=4, head_dim=24, sliding_window=8, sliding_window_pattern=2),
    "phi3": dict(BASE, num_hidden_layers=2, sliding_window=8, pad_token_id=0),
    "phimoe": dict(BASE, num_hidden_layers=2, intermediate_size=48, num_local_experts=4, num_experts_per_tok=2,
                   attention_bias=True, lm_head_bias=True, sliding_window=8),
    "granite": dict(BASE, num_hidden_layers=2, attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
                    embedding_multiplier=12.0, logits_scaling=8.0, residual_multiplier=0.22),
    "granitemoe": dict(BASE, **MOE, num_hidden_layers=2, intermediate_size=32, num_local_experts=4,
                       tie_word_embeddings=True),
    "olmo2": dict(BASE, num_hidden_layers=2),
    "olmo3": dict(BASE, num_hidden_layers=4, sliding_window=8),
    "starcoder2": dict(BASE, num_hidden_layers=2, intermediate_size=128, sliding_window=8, use_bias=True),
    "gemma": dict(BASE, num_hidden_layers=2, num_key_value_heads=1, head_dim=24),
    "cohere": dict(BASE, num_hidden_layers=2, use_qk_norm=True),
    "gpt_neox": dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=128,
                     num_hidden_layers=2, max_position_embeddings=256, use_parallel_residual=True),
    "glm4": dict(BASE, num_hidden_layers=2, head_dim=24, attention_bias=True, pad_token_id=0),
    "glm4_moe": dict(BASE, **MOE, num_hidden_layers=3, head_dim=24, moe_intermediate_size=32, n_routed_experts=8,
                     n_shared_experts=2, first_k_dense_replace=1, n_group=2, topk_group=1, attention_bias=True),
    "ernie4_5_moe": dict(BASE, num_hidden_layers=4, moe_intermediate_size=32, moe_num_experts=8, moe_k=2,
                         moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_interval=2, use_bias=True,
                         head_dim=24),
    "exaone4": dict(BASE, num_hidden_layers=4, sliding_window=8, sliding_window_pattern=4),
    "smollm3": dict(BASE, num_hidden_layers=4, use_sliding_window=True, sliding_window=8, pad_token_id=0),
    "seed_oss": dict(BASE, num_hidden_layers=2, head_dim=24, attention_bias=True, attention_out_bias=True),
    "apertus": dict(BASE, num_hidden_layers=2),
    "llama4_text": dict(BASE, num_hidden_layers=4, head_dim=24, intermediate_size=32, intermediate_size_mlp=96,
                        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
                        attention_chunk_size=8),
    "gptj": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=128, n_positions=256, rotary_dim=8),
    "phi": dict(BASE, num_hidden_layers=2, head_dim=24),   # (qk_layernorm breaks in transformers when head_dim != d // h)
    "stablelm": dict(BASE, num_hidden_layers=2, use_parallel_residual=True, use_qkv_bias=True, qk_layernorm=True),
    "nemotron": dict(BASE, num_hidden_layers=2, head_dim=24, attention_bias=True, mlp_bias=True),
    "ministral": dict(BASE, num_hidden_layers=4, head_dim=24, sliding_window=8,
                      layer_types=["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"]),
    "ernie4_5": dict(BASE, num_hidden_layers=2, head_dim=24, use_bias=True),
    "helium": dict(BASE, num_hidden_layers=2, head_dim=16, attention_bias=True, mlp_bias=True),
    "olmo": dict(BASE, num_hidden_layers=2, clip_qkv=8.0, attention_bias=True),
    "gpt_bigcode": dict(n_embd=64, n_head=4, n_layer=2, n_inner=96, vocab_size=128, n_positions=256),
    "opt": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, ffn_dim=96, vocab_size=128,
                max_position_embeddings=256, do_layer_norm_before=False),
    "bloom": dict(hidden_size=64, n_head=4, n_layer=2, vocab_size=128, pretraining_tp=2, slow_but_exact=True),
    "mpt": dict(d_model=64, n_heads=4, n_layers=2, vocab_size=128, max_seq_len=256,
                attn_config={"clip_qkv": 8.0, "alibi_bias_max": 8}),
    "cohere2": dict(BASE, num_hidden_layers=4, head_dim=24, sliding_window=8, sliding_window_pattern=2),
    "glm": dict(BASE, num_hidden_layers=2, head_dim=24, attention_bias=True, partial_rotary_factor=0.5, pad_token_id=0),
    "hunyuan_v1_dense": dict(BASE, num_hidden_layers=2, head_dim=24, attention_bias=True),
    "arcee": dict(BASE, num_hidden_layers=2, head_dim=24, mlp_bias=True),
    "vaultgemma": dict(BASE, num_hidden_layers=4, head_dim=24, sliding_window=8),
    "dots1": dict(BASE, **MOE, num_hidden_layers=4, moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=2,
                  first_k_dense_replace=1, sliding_window=8, max_window_layers=2, n_group=2, topk_group=1,
                  attention_bias=True),
    "hunyuan_v1_moe": dict(BASE, num_hidden_layers=3, head_dim=24, num_experts=4, moe_topk=[2, 1, 2],
                           attention_bias=True),
    # value heads narrower than the query/key heads; sliding layers with twice the KV heads and sinks
    "mimo_v2_flash": dict(BASE, **MOE, num_hidden_layers=7, head_dim=24, v_head_dim=16, sliding_window=8,
                          moe_intermediate_size=32, n_routed_experts=4),
    # MiniMax-M3's text decoder: fused SwiGLU-OAI MLP (dense_intermediate_size), MoE with one shared expert
    "minimax_m3_vl_text": dict(BASE, **MOE, num_hidden_layers=3, head_dim=24, intermediate_size=32,
                               dense_intermediate_size=96, shared_intermediate_size=48, num_local_experts=4,
                               mlp_layer_types=["dense", "sparse", "sparse"]),
    # Mamba-1 and short-convolution families (tests/test_hf_conv_families.py checks them further)
    "mamba": dict(hidden_size=64, num_hidden_layers=2, vocab_size=128, expand=2, time_step_rank="auto"),
    "falcon_mamba": dict(hidden_size=64, num_hidden_layers=2, vocab_size=128, expand=16, intermediate_size=96,
                         state_size=8, conv_kernel=3, time_step_rank=6),
    # Gemma 4: sliding layers and full ones of another head width and KV heads, values from the keys on the
    # full layers (no v_proj), experts beside every layer's MLP (tests/test_hf_gemma4.py checks it further)
    "gemma4_text": dict(BASE, num_hidden_layers=4, head_dim=16, global_head_dim=24, num_global_key_value_heads=1,
                        attention_k_eq_v=True, sliding_window=8, hidden_size_per_layer_input=0, enable_moe_block=True,
                        num_experts=4, top_k_experts=2, moe_intermediate_size=32,
                        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"]),
    # frontier families (issue #19): MiniMax-M2, and Qwen3-VL's text decoders under their wrappers (built whole,
    # the vision tower left out: hf_models.VISION; tests/test_hf_frontier_families.py has Kimi-K2 and Kimi-K2.5)
    "minimax_m2": dict(BASE, **MOE, num_hidden_layers=2, head_dim=24, intermediate_size=32, num_local_experts=4,
                       rotary_dim=12, attn_type_list=[1, 1], shared_intermediate_size=0, use_qk_norm=True),
    "qwen3_vl_text": dict(model_type="qwen3_vl", tie_word_embeddings=True, text_config=dict(
        BASE, num_hidden_layers=2, head_dim=24, rope_scaling=_MROPE_SMALL), vision_config=_VISION_SMALL),
    "qwen3_vl_moe_text": dict(model_type="qwen3_vl_moe", text_config=dict(
        BASE, **MOE, num_hidden_layers=3, moe_intermediate_size=32, num_experts=4, mlp_only_layers=[1],
        decoder_sparse_step=1, rope_scaling=_MROPE_SMALL), vision_config=_VISION_SMALL),
}
SEQ = 24   # longer than every window and chunk above
# Families whose forward reads tensor values (.item()), which the meta device cannot: their FLOPs are
# counted on CPU on small configs (tests/test_hf_conv_families.py, tests/test_hf_linear_families.py, with
# their parameters); here only the real configs' parameters.
ON_CPU = {"jamba", "lfm2", "lfm2_moe"} | {linear.TEXT.get(family, family) for family in linear.SMALL}
# The sparse-attention families: small configs, parameters and FLOPs, in tests/test_hf_sparse_families.py (CPU).
ON_CPU |= {"deepseek_v32", "glm_moe_dsa"}
# Step-3.7's experts always run their own loop over the routed experts (no batched_mm), which reads values:
# small configs on CPU in tests/test_hf_head_families.py.
ON_CPU |= {"step3p5"}
# DeepSeek-V4: its small config, parameters and FLOPs (module by module, cached steps too) in tests/test_hf_deepseek_v4.py.
ON_CPU |= {"deepseek_v4"}


def test_every_family_has_a_small_config():
    """The state-space families' small configs are in tests/test_hf_ssm_families.py (every phase)."""
    from costcalc.hf.families import ssm

    assert set(SMALL) | ON_CPU == set(hf.MAPPERS) - set(ssm.MAPPERS) - hf_models.UNSHIPPED and not set(SMALL) & ON_CPU


def all_experts_adjustment(spec, row: dict) -> int:
    """Llama 4: transformers multiplies every token by all E experts (zero weights for the unselected
    ones, modeling_llama4.py Llama4TextMoe); costcalc charges the k routed. The executed experts term
    is E/k times costcalc's, so the counter sees (E - k)/k x costcalc's experts FLOPs more."""
    moe = [g.sizes for g in spec.groups if g.block.ffn == "moe"]
    E, k = moe[0]["E"], moe[0]["k"]
    assert all((s["E"], s["k"]) == (E, k) for s in moe)
    assert row["experts_flops"] * (E - k) % k == 0
    return row["experts_flops"] * (E - k) // k


@pytest.mark.parametrize("family", sorted(SMALL))
def test_parameters_and_prefill_flops_equal_what_transformers_builds_and_counts(family):
    config = {"model_type": family, **SMALL[family]}
    spec = from_dict(hf.to_preset(config, "small"), "small")
    moe = any(g.block.ffn == "moe" for g in spec.groups)
    model, built = hf_models.build(config, experts=moe and family != "llama4_text")
    assert calc.parameters(spec)["total_params"] == hf_models.matrix_params(model, built)
    row = calc.prefill(spec, SEQ, 1, "full", logits="all")
    extra = all_experts_adjustment(spec, row) if family == "llama4_text" else 0
    assert row["total_flops"] + extra == hf_models.prefill_flops(model, SEQ)


@pytest.mark.slow
@pytest.mark.parametrize("name", IN_TRANSFORMERS)
def test_every_real_config_at_its_real_size(name):
    """The same two equalities for every real config (each preset's model) at its real size, on meta
    (about 20 s for all: ``pytest -m slow tests/test_hf_transformers.py``)."""
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    spec = from_dict(hf.to_preset(config, name), name)
    moe = any(g.block.ffn == "moe" for g in spec.groups)
    model, family = hf_models.build(config, experts=moe and family_of(config) != "llama4_text")
    assert calc.parameters(spec)["total_params"] == hf_models.matrix_params(model, family)
    from costcalc.hf.families import ssm

    if family in ON_CPU or family in ssm.MAPPERS:   # forwards that read values (.item()) on meta: their FLOPs are
        return                                      # held on small configs on CPU (test_hf_conv/ssm_families.py)
    row = calc.prefill(spec, 8, 1, "full", logits="all")
    extra = all_experts_adjustment(spec, row) if family == "llama4_text" else 0
    assert row["total_flops"] + extra == hf_models.prefill_flops(model, 8)


def family_of(config: dict) -> str:
    return hf_models.WRAPPERS.get(config["model_type"], config["model_type"])
