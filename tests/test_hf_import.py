"""The config import's semantics, family by family, without transformers (tests/test_hf_transformers.py
holds the same reading against transformers itself when it is installed)."""
import json
import re

import pytest

from costcalc import hf
from costcalc.errors import CostcalcError
from costcalc.hf.fields import COMMON, SHARED
from hf_rules import BASE, CONFIGS, kinds


def test_every_table_row_has_a_role_and_a_reason():
    for family, table in hf.TABLES.items():
        for key, row in table.known().items():
            assert row.role in ("used", "ignored") and row.reason, (family, key)
    assert "model_type" in COMMON and "hidden_size" in SHARED


@pytest.mark.parametrize("family, kind", sorted(hf.OUT_OF_REACH.items()))
def test_families_out_of_reach_are_one_line_errors_naming_the_block_kind(family, kind):
    with pytest.raises(CostcalcError, match=re.escape(kind)) as err:
        hf.to_preset({"model_type": family, **BASE}, "x")
    assert "not supported" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("change, message", [
    ({}, "config: missing field 'model_type' (the model family; supported: llama, "),
    ({"model_type": None}, "config: missing field 'model_type' (the model family; supported: llama, "),
    ({"model_type": 3}, "config: field 'model_type' must be a string (the model family), got 3"),
    ({"model_type": ["llama"]}, "field 'model_type' must be a string (the model family), got ['llama']"),
    ({"model_type": {"name": "llama"}}, "field 'model_type' must be a string"),
])
def test_a_missing_or_bad_model_type_is_one_line_naming_the_field(change, message):
    with pytest.raises(CostcalcError) as err:
        hf.to_preset({"num_hidden_layers": 2, **BASE, **change}, "x")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_llama4_no_rope_layers_must_be_a_list():
    config = json.loads((CONFIGS / "llama-4-scout-17b-16e.json").read_text())
    for bad in (1, True, "1110"):
        with pytest.raises(CostcalcError, match="field 'no_rope_layers' must be a list of integers"):
            hf.to_preset({**config, "text_config": {**config["text_config"], "no_rope_layers": bad}}, "x")


def test_an_unknown_field_is_named():
    with pytest.raises(CostcalcError, match="field 'mamba_d_state' .phi3. is not understood"):
        hf.to_preset({"model_type": "phi3", "num_hidden_layers": 2, "mamba_d_state": 16, **BASE}, "x")


def qwen2(**changes):
    return {"model_type": "qwen2", "num_hidden_layers": 4, **BASE, **changes}


def test_qwen2_windows_from_max_window_layers_and_layer_types_must_agree():
    config = qwen2(use_sliding_window=True, sliding_window=8, max_window_layers=3)
    assert kinds(config) == [(3, "gqa.dense"), (1, "window.dense")]            # layers i >= 3
    types = ["full_attention"] * 3 + ["sliding_attention"]
    assert kinds({**config, "layer_types": types}) == kinds(config)
    with pytest.raises(CostcalcError, match="'layer_types' and 'use_sliding_window', 'max_window_layers' disagree"):
        hf.to_preset({**config, "layer_types": ["sliding_attention"] + ["full_attention"] * 3}, "x")
    # what transformers 5.23 writes when windows are off: layer_types all full, sliding_window null
    off = qwen2(use_sliding_window=False, sliding_window=None, layer_types=["full_attention"] * 4)
    assert kinds(off) == [(4, "gqa.dense")]
    with pytest.raises(CostcalcError, match="use_sliding_window is not true"):
        hf.to_preset(qwen2(sliding_window=8, layer_types=["sliding_attention"] * 4), "x")


def test_qwen2_moe_windows_the_even_layers_below_max_window_layers():
    config = {"model_type": "qwen2_moe", "num_hidden_layers": 6, **BASE, "moe_intermediate_size": 32,
              "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
              "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 4}
    preset = hf.to_preset(config, "x")
    # layers 0 and 2 windowed (even, below 4); 1, 3, 4, 5 full
    assert [(g["count"], g["arch"]) for g in preset["layers"]] == [(2, "window.moe_shared_gate"),
                                                                   (4, "gqa.moe_shared_gate")]


def test_qwen3_moe_with_use_sliding_window_windows_every_layer():
    config = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    assert kinds(config) == [(48, "gqa.moe")]
    on = {**config, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28}
    assert kinds(on) == [(48, "window.moe")]        # max_window_layers is not read by 5.23


def test_qwen3_coder_s_published_qkv_bias_is_read_as_nothing():
    """Qwen3-Coder-480B-A35B's file writes qkv_bias, which transformers 5.23 does not read (it was
    refused as an unknown key): the import counts the same layers with it as without it."""
    config = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    for value in (False, True):
        assert hf.to_preset({**config, "qkv_bias": value}, "x") == hf.to_preset(config, "x")


def test_deepseek_moe_layers_follow_first_k_dense_replace_only():
    config = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    assert kinds({**config, "first_k_dense_replace": 5}) == [(5, "mla_q.dense"), (56, "mla_q.moe_shared")]
    with pytest.raises(CostcalcError, match="'moe_layer_freq' is 2"):
        hf.to_preset({**config, "moe_layer_freq": 2}, "x")
    with pytest.raises(CostcalcError, match="'qk_head_dim' is 128"):
        hf.to_preset({**config, "qk_head_dim": 128}, "x")
    with pytest.raises(CostcalcError, match="needs field 'q_lora_rank'"):
        hf.to_preset({k: v for k, v in config.items() if k != "q_lora_rank"}, "x")


def test_checks_where_transformers_would_read_otherwise():
    gemma = json.loads((CONFIGS / "gemma-2-9b.json").read_text())
    with pytest.raises(CostcalcError, match="use_bidirectional_attention must be false"):
        hf.to_preset({**gemma, "use_bidirectional_attention": True}, "x")
    oss = json.loads((CONFIGS / "gpt-oss-20b.json").read_text())
    with pytest.raises(CostcalcError, match="'experts_per_token' is 2"):
        hf.to_preset({**oss, "experts_per_token": 2}, "x")
    mistral = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())
    with pytest.raises(CostcalcError, match="needs field 'sliding_window'"):
        hf.to_preset({k: v for k, v in mistral.items() if k != "sliding_window"}, "x")
    assert kinds({**mistral, "sliding_window": None}) == [(32, "gqa.dense")]
    mixtral = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
    with pytest.raises(CostcalcError, match="fields 'num_experts' and 'num_local_experts' .* disagree"):
        hf.to_preset({**mixtral, "num_experts": 4}, "x")
    assert kinds({**{k: v for k, v in mixtral.items() if k != "num_local_experts"}, "num_experts": 8}) == kinds(mixtral)


