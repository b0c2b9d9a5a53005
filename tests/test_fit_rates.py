"""No time without fit, and the answers people look for: ``fits`` on every timed row (held to
``memory`` at the same point, and to bytes derived here by hand), ``--batch max``, a decode step's
tokens/s, the one warning line, and ``crossover --device``'s ``compute_bound_batch`` (held to the
decode rows' own FLOPs and bytes: compute time equals memory time at the exact batch)."""
import json
import math
from fractions import Fraction

import pytest

from cli_run import one_error, run
from costcalc import devices, memory, presets
from costcalc.evaluate import Query
from costcalc.layout import Layout
from costcalc.roofline import Machine, Precision

H100 = Machine(devices.load("h100"))
USABLE = math.floor(devices.load("h100").mem_bytes * 0.9)   # memory's default reserve: 10% kept free


def rows(capsys, *args):
    code, out, err = run(capsys, *args, "-f", "json")
    assert code == 0, err
    return json.loads(out), err


def llama_8b_bytes(batch, context):
    """Llama-3.1-8B in bf16 by hand: per layer q, k, v, o, gate, up, down; the embedding and the
    untied LM head; K and V of h_kv heads per token per layer."""
    L, d, h_q, h_kv, d_h, m, V = 32, 4096, 32, 8, 128, 14336, 128256
    weights = 2 * (L * (d * h_q * d_h + 2 * d * h_kv * d_h + h_q * d_h * d + 3 * d * m) + 2 * V * d)
    return weights + 2 * L * batch * context * 2 * h_kv * d_h


def memory_fits(name, batch, context, **layout):
    query = Query(presets.load(name), "decode", memory.SERVING, Precision(), H100)
    return memory.fit(query, batch, context, layout=Layout(**layout))["fits"]


def test_decode_fits_is_memory_at_the_context_after_the_step(capsys):
    got, _ = rows(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k,32k,128k", "--batch", "1,8,64",
                  "--device", "h100")
    assert {r["fits"] for r in got} == {True, False}           # both sides of the line are tried
    for r in got:
        held = r["context"] + 1                                 # the step writes its own key
        assert r["fits"] == memory_fits("llama-3.1-8b", r["batch"], held)
        assert r["fits"] == (llama_8b_bytes(r["batch"], held) <= USABLE)


def test_prefill_chunked_and_generate_rows_hold_what_their_step_leaves(capsys):
    got, _ = rows(capsys, "prefill", "-p", "llama-3.1-8b", "--seq", "64k,128k", "--batch", "4", "--device", "h100")
    assert [r["fits"] for r in got] == [llama_8b_bytes(4, r["seq"]) <= USABLE for r in got] == [True, False]
    # 8B on one H100 (85.5 GB exposed): 4 x 64k tokens fit, 4 x 128k do not
    seq = 128 * 1024
    got, _ = rows(capsys, "chunked", "-p", "llama-3.1-8b", "--seq", str(seq), "--chunk", "16k", "--batch", "4",
                  "--device", "h100", "--convention", "causal")
    for r in got:
        held = r["prefix"] + (seq if r["phase"] in ("total", "unchunked") else r["chunk"])
        assert r["fits"] == (llama_8b_bytes(4, held) <= USABLE), r["phase"]
    assert got[0]["fits"] and not got[-1]["fits"]
    got, _ = rows(capsys, "generate", "-p", "llama-3.1-8b", "--prompt", "100k", "--new", "20k", "--batch", "4",
                  "--device", "h100")
    assert [r["fits"] for r in got] == [llama_8b_bytes(4, 100 * 1024) <= USABLE] + \
        [llama_8b_bytes(4, 120 * 1024 - 1) <= USABLE] * 2 == [True, False, False]


def test_fits_per_device_under_a_layout_is_memory_s(capsys):
    got, _ = rows(capsys, "decode", "-p", "llama-3.1-70b", "--context", "32k", "--batch", "8,64",
                  "--device", "h100", "--tp", "4")
    assert [r["fits"] for r in got] == [memory_fits("llama-3.1-70b", b, 32769, tp=4) for b in (8, 64)] == [True, False]


@pytest.mark.parametrize("command", [("decode", "--context", "32k"), ("prefill", "--seq", "32k"),
                                     ("generate", "--prompt", "16k", "--new", "16k")])
def test_batch_max_fits_and_one_more_does_not(capsys, command):
    got, _ = rows(capsys, *command, "-p", "llama-3.1-8b", "--batch", "max", "--device", "h100")
    held = {"decode": 32 * 1024 + 1, "prefill": 32 * 1024, "generate": 32 * 1024 - 1}[command[0]]
    best = got[0]["batch"]
    assert all(r["fits"] for r in got)
    assert llama_8b_bytes(best, held) <= USABLE < llama_8b_bytes(best + 1, held)    # by hand
    assert memory_fits("llama-3.1-8b", best, held) and not memory_fits("llama-3.1-8b", best + 1, held)
    more, _ = rows(capsys, *command, "-p", "llama-3.1-8b", "--batch", str(best + 1), "--device", "h100")
    assert not more[-1]["fits"]


def test_batch_max_under_a_layout_counts_the_replicas(capsys):
    got, _ = rows(capsys, "decode", "-p", "llama-3.1-70b", "--context", "8k", "--batch", "max",
                  "--device", "h100", "--tp", "4", "--dp", "2")
    best = got[0]["batch"]
    assert best % 2 == 0 and got[0]["fits"]
    assert memory_fits("llama-3.1-70b", best, 8193, tp=4, dp=2)
    assert not memory_fits("llama-3.1-70b", best + 2, 8193, tp=4, dp=2)


