"""DeepSeek Sparse Attention as transformers 5.23 executes it, module by module: a tiny DeepseekV32
model (eager attention, batched experts, real weights on the CPU) counted with FlopCounterMode on a
prefill and on a decode step over its cache, against costcalc's executed convention -- ``full`` with
the ``expanded`` MLA (docs/conventions.md, "DeepSeek Sparse Attention: two conventions"): the
indexer over the whole rectangle, the attention dense with the top-k as a mask, ``kv_b_proj``
re-expanding every cached latent. And the index-key cache transformers keeps
(``DynamicIndexedLayer.indexer_keys``) against costcalc's bytes of the indexer's K cache.
"""
from collections import defaultdict

import pytest

from costcalc import calc, hf
from costcalc.evaluate import Options, Query
from costcalc.roofline import Precision
from costcalc.spec import from_dict

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

CONFIG = dict(model_type="deepseek_v32", hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
              intermediate_size=96, vocab_size=128, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8,
              qk_rope_head_dim=4, v_head_dim=12, moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1,
              num_experts_per_tok=2, index_n_heads=4, index_head_dim=8, index_topk=6, max_position_embeddings=256,
              num_hidden_layers=2, first_k_dense_replace=1, n_group=1, topk_group=1)
B, S = 2, 10          # S above index_topk: the top-k mask is not all-true
ATTENTION = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
INDEXER = ("wq_b", "wk", "weights_proj")


@pytest.fixture(scope="module")
def executed():
    """(prefill counts, decode-step counts, the cache after the prefill's S and after the step's S + 1 keys)."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    torch.manual_seed(0)
    fields = {k: v for k, v in CONFIG.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(CONFIG_MAPPING["deepseek_v32"](**fields), attn_implementation="eager",
                                             experts_implementation="batched_mm").eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (B, S))
    with torch.no_grad(), FlopCounterMode(display=False) as prefill:
        out = model(input_ids=ids, use_cache=True, logits_to_keep=0)       # logits at every position
    cache = out.past_key_values
    after_prefill = [layer.indexer_keys.clone() for layer in cache.layers]
    with torch.no_grad(), FlopCounterMode(display=False) as step:
        model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True, logits_to_keep=1)
    after_step = [layer.indexer_keys for layer in cache.layers]
    return prefill.get_flop_counts(), step.get_flop_counts(), after_prefill, after_step


def by_operator(counts: dict) -> dict[str, int]:
    """The counter's per-module FLOPs as costcalc's operators: each named linear; ``indexer`` (the
    indexer module less its projections: its scores), ``attention`` (self_attn less its projections
    and indexer), ``router`` (mlp.gate), ``experts`` (the batched experts module), ``lm_head``."""
    flops = {path.removeprefix("DeepseekV32ForCausalLM."): sum(c.values()) for path, c in counts.items()}
    out: dict[str, int] = defaultdict(int)
    for i in range(CONFIG["num_hidden_layers"]):
        attn, mlp = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        projections = sum(flops.get(f"{attn}.{name}", 0) for name in ATTENTION)
        index_projections = sum(flops.get(f"{attn}.indexer.{name}", 0) for name in INDEXER)
        for name in ATTENTION:
            out[name] += flops.get(f"{attn}.{name}", 0)
        for name in INDEXER:
            out[f"indexer.{name}"] += flops.get(f"{attn}.indexer.{name}", 0)
        out["indexer"] += flops[f"{attn}.indexer"] - index_projections
        out["attention"] += flops[attn] - projections - flops[f"{attn}.indexer"]
        for name in ("gate_proj", "up_proj", "down_proj"):
            out[name] += flops.get(f"{mlp}.{name}", 0)
            out[f"shared_experts.{name}"] += flops.get(f"{mlp}.shared_experts.{name}", 0)
        out["router"] += flops.get(f"{mlp}.gate", 0)
        out["experts"] += flops.get(f"{mlp}.experts", 0)
    out["lm_head"] = flops["lm_head"]
    assert sum(out.values()) == flops["Global"]            # every FLOP is some operator's
    return dict(out)


def costcalc_operators(workload: str, **inputs: int) -> dict[str, int]:
    spec = from_dict(hf.to_preset(CONFIG, "dsa-small"), "dsa-small")
    logits = "all" if workload == "prefill" else "last"
    ops = calc.operators(spec, workload, "full", logits, mla="expanded", **inputs)
    out: dict[str, int] = defaultdict(int)
    for op, value in ops.items():
        out["experts" if op.startswith("experts.") else op] += value
    return {op: v for op, v in out.items() if v}


def test_a_prefill_counts_what_the_executed_convention_says_module_by_module(executed):
    counted = by_operator(executed[0])
    assert counted == costcalc_operators("prefill", batch=B, seq=S)
    # not what the sparse kernel does: the causal convention reads min(p, k_I) keys and scores p
    spec = from_dict(hf.to_preset(CONFIG, "dsa-small"), "dsa-small")
    kernel = calc.operators(spec, "prefill", "causal", "all", mla="naive", batch=B, seq=S)
    assert kernel["attention"] < counted["attention"] and kernel["indexer"] < counted["indexer"]


def test_a_decode_step_over_the_cache_counts_what_the_executed_convention_says(executed):
    counted = by_operator(executed[1])
    assert counted == costcalc_operators("decode", batch=B, context=S)
    assert counted["kv_b_proj"] == 2 * B * (S + 1) * 16 * 4 * (8 + 12) * CONFIG["num_hidden_layers"]   # every latent


def indexer_elements(workload: str, **values: int) -> dict[str, int]:
    """costcalc's elements of the indexer's K cache written and read by one forward, over the layers."""
    spec = from_dict(hf.to_preset(CONFIG, "dsa-small"), "dsa-small")
    out: dict[str, int] = defaultdict(int)
    query = Query(spec, workload, Options("full", mla="expanded"), precision=Precision(kv="fp32"))
    for group, recipe in query.recipes("bytes"):
        got = recipe.evaluate({**group.numbers(), **values})
        for key in ("indexer.kv_write", "indexer.kv_read"):
            out[key] += got.get(key, 0)
    return dict(out)


def test_the_index_key_cache_transformers_keeps_is_costcalcs_indexer_cache(executed):
    _, _, after_prefill, after_step = executed
    width = Precision(kv="fp32").bits("kv") / 8
    assert all(k.dtype == torch.float32 for k in after_prefill)
    held = sum(k.numel() * k.element_size() for k in after_prefill)
    assert held == indexer_elements("prefill", B=B, S=S)["indexer.kv_write"] * width      # the prompt's keys, written
    step = indexer_elements("decode", B=B, T=S)
    read = sum(k.numel() * k.element_size() for k in after_step)                          # T + 1 keys, scored
    assert read == step["indexer.kv_read"] * width
    assert read - held == step["indexer.kv_write"] * width                                # the new token's key
