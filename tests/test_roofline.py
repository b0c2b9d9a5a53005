"""Bytes, memory and time: the byte identities, the roofline's bounds, devices and the CLI keys."""
import json
import math
import re
from fractions import Fraction

import pytest

from cli_run import run
from costcalc import calc, devices, memory, presets
from costcalc.evaluate import Query
from costcalc.roofline import Machine, Precision, experts_touched
from costcalc.vocab import Routing

H100 = Machine(devices.load("h100"))
BF16 = Precision("bf16")   # every module in bf16 (--weight-dtype bf16), whatever the model ships in


def fit(spec, device, batch, context, options=memory.SERVING):
    """The ``memory`` row of a model on a device in bf16."""
    return memory.fit(Query(spec, "decode", options, BF16, Machine(device)), batch, context)


def decode_row(spec, context, batch=1, precision=BF16, machine=None):
    return calc.rows(calc.table(spec, "decode", precision=precision, machine=machine, batch=[batch],
                                context=[context]))[0]


def test_a_dense_decode_step_reads_every_matmul_weight_once():
    spec = presets.load("llama-3.1-8b")
    counts = calc.parameters(spec)
    for batch in (1, 64):
        row = decode_row(spec, 4095, batch)
        assert row["weight_bytes"] == 2 * (counts["block_params"] + counts["lm_head_params"])   # bf16: 2 bytes
    int4 = decode_row(spec, 4095, 1, Precision(weight="int4", group_size=128))
    assert int4["weight_bytes"] == (counts["block_params"] + counts["lm_head_params"]) * (4 + 16 / 128) / 8


def test_a_moe_decode_step_reads_the_experts_it_touches():
    spec = presets.load("mixtral-8x7b")          # 8 experts, 2 per token, every layer MoE
    L, d, m_e = spec["L"], spec["d"], spec["m_e"]
    expert = L * 3 * d * m_e                     # one expert's weights in every layer
    counts = calc.parameters(spec)
    others = counts["block_params"] - 8 * expert + counts["lm_head_params"]
    for batch, routing in ((1, "expected"), (4, "expected"), (4, "worst"), (64, "worst")):
        row = decode_row(spec, 100, batch, Precision(routing=routing))
        touched = 8 * (1 - Fraction(6, 8) ** batch) if routing == "expected" else min(8, 2 * batch)
        assert row["weight_bytes"] == round(2 * (others + touched * expert)), (batch, routing)
    assert decode_row(spec, 100, 1)["weight_bytes"] == 2 * (others + 2 * expert)   # one token: its k experts


def test_expected_experts_run_from_k_to_e():
    assert experts_touched(128, 8, 1, Routing.expected) == 8
    assert experts_touched(128, 8, 2, Routing.expected) == 128 * (1 - Fraction(120, 128) ** 2)
    assert 127.99 < float(experts_touched(128, 8, 4096, Routing.expected)) <= 128
    assert float(experts_touched(128, 8, 10**7, Routing.expected)) == pytest.approx(128)
    assert experts_touched(128, 8, 3, Routing.worst) == 24 and experts_touched(128, 8, 999, Routing.worst) == 128


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gpt-oss-20b", "deepseek-v3"])
def test_the_decode_phase_reads_the_kv_of_its_steps(name):
    spec = presets.load(name)
    prompt, new, batch = 700, 30, 2
    rows = calc.rows(calc.generate_table(spec, precision=BF16, batch=[batch], seq=[prompt], new_tokens=[new]))
    steps = [decode_row(spec, prompt + j - 1, batch) for j in range(1, new)]
    for key in ("kv_read_bytes", "kv_write_bytes", "activation_bytes"):
        assert rows[1][key] == sum(r[key] for r in steps), key
    assert rows[2]["kv_read_bytes"] == rows[0]["kv_read_bytes"] + rows[1]["kv_read_bytes"]


