"""Throughput under continuous batching (``costcalc serve``, ``costcalc.serving``): the mixed iteration
against the existing commands' rows, the limits (one request, one output token), Little's law, the
disaggregated pools and their KV transfer, and bad inputs in one line."""
import json
from fractions import Fraction

import pytest

from costcalc import calc, devices, presets, serving
from costcalc.evaluate import Options, Query
from costcalc.roofline import Machine, Precision
from costcalc.rows import as_rows

from cli_run import one_error, run

H200 = Machine(devices.load("h200"))
DENSE = "llama-3.1-8b"


def _query(name=DENSE, **options):
    return Query(presets.load(name), "decode", Options(**options), Precision(), H200)


def _rows(query, shape, concurrency):
    return as_rows(serving.aggregated(query, shape, concurrency))


def _one(spec, workload, **inputs):
    """A compiled workload's row on the H200 (the existing commands' numbers: calc.answer)."""
    logits = inputs.pop("logits", "last")
    query = Query(spec, workload, Options(logits=logits), Precision(), H200)
    return as_rows(calc.answer(query, **{k: [v] for k, v in inputs.items()}))[0]


@pytest.mark.parametrize("decoding, chunk", [(63, (1, 4096, 0, True)), (5, (1, 1000, 3000, False)),
                                             (0, (2, 512, 0, True)), (40, None)])
def test_a_mixed_iteration_is_the_decode_steps_over_osl_positions_plus_the_chunks_cached_prefill(decoding, chunk):
    """FLOPs: the decode phase's (B = decoding, its exact sum over the osl - 1 contexts) / (osl - 1) plus the
    chunk's cached prefill; bytes: the same, less the chunk's weight bytes (the weights read once)."""
    spec, shape = presets.load(DENSE), serving.Shape(4096, 257)
    step = serving.Engine(_query()).iteration(shape, decoding, chunk)
    flops, moved = Fraction(0), Fraction(0)
    if decoding:
        phase = _one(spec, "decode_phase", batch=decoding, seq=4096, new_tokens=257)
        flops += Fraction(phase["total_flops"], 256)
        moved += Fraction(phase["total_bytes"], 256)
    if chunk:
        prompts, size, prefix, last = chunk
        part = _one(spec, "cached_prefill", batch=prompts, chunk=size, prefix=prefix, logits="last" if last else "none")
        flops += part["total_flops"]
        moved += part["total_bytes"] - (part["weight_bytes"] if decoding else 0)
    assert step.flops == flops
    assert abs(step.bytes - moved) <= 2      # the rows' bytes are whole; the step's exact
    assert step.time_s == step.floor_s >= max(step.compute_s, step.memory_s) > 0


def test_one_request_is_a_generation_ttft_its_prefill_tpot_its_decode_steps():
    spec = presets.load(DENSE)
    row = _rows(_query(), serving.Shape(2048, 300), [1])[0]
    gen = as_rows(calc.generation(Query(spec, "generate", Options(), Precision(), H200), [1], [2048], [300]))[-1]
    assert row["ttft_s"] == pytest.approx(gen["ttft_s"], rel=1e-12)
    assert row["tpot_s"] == pytest.approx(gen["tpot_s"], rel=1e-12)
    assert row["requests_per_s"] == pytest.approx(gen["tokens_per_s"] / 300, rel=1e-12)
    assert row["flops_per_request"] == gen["total_flops"]       # one chunk over no prefix = the prefill
    assert row["queued"] == 0 and row["fits"] is True


def test_one_output_token_is_prefill_only():
    spec = presets.load(DENSE)
    row = _rows(_query(), serving.Shape(3000, 1), [1])[0]
    prefill = _one(spec, "prefill", batch=1, seq=3000)
    assert row["ttft_s"] == pytest.approx(prefill["time_s"], rel=1e-12)
    assert row["requests_per_s"] == pytest.approx(1 / prefill["time_s"], rel=1e-12)
    assert row["tpot_s"] is None and row["tokens_per_s_per_user"] is None
    many = _rows(_query(), serving.Shape(1000, 1), [8])[0]      # 8 whole prompts a forward, nothing decoding
    assert many["queued"] == 0 and many["prompts_per_mixed"] == 8
    assert many["ttft_s"] == pytest.approx(_one(spec, "prefill", batch=8, seq=1000)["time_s"], rel=1e-12)


