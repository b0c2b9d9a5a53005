"""Tensor and expert parallelism (issue 20, first slice): per-device FLOPs and collectives.

Every expected number here is written from the Megatron / vLLM sharding rules and the projection
shapes by hand (2 FLOPs a multiply-add), not read back from costcalc: q/k/v/gate/up split by
columns, o/down by rows, each a matmul / tp; heads / tp (one KV head a device where h_kv < tp);
vocabulary-parallel LM head / tp; the router and MLA's down-projections replicated; under EP
each device runs the expected n k / ep routed pairs.
"""
import json

import pytest

from costcalc import calc, presets
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.layout import Layout

from cli_run import one_error, run


def row(preset, workload, tp=1, ep=1, **inputs):
    table = calc.answer(Query(presets.load(preset), workload, Options(tp=tp, ep=ep)), **{k: [v] for k, v in inputs.items()})
    return {k: v[0] for k, v in table.items()}


def llama_device(B, S, tp, kv_heads):
    """A Llama-3.1-8B prefill (logits of the last position) on one of tp devices, by hand."""
    d, h, d_h, m, V, L = 4096, 32, 128, 14336, 128256, 32
    T = B * S
    proj = 2 * T * d * d_h * (2 * h // tp + 2 * kv_heads)     # q, o; k, v
    ffn = 3 * 2 * T * d * m // tp
    attention = 2 * 2 * B * (h // tp) * d_h * S * (S + 1) // 2   # QK^T and AV over the causal pairs
    return L * (proj + ffn + attention) + 2 * B * d * V // tp


def test_tp_prefill_flops_per_device_by_hand():
    got = row("llama-3.1-8b", "prefill", tp=2, batch=2, seq=64)
    assert got["layout"] == "tp2" and got["devices"] == 2
    assert got["flops_per_device"] == llama_device(2, 64, 2, 8 // 2)
    # nothing replicated at h_kv = 8 >= tp: the devices together run the model's FLOPs exactly
    assert got["flops_per_device"] * 2 == got["total_flops"]
    assert got["replicated_flops"] == 0 and got["replicated"] == "none"


def test_kv_heads_replicated_when_fewer_than_tp():
    B, S, tp, d, d_h, L = 1, 32, 16, 4096, 128, 32
    got = row("llama-3.1-8b", "prefill", tp=tp, batch=B, seq=S)
    assert got["flops_per_device"] == llama_device(B, S, tp, 1)     # one KV head a device (vLLM)
    extra = L * 2 * (tp * 1 - 8) * 2 * B * S * d * d_h               # k_proj and v_proj: 16 heads run, 8 exist
    assert got["replicated_flops"] == extra
    assert got["flops_per_device"] * tp == got["total_flops"] + extra
    assert "k_proj (KV heads replicated: h_kv < tp)" in got["replicated"]
    assert "v_proj (KV heads replicated: h_kv < tp)" in got["replicated"]


def test_deepseek_v3_tp8_ep8_replicated_parts_named_and_counted():
    B, tp = 4, 8
    got = row("deepseek-v3", "decode", tp=tp, ep=tp, batch=B, context=1000)
    d, E, r_q, r_kv, d_rope, L, moe = 7168, 256, 1536, 512, 64, 61, 58
    single = 2 * B * d * (E * moe + r_q * L + (r_kv + d_rope) * L)   # router, q_a_proj, kv_a_proj_with_mqa
    assert got["replicated"] == "q_a_proj, kv_a_proj_with_mqa, router"
    assert got["replicated_flops"] == (tp - 1) * single
    assert got["flops_per_device"] * tp == got["total_flops"] + (tp - 1) * single
    assert got["layout"] == "tp8.ep8"


def test_ep_runs_a_share_of_the_routed_pairs():
    """Mixtral at tp2 ep2: whole experts (not split by width), n k / ep pairs a device."""
    B, S, d, m_e, k, E, L = 1, 100, 4096, 14336, 2, 8, 32
    ep = row("mixtral-8x7b", "prefill", tp=2, ep=2, batch=B, seq=S)
    tp = row("mixtral-8x7b", "prefill", tp=2, batch=B, seq=S)
    router = L * 2 * B * S * d * E
    assert ep["flops_per_device"] == tp["flops_per_device"]    # either way half the experts' work a device
    assert ep["flops_per_device"] * 2 == ep["total_flops"] + router
    assert ep["replicated"] == "router"
    experts = L * 3 * 2 * B * S * k * d * m_e
    assert ep["experts_flops"] == experts


def test_all_reduce_bytes_per_layer_are_B_S_d_bytes():
    B, S, d, V, L = 3, 50, 4096, 128256, 32
    got = row("llama-3.1-8b", "prefill", tp=4, batch=B, seq=S)
    ops = {(c["op"], c["where"]): c for c in got["collectives"]}
    for where in ("o_proj", "ffn down_proj"):
        assert ops[("all_reduce", where)] == {"op": "all_reduce", "where": where, "count": L, "bytes": B * S * d * 2}
    assert ops[("all_gather", "lm_head")]["bytes"] == B * V * 2 and ops[("all_gather", "lm_head")]["count"] == 1
    # the vocabulary-parallel embedding's partial lookups summed once a forward (vLLM's VocabParallelEmbedding)
    assert ops[("all_reduce", "embedding")] == {"op": "all_reduce", "where": "embedding", "count": 1,
                                                "bytes": B * S * d * 2}
    assert got["comm_bytes_per_device"] == (2 * L + 1) * B * S * d * 2 + B * V * 2
    every = calc.answer(Query(presets.load("llama-3.1-8b"), "prefill", Options(logits="all", tp=4)), batch=[B], seq=[S])
    gather = [c for c in every["collectives"][0] if c["op"] == "all_gather"]
    assert gather[0]["bytes"] == B * S * V * 2


def test_ep_all_to_all_dispatch_and_combine():
    B, d, k, moe, ep = 5, 7168, 8, 58, 8
    got = row("deepseek-v3", "decode", tp=ep, ep=ep, batch=B, context=100)
    a2a = [c for c in got["collectives"] if c["op"] == "all_to_all"]
    share = -(-B // ep)      # the busiest device's tokens: 1 of 5 over 8
    assert [c["where"] for c in a2a] == ["experts dispatch", "experts combine"]
    assert all(c["count"] == moe and c["bytes"] == share * k * d * 2 for c in a2a)


def test_generate_totals_are_the_phases_added():
    B, S, N = 2, 40, 6
    query = Query(presets.load("mixtral-8x7b"), "generate", Options(tp=2))
    t = calc.generation(query, [B], [S], [N])
    pre, dec, tot = (dict(zip(t, col)) for col in zip(*t.values()))
    assert tot["flops_per_device"] == pre["flops_per_device"] + dec["flops_per_device"]
    assert tot["comm_bytes_per_device"] == pre["comm_bytes_per_device"] + dec["comm_bytes_per_device"]
    step = [c for c in dec["collectives"] if c["where"] == "o_proj"][0]
    assert step["count"] == 32 * (N - 1) and step["bytes"] == B * 4096 * 2   # N-1 steps of one token a sequence
    assert dec["flops_per_device"] * 2 == dec["total_flops"] + 32 * 2 * B * (N - 1) * 4096 * 8


@pytest.mark.parametrize("args", [
    ["prefill", "-p", "toy", "--seq", "64", "-f", "json"],
    ["decode", "-p", "mixtral-8x7b", "--context", "1k", "--batch", "2", "-f", "json"],
    ["generate", "-p", "deepseek-v3", "--prompt", "100", "--new", "3", "-f", "json", "--device", "h100"],
])
def test_tp1_prints_what_it_prints_today(capsys, args):
    code, today, _ = run(capsys, *args)
    code1, with_tp1, _ = run(capsys, *args, "--tp", "1", "--ep", "1")
    assert code == code1 == 0 and today == with_tp1
    assert "layout" not in today and "collectives" not in today


@pytest.mark.parametrize("args, message", [
    (["prefill", "-p", "llama-3.1-8b", "--seq", "8", "--tp", "3"], "query head count h_q 32 does not divide by 3"),
    (["decode", "-p", "llama-3.1-8b", "--context", "8", "--tp", "2", "--ep", "2"], "has no MoE layers"),
    (["decode", "-p", "deepseek-v3", "--context", "8", "--ep", "8"], "over the tensor-parallel devices (--ep 1)"),
    (["decode", "-p", "mixtral-8x7b", "--context", "8", "--tp", "16", "--ep", "16"], "8 experts do not divide by 16"),
    (["prefill", "-p", "llama-3.1-8b", "--seq", "8", "--tp", "2", "--pp", "2", "--dp", "2", "--device", "h100"],
     "batch 1 does not divide into 2 replicas"),
    (["prefill", "-p", "llama-3.1-8b", "--lengths", "3,5", "--tp", "2"], "not varlen_prefill yet"),
    (["prefill", "-p", "llama-3.1-8b", "--seq", "8", "--tp", "0"], "--tp must be a positive integer"),
    (["train", "-p", "qwen3.5-27b", "--seq", "8", "--tp", "2"], "not modelled under parallelism for a training step"),
    (["decode", "-p", "llama-3.1-8b", "--context", "8", "--sp"], "--sp (sequence parallel) splits"),
    (["decode", "-p", "llama-3.1-8b", "--context", "8", "--tp", "2", "--micro-batches", "4"], "it needs --pp > 1"),
    (["decode", "-p", "llama-3.1-8b", "--context", "8", "--pp", "0"], "--pp must be a positive integer"),
    (["decode", "-p", "mixtral-8x7b", "--context", "8", "--tp", "2", "--dp", "2", "--ep", "8"], "(--ep 4: vLLM"),
])
def test_layout_errors_are_one_line(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code != 0 and one_error(err, message), err


def test_kv_heads_that_neither_divide_nor_are_divided(tmp_path, capsys):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"name": "odd", "arch": "gqa.dense", "L": 2, "d": 96, "h_q": 48, "h_kv": 6,
                                "d_h": 2, "m": 64, "V": 64}))
    code, _, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "8", "--tp", "4")
    assert code != 0 and one_error(err, "6 KV heads are fewer than") is False
    assert one_error(err, "6 KV heads do not divide by 4"), err
    code, _, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "8", "--tp", "8")
    assert one_error(err, "tp / h_kv devices"), err   # 6 < 8 and 8 is not a multiple of 6