def test_a_chunked_schedule_moves_the_unchunked_bytes_plus_its_re_reads():
    spec = presets.load("llama-3.1-8b")
    seq, chunk = 8192, 2048
    rows = {r["phase"]: r for r in calc.chunked(spec, seq, chunk, precision=BF16)}
    total, single = rows["total"], rows["unchunked"]
    L, d_kv, d, V = spec["L"], spec.d_kv, spec["d"], spec["V"]
    per_key = L * 2 * d_kv * 2                                  # K and V, bf16, every layer
    prefixes = sum(range(0, seq, chunk))                        # keys cached before each chunk: re-read
    assert total["kv_read_bytes"] == single["kv_read_bytes"] + prefixes * per_key
    counts = calc.parameters(spec)
    block_weights = 2 * counts["block_params"]
    assert total["weight_bytes"] == single["weight_bytes"] + 3 * block_weights   # read again by 3 more chunks
    assert total["kv_write_bytes"] == single["kv_write_bytes"]
    assert total["activation_bytes"] == single["activation_bytes"]   # the LM head runs once either way


@pytest.mark.parametrize("name", ["llama-3.1-70b", "gemma-3-12b", "deepseek-v3", "gpt-oss-120b", "llama-4-scout-17b-16e"])
@pytest.mark.parametrize("window_cache", ["whole", "rolling"])
def test_memory_is_weights_plus_the_cache_of_every_group(name, window_cache):
    from costcalc.evaluate import Options

    spec = presets.load(name)
    batch, context = 4, 50_000
    row = fit(spec, devices.load("h200"), batch, context, Options(window_cache=window_cache))
    counts = calc.parameters(spec)
    resident = counts["block_params"] + counts["embedding_params"] + (0 if spec.tied_embeddings else
                                                                       counts["lm_head_params"])
    assert row["weight_bytes_resident"] == 2 * resident
    cache = 0
    for g in spec.groups:           # by hand: K/V (GQA) or the latent (MLA) per token and layer
        per_token = g.sizes["r_kv"] + g.sizes["d_rope"] if g.block.attention == "mla" else \
            2 * g.sizes["h_kv"] * g.sizes["d_h"]
        bound = {"window": g.sizes.get("W"), "chunk": g.sizes.get("W_c")}.get(g.block.attention)
        kept = min(context, bound) if bound and window_cache == "rolling" else context
        cache += g.count * per_token * kept * 2 * batch
    assert row["kv_cache_bytes"] == cache
    assert row["total_bytes"] == row["weight_bytes_resident"] + row["kv_cache_bytes"]
    assert row["fits"] == (row["total_bytes"] <= row["usable_bytes"])
    assert row.get("window_cache") == (window_cache if name in ("gemma-3-12b", "gpt-oss-120b", "llama-4-scout-17b-16e")
                                       else None)


def test_memory_of_mla_under_each_form(capsys):
    code, out, _ = run(capsys, "memory", "-p", "deepseek-v3", "--context", "4k", "--device", "h200", "-f", "json")
    absorbed = json.loads(out)[0]
    code2, out, _ = run(capsys, "memory", "-p", "deepseek-v3", "--context", "4k", "--device", "h200", "-f", "json",
                        "--mla", "naive")
    naive = json.loads(out)[0]
    assert code == code2 == 0 and absorbed["mla"] == "absorbed" and naive["mla"] == "naive"
    spec = presets.load("deepseek-v3")
    z = spec.groups[0].sizes
    layers = sum(g.count for g in spec.groups)
    assert absorbed["kv_cache_bytes"] == layers * 4096 * (z["r_kv"] + z["d_rope"]) * 2
    assert naive["kv_cache_bytes"] == layers * 4096 * z["h_q"] * (z["d_nope"] + z["d_rope"] + z["d_v"]) * 2