def test_a_tiny_prompt_leaves_the_decode_step():
    row = _rows(_query(), serving.Shape(1, 512), [32])[0]
    assert row["tpot_s"] == pytest.approx(row["decode_time_s"], rel=1e-3)    # a 1-token prompt: next to nothing
    assert row["mixed_share"] < 0.07


@pytest.mark.parametrize("concurrency", [1, 7, 64, 500, 3000])
def test_littles_law_and_the_rates(concurrency):
    """requests/s x (TTFT + (osl - 1) TPOT) = C, queued requests included; tokens/s per GPU x devices =
    requests/s x osl; per user x TPOT = 1."""
    shape = serving.Shape(4096, 1024)
    row = _rows(_query(), shape, [concurrency])[0]
    latency = row["ttft_s"] + (shape.osl - 1) * row["tpot_s"]
    assert row["requests_per_s"] * latency == pytest.approx(concurrency, rel=1e-9)
    assert row["tokens_per_s_per_gpu"] * row["devices"] == pytest.approx(row["requests_per_s"] * shape.osl)
    assert row["tokens_per_s_per_user"] * row["tpot_s"] == pytest.approx(1)
    assert (row["queued"] > 0) == (concurrency == 3000)       # 4k prompts, 1 a mixed iteration: 1024 keep up


@pytest.mark.parametrize("concurrency", [1, 64, 500])
def test_the_cycle_is_the_mixed_iterations_and_decode_phase_rows(concurrency):
    """Below the keep-up limit (one 4k prompt a mixed iteration, one chunk): a decode iteration is the decode
    phase's row / (osl - 1) (per operator max(FLOPs/peak, bytes/bandwidth) of the averages), and a cycle of
    osl iterations holds C mixed ones: requests/s = C / (C t_mix + (osl - C) t_d), TTFT = t_mix,
    TPOT = (cycle - t_mix) / (osl - 1) -- docs/cost-model.md's rates, from the decode_phase command's row."""
    shape, spec = serving.Shape(4096, 1024), presets.load(DENSE)
    row = _rows(_query(), shape, [concurrency])[0]
    phase = _one(spec, "decode_phase", batch=concurrency, seq=4096, new_tokens=1024)
    t_d = phase["time_s"] / 1023
    assert row["decode_time_s"] == pytest.approx(t_d, rel=1e-9)
    t_mix = row["mixed_time_s"]
    assert t_d < t_mix
    cycle = concurrency * t_mix + (1024 - concurrency) * t_d
    assert row["requests_per_s"] == pytest.approx(concurrency / cycle, rel=1e-9)
    assert row["ttft_s"] == pytest.approx(t_mix, rel=1e-12)
    assert row["tpot_s"] == pytest.approx((cycle - t_mix) / 1023, rel=1e-9)


def test_the_prefill_share_keeps_up_up_to_the_cycle():
    """C n_p / m mixed iterations fit the n_p + osl - 1 of a request's life: 4k prompts one an iteration
    over 1023 decode steps admit 1024 requests; short prompts as many an iteration as arrive, within the room."""
    shape = serving.Shape(4096, 1024)
    assert serving.admitted(shape, 1024) == 1024 and serving.admitted(shape, 1025) == 1024
    short = serving.mix(serving.Shape(100, 11), 50)    # 50 requests of 11 iterations: 5 arrive an iteration
    assert (short.prompts, short.chunks) == (5, (100,))
    packed = serving.mix(serving.Shape(100, 11, 400), 50)   # the room 400 - 49 holds 3 whole prompts
    assert packed.prompts == 3 and not serving.sustained(serving.Shape(100, 11, 400), 50)
    long = serving.mix(serving.Shape(20000, 10), 3)
    assert long.prompts == 1 and long.chunks == (8190, 8190, 3620) and long.prefixes == (0, 8190, 16380)


