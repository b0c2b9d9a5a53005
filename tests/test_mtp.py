"""Multi-token-prediction (MTP) layers: counted apart from the decoder, and a decode step's draft.

DeepSeek-V3's checkpoint stores its one MTP module as layer 61 (``num_hidden_layers``) of
``model.safetensors.index.json`` (https://huggingface.co/deepseek-ai/DeepSeek-V3, README_WEIGHTS.md:
"embed_tokens, enorm, hnorm, eh_proj, shared_head (norm, head)" and a decoder layer of the main
model's kind). Its tensors' shapes are written below from the config by the checkpoint's own rules
(a ``nn.Linear`` stores (out, in)); the published headers read eh_proj (7168, 14336) and
embed_tokens, shared_head.head (129280, 7168). costcalc's ``mtp_params`` must equal every matrix of
that layer but the two copies of the embedding and the head, which the module shares with the model.
"""
import json
from pathlib import Path

import pytest

from costcalc import calc, presets
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query, table
from costcalc.memory import fit
from costcalc.roofline import Machine, Precision
from costcalc.devices import load as device
from costcalc.spec import from_dict
from cli_run import one_error, run

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def layer_61_matrices(c: dict) -> dict[str, tuple[int, int]]:
    """The 2-D tensors of DeepSeek-V3's checkpoint layer 61 (one routed expert's named once, times E)."""
    d, V, h = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    nope, rope, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    r_q, r_kv, m_e = c["q_lora_rank"], c["kv_lora_rank"], c["moe_intermediate_size"]
    shared = m_e * c["n_shared_experts"]
    out = {"embed_tokens": (V, d), "eh_proj": (d, 2 * d), "shared_head.head": (V, d),
           "self_attn.q_a_proj": (r_q, d), "self_attn.q_b_proj": (h * (nope + rope), r_q),
           "self_attn.kv_a_proj_with_mqa": (r_kv + rope, d), "self_attn.kv_b_proj": (h * (nope + dv), r_kv),
           "self_attn.o_proj": (d, h * dv), "mlp.gate": (c["n_routed_experts"], d),
           "mlp.shared_experts.gate_proj": (shared, d), "mlp.shared_experts.up_proj": (shared, d),
           "mlp.shared_experts.down_proj": (d, shared)}
    for i in range(c["n_routed_experts"]):
        out.update({f"mlp.experts.{i}.gate_proj": (m_e, d), f"mlp.experts.{i}.up_proj": (m_e, d),
                    f"mlp.experts.{i}.down_proj": (d, m_e)})
    return out


def test_deepseek_v3_mtp_params_are_layer_61_but_its_embedding_and_head_copies():
    config = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    shapes = layer_61_matrices(config)
    assert shapes["eh_proj"] == (7168, 14336) and shapes["embed_tokens"] == (129280, 7168)   # the published headers
    copies = {"embed_tokens", "shared_head.head"}
    module = sum(a * b for name, (a, b) in shapes.items() if name not in copies)
    spec = presets.load("deepseek-v3")
    got = calc.parameters(spec)
    assert got["mtp_params"] == module
    assert sum(a * b for a, b in shapes.values()) == got["mtp_params"] + 2 * spec["d"] * spec["V"]
    # apart: the decoder's counts are those of the model without its MTP module
    bare = from_dict({k: v for k, v in spec.to_dict().items() if k != "mtp"}, "test")
    plain = calc.parameters(bare)
    assert "mtp_params" not in plain
    assert {k: got[k] for k in plain} == plain


def with_one_more_layer(spec):
    """The model with one more layer of its last group's kind: an independent source of one MTP block's cost."""
    data = {k: v for k, v in spec.to_dict().items() if k != "mtp"}
    data["layers"][-1]["count"] += 1
    return from_dict(data, "test")


