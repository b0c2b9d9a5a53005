"""DeepSeek-V4 held against what transformers 5.23 builds and runs (modeling_deepseek_v4).

1. The model transformers builds on meta from a small config has the matrices costcalc counts.
2. FlopCounterMode (eager attention, batched experts) counts what costcalc's ``full`` convention
   does -- a prefill (no cache, logits at every position), a decode step and a cached chunk after a
   prefill through transformers' own DynamicCache (its rolling window of W-1 keys, its compressed
   entries) -- in total and module by module: transformers runs the dense rectangle of window keys and
   compressed entries with the causal and top-k choices as a mask, and its indexer scores every
   compressed index key. ``causal`` is the ideal kernel's work (tests/test_deepseek_v4.py).

The small config is tests/data/v4-tiny.json's model written as transformers' configuration.
"""
import json
from pathlib import Path

import pytest

from costcalc import calc
from costcalc.spec import from_dict

DATA = Path(__file__).parent / "data"
SPEC = from_dict(json.loads((DATA / "v4-tiny.json").read_text()), "v4-tiny")
SMALL = dict(model_type="deepseek_v4", hidden_size=64, num_attention_heads=4, head_dim=16, q_lora_rank=24,
             o_groups=2, o_lora_rank=12, sliding_window=8, hc_mult=3,
             compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
             index_n_heads=2, index_head_dim=8, index_topk=3, n_routed_experts=4, num_experts_per_tok=2,
             moe_intermediate_size=32, vocab_size=128, num_hidden_layers=3,
             layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
             mlp_layer_types=["hash_moe", "moe", "moe"], max_position_embeddings=256)
SEQ = 40      # 10 compressed entries in the csa layer (above index_topk 3), 2 in the hca one


def model():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    torch.manual_seed(0)
    fields = {k: v for k, v in SMALL.items() if k != "model_type"}
    return AutoModelForCausalLM.from_config(CONFIG_MAPPING["deepseek_v4"](**fields), attn_implementation="eager",
                                            experts_implementation="batched_mm").eval()


def test_transformers_builds_the_matrices_costcalc_counts():
    pytest.importorskip("transformers")
    from hf_models import build, matrix_params

    built, family = build(SMALL, experts=True)
    assert calc.parameters(SPEC)["total_params"] == matrix_params(built, family)


def counted(run):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        run()
    return counter


def test_a_prefill_is_what_full_counts_module_by_module():
    import torch

    m = model()
    with torch.no_grad():
        counter = counted(lambda: m(input_ids=torch.randint(0, 128, (1, SEQ)), use_cache=False, logits_to_keep=0))
    row = calc.prefill(SPEC, SEQ, 1, "full", logits="all")
    assert row["total_flops"] == counter.get_total_flops()
    flops = {path.removeprefix("DeepseekV4ForCausalLM.").removeprefix("model."): sum(c.values())
             for path, c in counter.get_flop_counts().items()}
    ops = calc.operators(SPEC, "prefill", "full", "all", seq=SEQ, batch=1)
    hyper = sum(v for k, v in ops.items() if k.endswith((".fn", ".comb")))
    layers = [f"layers.{i}" for i in range(3)]
    # each module's own count, its children's taken out: the layer's own is the two comb mixes
    comb = sum(flops[l] - flops[f"{l}.attn_hc"] - flops[f"{l}.self_attn"] - flops[f"{l}.ffn_hc"] - flops[f"{l}.mlp"]
               for l in layers)
    assert hyper == comb + sum(flops[f"{l}.attn_hc"] + flops[f"{l}.ffn_hc"] for l in layers)
    assert ops["hc_head"] == flops["hc_head"] and ops["lm_head"] == flops["lm_head"]
    scorer = flops["layers.1.self_attn.compressor.indexer.scorer"] - \
        flops["layers.1.self_attn.compressor.indexer.scorer.weights_proj"]
    assert ops["indexer"] == scorer
    named = ("q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj")
    for op in named:
        assert ops[op] == sum(flops[f"{l}.self_attn.{op}"] for l in layers), op
    for op in ("compressor.kv_proj", "compressor.gate_proj"):
        assert ops[op] == flops[f"layers.1.self_attn.{op}"] + flops[f"layers.2.self_attn.{op}"], op
    for op in ("kv_proj", "gate_proj", "q_b_proj"):
        assert ops[f"indexer.{op}"] == flops[f"layers.1.self_attn.compressor.indexer.{op}"], op
    assert ops["indexer.weights_proj"] == flops["layers.1.self_attn.compressor.indexer.scorer.weights_proj"]
    # attention: each self_attn less its projections, its compressor's and its indexer's
    own = sum(flops[f"{l}.self_attn"] - sum(flops[f"{l}.self_attn.{op}"] for op in named) for l in layers)
    own -= flops["layers.1.self_attn.compressor"] + flops["layers.2.self_attn.compressor"]
    assert ops["attention"] == own
    assert ops["router"] == sum(flops[f"{l}.mlp.gate"] for l in layers)       # hash layers run it too
    assert ops["experts.gate_proj"] + ops["experts.up_proj"] + ops["experts.down_proj"] == \
        sum(flops[f"{l}.mlp.experts"] for l in layers)


@pytest.mark.parametrize("past, new", [(SEQ, 1), (37, 1), (SEQ, 9), (35, 13)])
def test_a_cached_step_or_chunk_is_what_full_counts(past, new):
    import torch
    from transformers import DynamicCache

    m = model()
    cache = DynamicCache(config=m.config)
    ids = torch.randint(0, 128, (1, past + new))
    with torch.no_grad():
        m(input_ids=ids[:, :past], past_key_values=cache, use_cache=True)
        counter = counted(lambda: m(input_ids=ids[:, past:], past_key_values=cache, use_cache=True, logits_to_keep=1))
    row = calc.decode(SPEC, past, 1, "full") if new == 1 else calc.cached_prefill(SPEC, new, past, 1, "full")
    assert row["total_flops"] == counter.get_total_flops()
    assert calc.cached_prefill(SPEC, new, past, 1, "causal")["attention_flops"] < row["attention_flops"]


@pytest.mark.parametrize("past", [5, 16, 37])
def test_the_cache_transformers_keeps_is_the_window_and_one_entry_per_rate(past):
    """After a prefill of T: each layer's window holds min(T, W-1) keys of d_h (the step adds its own),
    its compressor floor(T / R_c) entries of d_h, a csa indexer as many of d_I -- the keys and entries
    costcalc's memory counts (min(T, W) window keys: the next step's own included)."""
    import torch
    from transformers import DynamicCache

    m = model()
    cache = DynamicCache(config=m.config)
    with torch.no_grad():
        m(input_ids=torch.randint(0, 128, (1, past)), past_key_values=cache, use_cache=True)
    rates = SMALL["compress_rates"]
    for layer, kind in zip(cache.layers, SMALL["layer_types"]):
        assert tuple(layer.keys.shape[-2:]) == (min(past, SMALL["sliding_window"] - 1), SMALL["head_dim"])
        if kind in rates:
            entries = layer.compressed_kv["compressor"]
            assert tuple(entries.shape[1:]) == (past // rates[kind], SMALL["head_dim"])
        if kind == "compressed_sparse_attention":
            assert tuple(layer.compressed_kv["indexer"].shape[1:]) == (past // rates[kind], SMALL["index_head_dim"])
