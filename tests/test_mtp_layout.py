"""The MTP module under a parallel layout (``--draft mtp --tp/--ep/--dp``): sharded as a layer
(layout.device_spec), its own collectives (parallel.mtp_collectives, vLLM's DeepSeekMultiTokenPredictor),
its weights and cache on each device (memory._with_mtp), and speculative decoding by it. Held to the
single-device numbers where a layout shards nothing (--dp: one device at its replica's share), to the
parallel identities, and to the collectives vLLM's module runs."""
import json

import pytest

from costcalc import parallel, presets
from costcalc.evaluate import Options, Query
from costcalc.roofline import Machine, Precision
from costcalc.devices import load as device
from cli_run import one_error, run

HYBRID = "qwen3.5-35b-a3b"      # MTP over Gated DeltaNet + attention; one H200 holds it


def _json(capsys, *args):
    code, out, err = run(capsys, *args, "-f", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("speculative", [(), ("--acceptance", "0.8", "--draft-tokens", "2")])
def test_data_parallel_replicas_are_one_device_at_their_share(capsys, speculative):
    """--dp 2 shards nothing: each device is the single device at B / 2, the module's cost and memory too."""
    base = ("-p", HYBRID, "--device", "h200", "-t", "4k", "--draft", "mtp", *speculative)
    replica, = _json(capsys, "decode", *base, "-b", "8", "--dp", "2")
    alone, = _json(capsys, "decode", *base, "-b", "4")
    for key in ("time_s", "draft_time_s") + (("verify_time_s",) if speculative else ()):
        assert replica[key] == alone[key], key
    assert replica["fits"] is True and replica["comm_time_s"] == 0
    held, = _json(capsys, "memory", "-p", HYBRID, "--device", "h200", "-t", "4k", "--draft", "mtp", "-b", "8",
                  "--dp", "2")
    one, = _json(capsys, "memory", "-p", HYBRID, "--device", "h200", "-t", "4k", "--draft", "mtp", "-b", "4")
    assert held["weight_bytes_per_device"] == one["weight_bytes_resident"]
    assert held["kv_cache_bytes_per_device"] == one["kv_cache_bytes"]
    assert held["state_bytes_per_device"] == one["state_bytes"]
    assert held["max_batch"] == 2 * one["max_batch"]


def test_the_module_is_sharded_as_a_layer_and_its_replicated_work_named(capsys):
    """DeepSeek-V3 on tp8.ep8: devices x per-device FLOPs = the model's + the replicated, which now names the
    module's eh_proj (a plain nn.Linear in vLLM) and its MLA down-projections and router, not its experts."""
    row, = _json(capsys, "decode", "-p", "deepseek-v3", "--device", "h200", "-t", "4k", "-b", "8", "--draft", "mtp",
                 "--tp", "8", "--ep", "8")
    assert row["flops_per_device"] * 8 == row["total_flops"] + row["replicated_flops"]
    named = row["replicated"].split(", ")
    assert {"mtp.eh_proj", "mtp.q_a_proj", "mtp.kv_a_proj_with_mqa", "mtp.router"} <= set(named)
    assert not any("experts" in name for name in named)
    plain, = _json(capsys, "decode", "-p", "deepseek-v3", "--device", "h200", "-t", "4k", "-b", "8", "--tp", "8",
                   "--ep", "8")
    assert row["time_s"] > plain["time_s"] and row["comm_time_s"] > plain["comm_time_s"]


def test_the_module_runs_the_collectives_of_vllms_mtp_layer_each_forward():
    """Per forward of B tokens: an all-reduce after the vocabulary-parallel embedding, after o_proj and after
    the FFN, the logits of one row a sequence gathered, and under EP a dispatch and a combine of k copies."""
    spec = presets.load("deepseek-v3")
    q = Query(spec, "decode_phase", Options(tp=8, ep=8, draft="mtp"), Precision(), Machine(device("h200")))
    b, n = 16, 5
    found = [c for c in parallel.collectives(q, {"B": b, "S": 4096, "N": n}) if c.where.startswith("mtp ")]
    d, v = spec.sizes["d"], parallel.padded(spec.sizes["V"])
    want = {("all_reduce", "mtp embedding", n - 1, b * d * 2), ("all_reduce", "mtp o_proj", n - 1, b * d * 2),
            ("all_reduce", "mtp ffn down_proj", n - 1, b * d * 2), ("all_gather", "mtp lm_head", n - 1, b * v * 2),
            ("all_to_all", "mtp experts dispatch", n - 1, (b // 8) * 8 * d * 2),
            ("all_to_all", "mtp experts combine", n - 1, (b // 8) * 8 * d * 2)}
    assert {(c.op, c.where, c.count, c.bytes) for c in found} == want
    plain = Query(spec, "decode_phase", Options(tp=8, ep=8), Precision(), Machine(device("h200")))
    assert not [c for c in parallel.collectives(plain, {"B": b, "S": 4096, "N": n}) if c.where.startswith("mtp ")]


def test_speculation_by_the_module_on_a_layout_is_its_verify_and_its_own_steps(capsys):
    """The verify is the cached prefill on the layout; the module's forwards (over the K + 1 verified tokens,
    then K - 1 single tokens) each its own term's time and its own collectives, under --overlap (one after
    the other with the verify)."""
    k, b, t = 2, 8, 4096
    base = ("-p", "deepseek-v3", "--device", "h200", "-b", str(b), "--tp", "8", "--ep", "8")
    row, = _json(capsys, "decode", *base, "-t", str(t), "--draft", "mtp", "--acceptance", "0.8", "--draft-tokens",
                 str(k))
    verify, = _json(capsys, "prefill", *base, "--cached-prefix", str(t), "--seq", str(k + 1), "--logits", "all",
                    "--mla", "absorbed")
    assert row["verify_time_s"] == verify["time_s"]
    machine, spec = Machine(device("h200")), presets.load("deepseek-v3")
    first = Query(spec, "cached_prefill", Options(tp=8, ep=8, draft="mtp", mla="absorbed"), Precision(), machine)
    rest = Query(spec, "decode_phase", Options(tp=8, ep=8, draft="mtp"), Precision(), machine)
    spent = 0.0
    for drafter, point in ((first, {"B": b, "T": t, "C": k + 1}), (rest, {"B": b, "S": t + k + 1, "N": k})):
        own = parallel.device_traffic(drafter, point)["draft_time_s"]
        spent += max(own, parallel.draft_comm(drafter, point))
    assert row["draft_time_s"] == spent
    assert row["time_s"] == pytest.approx(row["verify_time_s"] + row["draft_time_s"], rel=1e-15)


@pytest.mark.parametrize("args, message", [
    (("--tp", "2", "--pp", "2"), "--draft mtp with --pp is not modelled"),
    (("--tp", "2", "--sp"), "--draft mtp with --sp is not modelled"),
])
def test_the_module_under_a_pipeline_or_sequence_split_is_one_line(capsys, args, message):
    code, _, err = run(capsys, "decode", "-p", "deepseek-v3", "-t", "4k", "--draft", "mtp", *args)
    assert code == 2 and one_error(err, message), err
