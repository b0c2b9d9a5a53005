"""The published end-to-end measurements (bench/data/published.csv): every row well-formed, and
the roofline floor at or below the measured time on a small subset (the whole set: bench/published.py)."""
from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

from costcalc import devices, presets
from costcalc.weights import parse

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data" / "published.csv"


def _bench():
    spec = importlib.util.spec_from_file_location("published_bench", ROOT / "bench" / "published.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module             # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _bench()
POINTS = bench.load(DATA)
BY_ID = {p.id: p for p in POINTS}
PRESETS, DEVICES = set(presets.names()), {name: devices.load(name) for name in devices.names()}


def test_columns_are_the_documented_ones():
    with open(DATA, newline="") as f:
        header = next(csv.reader(f))
    documented = (ROOT / "bench" / "data" / "README.md").read_text()
    assert header[:len(bench.Point.__dataclass_fields__)] == list(bench.Point.__dataclass_fields__)
    for column in header:
        assert f"`{column}`" in documented, column


def test_ids_unique_and_enough_points():
    assert len(BY_ID) == len(POINTS) >= 60


@pytest.mark.parametrize("p", POINTS, ids=lambda p: p.id)
def test_row_is_well_formed(p):
    assert p.model in PRESETS
    assert p.device in DEVICES
    assert p.metric in bench.METRICS and bench.METRICS[p.metric][1] == p.phase
    assert p.value > 0 and p.batch >= 1 and p.input_len >= 1 and p.output_len >= 1 and p.tp >= 1 and p.ep >= 1
    if p.metric == "ttft_ms":
        assert p.output_len == 1
    for dtype in (p.kv_dtype, p.act_dtype) + (() if p.weight_dtype == bench.PRESET else (p.weight_dtype,)):
        parse(dtype)
    DEVICES[p.device].peak(p.act_dtype)                      # the device has a peak for the dtype it computes in
    assert p.url.startswith("https://github.com/") and p.section.strip()
    assert (p.group_size is not None) == (p.weight_dtype in ("int8", "int4") and p.engine == "gpt-fast")
    assert p.measured_s() > 0
    assert p.note == "" or p.note.startswith("inconsistent: ")


def test_measured_time_follows_the_metric():
    # by hand from the rows' published numbers
    assert BY_ID["p001"].measured_s() == pytest.approx(5.0e-3)                    # 5.0 ms
    assert BY_ID["p081"].measured_s() == pytest.approx(200 / 104.9)               # 200 new tokens at 104.9 tok/s
    assert BY_ID["p049"].measured_s() == pytest.approx(1024 * 128 / (5444 * 2))   # B x N / (tok/s/GPU x TP)
    assert BY_ID["p101"].measured_s() == pytest.approx(0.459)                     # a batch's latency, as timed
    assert BY_ID["p117"].measured_s() == pytest.approx(32 * 256 / 760.52)         # B x N / (tok/s, all GPUs)


# one row of each metric on each device it appears on, tp1 and tp>1, bf16 to int4; Llama 2 and Mixtral
# only (GPT-J, Mistral and DeepSeek-V3 compile recipes of their own: seconds on a cold cache)
SUBSET = ["p007", "p006", "p010", "p015", "p027", "p030", "p035", "p038", "p040", "p057", "p058", "p070", "p079",
          "p081", "p083", "p089", "p093", "p095", "p097", "p101", "p114"]
# not DeepSeek-V3 (p115-p117): its MLA and fp8-block recipes take seconds to compile on a cold cache
COLD = {"deepseek-v3"}


@pytest.mark.parametrize("pid", SUBSET)
def test_floor_at_or_below_measured(pid):
    p = BY_ID[pid]
    assert not p.excluded
    assert bench.floor(p)["time_s"] <= p.measured_s()


def test_subset_spans_the_set():
    chosen, rest = [BY_ID[i] for i in SUBSET], [p for p in POINTS if p.model not in COLD]
    assert {p.metric for p in chosen} == {p.metric for p in rest}
    assert {p.device for p in chosen} == {p.device for p in rest}
    assert {p.weight_dtype for p in chosen} == {p.weight_dtype for p in rest}
    assert any(p.tp > 1 for p in chosen) and any(p.model == "mixtral-8x7b" and p.tp > 1 for p in chosen)


@pytest.mark.parametrize("p", [p for p in POINTS if p.excluded], ids=lambda p: p.id)
def test_a_row_left_out_is_impossible_as_printed(p):
    # left out only where even the weight reads alone exceed the published time: every decode step of
    # the tp group reads each device's share of all weights (the note's arithmetic), at the datasheet rate
    from costcalc import memory
    from costcalc.layout import Layout

    query = bench._query(p).but(workload="decode", tp=1, ep=1, overlap="none")
    share = memory.fit(query, p.batch, p.input_len + p.output_len, 0.0, Layout(p.tp, p.ep))["weight_bytes_per_device"]
    assert (p.output_len - 1) * share / devices.load(p.device).mem_bw > p.measured_s()


@pytest.mark.parametrize("pid", ["p010", "p083"])
def test_the_printed_command_answers_with_the_floor(pid, tmp_path):
    # the report prints, per point, the command a user runs: it gives the library's floor
    import json

    from costcalc.cli import main

    p = BY_ID[pid]
    out = tmp_path / "row.json"
    assert main(bench.cli_args(p) + ["-f", "json", "-o", str(out)]) == 0
    rows = json.loads(out.read_text())
    row = next((r for r in rows if r.get("phase") == "total"), rows[-1])
    assert row["time_s"] == pytest.approx(bench.floor(p)["time_s"], rel=1e-12)


def test_the_estimate_is_a_time_or_says_it_is_not_available():
    # without the measured tables (the [measured] extra) one reason saying how to install them, never a
    # traceback; with them a time
    import importlib.util

    installed = all(importlib.util.find_spec(m) for m in ("aiconfigurator_core", "pyarrow"))
    if installed:
        assert bench.estimate(BY_ID["p081"]) > 0
    else:
        with pytest.raises(bench.NotAvailable, match=r"pip install 'costcalc\[measured\]'"):
            bench.estimate(BY_ID["p081"])


def test_the_report_names_what_an_estimate_kept_at_its_floor():
    # measured_coverage's "roofline floor (no table)" parts, each operator once, other notes left out
    coverage = ("roofline floor (no table): attention, experts.up_proj | lm_head: n=128256 above the largest "
                "measured 65536 (time scaled in proportion) | roofline floor (no table): experts.up_proj, q_absorb")
    assert bench.floored(coverage) == "attention, experts.up_proj, q_absorb"
    assert bench.floored("measured") == "" and bench.floored("") == ""
