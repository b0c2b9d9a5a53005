"""Families whose attention needs the GQA head features (costcalc/hf/families/heads.py): what the import
reads from the published file, and the published keys transformers 5.23 does not read held to what it
builds. Parameters and prefill FLOPs against the meta model are in tests/test_hf_transformers.py (a
small config; the real file at its real size under -m slow)."""
import json
from pathlib import Path

import pytest

from costcalc import hf
from costcalc.errors import CostcalcError

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def mimo(**changes) -> dict:
    return {**json.loads((CONFIGS / "mimo-v2-flash.json").read_text()), **changes}


def groups(config: dict) -> list[tuple]:
    preset = hf.to_preset(config, "x")
    layers = preset.get("layers") or [{"count": preset["L"], "arch": preset["arch"]}]
    return [(g["count"], g["arch"], g.get("h_kv", preset.get("h_kv")), g.get("W", preset.get("W"))) for g in layers]


def test_mimo_v2_flash_reads_its_published_layers():
    """Layer 0 and every 6th full (9 of 48) with 4 KV heads, the others sliding with 8; layer 0 dense.
    The window is sliding_window_size + 1 (5.23's __post_init__), whatever sliding_window says."""
    assert groups(mimo()) == [(1, "gqa-dv.dense", 4, None), (39, "window-dv.moe", 8, 129), (8, "gqa-dv.moe", 4, None)]
    preset = hf.to_preset(mimo(), "x")
    assert (preset["d_h"], preset["d_v"], preset["h_q"]) == (192, 128, 64)
    assert groups(mimo(sliding_window_size=None, sliding_window=64))[1][3] == 64


def test_mimo_v2_flash_with_equal_head_dims_is_plain_gqa():
    config = mimo(v_head_dim=192, swa_v_head_dim=192)
    assert [g[1] for g in groups(config)] == ["gqa.dense", "window.moe", "gqa.moe"]


@pytest.mark.parametrize("change, told", [
    ({"hybrid_layer_pattern": [0] * 48}, "'hybrid_layer_pattern' says layer 1 is full but transformers 5.23 builds it sliding"),
    ({"moe_layer_freq": [1] * 48}, "'moe_layer_freq' says layer 0 is MoE but transformers 5.23 builds it dense"),
    ({"swa_num_key_value_heads": 4}, "'swa_num_key_value_heads' is 4 but transformers 5.23 does not read it"),
    ({"swa_v_head_dim": 192}, "'swa_v_head_dim' is 192"),
    ({"n_shared_experts": 1}, "builds no shared expert"),
    ({"hybrid_layer_pattern": [0, 1]}, "must list 0 or 1 for each layer"),
    ({"v_head_dim": None}, "needs field 'v_head_dim'"),
    ({"layer_types": ["full_attention"] * 48, "hybrid_layer_pattern": None}, None),
])
def test_mimo_v2_flash_keys_5_23_does_not_read_must_say_what_it_builds(change, told):
    if told is None:         # layer_types decides: every layer full, no window needed
        assert groups(mimo(**change)) == [(1, "gqa-dv.dense", 4, None), (47, "gqa-dv.moe", 4, None)]
        return
    with pytest.raises(CostcalcError, match=told.replace("(", r"\(").replace(")", r"\)")):
        hf.to_preset(mimo(**change), "x")


# --- Step-3.7 (step3p5, inside the step3p7 wrapper): held to transformers on CPU ----------------------
# (its experts always run their own loop over the routed experts, which reads values: not on meta)

STEP = dict(hidden_size=64, num_attention_heads=4, num_attention_groups=2, head_dim=16, vocab_size=128,
            max_position_embeddings=256, intermediate_size=96, num_hidden_layers=5, sliding_window=8,
            moe_intermediate_size=32, moe_num_experts=4, moe_top_k=2, share_expert_dim=48, num_nextn_predict_layers=1,
            layer_types=["full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                         "full_attention", "full_attention"],
            attention_other_setting={"num_attention_heads": 6, "num_attention_groups": 2},
            moe_layers_enum="2,3,4,5", use_head_wise_attn_gate=True)


_BUILT: dict = {}


def step_model(text: dict):
    """The Step-3.7 model transformers builds (CPU, float32, eager), once per test session."""
    key = json.dumps(text, sort_keys=True)
    if key not in _BUILT:
        _BUILT[key] = _build_step(text)
    return _BUILT[key]


def _build_step(text: dict):
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    torch.manual_seed(0)
    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14,
                  max_position_embeddings=4)      # a small tower: built, never run, not counted
    config = AutoConfig.for_model("step3p7", text_config=dict(text), vision_config=vision)
    return AutoModelForImageTextToText.from_config(config, attn_implementation="eager").float().eval()