def flops(spec, workload, options=Options(), **inputs):
    return table(Query(spec, workload, options), **{k: [v] for k, v in inputs.items()})


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2", "glm-4.5-air"])
def test_a_drafting_decode_step_adds_exactly_one_mtp_module(name):
    spec = presets.load(name)
    bigger = with_one_more_layer(spec)
    d, V = spec["d"], spec["V"]
    for batch, context in ((1, 4096), (8, 100_000)):
        plain = flops(spec, "decode", batch=batch, context=context)
        drafted = flops(spec, "decode", Options(draft="mtp"), batch=batch, context=context)
        block = flops(bigger, "decode", batch=batch, context=context)["total_flops"][0] - plain["total_flops"][0]
        eh_proj = 2 * batch * (2 * d) * d          # one new token a sequence: [h; e] (2d) -> d
        head = 2 * batch * d * V                   # the draft token's logits
        assert drafted["draft_flops"][0] == block + eh_proj + head
        assert drafted["total_flops"][0] == plain["total_flops"][0] + drafted["draft_flops"][0]
        assert drafted["draft"] == ["mtp"] and "draft" not in plain
        for term in ("attn_proj", "experts", "attention", "lm_head"):     # the decoder's own terms unchanged
            assert drafted[f"{term}_flops"] == plain[f"{term}_flops"]


def test_a_drafting_generation_runs_the_module_over_the_prompt_and_every_step():
    spec = presets.load("deepseek-v3")
    bigger = with_one_more_layer(spec)
    d, V, B, S, N = spec["d"], spec["V"], 2, 1000, 50
    plain = calc.generation(Query(spec, "generate"), batch=[B], seq=[S], new_tokens=[N])
    drafted = calc.generation(Query(spec, "generate", Options(draft="mtp")), batch=[B], seq=[S], new_tokens=[N])
    more = calc.generation(Query(bigger, "generate"), batch=[B], seq=[S], new_tokens=[N])
    tokens = B * S + B * (N - 1)                   # the prompt, then one token a step
    expected = (more["total_flops"][-1] - plain["total_flops"][-1]) + 2 * tokens * 2 * d * d + 2 * B * N * d * V
    assert drafted["draft_flops"][-1] == expected
    assert drafted["total_flops"][-1] == plain["total_flops"][-1] + expected


