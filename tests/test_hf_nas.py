"""Llama-Nemotron NAS (``nemotron-nas``, DeciLM remote code; transformers 5.23 ships no model to hold it
against) held to an independent count instead:

1. Its table knows every key of the published Llama-3.3-Nemotron-Super-49B file and of its blocks.
2. DeciLM's rules, written out here from its modelling code (``modeling_decilm.py``: a Llama layer whose
   attention has num_attention_heads // n_heads_in_group key/value heads or is skipped (``no_op``),
   whose SwiGLU is ``_ffn_mult_to_intermediate_size(ffn_mult, hidden_size)`` wide or skipped), build
   the weight shapes of the published file: their sum is costcalc's total_params, and that sum is the
   49.87B the Hub states (tests/test_params.py holds the preset to it); the widths agree with the
   Llama-3.3-70B's 28672 the 49B was searched from (ffn_mult 5.25).
3. The prefill and decode FLOPs from those shapes (2 per multiply-add of every weight, and QK^T and AV
   over every key pair of each attention layer) equal costcalc's under ``full``.
4. What DeciLM runs that costcalc cannot express is refused in one line naming it; a layer skipped in
   both parts runs nothing.
"""
import json

import pytest

from costcalc import calc, hf
from costcalc.spec import from_dict
from hf_rules import CONFIGS, refused

SUPER = "llama-3.3-nemotron-super-49b"


def published() -> dict:
    return json.loads((CONFIGS / f"{SUPER}.json").read_text())