def test_concurrency_max_fits_and_one_more_does_not():
    from costcalc import fitting

    query, shape = _query(), serving.Shape(4096, 1024)
    row = _rows(query, shape, ["max"])[0]
    c = row["concurrency"]
    assert row["fits"] is True and row["queued"] == 0
    assert fitting.fits(query, c, shape.held) and not fitting.fits(query, c + 1, shape.held)


def test_kv_transfer_is_memorys_kv_cache_of_the_prompt(capsys):
    """Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes a token = 128 KiB; 4096 tokens."""
    spec = presets.load(DENSE)
    by_hand = spec["L"] * spec["h_kv"] * spec["d_h"] * 2 * 2 * 4096
    code, out, err = run(capsys, "memory", "-p", DENSE, "--context", "4096", "--batch", "1", "--device", "h200",
                         "-f", "json")
    assert code == 0 and json.loads(out)[0]["kv_cache_bytes"] == by_hand == 128 * 1024 * 4096
    pools = serving.Pools(_query(), _query(tp=2), 1, 2)
    moved, seconds = serving.transfer(pools, serving.Shape(4096, 100))
    assert moved == by_hand
    link = H200.device.scale_up            # 3 devices: one NVLink domain; each prefill device sends all of it
    assert seconds == pytest.approx(link.latency_s + by_hand / link.bandwidth(2))


def test_disaggregated_throughput_is_the_slower_pool():
    shape = serving.Shape(4096, 1024)
    pools = serving.Pools(_query(), _query(tp=2), 1, 4)
    rows = as_rows(serving.disaggregated(pools, shape, [16, 256]))
    spec = presets.load(DENSE)
    prompts = _one(spec, "prefill", batch=2, seq=4096)          # the budget's 2 whole prompts a forward
    for row, c in zip(rows, (16, 256)):
        assert row["requests_per_s"] == min(row["prefill_requests_per_s"], row["decode_requests_per_s"])
        assert row["prefill_requests_per_s"] == pytest.approx(2 / prompts["time_s"])     # 1 engine
        assert row["decode_requests_per_s"] == pytest.approx(2 * c / (1023 * row["tpot_s"]))  # 2 engines of tp2
        assert row["ttft_s"] == pytest.approx(prompts["time_s"] + row["kv_transfer_time_s"])
        assert row["tokens_per_s_per_gpu"] * 5 == pytest.approx(row["requests_per_s"] * 1024)
    assert [r["bottleneck"] for r in rows] == ["decode", "prefill"]
    tp2 = Query(spec, "generate", Options(tp=2), Precision(), H200)
    gen = as_rows(calc.generation(tp2, [16], [4096], [1024]))[-1]
    assert rows[0]["tpot_s"] == pytest.approx(gen["tpot_s"], rel=1e-9)    # the decode engine's generation steps


