"""--pp on the workload commands: per-stage FLOPs, the stage boundary's send/recv, the bubble and the
step's time from the schedule (costcalc.parallel.pipeline_columns). Expected values are derived here
from the model's sizes and vLLM's split, not read back from the code."""
import json
import re
from fractions import Fraction

import pytest

from costcalc import calc, devices, parallel, presets
from costcalc.collectives import link_for
from costcalc.evaluate import Options, Query
from costcalc.roofline import Machine, Precision

from cli_run import one_error, run


def _columns(name, workload, options, point, machine=None):
    query = Query(presets.load(name), workload, options, Precision() if machine else None, machine)
    return query, parallel.pipeline_columns(query, {k: [v] for k, v in point.items()}, 1)


def test_stage_flops_add_up_to_the_model_and_only_the_last_stage_runs_the_lm_head():
    spec = presets.load("llama-3.1-8b")
    d, V, B, S = spec["d"], spec["V"], 4, 512
    whole = calc.prefill(spec, S, B)["total_flops"]
    for pp, tp in [(2, 1), (4, 1), (2, 2), (4, 2)]:
        _, got = _columns("llama-3.1-8b", "prefill", Options(tp=tp, pp=pp), {"B": B, "S": S})
        stages = got["stage_flops"][0]
        assert sum(stages) * tp == whole + got["replicated_flops"][0]
        assert got["replicated_flops"][0] == 0          # 8 KV heads over tp 2: nothing replicated
        assert got["flops_per_device"][0] == max(stages) == stages[-1]
        # 32 layers split evenly: the stages differ by the LM head alone, 2 B d V / tp (logits last)
        assert all(s == stages[0] for s in stages[:-1])
        assert stages[-1] - stages[0] == 2 * B * d * V // tp


def test_replicated_kv_heads_under_tp_are_named_with_a_pipeline():
    _, got = _columns("toy", "prefill", Options(tp=2, pp=2), {"B": 1, "S": 8})
    toy = presets.load("toy")
    # 1 KV head on 2 devices; toy's V = 6 padded to 64 rows as vLLM pads it (the last stage's LM head)
    assert got["replicated"][0] == ("k_proj (KV heads replicated: h_kv < tp), v_proj (KV heads replicated: h_kv < tp), "
                                    "lm_head (vocabulary padded to 64)")
    # each of 2 x 2 devices runs the whole k_proj and v_proj of its layer: 2 x (2 x 8 x d x h_kv d_h), 2 layers;
    # the LM head's 64 - 6 padded rows for the one logit row
    g = toy.groups[0].sizes
    assert got["replicated_flops"][0] == (2 - 1) * 2 * 2 * (2 * 8 * g["d"] * g["h_kv"] * g["d_h"]) + \
        2 * 1 * g["d"] * (64 - g["V"])


def test_deepseek_v3_stages_follow_vllm_get_pp_indices():
    # 61 layers on 4 stages: 15 each, the one left over to the stage before the last
    query, got = _columns("deepseek-v3", "decode", Options(pp=4), {"B": 2, "T": 64})
    assert got["stage_layers"][0] == [15, 15, 16, 15]
    first = parallel.stage_queries(query)[0]
    assert [(g.count, g.block.ffn) for g in first.spec.groups] == [(3, "dense"), (12, "moe")]


@pytest.mark.parametrize("workload, point, tokens", [("prefill", {"B": 6, "S": 40}, 40),
                                                     ("decode", {"B": 6, "T": 100}, 1),
                                                     ("cached_prefill", {"B": 6, "C": 16, "T": 100}, 16)])
