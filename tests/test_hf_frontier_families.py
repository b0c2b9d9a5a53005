"""Kimi-K2 (remote-code ``kimi_k2``, read as transformers' deepseek_v3), Kimi-K2.5 (the ``kimi_k25`` wrapper),
MiniMax-M2 and the Qwen3-VL text decoders: the published configs' layers, the refusals, and Kimi's two
held to what transformers 5.23 builds and counts (MiniMax-M2's and Qwen3-VL's small configs are in
tests/test_hf_transformers.py's SMALL; every real config at its real size in its slow group)."""
import json
from pathlib import Path

import pytest

from costcalc import calc, hf
from costcalc.errors import CostcalcError
from costcalc.spec import from_dict

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def spec_of(config: dict):
    return from_dict(hf.to_preset(config, "small"), "small")


def structure(name: str):
    spec = hf.load(CONFIGS / f"{name}.json", name)
    return [(g.count, g.arch) for g in spec.groups], spec


def test_the_published_configs_read_as_their_layers():
    kimi, spec = structure("kimi-k2-instruct")
    assert kimi == [(1, "mla_q.dense"), (60, "mla_q.moe_shared")]
    assert dict(spec.groups[1].sizes)["E"] == 384 and dict(spec.groups[1].sizes)["E_s"] == 1
    assert structure("kimi-k2.5")[0] == kimi                       # the wrapper's text decoder is Kimi-K2's
    assert structure("minimax-m2.5")[0] == [(62, "gqa.moe")]
    assert structure("qwen3-coder-480b-a35b-instruct")[0] == [(62, "gqa.moe")]
    vl, spec = structure("qwen3-vl-235b-a22b-instruct")
    assert vl == [(94, "gqa.moe")] and not spec.tied_embeddings


# Kimi-K2's remote-code keys (its DeepseekV3Config), small
KIMI = dict(model_type="kimi_k2", hidden_size=64, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=3,
            intermediate_size=96, vocab_size=128, kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=8, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=1,
            num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1, moe_layer_freq=1,
            scoring_func="sigmoid", topk_method="noaux_tc", seq_aux=True, aux_loss_alpha=0.001,
            num_nextn_predict_layers=0, routed_scaling_factor=2.827, tie_word_embeddings=False)
KIMI_VISION = dict(num_hidden_layers=1, hidden_size=32, intermediate_size=32, num_attention_heads=2)


def test_kimi_k2_reads_as_the_deepseek_v3_it_describes():
    assert spec_of(KIMI).groups == spec_of({**KIMI, "model_type": "deepseek_v3"}).groups


def test_kimi_k2_must_state_first_k_dense_replace():
    """Its remote-code class defaults it to 0, transformers' deepseek_v3 to 3: neither is assumed."""
    config = {k: v for k, v in KIMI.items() if k != "first_k_dense_replace"}
    with pytest.raises(CostcalcError, match=r"kimi_k2, read as deepseek_v3\).*first_k_dense_replace"):
        hf.to_preset(config, "x")


@pytest.mark.parametrize("change, message", [
    ({"attn_type_list": [1, 0]}, r"layer 1 the type 0 \(0: lightning attention\)"),
    ({"attn_type_list": [1]}, r"one attention type per layer"),
    ({"shared_intermediate_size": 8192}, r"'shared_intermediate_size' is 8192 but .* no shared expert"),
    ({"head_dim": None}, r"'head_dim' must be a number"),
])
def test_minimax_m2_keys_transformers_does_not_read_must_say_what_it_builds(change, message):
    config = dict(model_type="minimax_m2", hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                  intermediate_size=32, vocab_size=128, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2)
    spec_of(config)
    with pytest.raises(CostcalcError, match=message):
        hf.to_preset({**config, **change}, "x")


def test_qwen3_moe_refuses_a_shared_expert_it_does_not_build():
    config = json.loads((CONFIGS / "qwen3-coder-480b-a35b-instruct.json").read_text())
    with pytest.raises(CostcalcError, match=r"'shared_expert_intermediate_size' is 1024 but .* no shared expert"):
        hf.to_preset({**config, "shared_expert_intermediate_size": 1024}, "x")


def test_qwen3_vl_text_needs_its_head_dim():
    """Qwen3VLTextConfig's head_dim defaults to a fixed 128 (the example model's): it must be stated."""
    text = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128,
                num_hidden_layers=2)
    with pytest.raises(CostcalcError, match=r"qwen3_vl_text: needs field 'head_dim'"):
        hf.to_preset({"model_type": "qwen3_vl", "text_config": text}, "x")


def test_a_wrappers_vision_tower_is_not_costed():
    """Kimi-K2.5's and Qwen3-VL's numbers are their text decoders': another vision tower changes none of them."""
    for name in ("kimi-k2.5", "qwen3-vl-235b-a22b-instruct"):
        config = json.loads((CONFIGS / f"{name}.json").read_text())
        bigger = {**config, "vision_config": {**config["vision_config"], "hidden_size": 4096, "depth": 64}}
        a, b = spec_of(config), spec_of(bigger)
        assert calc.parameters(a) == calc.parameters(b) and a.groups == b.groups


def test_kimi_k3_is_refused_naming_what_it_runs():
    with pytest.raises(CostcalcError, match=r"model_type 'kimi_k3' is not supported: .*full-rank gates .*output gate "
                                            r".*latent width .*attention residuals"):
        hf.to_preset({"model_type": "kimi_k3", "text_config": {"model_type": "kimi_linear"}}, "x")


pytest.importorskip("transformers")
import hf_models  # noqa: E402  (tests/hf_models.py: transformers; torch where a model is built)

SEQ = 24


@pytest.mark.parametrize("config", [
    KIMI,
    # the wrapper's own tie_word_embeddings (class default true) ties the head whatever its text_config says
    dict(model_type="kimi_k25", text_config={**KIMI, "tie_word_embeddings": False}, vision_config=KIMI_VISION),
    dict(model_type="kimi_k25", tie_word_embeddings=False, text_config=KIMI, vision_config=KIMI_VISION),
], ids=["kimi_k2", "kimi_k25-tied", "kimi_k25"])
def test_kimi_parameters_and_prefill_flops_equal_what_transformers_builds_and_counts(config):
    """kimi_k2 built as transformers' deepseek_v3 from its keys; kimi_k25 as Kimi_K25ForConditionalGeneration, its
    vision tower and projector left out (hf_models.VISION) -- and they are there, so leaving them out is a choice."""
    spec = spec_of(config)
    model, built = hf_models.build(config, experts=True)
    assert calc.parameters(spec)["total_params"] == hf_models.matrix_params(model, built)
    assert spec.tied_embeddings == (config.get("tie_word_embeddings", True) if built == "kimi_k25" else False)
    if built == "kimi_k25":
        assert hf_models.matrix_params(model, "deepseek_v3") > hf_models.matrix_params(model, built)
    row = calc.prefill(spec, SEQ, 1, "full", logits="all")
    assert row["total_flops"] == hf_models.prefill_flops(model, SEQ)