def test_memory_limits_are_the_largest_that_fit():
    spec, device = presets.load("llama-3.1-8b"), devices.load("h100")
    row = fit(spec, device, 8, 32_768)
    assert row["fits"] and row["max_batch"] >= 8
    more = fit(spec, device, row["max_batch"] + 1, 32_768)
    assert fit(spec, device, row["max_batch"], 32_768)["fits"] and not more["fits"]
    longest = row["max_context"]
    assert fit(spec, device, 8, longest)["fits"] and not fit(spec, device, 8, longest + 1)["fits"]
    assert row["fits_on"] == "tp1"
    big = fit(presets.load("llama-3.1-405b"), device, 1, 8192)
    assert not big["fits"] and big["max_batch"] == 0
    # no device of a layout holds less than its share of the whole: at least ceil(total / usable) devices
    assert _devices(big["fits_on"]) >= math.ceil(big["total_bytes"] / big["usable_bytes"]) >= 11


def _devices(label: str) -> int:
    """Devices of a layout label (tp x pp x dp), read from the label's own spelling."""
    degrees = dict(re.fullmatch(r"([a-z]+)(\d+)", part).groups() for part in label.split("."))
    return int(degrees["tp"]) * int(degrees.get("pp", 1)) * int(degrees.get("dp", 1))


@pytest.mark.parametrize("workload, args", [("decode", {"context": [4095, 100_000]}),
                                            ("prefill", {"seq": [512, 32_768]}),
                                            ("cached_prefill", {"chunk": [2048], "prefix": [8192]})])
def test_time_lies_between_the_larger_and_the_sum_of_compute_and_memory(workload, args):
    for name in ("llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b"):
        spec = presets.load(name)
        n = len(next(iter(args.values())))
        rows = calc.rows(calc.table(spec, workload, machine=H100, batch=[8] * n, **args))
        for r in rows:
            assert max(r["compute_time_s"], r["memory_time_s"]) <= r["time_s"] * (1 + 1e-12)
            assert r["time_s"] <= (r["compute_time_s"] + r["memory_time_s"]) * (1 + 1e-12)
            assert r["compute_time_s"] == pytest.approx(r["total_flops"] / 989.5e12)
            assert r["memory_time_s"] == pytest.approx(r["total_bytes"] / 3.35e12)


def test_the_time_crossover_of_llama_3_1_8b():
    spec = presets.load("llama-3.1-8b")
    L, d, d_kv, m, V = spec["L"], spec["d"], spec.d_kv, spec["m"], spec["V"]
    weights = 2 * (L * (2 * d * d + 2 * d * d_kv + 3 * d * m) + d * V)     # bf16 matmul weights, LM head in
    for batch in (1, 64):
        keys = Fraction(weights, batch * L * 2 * d_kv * 2)                 # K and V per key, every layer
        row = calc.crossover(spec, precision=BF16, batch=batch)[0]
        assert Fraction(row["t_equal_time_exact"]) == keys
    assert 114_000 < calc.crossover(spec, precision=BF16, batch=1)[0]["t_equal_time"] < 115_000
    assert calc.crossover(spec, precision=BF16, batch=64)[0]["t_equal_time"] < 2048


def test_generation_times(capsys):
    code, out, err = run(capsys, "generate", "-p", "llama-3.1-8b", "--prompt", "1k", "--new", "101",
                         "--batch", "8", "--device", "h100", "-f", "json")
    assert code == 0, err
    prefill, decode, total = json.loads(out)
    assert total["time_s"] == pytest.approx(prefill["time_s"] + decode["time_s"])
    assert total["ttft_s"] == prefill["time_s"] and total["tpot_s"] == pytest.approx(decode["time_s"] / 100)
    assert total["tokens_per_s"] == pytest.approx(101 / total["time_s"])
    assert total["batch_tokens_per_s"] == pytest.approx(8 * 101 / total["time_s"])