def test_the_command_prints_the_rows(capsys):
    code, out, err = run(capsys, "serve", "-p", DENSE, "--isl", "4k", "--osl", "1k", "-c", "1,64,max",
                         "--device", "h200", "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["concurrency"] for r in rows][:2] == [1, 64] and all(r["fits"] for r in rows)
    for key in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "requests_per_s", "timing"):
        assert key in rows[0]
    code, out, err = run(capsys, "serve", "-p", "qwen3-30b-a3b", "--isl", "2k", "--osl", "256", "-c", "32",
                         "--device", "h200", "--disagg", "--prefill-tp", "2", "--decode-tp", "2", "--decode-ep", "2",
                         "--decode-devices", "4", "-f", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert (row["prefill_layout"], row["decode_layout"], row["devices"]) == ("tp2", "tp2.ep2", 6)
    assert row["kv_transfer_bytes"] > 0 and row["kv_transfer_time_s"] > 0


@pytest.mark.parametrize("args, message", [
    (["--isl", "4k", "--osl", "1k"], "serve needs a device"),
    (["--isl", "4k", "--osl", "0", "--device", "h200"], "--osl must be a positive integer"),
    (["--isl", "4k", "--osl", "1k", "--device", "h200", "-c", "0"], "--concurrency"),
    (["--isl", "4k", "--osl", "1k", "--device", "h200", "--max-batched-tokens", "0"], "--max-batched-tokens"),
    (["--isl", "4k", "--osl", "1k", "--device", "h200", "--pp", "2"], "not modelled yet"),
    (["--isl", "4k", "--osl", "1", "--device", "h200", "--disagg"], "--osl 1"),
    (["--isl", "4k", "--osl", "8", "--device", "h200", "--disagg", "--decode-tp", "2", "--decode-devices", "3"],
     "--decode-devices 3 is not a whole number"),
])
def test_bad_input_is_one_line(capsys, args, message):
    code, out, err = run(capsys, "serve", "-p", DENSE, *args)
    assert code != 0 and one_error(err, message), err


def test_concurrency_max_where_nothing_fits_is_one_line(capsys):
    code, out, err = run(capsys, "serve", "-p", "llama-3.1-405b", "--isl", "4k", "--osl", "1k", "-c", "max",
                         "--device", "l4")
    assert code != 0 and one_error(err, "does not fit on l4"), err


def test_a_mixed_iteration_of_a_moe_model_reads_the_experts_all_its_tokens_touch():
    """The routed experts' weights: those a decode step over all the iteration's tokens touches (40 decode
    tokens and a chunk of 300), read once; every other byte the two shares' own."""
    spec, shape = presets.load("qwen3-30b-a3b"), serving.Shape(2048, 65)
    step = serving.Engine(_query("qwen3-30b-a3b")).iteration(shape, 40, (1, 300, 600, False))
    phase = _one(spec, "decode_phase", batch=40, seq=2048, new_tokens=65)
    chunk = _one(spec, "cached_prefill", batch=1, chunk=300, prefix=600, logits="none")
    touched = _one(spec, "decode", batch=340, context=2048)
    assert touched["weight_bytes"] > chunk["weight_bytes"] > Fraction(phase["weight_bytes"], 64)
    rest = Fraction(phase["total_bytes"] - phase["weight_bytes"], 64) + chunk["total_bytes"] - chunk["weight_bytes"]
    assert abs(step.bytes - rest - touched["weight_bytes"]) <= 3


def test_measured_timing_adds_the_shares_estimates():
    """--timing measured: one request's decode iterations are the generation's looked-up decode steps."""
    pytest.importorskip("aiconfigurator_core")
    from costcalc.measured import timing

    machine = Machine(devices.load("h200"), timing=timing("h200", None, None))
    spec = presets.load(DENSE)
    row = _rows(Query(spec, "decode", Options(), Precision(), machine), serving.Shape(2048, 65), [1])[0]
    gen = as_rows(calc.generation(Query(spec, "generate", Options(), Precision(), machine), [1], [2048], [65]))[-1]
    assert row["timing"] == "measured"
    assert row["tpot_s"] == pytest.approx(gen["tpot_s"], rel=1e-9)
    floor = _rows(_query(), serving.Shape(2048, 65), [1])[0]
    assert row["ttft_s"] >= floor["ttft_s"] and row["tpot_s"] > floor["tpot_s"]


def test_measured_timing_under_a_layout_is_the_generations_on_that_layout():
    """--timing measured on --tp 2: one request's decode iterations are the tp2 generation's looked-up decode
    steps (one device's kernels and its collectives from the communication tables), at or above the floor."""
    pytest.importorskip("aiconfigurator_core")
    from costcalc.measured import timing

    machine = Machine(devices.load("h200"), timing=timing("h200", None, None))
    spec = presets.load(DENSE)
    row = _rows(Query(spec, "decode", Options(tp=2), Precision(), machine), serving.Shape(2048, 65), [1])[0]
    gen = as_rows(calc.generation(Query(spec, "generate", Options(tp=2), Precision(), machine), [1], [2048], [65]))
    assert row["tpot_s"] == pytest.approx(gen[-1]["tpot_s"], rel=1e-9)
    floor = _rows(Query(spec, "decode", Options(tp=2), Precision(), Machine(devices.load("h200"))),
                  serving.Shape(2048, 65), [1])[0]
    assert row["tpot_s"] >= floor["tpot_s"] and row["ttft_s"] >= floor["ttft_s"]


@pytest.mark.parametrize("flags, named", [(["--prefill-tp", "3"], "--prefill-tp 3: "),
                                          (["--decode-tp", "8", "--decode-ep", "4"], "--decode-tp 8 --decode-ep 4: ")])
def test_a_pool_layout_that_does_not_divide_names_the_pools_options(capsys, flags, named):
    code, _, err = run(capsys, "serve", "-p", "qwen3-235b-a22b", "--isl", "4k", "--osl", "1k", "-c", "8",
                       "--device", "h200", "--disagg", *flags)
    assert code == 2 and one_error(err, named)


# --- data-parallel replicas (--dp): each schedules its own requests -------------------------------------

@pytest.mark.parametrize("concurrency", [8, 64, "max"])
def test_replicas_without_shared_experts_are_copies_of_one_engine(concurrency):
    """--tp 2 --dp 2 shares nothing between its replicas (no --ep over them): at 2C it is two copies of the
    --tp 2 engine at C -- the same TTFT, TPOT and tokens/s per GPU, twice the requests/s and the concurrency
    that fits."""
    shape = serving.Shape(4096, 1024)
    one = _rows(_query(tp=2), shape, [concurrency if concurrency == "max" else concurrency // 2])[0]
    two = _rows(_query(tp=2, dp=2), shape, [concurrency])[0]
    assert two["concurrency"] == 2 * one["concurrency"] and two["devices"] == 4
    for key in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "mixed_time_s", "decode_time_s"):
        assert two[key] == pytest.approx(one[key], rel=1e-12), key
    assert two["requests_per_s"] == pytest.approx(2 * one["requests_per_s"], rel=1e-12)


def test_data_parallel_attention_with_experts_over_every_replica():
    """DeepSeek-V3 on tp1.ep8.dp8 (vLLM's data-parallel attention with expert parallelism): a decode
    iteration is each replica's C/8 tokens, the experts routed every replica's (the decode phase's row on
    that layout over osl - 1), and the MLA latent each replica holds is its own requests': eight times the
    concurrency of tp8.ep8, whose every device holds every request's latent."""
    spec, shape = presets.load("deepseek-v3"), serving.Shape(4096, 1024)
    wide = Query(spec, "decode", Options(tp=1, ep=8, dp=8), Precision(weight="fp8"), H200)
    row = _rows(wide, shape, [64])[0]
    phase = as_rows(calc.answer(Query(spec, "decode_phase", Options(tp=1, ep=8, dp=8), Precision(weight="fp8"),
                                      H200), batch=[64], seq=[4096], new_tokens=[1024]))[0]
    assert row["decode_time_s"] == pytest.approx(phase["time_s"] / 1023, rel=1e-9)
    most = _rows(wide, shape, ["max"])[0]["concurrency"]
    narrow = _rows(Query(spec, "decode", Options(tp=8, ep=8), Precision(weight="fp8"), H200), shape, ["max"])[0]
    assert most % 8 == 0 and most > 4 * narrow["concurrency"]


def test_a_concurrency_that_does_not_divide_over_the_replicas_is_one_line(capsys):
    code, out, err = run(capsys, "serve", "-p", DENSE, "--isl", "4k", "--osl", "1k", "--device", "h200", "--tp", "2",
                         "--dp", "2", "-c", "7")
    assert code != 0 and one_error(err, "--concurrency 7 does not divide over the 2 data-parallel replicas"), err
