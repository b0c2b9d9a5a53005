"""A training step under pipeline parallelism (issue 20, ``train --pp``): per-stage FLOPs, the
send/recv of activations and their gradients, the bubble and the micro-batches in flight from the
F+B table, the makespan, and the data-parallel collectives of each stage's own parameters.

Expected numbers are written by hand from the shapes (2 FLOPs a multiply-add, forward x3; vLLM's
split of the layers), the published schedule forms -- (p-1)/(m+p-1) for GPipe and 1F1B (Narayanan et
al. 2021, section 2.2), 1F1B's p - s micro-batches in flight on stage s and GPipe's m (ibid. and Huang
et al. 2019) -- and (m+p-1)(t_f+t_b) for a step of equal stages, not read back from the code.
"""
import json
from fractions import Fraction

import pytest

from costcalc import collectives, devices, pipeline
from costcalc.training import Plan

from cli_run import one_error, run

from train_rows import LLAMA, row as _row


def row(spec, plan=None, batch=8, seq=128, **layout):
    return _row(spec, plan, batch, seq, **layout)


def llama_layers(B, S, tp, layers):
    """Train FLOPs of ``layers`` Llama-3.1-8B layers on one of tp devices, by hand (forward x3)."""
    c, T = LLAMA, B * S
    kv = c["h_kv"] * c["d_h"]
    proj = 2 * T * c["d"] * (2 * c["d"] + 2 * kv) // tp
    ffn = 3 * 2 * T * c["d"] * c["m"] // tp
    attention = 2 * 2 * B * (c["h"] // tp) * c["d_h"] * S * (S + 1) // 2
    return 3 * layers * (proj + ffn + attention)


def llama_psi(tp, layers, table):
    c = LLAMA
    kv = c["h_kv"] * c["d_h"]
    return layers * (2 * c["d"] * c["d"] + 2 * c["d"] * kv + 3 * c["d"] * c["m"]) // tp + table * c["d"] * c["V"] // tp


@pytest.mark.parametrize("tp,pp,dp,m", [(2, 4, 1, 4), (1, 2, 2, 2), (2, 2, 2, 1)])
def test_stage_flops_by_hand_and_summed_are_the_whole_step(tp, pp, dp, m):
    B, S = 8, 128
    got = row("llama-3.1-8b", batch=B, seq=S, tp=tp, pp=pp, dp=dp, micro_batches=m)
    per = LLAMA["L"] // pp
    head = 3 * 2 * (B // dp) * S * LLAMA["d"] * LLAMA["V"] // tp       # the LM head, on the last stage only
    assert got["stage_layers"] == [per] * pp
    assert got["stage_flops"] == [llama_layers(B // dp, S, tp, per)] * (pp - 1) + [llama_layers(B // dp, S, tp, per)
                                                                                    + head]
    assert got["flops_per_device"] == got["stage_flops"][-1] and got["devices"] == tp * pp * dp
    assert sum(got["stage_flops"]) * tp * dp == got["total_flops"] and got["replicated_flops"] == 0


def test_replicated_router_in_the_stage_identity():
    d, E, L, B, S = 4096, 8, 32, 4, 64
    got = row("mixtral-8x7b", batch=B, seq=S, tp=2, pp=2, micro_batches=2)
    router = 3 * L * 2 * B * S * d * E
    assert got["replicated_flops"] == router
    assert sum(got["stage_flops"]) * 2 == got["total_flops"] + router


@pytest.mark.parametrize("sp", [False, True])
def test_send_recv_forward_and_backward_bytes(sp):
    B, S, m, tp, pp = 8, 128, 4, 2, 4
    got = row("llama-3.1-8b", batch=B, seq=S, tp=tp, pp=pp, micro_batches=m, sp=sp)
    tokens = B // m * S // (tp if sp else 1)              # one micro-batch's tokens (1/tp of them under sp)
    message = tokens * LLAMA["d"] * 2                     # bf16 hidden states, d a token
    sends = [c for c in got["collectives"] if c["op"] == "send_recv"]
    forward = {c["stage"]: c for c in sends if "forward" in c["where"]}
    backward = {c["stage"]: c for c in sends if "backward" in c["where"]}
    assert sorted(forward) == [0, 1, 2] and sorted(backward) == [1, 2, 3]
    assert all(c["count"] == m and c["bytes"] == message for c in sends)


def test_tp_collectives_per_stage_add_up_to_the_unpipelined_step():
    # the embedding's forward all-reduce on the first stage, the LM head's backward one and the
    # cross-entropy's on the last: the stages' TP collectives are the whole step's, micro-batch by micro-batch
    B, S = 8, 128
    whole = row("llama-3.1-8b", batch=B, seq=S, tp=2)
    piped = row("llama-3.1-8b", batch=B, seq=S, tp=2, pp=4, micro_batches=4)

    def tp_bytes(listed):
        return sum(c["count"] * c["bytes"] for c in listed if c["where"].startswith("tp"))
    assert tp_bytes(piped["collectives"]) == tp_bytes(whole["collectives"])
    first = [c for c in piped["collectives"] if c["stage"] == 0 and c["where"].startswith("tp forward")]
    assert first[0]["count"] == 4 * (2 * 8 + 1)          # 8 layers x 2 + the embedding, per micro-batch


def test_dp_collectives_of_each_stages_own_parameters():
    got = row("llama-3.1-8b", batch=8, seq=128, tp=2, pp=4, dp=2, micro_batches=2)
    ddp = {c["stage"]: c["bytes"] for c in got["collectives"] if c["where"].startswith("dp:")}
    assert ddp == {0: llama_psi(2, 8, 1) * 2, 1: llama_psi(2, 8, 0) * 2, 2: llama_psi(2, 8, 0) * 2,
                   3: llama_psi(2, 8, 1) * 2}
    assert got["params_per_device"] == llama_psi(2, 8, 1)


def test_tied_table_on_both_ends_and_its_gradient_all_reduce():
    c = dict(d=1024, V=103424)                                      # ernie-4.5-0.3b: tied embeddings
    got = row("ernie-4.5-0.3b-pt", batch=4, seq=64, pp=2, micro_batches=2)
    tied = [x for x in got["collectives"] if x["where"].startswith("pp: tied")]
    assert [(x["stage"], x["op"], x["bytes"]) for x in tied] == [(0, "all_reduce", c["d"] * c["V"] * 2),
                                                                 (1, "all_reduce", c["d"] * c["V"] * 2)]
    one = row("ernie-4.5-0.3b-pt", batch=4, seq=64)
    assert not any(x["where"].startswith("pp:") for x in one.get("collectives", []))


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("p,m", [(4, 8), (2, 1), (4, 4)])
def test_bubble_from_the_table(schedule, p, m):
    got = row("llama-3.1-8b", Plan(schedule=schedule), batch=8, seq=64, pp=p, micro_batches=m)
    assert got["bubble"] == float(Fraction(p - 1, m + p - 1)) and got["schedule"] == schedule


def test_interleaved_bubble_divided_by_v():
    got = row("llama-3.1-8b", Plan(schedule="interleaved", virtual=2), batch=8, seq=64, pp=4, micro_batches=8)
    assert got["bubble"] == float(Fraction(3, 2 * 8 + 3)) and got["virtual_stages"] == 2
    assert got["stage_layers"] == [8, 8, 8, 8]          # 8 chunks of 4 layers, two a rank


@pytest.mark.parametrize("p,m", [(4, 8), (4, 2), (3, 5)])
def test_in_flight_of_1f1b_is_p_minus_s_and_gpipe_m(p, m):
    assert pipeline.in_flight("1f1b", p, m) == [min(p - s, m) for s in range(p)]
    assert pipeline.in_flight("gpipe", p, m) == [m] * p


def test_activation_memory_is_the_micro_batches_in_flight():
    B, S, m, p = 16, 128, 8, 4
    got = row("llama-3.1-8b", batch=B, seq=S, tp=2, pp=p, micro_batches=m)
    assert got["stage_in_flight"] == [4, 3, 2, 1]
    # one micro-batch on every stage is the unpipelined step's activations at B/m (32 layers, one LM head input)
    one = row("llama-3.1-8b", batch=B // m, seq=S, tp=2)["activation_bytes_per_device"]
    per = [Fraction(a, n) for a, n in zip(got["stage_activation_bytes"], got["stage_in_flight"])]
    assert sum(per) == one and per[0] == per[1] == per[2]
    gpipe = row("llama-3.1-8b", Plan(schedule="gpipe"), batch=B, seq=S, tp=2, pp=p, micro_batches=m)
    assert gpipe["stage_in_flight"] == [m] * p and gpipe["stage_activation_bytes"][0] == m * per[0]
    assert got["activation_bytes_per_device"] == max(got["stage_activation_bytes"])
    assert got["total_bytes_per_device"] == max(got["stage_total_bytes"])
    assert got["weight_bytes_per_device"] == llama_psi(2, 8, 1) * 2


def test_zero1_shards_each_stages_optimizer_state():
    got = row("llama-3.1-8b", batch=8, seq=64, pp=4, dp=2, zero=1, micro_batches=2)
    psi = llama_psi(1, 8, 1)
    assert got["optimizer_bytes_per_device"] == psi * 12 // 2 and got["grad_bytes_per_device"] == psi * 2


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(4, 8), (3, 2)])
def test_makespan_of_equal_stages(schedule, p, m):
    t_f, t_b = 1.5, 3.0
    assert pipeline.makespan(schedule, [t_f] * p, m, [t_b] * p) == pytest.approx((m + p - 1) * (t_f + t_b))


@pytest.mark.parametrize("overlap", ["none", "full"])
def test_time_of_one_micro_batch_is_the_stages_one_after_another(overlap):
    # m = 1, tp = 1: every forward, then every backward, a send each way at each of the p-1 boundaries; then
    # the DDP all-reduce of a stage's own gradients (2 replicas, 4 devices: inside one 8-GPU NVLink domain)
    h100, B, S, p = devices.load("h100"), 4, 256, 2
    got = row("llama-3.1-8b", Plan(device=h100), batch=B, seq=S, pp=p, dp=2, overlap=overlap)
    send = collectives.time("send_recv", 2, B // 2 * S * LLAMA["d"] * 2, h100.scale_up)
    span = got["total_flops"] / 2 / 989.5e12 + 2 * (p - 1) * send
    ddp = collectives.time("all_reduce", 2, llama_psi(1, 16, 1) * 2, h100.scale_up)
    assert got["time_s"] == pytest.approx(span + ddp if overlap == "none" else max(span, ddp))
    assert got["compute_time_s"] == pytest.approx(got["flops_per_device"] / 989.5e12)
    held = got["weight_bytes_per_device"] + got["grad_bytes_per_device"] + got["optimizer_bytes_per_device"]
    assert held == 16 * llama_psi(1, 16, 1) and got["overlap"] == overlap
    assert got["fits"] is (held + got["activation_bytes_per_device"] <= h100.mem_bytes)


@pytest.mark.parametrize("args,message", [
    (["--pp", "2", "--dp", "2", "--zero", "2"], "ZeRO-2 with pipeline parallelism is not modelled"),
    (["--schedule", "gpipe"], "--schedule and --virtual-stages order a pipeline's micro-batches: they need --pp > 1"),
    (["--pp", "2", "--virtual-stages", "2"], "1f1b: one model chunk a rank (v = 1); interleaved takes v > 1"),
    (["--pp", "2", "--micro-batches", "3"], "batch 8 does not divide into 3 micro-batches"),
    (["--pp", "2", "--dp", "2", "--micro-batches", "8"], "batch 8 does not divide into 2 replicas of 8 micro-batches"),
    (["--pp", "4", "--schedule", "interleaved", "--virtual-stages", "16"], "64 model chunks, more than the model's 32"),
    (["--pp", "64"], "--pp 64: more stages than the model's 32 layers"),
    (["--pp", "2", "--schedule", "zb"], "'zb' is not one of"),
])
def test_one_line_errors(capsys, args, message):
    code, out, err = run(capsys, "train", "-p", "llama-3.1-8b", "--seq", "256", "-b", "8", *args)
    assert code != 0 and out == ""
    assert one_error(err, message), err


def test_cli_pipeline_columns(capsys):
    code, out, err = run(capsys, "train", "-p", "llama-3.1-8b", "--seq", "256", "-b", "8", "--tp", "2", "--pp", "2",
                         "--micro-batches", "4", "--schedule", "gpipe", "--device", "h100", "-f", "json")
    assert code == 0, err
    got = json.loads(out)[0]
    assert got["layout"] == "tp2.pp2" and got["schedule"] == "gpipe" and got["micro_batches"] == 4
    assert len(got["stage_flops"]) == len(got["stage_time_s"]) == 2 and got["stage_in_flight"] == [4, 4]


def test_single_device_and_unpipelined_rows_keep_their_columns(capsys):
    code, out, _ = run(capsys, "train", "-p", "llama-3.1-8b", "--seq", "256", "-b", "8", "--tp", "2", "-f", "json")
    assert code == 0 and not {"bubble", "stage_flops", "schedule"} & set(json.loads(out)[0])


# --- inference pipelines: replicas of a pipeline (--dp) and a chunk schedule's chunks (chunked --pp) ------------

def llama_prefill(B, S, tp, layers, head):
    """Prefill FLOPs (logits at the last position) of ``layers`` Llama-3.1-8B layers on one of tp devices."""
    return llama_layers(B, S, tp, layers) // 3 + (2 * B * LLAMA["d"] * LLAMA["V"] // tp if head else 0)


def test_replicas_of_a_pipeline_run_b_over_d_sequences(capsys):
    B, S, m = 8, 64, 2
    code, out, err = run(capsys, "prefill", "-p", "llama-3.1-8b", "--seq", str(S), "-b", str(B), "--tp", "2", "--pp",
                         "2", "--dp", "2", "--micro-batches", str(m), "-f", "json")
    assert code == 0, err
    got = json.loads(out)[0]
    assert got["layout"] == "tp2.pp2.dp2" and got["devices"] == 8
    assert got["stage_flops"] == [llama_prefill(B // 2, S, 2, 16, False), llama_prefill(B // 2, S, 2, 16, True)]
    assert sum(got["stage_flops"]) * 2 * 2 == got["total_flops"] and got["replicated_flops"] == 0
    sends = [c for c in got["collectives"] if c["op"] == "send_recv"]
    assert sends == [{"op": "send_recv", "where": "stage boundary", "count": m, "bytes": B // 2 // m * S * 4096 * 2,
                      "stage": 0}]


def test_a_chunk_schedule_on_a_pipeline_adds_its_chunks(capsys):
    code, out, err = run(capsys, "chunked", "-p", "llama-3.1-8b", "--seq", "1k", "--chunk", "384", "--tp", "2",
                         "--pp", "2", "--convention", "causal", "--device", "h100", "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    chunks, total = rows[:3], rows[3]
    assert total["phase"] == "total" and [r["phase"] for r in chunks] == ["chunk 1", "chunk 2", "chunk 3"]
    assert total["stage_flops"] == [sum(r["stage_flops"][s] for r in chunks) for s in (0, 1)]
    assert sum(total["stage_flops"]) * 2 == total["total_flops"]
    assert total["time_s"] == pytest.approx(sum(r["time_s"] for r in chunks))
    sends = [c for c in total["collectives"] if c["op"] == "send_recv"]
    assert sum(c["count"] for c in sends) == 3 and {c["stage"] for c in sends} == {0}
    heads = [c for c in total["collectives"] if c["where"] == "lm_head"]
    assert [(c["stage"], c["count"]) for c in heads] == [(1, 1)]    # the last chunk's logits, on the last stage



def test_boundary_peers_in_one_domain_by_placement():
    from costcalc.layout import Layout
    from costcalc.parallel import peers_within
    # replica r, stage s, TP rank t is device (r pp + s) tp + t; 8-GPU domains
    assert peers_within(Layout(tp=4, pp=2, dp=2), 8, 0, 1)        # 0-3 -> 4-7; 8-11 -> 12-15
    assert not peers_within(Layout(tp=8, pp=2), 8, 0, 1)          # 0-7 -> 8-15
    assert peers_within(Layout(tp=2, pp=4, dp=2), 8, 3, 0)        # interleaved's wrap: 6-7 -> 0-1; 14-15 -> 8-9
    assert not peers_within(Layout(tp=2, pp=3, dp=2), 8, 0, 1)    # replica 1: 6-7 -> 8-9
    assert peers_within(Layout(tp=2, pp=3, dp=2), 8, 1, 2)        # 2-3 -> 4-5; 8-9 -> 10-11
    assert peers_within(Layout(tp=8, pp=2), None, 0, 1)           # no domain: one link


@pytest.mark.parametrize("args, message", [
    (["train", "-p", "llama-3.1-8b", "-s", "4k", "-b", "16", "--schedule", "interleaved", "--pp", "2",
      "--micro-batches", "4", "--virtual-stages", "99999999999999999999"], "model chunks, more than the model's 32"),
    (["train", "-p", "llama-3.1-8b", "-s", "4k", "-b", "16", "--pp", "2", "--micro-batches", "99999999999"],
     "batch 16 does not divide into 99999999999 micro-batches"),
    (["prefill", "-p", "llama-3.1-8b", "-s", "4k", "-b", "16", "--pp", "2", "--micro-batches", "99999999999"],
     "batch 16 does not divide into 99999999999 micro-batches"),
    (["train", "-p", "llama-3.1-8b", "-s", "1k", "-b", "8", "--schedule", "interleaved", "--pp", "2",
      "--micro-batches", "4"], "interleaved 1F1B runs v > 1 model chunks"),
    (["verify", "-p", "toy", "--device", "cpu", "--tp", "0"], "--tp must be a positive integer, got 0"),
])
def test_huge_or_idle_pipeline_options_are_one_error_before_any_table(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code != 0 and not out and one_error(err, message), err