def test_batch_max_on_a_pipeline_is_whole_micro_batches(capsys):
    """With --micro-batches 4 the largest batch is a multiple of 4 (each micro-batch whole), and 4 more
    do not fit."""
    got, _ = rows(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k", "--batch", "max",
                  "--device", "h100", "--pp", "2", "--micro-batches", "4")
    best = got[0]["batch"]
    assert best % 4 == 0 and got[0]["fits"]
    assert memory_fits("llama-3.1-8b", best, 4097, pp=2)
    assert not memory_fits("llama-3.1-8b", best + 4, 4097, pp=2)


def test_batch_max_errors(capsys):
    code, _, err = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k", "--batch", "max")
    assert code != 0 and one_error(err, "--batch max needs a device")
    code, _, err = run(capsys, "decode", "-p", "llama-3.1-70b", "--context", "4k", "--batch", "max", "--device", "h100")
    assert code != 0 and one_error(err, "does not fit on h100 even at batch 1")


def test_decode_tokens_per_second(capsys):
    got, _ = rows(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k", "--batch", "1,64", "--device", "h100")
    for r in got:
        assert r["tokens_per_s"] == pytest.approx(1 / r["time_s"], rel=1e-12)
        assert r["batch_tokens_per_s"] == pytest.approx(r["batch"] / r["time_s"], rel=1e-12)
    assert got[1]["batch_tokens_per_s"] > got[0]["batch_tokens_per_s"] > got[1]["tokens_per_s"]   # batching


def test_generate_default_table_shows_the_batch_tokens_per_second(capsys):
    code, out, _ = run(capsys, "generate", "-p", "llama-3.1-8b", "--prompt", "1k", "--new", "128", "--batch", "8",
                       "--device", "h100")
    got, _ = rows(capsys, "generate", "-p", "llama-3.1-8b", "--prompt", "1k", "--new", "128", "--batch", "8",
                  "--device", "h100")
    header = next(line for line in out.splitlines() if line.startswith("phase"))
    assert header.split()[-1] == "tok/s"
    total = got[-1]
    assert total["batch_tokens_per_s"] == pytest.approx(8 * 128 / total["time_s"])
    assert f"{round(total['batch_tokens_per_s'])}" in out.splitlines()[out.splitlines().index(header) + 4]


def test_one_warning_line_names_the_rows_that_do_not_fit(capsys):
    _, err = rows(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k,128k", "--batch", "1,64",
                  "--device", "h100")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: does not fit on h100")
    assert "llama-3.1-8b batch 64 context 131072" in lines[0] and "context 4096" not in lines[0]
    _, err = rows(capsys, "decode", "-p", "llama-3.1-8b", "--context", "4k", "--batch", "1,64", "--device", "h100")
    assert err == ""


def step(capsys, name, context, *batches):
    got, _ = rows(capsys, "decode", "-p", name, "--context", str(context), "--batch", ",".join(map(str, batches)),
                  "--device", "h100")
    return got


def cross(capsys, name, context):
    got, _ = rows(capsys, "crossover", "-p", name, "--device", "h100", "--context", str(context))
    return got[0]


def test_compute_bound_batch_equal_times_at_the_exact_batch(capsys):
    """Dense bf16: FLOPs and bytes of the step are linear in B (bf16: whole bytes, so the rows'
    integers are exact); at the rational batch FLOPs / peak equals bytes / bandwidth exactly."""
    got = cross(capsys, "llama-3.1-8b", 128)
    peak = Fraction(devices.load("h100").peak("bf16"))
    bandwidth = Fraction(devices.load("h100").mem_bw)
    one, two = step(capsys, "llama-3.1-8b", 128, 1, 2)
    for prefix in ("", "attn_proj_", "ffn_", "lm_head_"):
        flops, moved = f"{prefix or 'total_'}flops", f"{prefix or 'total_'}bytes"
        exact = Fraction(got[f"{prefix}compute_bound_batch_exact"])

        def at(key, b):        # the line through B = 1 and B = 2
            return one[key] + (two[key] - one[key]) * (b - 1)
        assert at(flops, exact) / peak == at(moved, exact) / bandwidth, prefix
        first = got[f"{prefix}compute_bound_batch"]
        assert first == math.floor(exact) + 1
        below, above = step(capsys, "llama-3.1-8b", 128, first - 1, first)
        bound = f"{prefix}bound" if prefix else "bound"
        assert (below[bound], above[bound]) == ("memory", "compute"), prefix


def test_compute_bound_never_and_at_t_equal(capsys):
    got = cross(capsys, "llama-3.1-8b", 4096)
    assert got["attention_compute_bound_batch"] is None and got["attention_compute_bound_batch_exact"] == "never"
    far = step(capsys, "llama-3.1-8b", 4096, 1 << 20)[0]
    assert far["attention_bound"] == "memory"
    default, _ = rows(capsys, "crossover", "-p", "llama-3.1-8b", "--device", "h100")
    assert default[0]["compute_bound_context"] == default[0]["context"]       # T_equal's, when not given


def test_compute_bound_batch_with_routed_experts(capsys):
    got = cross(capsys, "mixtral-8x7b", 128)
    first = got["compute_bound_batch"]
    assert "routed experts" in got["compute_bound_batch_exact"]
    below, above = step(capsys, "mixtral-8x7b", 128, first - 1, first)
    assert (below["bound"], above["bound"]) == ("memory", "compute")


def test_crossover_context_needs_a_device(capsys):
    code, _, err = run(capsys, "crossover", "-p", "llama-3.1-8b", "--context", "4k")
    assert code != 0 and one_error(err, "--context applies with --device")