def test_gemma3_pattern_and_layer_types_agree_and_the_wrapper_ties():
    config = json.loads((CONFIGS / "gemma-3-12b.json").read_text())
    text = config["text_config"]
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(48)]
    assert kinds({**config, "text_config": {**text, "layer_types": types}}) == [(40, "window.dense"), (8, "gqa.dense")]
    with pytest.raises(CostcalcError, match="disagree"):
        hf.to_preset({**config, "text_config": {**text, "layer_types": ["full_attention"] * 48}}, "x")
    assert hf.to_preset({**config, "tie_word_embeddings": False}, "x")["tied_embeddings"] is False
    assert hf.to_preset({**config, "text_config": {**text, "tie_word_embeddings": False}}, "x")["tied_embeddings"]


def test_phimoe_runs_two_experts_whatever_num_experts_per_tok_says():
    config = json.loads((CONFIGS / "phi-3.5-moe-instruct.json").read_text())
    for k in (1, 2, 4):
        assert hf.to_preset({**config, "num_experts_per_tok": k}, "x")["k"] == 2


def test_llama4_chunks_the_rope_layers_and_needs_a_chunk_size():
    config = json.loads((CONFIGS / "llama-4-scout-17b-16e.json").read_text())
    text = config["text_config"]
    assert kinds(config) == [(36, "chunk.moe_shared"), (12, "gqa.moe_shared")]
    types = ["chunked_attention" if r else "full_attention" for r in text["no_rope_layers"]]
    assert kinds({**config, "text_config": {**text, "layer_types": types}}) == kinds(config)
    with pytest.raises(CostcalcError, match="needs field 'attention_chunk_size'"):
        hf.to_preset({**config, "text_config": {**text, "attention_chunk_size": None}}, "x")
    interleaved = {**text, "interleave_moe_layer_step": 2}
    # MoE on the odd layers; the global (NoPE) layers 3, 7, ... are all odd
    assert kinds({**config, "text_config": interleaved}) == [(24, "chunk.dense"), (12, "chunk.moe_shared"),
                                                            (12, "gqa.moe_shared")]
    dense = hf.to_preset({**config, "text_config": interleaved}, "x")["layers"][0]
    assert dense["m"] == text["intermediate_size_mlp"] != text["intermediate_size"]


def test_exaone4_string_pattern_needs_layer_types_and_must_agree():
    config = json.loads((CONFIGS / "exaone-4.0-32b.json").read_text())
    with pytest.raises(CostcalcError, match="needs field 'layer_types'"):
        hf.to_preset({k: v for k, v in config.items() if k != "layer_types"}, "x")
    with pytest.raises(CostcalcError, match="disagree"):
        hf.to_preset({**config, "sliding_window_pattern": "LLG"}, "x")
    as_int = {**{k: v for k, v in config.items() if k != "layer_types"}, "sliding_window_pattern": 4}
    assert kinds(as_int) == kinds(config) == [(48, "window.dense"), (16, "gqa.dense")]


def test_the_cli_refuses_an_out_of_reach_family_in_one_line(tmp_path, capsys):
    from costcalc.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "xlstm", **BASE, "num_hidden_layers": 2}))
    assert main(["prefill", "--config", str(path), "--seq", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "mLSTM matrix-memory blocks" in err and "\n" not in err


def test_the_cli_says_a_config_without_model_type_misses_the_field(tmp_path, capsys):
    from costcalc.cli import main

    path = tmp_path / "cfg.json"
    path.write_text("{}")
    assert main(["prefill", "--config", str(path), "-s", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: config {str(path)!r}: missing field 'model_type' (the model family; supported: ")
    assert all(family in err for family in hf.FAMILIES) and "\n" not in err