def test_layout_label():
    assert Layout(4, 4).label == "tp4.ep4" and Layout(2).label == "tp2" and Layout().single
    with pytest.raises(CostcalcError):
        Layout(2, 4)
    assert Layout(2, 4, pp=2, dp=2, sp=True).label == "tp2.ep4.pp2.dp2.sp" and Layout(2, 4, 2, 2).devices == 8
    assert Layout(2, 4, pp=2, dp=2, sp=True).flags == "--tp 2 --ep 4 --pp 2 --dp 2 --sp"


def test_csv_holds_the_collectives_as_json_text(capsys):
    import csv
    import io

    code, out, _ = run(capsys, "generate", "-p", "mixtral-8x7b", "--prompt", "10", "--new", "3", "--tp", "2", "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["phase"] for r in rows] == ["prefill", "decode", "total"]
    total = json.loads(rows[2]["collectives"])
    assert total == json.loads(rows[0]["collectives"]) + json.loads(rows[1]["collectives"])
    assert rows[0]["layout"] == "tp2" and int(rows[0]["devices"]) == 2


# The presets a tp2 (tp2.ep2 with MoE) layout still refuses, and why (docs/cost-model.md): none today; a preset
# of a block kind not modelled under parallelism is listed here with the words of its refusal.
REFUSED: dict[str, str] = {}


def vllm_replicates(spec, tp):
    """What vLLM keeps whole on every tensor-parallel rank, from its model files: the MoE router (FusedMoE's
    gate) and Qwen's shared_expert_gate (``ReplicatedLinear``); MLA's q_a_proj and kv_a_proj_with_mqa
    (deepseek_v2.py); DeepSeek Sparse Attention's whole indexer (deepseek_v2.py ``Indexer``: wq_b, wk,
    weights_proj ``ReplicatedLinear``, so its scores too); KDA's f_a_proj and g_a_proj (kda.py); DeepSeek-V4's
    fused q_a/kv projection (``disable_tp=True``), its compressors (``disable_tp=True``), its indexer and its
    hyper-connections (plain parameters run whole: deepseek_v4.py, ``DeepseekV4DecoderLayer``); the KV
    heads where h_kv < tp (``QKVParallelLinear``); Mamba-2's one group where G < tp (mamba_mixer2.py:
    in_proj's B and C columns and their conv channels); the LM head's padded rows where V is not a multiple
    of 64 (vocab_parallel_embedding.py)."""
    names = set()
    for g in spec.groups:
        b = g.block
        names |= {"router"} if b.ffn == "moe" else set()
        names |= {"shared_expert_gate"} if b.shared_gate else set()
        names |= ({"kv_a_proj_with_mqa"} | ({"q_a_proj"} if b.q_lora else set())) if b.attention == "mla" else set()
        names |= {"indexer.wq_b", "indexer.wk", "indexer.weights_proj", "indexer"} if b.sparse else set()
        names |= {"f_a_proj", "g_a_proj"} if b.attention == "kda" else set()
        if b.attention in ("swa", "hca", "csa"):
            names |= {"q_a_proj", "kv_proj", "attn_hc.fn", "attn_hc.comb", "ffn_hc.fn", "ffn_hc.comb", "hc_head"}
            names |= {"compressor.kv_proj", "compressor.gate_proj"} if b.attention != "swa" else set()
            names |= ({"indexer.kv_proj", "indexer.gate_proj", "indexer.q_b_proj", "indexer.weights_proj", "indexer"}
                      if b.attention == "csa" else set())
        if g.sizes.get("h_kv", tp) < tp:
            names |= {f"{op} (KV heads replicated: h_kv < tp)" for op in ("k_proj", "v_proj")}
        if g.sizes.get("G", tp) < tp:
            names |= {f"{op} (groups replicated: G < tp)" for op in ("in_proj", "conv")}
    V = spec.sizes["V"]
    if V % 64:
        names.add(f"lm_head (vocabulary padded to {-(-V // 64) * 64})")
    return names


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_a_layout_takes_splits_its_operators_or_names_them(name):
    """Every preset a tp2 (tp2.ep2 with MoE) layout is posed for: no operator runs less than its share,
    and the ones run more than once are exactly those vLLM replicates; the others are refused by name."""
    spec = presets.load(name)
    ep = 2 if any(g.block.ffn == "moe" for g in spec.groups) else 1
    if name in REFUSED:
        with pytest.raises(CostcalcError, match=REFUSED[name]):
            Query(spec, "prefill", Options(tp=2, ep=ep))
        return
    query = Query(spec, "prefill", Options(tp=2, ep=ep))
    got = {k: v[0] for k, v in calc.answer(query, batch=[2], seq=[8]).items()}
    named = set(got["replicated"].split(", ")) - {"none"}
    assert named == vllm_replicates(spec, 2), named
    assert got["flops_per_device"] * 2 == got["total_flops"] + got["replicated_flops"]
    assert (got["replicated_flops"] > 0) == bool(named)


@pytest.mark.parametrize("command", [["prefill", "--seq", "64"], ["decode", "--context", "64"],
                                     ["generate", "--prompt", "64", "--new", "4"],
                                     ["chunked", "--seq", "64", "--chunk", "32"]])
def test_overlap_without_a_device_warns_that_it_does_nothing(capsys, command):
    code, out, err = run(capsys, command[0], "-p", "llama-3.1-8b", *command[1:], "--tp", "2", "--overlap", "none")
    assert code == 0 and out and err.strip() == ("warning: --overlap none does nothing without --device (it changes "
                                                 "time, not FLOPs, bytes or memory)")
    code, _, err = run(capsys, command[0], "-p", "llama-3.1-8b", *command[1:], "--tp", "2", "--overlap", "none",
                       "--device", "h100")
    assert code == 0 and "--overlap" not in err