def decilm_width(ffn_mult: float, d: int) -> int:
    """modeling_decilm.py: _find_multiple(int(2 * ffn_mult * n_embd / 3), 256)."""
    n = int(2 * ffn_mult * d / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


def decilm_shapes(config: dict) -> list[tuple[str, int, int]]:
    """Every weight matrix DeciLMForCausalLM builds, (name, rows, cols), from block_configs."""
    d, h, V = config["hidden_size"], config["num_attention_heads"], config["vocab_size"]
    d_h = d // h
    shapes = [("embed_tokens", V, d)] + ([] if config.get("tie_word_embeddings") else [("lm_head", V, d)])
    for i, block in enumerate(config["block_configs"]):
        if not block["attention"].get("no_op"):
            kv = h // block["attention"]["n_heads_in_group"]
            shapes += [(f"{i}.q_proj", h * d_h, d), (f"{i}.k_proj", kv * d_h, d), (f"{i}.v_proj", kv * d_h, d),
                       (f"{i}.o_proj", d, h * d_h)]
        if not block["ffn"].get("no_op"):
            m = decilm_width(block["ffn"]["ffn_mult"], d)
            shapes += [(f"{i}.gate_proj", m, d), (f"{i}.up_proj", m, d), (f"{i}.down_proj", d, m)]
    return shapes


def spec_of(config: dict):
    return from_dict(hf.to_preset(config, "x"), "x")


def test_the_table_knows_every_key_of_the_published_file():
    config = published()
    table = hf.TABLES["nemotron-nas"].known()
    assert set(config) <= set(table)
    for part in ("attention", "ffn"):
        keys = {k for block in config["block_configs"] for k in block[part]}
        assert keys <= set(hf.tables.NEMOTRON_NAS_BLOCK[part].known()), part


def test_decilm_widths_of_the_published_multipliers():
    widths = {m: decilm_width(m, 8192) for m in (0.5, 1.0, 1.3125, 2.625, 3.28125, 5.25)}
    assert widths[5.25] == 28672          # Llama-3.3-70B's intermediate_size, the model the 49B was searched from
    assert widths == {0.5: 2816, 1.0: 5632, 1.3125: 7168, 2.625: 14336, 3.28125: 17920, 5.25: 28672}


def test_parameters_equal_the_decilm_weight_shapes_and_the_published_count():
    config = published()
    total = sum(rows * cols for _, rows, cols in decilm_shapes(config))
    assert calc.parameters(spec_of(config))["total_params"] == total == 49_866_080_256
    assert abs(total - 49.87e9) < 0.005e9         # the Hub's 49.87B (norms, about 1.3M, are not matrices)


def test_the_published_layers_group_as_decilm_builds_them():
    spec = spec_of(published())
    attends = sum(g.count for g in spec.groups if g.block.attention == "gqa")
    skipped = sum(g.count for g in spec.groups if g.block.attention == "none")
    assert (attends, skipped, spec["L"]) == (49, 31, 80)
    assert {g.block.ffn for g in spec.groups} == {"dense"}
    assert all((g.sizes["h_kv"], g.sizes["d_h"]) == (8, 128) for g in spec.groups if g.block.attends)


@pytest.mark.parametrize("seq", [1, 17])
def test_prefill_and_decode_flops_equal_the_decilm_shapes(seq):
    config = published()
    shapes = decilm_shapes(config)
    weights = sum(r * c for name, r, c in shapes if name != "embed_tokens")      # the embedding is a lookup
    h_dh = config["hidden_size"]                                                # 64 heads of 128
    layers = sum(1 for b in config["block_configs"] if not b["attention"]["no_op"])
    spec = spec_of(config)
    prefill = calc.prefill(spec, seq, 1, "full", logits="all")["total_flops"]
    assert prefill == 2 * seq * weights + layers * 2 * 2 * seq * seq * h_dh     # QK^T and AV over S x S keys
    step = calc.decode(spec, 100, 1, "full")["total_flops"]
    assert step == 2 * weights + layers * 2 * 2 * 101 * h_dh                    # one query over 100 + 1 keys


SMALL = dict(model_type="nemotron-nas", hidden_size=64, num_attention_heads=8, num_hidden_layers=4, vocab_size=100,
             block_configs=[
                 {"attention": {"n_heads_in_group": 4, "no_op": False}, "ffn": {"ffn_mult": 2.0}},
                 {"attention": {"no_op": True}, "ffn": {"ffn_mult": 1.0, "no_op": False}},
                 {"attention": {"n_heads_in_group": 2}, "ffn": {"no_op": True}},
                 {"attention": {"no_op": True}, "ffn": {"no_op": True}},     # runs nothing: left out
             ])


def test_small_blocks_map_to_attention_only_ffn_only_and_skipped_layers():
    spec = spec_of(SMALL)
    assert [(g.count, g.arch, dict(g.sizes)) for g in spec.groups] == [
        (1, "gqa.dense", dict(d=64, V=100, h_q=8, h_kv=2, d_h=8, m=256)),      # int(2 * 2.0 * 64 / 3) = 85 -> 256
        (1, "none.dense", dict(d=64, V=100, m=256)),
        (1, "gqa.none", dict(d=64, V=100, h_q=8, h_kv=4, d_h=8))]
    assert calc.parameters(spec)["total_params"] == sum(r * c for _, r, c in decilm_shapes(SMALL))


def block(i: int, part: str, **changes) -> dict:
    blocks = json.loads(json.dumps(SMALL["block_configs"]))
    blocks[i][part].update(changes)
    return {**SMALL, "block_configs": blocks}


def test_what_cannot_be_expressed_is_refused_in_one_line():
    refused(block(0, "attention", replace_with_linear=True), "block_configs[0].attention.replace_with_linear",
            "does not model")
    refused(block(1, "ffn", replace_with_linear=True), "block_configs[1].ffn.replace_with_linear")
    refused(block(0, "attention", window_length=128), "window_length")
    refused(block(0, "attention", num_sink_tokens=4), "num_sink_tokens")
    refused(block(0, "attention", n_heads_in_group=3), "must divide num_attention_heads (8)")
    refused(block(0, "ffn", ffn_mult=None), "ffn_mult must be a positive number")
    refused(block(0, "ffn", moe={"num_experts": 8}), "'block_configs[0].ffn.moe' is not understood")
    refused({**SMALL, "num_hidden_layers": 5}, "one block per layer")
    refused({**SMALL, "intermediate_size": 14336}, "field 'intermediate_size'", "block_configs")
    skipped = {"attention": {"no_op": True}, "ffn": {"no_op": True}}
    refused({**SMALL, "block_configs": [skipped] * 4}, "every block is no_op")
    refused({k: v for k, v in SMALL.items() if k != "block_configs"}, "needs 'block_configs'")