def test_draft_bytes_and_memory_hold_the_module_and_its_cache():
    spec = presets.load("deepseek-v3")
    bigger = with_one_more_layer(spec)
    machine, precision = Machine(device("h200")), Precision("bf16")
    plain = fit(Query(spec, "decode", Options(window_cache="rolling"), precision, machine), 4, 32768)
    drafted = fit(Query(spec, "decode", Options(window_cache="rolling", draft="mtp"), precision, machine), 4, 32768)
    more = fit(Query(bigger, "decode", Options(window_cache="rolling"), precision, machine), 4, 32768)
    assert drafted["kv_cache_bytes"] == more["kv_cache_bytes"]          # its own latent cache: one more layer's
    eh_proj = 2 * spec["d"] * spec["d"] * 2                             # bf16 bytes
    assert drafted["weight_bytes_resident"] == more["weight_bytes_resident"] + eh_proj
    # in the shipped fp8 (e4m3 and an fp32 scale per 128 x 128 block), the module is fp8 too
    native = Precision()
    drafted = fit(Query(spec, "decode", Options(window_cache="rolling", draft="mtp"), native, machine), 4, 32768)
    more = fit(Query(bigger, "decode", Options(window_cache="rolling"), native, machine), 4, 32768)
    d = spec["d"]
    assert drafted["weight_bytes_resident"] == more["weight_bytes_resident"] + 2 * d * d + (d // 128) * (2 * d // 128) * 4
    assert drafted["draft"] == "mtp" and "draft" not in plain
    row = calc.answer(Query(spec, "decode", Options(draft="mtp"), precision, machine), batch=[1], context=[4096])
    assert row["draft_bytes"][0] > 0 and row["draft_time_s"][0] > 0
    assert row["total_flops"][0] == row["draft_flops"][0] + sum(row[f"{t}_flops"][0] for t in (
        "linear", "attention", "lm_head"))


@pytest.mark.parametrize("batch", [1, 64])
def test_a_draft_reads_the_bytes_of_one_more_layer_and_its_own_projection_and_head(batch):
    """At any batch the draft's bytes are one more layer's (its routed experts read once per expert
    the batch touches, as the model's), eh_proj's weight and rows, and the LM head again."""
    spec = presets.load("deepseek-v3")
    bigger = with_one_more_layer(spec)
    machine, precision = Machine(device("h200")), Precision("bf16")

    def row(model, options):
        return calc.answer(Query(model, "decode", options, precision, machine), batch=[batch], context=[1024])

    plain, drafted, more = row(spec, Options()), row(spec, Options(draft="mtp")), row(bigger, Options())
    d = spec["d"]
    eh_proj = (2 * d * d + batch * (2 * d + d)) * 2          # bf16: its matrix, its rows in (2d) and out (d)
    extra_layer = more["total_bytes"][0] - plain["total_bytes"][0]
    assert drafted["draft_bytes"][0] == extra_layer + eh_proj + plain["lm_head_bytes"][0]
    assert drafted["total_bytes"][0] == plain["total_bytes"][0] + drafted["draft_bytes"][0]


def test_a_spec_names_its_mtp_block_and_round_trips():
    data = presets.load("deepseek-v3").to_dict()
    assert data["mtp"] == {"count": 1}
    own = from_dict({**data, "mtp": {"count": 2, "arch": "mla_q.dense", "m": 1024}}, "test")
    assert own.mtp.count == 2 and own.mtp.block.key == "mtp:mla_q.dense" and own.mtp.sizes["m"] == 1024
    assert from_dict(own.to_dict(), "again").mtp == own.mtp
    for bad, message in (({"count": 0}, "mtp.count"), ([1], "must be an object"), ({"count": 1, "L": 2}, "unknown field"),
                         ({"count": 1, "arch": "mla_q.dense"}, "missing field 'm'"),
                         ({"count": 1, "arch": "mtp:mla_q.dense", "m": 8}, "without 'mtp:'")):
        with pytest.raises(CostcalcError, match=message):
            from_dict({**data, "mtp": bad}, "test")
    with pytest.raises(CostcalcError, match="multi-token-prediction module is the model's 'mtp' field"):
        from_dict({"name": "x", "arch": "mtp:gqa.dense", "L": 1, "d": 8, "V": 8, "h_q": 1, "h_kv": 1, "d_h": 8,
                   "m": 8}, "test")


@pytest.mark.parametrize("args, message", [
    (["decode", "-p", "llama-3.1-8b", "--context", "4k", "--draft", "mtp"],
     "llama-3.1-8b has no multi-token-prediction layers"),
    (["generate", "-p", "llama-3.1-8b", "--prompt", "1k", "--new", "8", "--draft", "mtp"],
     "llama-3.1-8b has no multi-token-prediction layers"),
    (["decode", "-p", "deepseek-v3", "--context", "4k", "--draft", "eagle"], "--draft is mtp, a draft model's preset or its file"),
    (["memory", "-p", "llama-3.1-8b", "--context", "4k", "--device", "h200", "--draft", "mtp"],
     "no multi-token-prediction layers"),
])
def test_a_draft_the_model_cannot_run_is_a_one_line_error(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and one_error(err, message)


def test_the_cli_shows_the_draft_column(capsys):
    code, out, err = run(capsys, "decode", "-p", "deepseek-v3", "--context", "4k", "--draft", "mtp", "-f", "csv")
    assert code == 0
    header, row = out.strip().splitlines()
    cells = dict(zip(header.split(","), row.split(",")))
    assert cells["draft"] == "mtp" and int(cells["draft_flops"]) > 0