def test_step3p7_reads_its_layers_as_5_23_builds_them():
    """MTP entries of layer_types dropped; the sliding layers' 6 query heads from attention_other_setting;
    layers 2.. MoE from moe_layers_enum; every layer's g_proj one output per head."""
    preset = hf.to_preset({"model_type": "step3p7", "text_config": {"model_type": "step3p5", **STEP}}, "x")
    got = [(g["count"], g["arch"], g["h_q"]) for g in preset["layers"]]
    assert got == [(1, "gqa-hgated.dense", 4), (1, "window-hgated.dense", 6), (2, "window-hgated.moe_shared", 6),
                   (1, "gqa-hgated.moe_shared", 4)]
    model = step_model(STEP)
    layers = model.model.language_model.layers
    assert [layer.self_attn.g_proj.out_features for layer in layers] == [4, 6, 6, 6, 4]
    assert [type(layer.mlp).__name__ for layer in layers] == ["Step3p7MLP"] * 2 + ["Step3p7SparseMoeBlock"] * 3


def test_step3p7_parameters_and_prefill_flops_equal_what_transformers_builds_and_runs():
    import sys

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hf_models

    from costcalc import calc
    from costcalc.spec import from_dict

    spec = from_dict(hf.to_preset({"model_type": "step3p5", **STEP}, "x"), "x")
    model = step_model(STEP)
    assert calc.parameters(spec)["total_params"] == hf_models.matrix_params(model, "step3p5")
    seq = 24
    ids = torch.randint(0, 128, (1, seq))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False, logits_to_keep=0)
    assert calc.prefill(spec, seq, 1, "full", logits="all")["total_flops"] == counter.get_total_flops()


@pytest.mark.parametrize("change, told", [
    ({"use_head_wise_attn_gate": False}, "'use_head_wise_attn_gate' is False but transformers 5.23 always builds"),
    ({"gating": "per-channel"}, "a per-channel output gate"),
    ({"attention_other_setting": {"num_attention_heads": 6, "num_attention_groups": 4}},
     "attention_other_setting.num_attention_groups is 4 but transformers 5.23 does not read it"),
    ({"attention_other_setting": {"num_attention_heads": 6, "gqa_v_norm": True}}, "attention_other_setting.gqa_v_norm"),
    ({"layer_types": ["full_attention", "minimax_m3_sparse"] + ["full_attention"] * 4}, "builds no sparse indexer"),
    ({"sparse_attention_config": {"sparse_attention_freq": [0, 1, 0, 0, 0]}}, "sparse-attention layers"),
    ({"moe_layer_freq": [0, 0, 0, 1, 1, 1]}, "'moe_layer_freq' says layer 2 is dense"),
    ({"per_layer_config": {"1": {"head_dim": 32}}}, "must give a layer's num_attention_heads only"),
    ({"use_bidirectional_attention": True}, "non-causal"),
])
def test_step3p7_keys_5_23_does_not_read_must_say_what_it_builds(change, told):
    with pytest.raises(CostcalcError, match=told.replace("(", r"\(").replace(")", r"\)")):
        hf.to_preset({"model_type": "step3p7", "text_config": {"model_type": "step3p5", **STEP, **change}}, "x")


def test_step3p7_rewritten_by_transformers_reads_the_same():
    """5.23 writes the sliding layers' heads as per_layer_config and drops attention_other_setting."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hf_models

    original = {"model_type": "step3p7", "text_config": {"model_type": "step3p5", **STEP}}
    written = hf_models.rewrite(original)
    assert "per_layer_config" in written["text_config"] and "attention_other_setting" not in written["text_config"]
    assert hf.to_preset(written, "x")["layers"] == hf.to_preset(original, "x")["layers"]
    # its mtp_layer_types / mtp_mlp_layer_types and num_sliding_attention_heads give the same MTP module
    assert "mtp_layer_types" in written["text_config"]
    assert hf.to_preset(written, "x")["mtp"] == hf.to_preset(original, "x")["mtp"]