def test_a_one_token_generation_is_its_prefill(capsys):
    """--new 1 has no decode steps: the decode row moves nothing and takes no time; a sweep
    holding 1 gives the same rows as the one-token point alone."""
    code, out, err = run(capsys, "generate", "-p", "mixtral-8x7b", "--prompt", "64", "--new", "1:3",
                         "--device", "h100", "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    prefill, decode, total = rows[:3]
    assert decode["total_bytes"] == 0 and decode["time_s"] == 0 and decode["bound"] is None
    assert total["time_s"] == prefill["time_s"] == total["ttft_s"] and total["tpot_s"] is None
    assert all(decode.get(f"{t}_bound") is None for t in ("attn_proj", "experts", "attention"))
    assert rows[4]["experts_bound"] in ("memory", "compute")        # the two-token point has a step
    code, out, err = run(capsys, "generate", "-p", "mixtral-8x7b", "--prompt", "64", "--new", "1",
                         "--device", "h100", "-f", "json")
    assert code == 0, err
    assert [{k: v for k, v in r.items() if v is not None} for r in json.loads(out)] == \
           [{k: v for k, v in r.items() if v is not None} for r in rows[:3]]
    code, out, err = run(capsys, "generate", "-p", "toy", "--prompt", "4", "--new", "1", "--device", "h100")
    assert code == 0 and "tpot_s" not in out, err     # nothing to say is not said


@pytest.mark.parametrize("convention", ["causal", "all"])
def test_chunk_schedules_with_a_device_keep_every_row(convention, capsys):
    """Chunks before the last run no LM head: their rows have no lm_head bound, and no row of
    a schedule (nor a second schedule of a sweep) is lost for it."""
    args = ["chunked", "-p", "llama-3.1-8b", "-s", "4096", "-c", "1024,2048", "--convention", convention, "-f", "json"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    plain = json.loads(out)
    code, out, err = run(capsys, *args, "--device", "h100")
    assert code == 0, err
    timed = json.loads(out)
    assert [(r["convention"], r["chunk"], r["phase"]) for r in timed] == \
           [(r["convention"], r["chunk"], r["phase"]) for r in plain] and len(plain) == (6 + 4) * (3 if convention == "all" else 1)
    for row in timed:
        assert (row["lm_head_bound"] is None) == (row["phase"] in ("chunk 1", "chunk 2", "chunk 3", "total")
                                                  and not (row["chunk"] == 2048 and row["phase"] == "chunk 2"))
    schedule = [r for r in timed if r["chunk"] == 1024 and r["convention"] == "causal" and r["phase"].startswith("chunk")]
    total = next(r for r in timed if r["phase"] == "total" and r["convention"] == "causal")
    assert total["time_s"] == pytest.approx(sum(r["time_s"] for r in schedule))


@pytest.mark.parametrize("args", [["decode", "-p", "deepseek-v2-lite", "--context", "4k", "-b", "8"],
                                  ["prefill", "-p", "mixtral-8x7b", "--seq", "37", "--weight-dtype", "int4"],
                                  ["generate", "-p", "gemma-2-9b", "--prompt", "1k", "--new", "1,9"],
                                  ["chunked", "-p", "qwen3-30b-a3b", "--seq", "3k", "--chunk", "1k"]])
def test_bytes_and_times_by_term_add_up_to_the_rows(args, capsys):
    """Each term's bytes (its operators', each term rounded once) and roofline time add up to
    the row's: bytes to within a byte a term, times to float rounding."""
    code, out, err = run(capsys, *args, "--device", "h100", "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    for row in rows:
        terms = [k.removesuffix("_flops") for k in row if k.endswith("_flops") and
                 k not in ("linear_flops", "total_flops", "total_flops_per_token")]
        assert abs(sum(row[f"{t}_bytes"] for t in terms) - row["total_bytes"]) <= len(terms)
        assert sum(row[f"{t}_time_s"] for t in terms) == pytest.approx(row["time_s"])
        assert row["kv_read_bytes"] + row["kv_write_bytes"] <= row["attention_bytes"]
        assert all(row[f"{t}_bytes"] == 0 and row[f"{t}_bound"] is None for t in terms if not row[f"{t}_flops"])


INTERFACE = ["weight_bytes", "kv_read_bytes", "kv_write_bytes", "activation_bytes", "total_bytes", "intensity",
             "compute_time_s", "memory_time_s", "time_s", "bound"]


@pytest.mark.parametrize("args", [["prefill", "--seq", "2k"], ["decode", "--context", "2k"],
                                  ["chunked", "--seq", "4k", "--chunk", "1k"],
                                  ["generate", "--prompt", "1k", "--new", "8"]])
def test_rows_with_a_device_carry_the_interface_keys(args, capsys):
    code, out, err = run(capsys, *args, "-p", "qwen3-30b-a3b", "--device", "h200", "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert all(set(INTERFACE) <= set(r) for r in rows)
    assert {r["routing"] for r in rows} == {"expected"} and {r["device"] for r in rows} == {"h200"}
    code, out, err = run(capsys, *args, "-p", "llama-3.1-8b", "--kv-dtype", "fp8", "-f", "json")
    rows = json.loads(out)                       # a dtype alone: bytes, no time
    assert code == 0 and all("total_bytes" in r and "time_s" not in r for r in rows)
    code, out, err = run(capsys, *args, "-p", "llama-3.1-8b", "-f", "json")
    assert code == 0 and all("total_bytes" not in r for r in json.loads(out))


def test_devices_show_and_memory_and_crossover_keys(capsys):
    code, out, _ = run(capsys, "devices", "show", "h100", "-f", "json")
    profile = json.loads(out)
    assert code == 0 and {"name", "peak_flops", "mem_bw", "mem_bytes", "source"} <= set(profile)
    assert profile["peak_flops"]["bf16"] == 989.5e12 and profile["source"]["url"].startswith("https://")
    code, out, _ = run(capsys, "memory", "-p", "llama-3.1-70b", "--batch", "8", "--context", "8k", "--device", "h100",
                       "-f", "json")
    row = json.loads(out)[0]
    assert code == 0 and {"weight_bytes_resident", "kv_cache_bytes", "total_bytes", "device_bytes", "fits",
                          "max_batch", "max_context", "fits_on"} <= set(row)
    code, out, _ = run(capsys, "crossover", "-p", "llama-3.1-8b", "--device", "h100", "--batch", "64", "-f", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["t_equal"] == 26624.0 and 1700 < row["t_equal_time"] < 2048


def test_every_built_in_device_has_a_source_and_dense_peaks():
    for device in devices.load_all():
        assert device.source.get("url", "").startswith("https://"), device.name
        assert max(device.peak_flops.values()) > 1e14 and device.mem_bw > 2e11 and device.mem_bytes >= 20e9
        half = device.peak_flops.get("bf16", device.peak_flops.get("fp16"))   # a profile leaves out what no source gives
        if "fp8" in device.peak_flops and half:   # dense fp8 is twice dense 16-bit on every part here
            assert device.peak_flops["fp8"] == pytest.approx(2 * half, rel=0.05), device.name


@pytest.mark.parametrize("args, message", [
    (["decode", "-p", "toy", "--context", "4", "--device", "h1000"], "unknown device 'h1000'; did you mean"),
    (["decode", "-p", "toy", "--context", "4", "--device", "h100", "--device-file", "x.json"], "not both"),
    (["decode", "-p", "toy", "--context", "4", "--device", "h100", "--efficiency", "1.5"], "must be between 0.001 and 1"),
    (["decode", "-p", "toy", "--context", "4", "--device", "h100", "--efficiency", "fast"], "--efficiency"),
    (["decode", "-p", "toy", "--context", "4", "--act-dtype", "int4"], "not a compute dtype"),
    (["decode", "-p", "toy", "--context", "4", "--device", "a100", "--act-dtype", "fp8"], "no fp8 peak"),
    (["memory", "-p", "toy", "--context", "4"], "memory needs a device"),
    (["memory", "-p", "toy", "--context", "4", "--device", "h100", "--reserve", "1"], "reserve must be"),
    (["devices", "show", "nope"], "unknown device 'nope'"),
    (["decode", "-p", "toy", "--context", "4", "--device", ""], "--device: the name is empty"),
    (["decode", "-p", "toy", "--context", "4", "--device-file", " "], "--device-file: the path is empty"),
    (["prefill", "-p", "toy", "--lengths", "3,4", "--device", "h100"], "uniform prompts"),
])
def test_bad_device_input_is_one_line(args, message, capsys):
    code, out, err = run(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("field, value, message", [
    ("peak_flops", '{"bf16": 1e-300}', "between 1e+06 and 1e+21 FLOP/s"),
    ("peak_flops", '{"bf16": 1e999}', "between 1e+06 and 1e+21 FLOP/s"),     # JSON's overflow to infinity
    ("mem_bw", "1e-300", "between 1000 and 1e+18 bytes/s"),
    ("mem_bytes", "8.5", "whole number of bytes"),
    ("mem_bytes", '"80GB"', "number of bytes"),
])
def test_a_device_file_outside_what_devices_are_is_one_line(field, value, message, tmp_path, capsys):
    """Absurd rates (a missing e12) are refused at load: times on them would overflow or be noise."""
    profile = {"name": "mine", "peak_flops": '{"bf16": 1e15}', "mem_bw": "1e12", "mem_bytes": "80000000000",
               field: value}
    path = tmp_path / "mine.json"
    path.write_text("{" + ", ".join(f'"{k}": {v}' if k != "name" else f'"{k}": "{v}"' for k, v in profile.items()) + "}")
    code, out, err = run(capsys, "decode", "-p", "toy", "--context", "4", "--device-file", str(path))
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, err


def test_devices_show_reads_in_units_as_a_table_and_keeps_the_numbers_in_csv(capsys):
    code, out, _ = run(capsys, "devices", "show", "h100")
    fields = dict(line.split(None, 1) for line in out.splitlines() if line.strip() and not line.startswith(" "))
    assert code == 0 and fields["peak_flops.bf16"] == "989.5 TFLOP/s (9.895e+14)"
    # 81559 MiB, what nvidia-smi reports for an H100 SXM (the profile's source.memory_note): 85,520,809,984 bytes
    assert fields["mem_bw"] == "3.350 TB/s (3.35e+12)" and fields["mem_bytes"] == "85.52 GB (8.55208e+10)"
    code, out, _ = run(capsys, "devices", "show", "h100", "-f", "csv")
    import csv
    import io

    assert next(csv.DictReader(io.StringIO(out)))["mem_bw"] == "3350000000000"


def test_a_whole_number_of_bytes_written_as_a_float_is_whole(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text('{"name": "mine", "peak_flops": {"bf16": 1e15}, "mem_bw": 1e12, "mem_bytes": 8e10}')
    code, out, err = run(capsys, "devices", "show", "--device-file", str(path), "-f", "json")
    assert code == 0 and json.loads(out)["mem_bytes"] == 80_000_000_000, err


def test_a_device_file_of_ones_own(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"name": "mine", "peak_flops": {"bf16": 1e14}, "mem_bw": 1e12, "mem_bytes": 10**11}))
    code, out, err = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k", "--device-file", str(path),
                         "-f", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["device"] == "mine" and row["memory_time_s"] == pytest.approx(row["total_bytes"] / 1e12)
    path.write_text(json.dumps({"name": "mine", "peak_flops": {"bf16": -1}, "mem_bw": 1e12, "mem_bytes": 10**11}))
    code, _, err = run(capsys, "decode", "-p", "toy", "--context", "4", "--device-file", str(path))
    assert code == 2 and "peak_flops.bf16" in err


def test_a_profile_with_one_peak_computes_in_its_dtype(tmp_path, capsys):
    path = tmp_path / "measured.json"
    path.write_text(json.dumps({"name": "measured", "peak_flops": {"fp32": 1e12}, "mem_bw": 1e10, "mem_bytes": 10**10}))
    code, out, err = run(capsys, "decode", "-p", "toy", "--context", "4", "--device-file", str(path), "-f", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["act_dtype"] == "fp32" and "computing in fp32" in err
    code, _, err = run(capsys, "decode", "-p", "toy", "--context", "4", "--device-file", str(path),
                       "--act-dtype", "bf16")
    assert code == 2 and "no bf16 peak" in err


def test_tables_with_bytes_time_and_rates_say_what_they_mean(capsys):
    code, out, _ = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k", "--device", "h100")
    assert code == 0 and "a roofline floor" in out and "ttft" not in out and "compute_efficiency" not in out
    code, out, _ = run(capsys, "generate", "-p", "llama-3.1-8b", "--prompt", "1k", "--new", "64",
                       "--device", "h100", "--efficiency", "0.5,0.8")
    assert code == 0 and "time per output token" in out and "--efficiency" in out
    code, out, _ = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k")
    assert code == 0 and "roofline" not in out


@pytest.mark.parametrize("key", ["gqa.dense", "window.dense", "window-rolling.dense", "chunk.dense",
                                 "mla_q-absorbed.moe_shared", "mla.dense"])
@pytest.mark.parametrize("convention", ["causal", "full", "tiled"])
def test_one_query_loads_the_keys_it_reads(key, convention):
    """The decode phase's bytes sum keys_read over its steps; a step's bytes use keys_loaded:
    for one query the two rules must be one number, at every past length."""
    import sympy as sp

    from costcalc import symbols as s
    from costcalc.blocks import parse
    from named import attention

    keys_loaded, keys_read = attention.keys_loaded, attention.keys_read
    from costcalc.vocab import Convention

    block, conv = parse(key), Convention(convention)
    loaded = keys_loaded(conv, block, s.T, sp.Integer(1))
    read = keys_read(conv, block, s.T + 1, s.T, sp.Integer(1))
    values = {s.W: 5, s.W_c: 4, s.b_q: 3, s.b_k: 2}
    for past in range(0, 13):
        point = {**values, s.T: past}
        assert loaded.subs(point) == read.subs(point), (key, convention, past)


def test_memory_keeps_what_serving_caches_keep_unless_told(capsys):
    rows = {}
    for cache in (None, "whole"):
        args = ["memory", "-p", "gemma-3-12b", "--context", "128k", "--device", "h200", "-f", "json"]
        code, out, _ = run(capsys, *args, *(["--window-cache", cache] if cache else []))
        assert code == 0
        rows[cache] = json.loads(out)[0]
    assert rows[None]["window_cache"] == "rolling" and rows["whole"]["window_cache"] == "whole"
    assert rows[None]["kv_cache_bytes"] < rows["whole"]["kv_cache_bytes"]


def test_crossovers_print_whole_numbers_whole_and_refuse_a_zero_batch(capsys):
    code, out, err = run(capsys, "crossover", "-p", "llama-3.1-8b", "--device", "h100", "-f", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["tokens"] == 26624 and isinstance(row["tokens"], int) and row["context"] == 26623
    assert row["t_equal_time"] == 114512 and isinstance(row["t_equal_time"], int)
    mixtral = json.loads(run(capsys, "crossover", "-p", "mixtral-8x7b", "--device", "h100", "--batch", "3",
                             "-f", "json")[1])[0]
    assert isinstance(mixtral["t_equal_time"], float)        # expected routing: a rational, two decimals
    code, out, err = run(capsys, "crossover", "-p", "toy", "--device", "h100", "--batch", "0")
    assert code == 2 and err.strip() == "error: --batch: 0 is not positive"