def test_each_stage_but_the_last_sends_its_activations_per_micro_batch(workload, point, tokens):
    d = presets.load("llama-3.1-8b")["d"]
    for m in (1, 2, 3):
        _, got = _columns("llama-3.1-8b", workload, Options(pp=3, micro_batches=m), point)
        sends = [c for c in got["collectives"][0] if c["op"] == "send_recv"]
        assert [c["stage"] for c in sends] == [0, 1]
        assert all(c["count"] == m and c["bytes"] == (6 // m) * tokens * d * 2 for c in sends)
        assert got["bubble"][0] == float(Fraction(3 - 1, m + 3 - 1))
        assert got["micro_batches"][0] == m


def test_a_generation_sends_once_per_decode_step():
    d = presets.load("llama-3.1-8b")["d"]
    query = Query(presets.load("llama-3.1-8b"), "decode_phase", Options(pp=2))
    got = parallel.pipeline_columns(query, {"B": [2], "S": [10], "N": [5]}, 1)
    assert [(c["count"], c["bytes"]) for c in got["collectives"][0] if c["op"] == "send_recv"] == [(4, 2 * d * 2)]


def test_the_tp_collectives_of_each_stage_are_its_own_layers():
    spec = presets.load("llama-3.1-8b")
    _, got = _columns("llama-3.1-8b", "decode", Options(tp=2, pp=4), {"B": 3, "T": 10})
    listed = got["collectives"][0]
    for stage in range(4):
        reduces = [c for c in listed if c["stage"] == stage and c["op"] == "all_reduce"]
        layers = [c for c in reduces if c["where"] != "embedding"]
        assert sorted(c["count"] for c in layers) == [8, 8]       # 32 layers / 4: o_proj and down_proj each
        embedding = [c["count"] for c in reduces if c["where"] == "embedding"]
        assert embedding == ([1] if stage == 0 else [])            # the embedding's, on the first stage only
        assert all(c["bytes"] == 3 * spec["d"] * 2 for c in reduces)
    gathers = [c for c in listed if c["op"] == "all_gather"]
    assert [(c["stage"], c["bytes"]) for c in gathers] == [(3, 3 * spec["V"] * 2)]   # the logits, last stage only


def test_the_step_time_is_the_stage_times_plus_the_sends_through_the_gpipe_makespan():
    h100 = devices.load("h100")
    machine = Machine(h100)
    spec = presets.load("llama-3.1-8b")
    single = Query(spec, "prefill", Options(), Precision(), machine)
    from costcalc import roofline

    alone = roofline.point(single, {"B": 1, "S": 1024})["time_s"]
    up = h100.scale_up
    send = up.latency_s + 1024 * spec["d"] * 2 / up.bytes_per_s_each_way     # one boundary, inside NVLink
    _, got = _columns("llama-3.1-8b", "prefill", Options(pp=4), {"B": 1, "S": 1024}, machine)
    assert got["time_s"][0] == pytest.approx(alone + 3 * send, rel=1e-12)
    assert got["time_s"][0] == pytest.approx(sum(got["stage_time_s"][0]), rel=1e-12)    # m = 1: one after another
    _, two = _columns("llama-3.1-8b", "prefill", Options(pp=4, micro_batches=2), {"B": 2, "S": 1024}, machine)
    t = [x / 2 for x in two["stage_time_s"][0]]            # a micro-batch's time on each stage
    assert two["time_s"][0] == pytest.approx(sum(t) + max(t), rel=1e-12)


def test_a_boundary_across_scale_up_domains_takes_the_scale_out_link():
    h100 = devices.load("h100")    # 8 GPUs an NVLink domain; tp 8 innermost: stage 0 on 0-7, stage 1 on 8-15
    query = Query(presets.load("llama-3.1-70b"), "decode", Options(tp=8, pp=2), machine=Machine(h100))
    assert parallel.boundary_link(query, 0).bytes_per_s_each_way == h100.scale_out.bytes_per_s_each_way
    query = Query(presets.load("llama-3.1-70b"), "decode", Options(tp=4, pp=2), machine=Machine(h100))
    assert parallel.boundary_link(query, 0) == link_for(2, h100.scale_up, h100.scale_out)


def test_micro_batches_split_the_work_not_change_it():
    base = _columns("llama-3.1-8b", "prefill", Options(pp=2), {"B": 4, "S": 64})[1]["stage_flops"][0]
    split = _columns("llama-3.1-8b", "prefill", Options(pp=2, micro_batches=4), {"B": 4, "S": 64})[1]
    assert split["stage_flops"][0] == base


@pytest.mark.parametrize("args, message", [
    (["prefill", "-p", "llama-3.1-8b", "--seq", "64", "-b", "3", "--pp", "2", "--micro-batches", "2"],
     "batch 3 does not divide into 2 micro-batches"),
    (["prefill", "-p", "toy", "--seq", "64", "--pp", "3"], "more stages than the model's 2 layers"),
    (["prefill", "-p", "toy", "--seq", "64", "-b", "2", "--pp", "2", "--dp", "2", "--micro-batches", "2"],
     "batch 2 does not divide into 2 replicas of 2 micro-batches"),
])
def test_what_a_pipeline_cannot_do_is_one_error(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2 and one_error(err, message)


def test_the_cli_rows_carry_the_pipeline_columns(capsys):
    code, out, err = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "1k", "-b", "4", "--pp", "2",
                         "--micro-batches", "2", "--format", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["layout"] == "tp1.pp2" and row["devices"] == 2 and row["micro_batches"] == 2
    assert sum(row["stage_flops"]) == row["total_flops"]


@pytest.mark.parametrize("name, pp", [("deepseek-v3", 16), ("gpt-oss-120b", 4), ("llama-3.1-8b", 3)])
def test_the_stages_bytes_add_up_to_the_models_in_its_own_weight_formats(name, pp):
    # every matrix read once a forward, each in the format the model ships it in (DeepSeek-V3's first
    # stages hold dense layers only: no router, whose bf16 format the preset names), the LM head once
    from costcalc import roofline

    spec, point = presets.load(name), {"B": 2, "T": 300}
    whole = roofline.point(Query(spec, "decode", Options(), Precision()), point)
    query = Query(spec, "decode", Options(pp=pp), Precision())
    parts = [parallel.stage_traffic(stage, point) for stage in parallel.stage_queries(query)]
    for key in ("weight_bytes", "kv_read_bytes", "total_bytes"):
        assert abs(sum(p[key] for p in parts) - whole[key]) <= pp      # each stage's bytes rounded to whole


def test_the_table_shows_each_stage_in_its_unit_and_each_collective_with_its_stage(capsys):
    code, out, err = run(capsys, "prefill", "-p", "llama-3.1-8b", "--seq", "1k", "--pp", "2", "--device", "h100",
                         "--wide")
    assert code == 0, err
    row = calc.answer(Query(presets.load("llama-3.1-8b"), "prefill", Options(pp=2)), batch=[1], seq=[1024])
    first, last = (f"{x / 1e12:.4g} TFLOP" for x in row["stage_flops"][0])
    assert f"[{first}, {last}]" in out
    assert "stage 0 send_recv stage boundary x1 8.389 MB" in out      # 1024 x 4096 x 2 bytes
    assert re.search(r"\[\d[\d.]* ms, \d[\d.]* ms\]", out)              # stage_time_s in seconds' units


def test_expert_parallel_stages_split_the_experts_and_replicate_the_router():
    spec = presets.load("qwen3-30b-a3b")           # 48 MoE layers, E 128, top-8
    g, B, S = spec.groups[0].sizes, 2, 16
    _, got = _columns("qwen3-30b-a3b", "prefill", Options(tp=2, ep=2, pp=2), {"B": B, "S": S})
    whole = calc.prefill(spec, S, B)["total_flops"]
    assert sum(got["stage_flops"][0]) * 2 == whole + got["replicated_flops"][0]
    assert got["replicated"][0] == "router"
    assert got["replicated_flops"][0] == (2 - 1) * 2 * B * S * g["d"] * g["E"] * spec["L"]   # the router, whole on both
    a2a = [c for c in got["collectives"][0] if c["op"] == "all_to_all"]
    assert {(c["stage"], c["count"]) for c in a2a} == {(0, 24), (1, 24)}                # 24 MoE layers a stage
    assert all(c["bytes"] == (B * S // 2) * g["k"] * g["d"] * 2 for c in a2a)          # its share's k copies of d


def test_a_pipeline_of_one_micro_batch_is_the_tp_ep_layout_plus_its_sends():
    # the stages split the layers of one tp2.ep2 device: their bytes add up to that device's (H1's
    # device_traffic over every layer), their times to its step time, plus the one boundary's send
    h100 = devices.load("h100")
    spec, point = presets.load("qwen3-30b-a3b"), {"B": [4], "T": [512]}
    flat = Query(spec, "decode", Options(tp=2, ep=2), Precision(), Machine(h100))
    piped = Query(spec, "decode", Options(tp=2, ep=2, pp=2), Precision(), Machine(h100))
    one, two = parallel.columns(flat, point, 1), parallel.columns(piped, point, 1)
    assert abs(sum(two["stage_bytes"][0]) - one["total_bytes_per_device"][0]) <= 2
    send = h100.scale_up.latency_s + 4 * spec["d"] * 2 / h100.scale_up.bytes_per_s_each_way
    assert two["time_s"][0] == pytest.approx(one["time_s"][0] + send, rel=1e-9)
    assert two["comm_time_s"][0] < one["comm_time_s"][0]          # each stage: its own layers' collectives


def test_under_sp_a_stage_sends_each_tp_ranks_share_of_the_tokens():
    spec = presets.load("llama-3.1-8b")
    B, S = 2, 1024
    _, got = _columns("llama-3.1-8b", "prefill", Options(tp=2, pp=2, sp=True), {"B": B, "S": S})
    sends = [c for c in got["collectives"][0] if c["op"] == "send_recv"]
    assert sends == [{"op": "send_recv", "where": "stage boundary", "count": 1, "bytes": B * S // 2 * spec["d"] * 2,
                      "stage": 0}]


def test_an_expert_group_over_every_replica_spans_the_stages_between_them():
    """tp4 x pp2 x dp2 with ep 8: a replica is tp x pp = 8 consecutive devices, so the 8 expert ranks
    (4 of each replica) span 16 devices -- past an HGX domain of 8: the NIC, not NVLink."""
    h100 = devices.load("h100")
    _, got = _columns("deepseek-v2-lite", "prefill", Options(tp=4, pp=2, dp=2, ep=8), {"B": 8, "S": 256},
                      Machine(h100))
    assert "ep8: scale_out across domains" in got["links"][0]
    _, one = _columns("deepseek-v2-lite", "prefill", Options(tp=4, pp=2, ep=4), {"B": 8, "S": 256}, Machine(h100))
    assert "tp4, ep4: scale_up" in one["links"][0]


def test_a_pipelines_term_times_are_its_busiest_stages():
    h100 = devices.load("h100")
    query, got = _columns("llama-3.1-70b", "prefill", Options(tp=4, pp=2), {"B": 8, "S": 4096}, Machine(h100))
    stages = [parallel.stage_traffic(stage, {"B": 8, "S": 4096}) for stage in parallel.stage_queries(query)]
    for term in ("attn_proj", "ffn", "attention"):
        assert got[f"{term}_time_s"][0] == max(s[f"{term}_time_s"] for s in stages) > 0
    assert got["ffn_time_s"][0] <= got["compute_time_s"][0] + got["memory_time_s"][0]
