"""A Hugging Face transformers model run tensor-parallel by transformers itself (``tp_plan="auto"``,
``DistributedConfig(tp_size=2)``) on two gloo ranks: each rank's executed FLOPs per operator and the
collectives it runs held to costcalc's per-device formulas for the model costcalc imports from the
same config.json, and what transformers runs beyond them named.

A tiny Llama from its config (random weights, saved and loaded back: tensor parallel goes through
``from_pretrained``), bf16 (costcalc's activation dtype: the messages' bytes compare exactly),
eager attention (the QK^T and AV matmuls are counted, the whole rectangle: costcalc's ``full``
convention), under ``torch.no_grad()`` (transformers 5.23 then runs its column- and row-split
Linears on local tensors, so FlopCounterMode counts each rank's own FLOPs; with gradients on it
runs them as DTensor and the counter reports the global FLOPs on every rank).

transformers 5.23 shards the input embedding by the vocabulary (``embedding_rowwise``, added by
``distributed/mixin.py`` to every plan whose model has an ``embed_tokens``) and sums the lookups with
one all-reduce of the B S x d embeddings: costcalc's ``embedding`` collective (vLLM's
``VocabParallelEmbedding`` does the same).
Needs ``accelerate`` (transformers refuses ``tp_plan`` without it); skipped where it is missing.
Slow: two processes import torch and transformers (python -m pytest -m slow -n 0 -k parallel_verify_hf).
"""
import os

import pytest

from costcalc import hf
from costcalc.evaluate import Options, Query
from costcalc.parallel import collectives, operator_columns

TP, B, S, L = 2, 2, 6, 2
SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=L, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=64, tie_word_embeddings=False)
PROJECTIONS = {"self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj", "self_attn.v_proj": "v_proj",
               "self_attn.o_proj": "o_proj", "mlp.gate_proj": "gate_proj", "mlp.up_proj": "up_proj",
               "mlp.down_proj": "down_proj"}
WHERE = {"self_attn.o_proj": "o_proj", "mlp.down_proj": "ffn down_proj", "lm_head": "lm_head"}


def hf_rank(rank, path, batch, seq):
    """One rank: the model loaded with transformers' tensor-parallel plan, a prefill and a decode
    step counted (FLOPs per module) and recorded (collectives, labelled by the innermost module)."""
    import torch
    import torch.distributed as dist
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaForCausalLM
    from transformers.distributed import DistributedConfig

    from costcalc.verify.parallel import CommRecorder

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(dist.get_world_size()))
    model = LlamaForCausalLM.from_pretrained(
        path, distributed_config=DistributedConfig(tp_size=dist.get_world_size(), tp_plan="auto"),
        dtype=torch.bfloat16, attn_implementation="eager").eval()
    recorder, stack = CommRecorder(), []
    for name, module in model.named_modules():
        def enter(mod, args, name=name):
            stack.append(name)
            recorder.where = name

        def leave(mod, args, out):
            stack.pop()
            recorder.where = stack[-1] if stack else ""
        module.register_forward_pre_hook(enter)
        module.register_forward_hook(leave)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen)
    out = {}
    with torch.no_grad():
        with FlopCounterMode(display=False) as counter, recorder:
            first = model(prompt, use_cache=True, logits_to_keep=1)
        out["prefill"] = _counted(counter, recorder)
        step = first.logits[:, -1].argmax(-1, keepdim=True)
        recorder.calls.clear()
        with FlopCounterMode(display=False) as counter, recorder:
            model(step, past_key_values=first.past_key_values, use_cache=True, logits_to_keep=1)
        out["decode"] = _counted(counter, recorder)
    return out


def _counted(counter, recorder):
    return {"flops": {k: sum(v.values()) for k, v in counter.get_flop_counts().items()},
            "collectives": [list(c) for c in recorder.calls]}


@pytest.mark.slow
def test_transformers_tp_plan_auto_on_two_gloo_ranks(tmp_path):
    pytest.importorskip("accelerate", reason="transformers' tp_plan needs accelerate (not a costcalc dependency)")
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    from costcalc.verify.parallel import launch

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**SIZES)).save_pretrained(tmp_path)
    spec = hf.load(tmp_path / "config.json")           # costcalc's own import of the same config
    results = launch(TP, "test_parallel_verify_hf:hf_rank", dict(path=str(tmp_path), batch=B, seq=S), timeout=300)
    d = SIZES["hidden_size"]
    for workload, point, tokens in (("prefill", {"B": B, "S": S}, B * S), ("decode", {"B": B, "T": S}, B)):
        query = Query(spec, workload, Options(convention="full", tp=TP))
        expected = {op: v[0] for op, v in operator_columns(query, {k: [v] for k, v in point.items()}, 1,
                                                           sharded=True).items()}
        want = sorted((c.op, c.where, c.bytes, c.count) for c in collectives(query, point))
        for rank, result in enumerate(results):
            got = result[workload]
            flops, ops = got["flops"], {}
            for i in range(L):
                layer = f"LlamaForCausalLM.model.layers.{i}"
                for module, op in PROJECTIONS.items():
                    ops[op] = ops.get(op, 0) + flops[f"{layer}.{module}"]
                projections = sum(flops[f"{layer}.{m}"] for m in PROJECTIONS if m.startswith("self_attn"))
                ops["attention"] = ops.get("attention", 0) + flops[f"{layer}.self_attn"] - projections
            ops["lm_head"] = flops["LlamaForCausalLM.lm_head"]
            assert ops == expected, (workload, rank)
            assert flops["Global"] == sum(expected.values())      # nothing else ran a counted matmul
            # the collectives: costcalc's list (the vocabulary-split embedding's all-reduce included)
            calls = []
            for op, where, size in got["collectives"]:
                module = where.split(".", 3)[-1] if where.startswith("model.layers.") else where
                calls.append((op, "embedding" if where == "model.embed_tokens" else WHERE[module], size))
            assert sorted((op, where, size, calls.count((op, where, size))) for op, where, size in set(calls)) == want
            assert ("all_reduce", "embedding", tokens * d * 2) in calls
