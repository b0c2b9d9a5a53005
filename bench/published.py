"""Hold costcalc against published end-to-end measurements (bench/data/published.csv).

For every point: the roofline floor (``costcalc.calc`` on the point's preset, device, dtypes and
layout), the measured time the published number stands for, and measured/floor; then the median
and spread for prefill (time to first token), decode (gpt-fast's batch-1 tokens/s) and generate
(TensorRT-LLM's static-batch throughput, vLLM's
batch latency) separately, and every point where the floor exceeds the
measured time (which must not happen). The ``measured`` timing mode (issue 22) is asked for through
the command line in-process (``--timing measured --engine ...``); where this costcalc has no such
option, one line says so and the estimate column stays empty.

    PYTHONPATH=$PWD python bench/published.py                 # writes reports/published/report.md
    PYTHONPATH=$PWD python bench/published.py --no-estimate   # the floor only

How each published number maps onto a costcalc workload: bench/data/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "published.csv"
REPORT = HERE.parent / "reports" / "published" / "report.md"

PHASES = ("prefill", "decode", "generate")
METRICS = {   # metric -> (workload costcalc runs, phase it is reported under)
    "ttft_ms": ("prefill", "prefill"),
    "tokens_per_s_per_user": ("generate", "decode"),
    "out_tokens_per_s_per_gpu": ("generate", "generate"),
    "batch_latency_s": ("generate", "generate"),
    "out_tokens_per_s": ("generate", "generate"),
}
# gpt-fast's int8 is weight-only with one fp16 scale per output channel (a whole row of inputs):
# the generic int8 format takes a scale per group, so a group as long as any row (2^16 inputs)
# charges at most the per-channel scale bytes -- never more, so the floor stays a floor.
PER_CHANNEL_GROUP = 2 ** 16
PRESET = "preset"   # weight_dtype: the formats the preset ships in (DeepSeek-V3: fp8 blocks, bf16 router and head)
OVERLAP = "full"   # the floor: a collective hidden behind compute where it is shorter (the least time)
# --engine for --timing measured. gpt-fast has no tables of its own; its rows take TensorRT-LLM's, the only
# engine whose A100 tables hold all three of its weight formats (bf16, and int8/int4 weight-only: int8_wo,
# int4_wo) -- its weight-only kernels, not gpt-fast's own (bench/data/README.md)
ENGINES = {"tensorrt-llm": "trtllm", "vllm": "vllm", "sglang": "sglang", "gpt-fast": "trtllm"}


@dataclass(frozen=True)
class Point:
    id: str
    source: str
    engine: str
    engine_version: str
    model: str
    published_model: str
    device: str
    phase: str
    metric: str
    value: float
    batch: int
    input_len: int
    output_len: int
    tp: int
    ep: int
    weight_dtype: str
    kv_dtype: str
    act_dtype: str
    group_size: Optional[int]
    url: str
    section: str
    note: str = ""

    @property
    def excluded(self) -> bool:
        """A published number that is impossible as printed (its note says why): kept, shown, left
        out of the statistics and of the floor check."""
        return self.note.startswith("inconsistent")

    @property
    def workload(self) -> str:
        return METRICS[self.metric][0]

    def measured_s(self) -> float:
        """The wall time the published number stands for (seconds)."""
        if self.metric == "ttft_ms":
            return self.value / 1000
        if self.metric == "batch_latency_s":              # the whole batch's generation, as timed
            return self.value
        if self.metric == "out_tokens_per_s":             # the batch's new tokens over its generation, all GPUs
            return self.batch * self.output_len / self.value
        if self.metric == "tokens_per_s_per_user":       # batch 1: new tokens over the whole generation
            return self.output_len / self.value
        # tokens/s per GPU over the tp GPUs of one static batch of B sequences, N new tokens each
        return self.batch * self.output_len / (self.value * self.tp)


INTS = ("value", "batch", "input_len", "output_len", "tp", "ep")


def load(path: Path = DATA) -> list[Point]:
    points = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = dict(raw)
            row["value"] = float(row["value"])
            for key in INTS[1:]:
                row[key] = int(row[key])
            gs = row["group_size"]
            row["group_size"] = PER_CHANNEL_GROUP if gs == "per-channel" else (int(gs) if gs else None)
            points.append(Point(**row))
    return points


def _query(p: Point, overlap: str = OVERLAP):
    from costcalc import devices, presets
    from costcalc.evaluate import Options, Query
    from costcalc.roofline import Machine, Precision
    from costcalc.weights import parse

    weight = None if p.weight_dtype == PRESET else parse(p.weight_dtype)   # None: the formats the model ships in
    precision = Precision(weight=weight, kv=p.kv_dtype, act=p.act_dtype,
                          group_size=p.group_size or 128)
    return Query(presets.load(p.model), p.workload, Options(tp=p.tp, ep=p.ep, overlap=overlap), precision,
                 Machine(devices.load(p.device)))


def floor(p: Point, overlap: str = OVERLAP) -> dict:
    """The roofline floor of the point's workload: time_s, and its compute/memory/comm parts."""
    from costcalc import calc

    query = _query(p, overlap)
    if p.workload == "prefill":
        row = {k: v[0] for k, v in calc.answer(query, seq=[p.input_len], batch=[p.batch]).items()}
    else:
        rows = calc.generation(query, seq=[p.input_len], new_tokens=[p.output_len], batch=[p.batch])
        row = {k: v[rows["phase"].index("total")] for k, v in rows.items()}
    return {k: float(row.get(k) or 0.0) for k in ("time_s", "compute_time_s", "memory_time_s", "comm_time_s")}


def fits(p: Point) -> dict:
    """Whether the weights and the KV cache of the point's batch and its longest context fit on one
    of its devices, under costcalc's default reserve (10%) and with none."""
    from costcalc import memory
    from costcalc.layout import Layout

    query = _query(p).but(workload="decode", tp=1, ep=1, overlap="none")   # the layout goes apart, as `memory` passes it
    context = p.input_len + p.output_len
    out = {}
    for reserve in (memory.DEFAULT_RESERVE, 0.0):
        row = memory.fit(query, p.batch, context, reserve, Layout(p.tp, p.ep))
        out[reserve] = bool(row["fits"])
    return {"fits": out[memory.DEFAULT_RESERVE], "fits_no_reserve": out[0.0]}


def cli_args(p: Point) -> list[str]:
    """The costcalc command that answers the same question (the report prints it)."""
    args = [p.workload, "-p", p.model, "--device", p.device]
    args += ["--seq", str(p.input_len)] if p.workload == "prefill" else ["--prompt", str(p.input_len),
                                                                          "--new", str(p.output_len)]
    args += ["--batch", str(p.batch)] + ([] if p.weight_dtype == PRESET else ["--weight-dtype", p.weight_dtype])
    args += ["--kv-dtype", p.kv_dtype, "--act-dtype", p.act_dtype]
    if p.group_size and p.weight_dtype in ("int8", "int4"):
        args += ["--group-size", str(p.group_size)]
    if p.tp > 1:
        args += ["--tp", str(p.tp)]
    if p.ep > 1:
        args += ["--ep", str(p.ep)]
    if p.tp > 1 or p.ep > 1:
        args += ["--overlap", OVERLAP]
    return args


class NotAvailable(Exception):
    pass


REFUSED: list[str] = []   # points the measured mode gave no time for, and its one-line reason
COVERAGE: dict[str, str] = {}   # point id -> the estimate's measured_coverage (what kept its floor, what lay outside)
PARTS: dict[str, dict] = {}     # point id -> the estimate's times by term, and its mem ops (seconds)
PART_NAMES = ("attn_proj", "ffn", "router", "experts", "attention", "lm_head", "mem_ops")   # those these models have
BAND = 0.15   # the aim: the estimate's median error within +-15%
# The summary this report printed before the estimate counted the mem ops, read fp16 from the bfloat16 tables,
# int8/int4 weight-only from int8_wo/int4_wo (gpt-fast's rows then took the default engine, vllm), looked up
# window layers whose window the positions never reach, and looked collectives up (a layout's prefill had no
# estimate) (reports/published/report.md at c40d7d0): a record.
BEFORE = {"prefill": "24 points: median 1.08x, range 0.84x-2.44x", "decode": "20 points: median 1.51x, range 0.93x-3.22x",
          "generate": "56 points: median 1.51x, range 0.73x-6.03x"}


def estimate(p: Point) -> Optional[float]:
    """The ``measured`` timing mode's time (seconds), through the command line in-process; None
    where it gives no time for this point; ``NotAvailable`` where this costcalc has no such mode.
    The row's ``measured_coverage`` goes to ``COVERAGE``."""
    from costcalc.cli import main

    args = cli_args(p) + ["--timing", "measured"]
    if p.engine in ENGINES:
        args += ["--engine", ENGINES[p.engine]]   # its newest data: none is of these old versions
    err = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(args + ["-f", "json", "-o", str(out)])
        message = err.getvalue().strip()
        if rc != 0:
            last = message.splitlines()[-1] if message else f"exit {rc}"
            if "no such option" in message.lower() or "install" in message.lower():
                raise NotAvailable(last)          # no measured mode here at all: say so once
            REFUSED.append(f"{p.id}: {last}")     # this point only (a device or shape without data)
            return None
        rows = json.loads(out.read_text())
    rows = rows if isinstance(rows, list) else rows.get("rows", [rows])
    row = next((r for r in rows if r.get("phase") == "total"), rows[-1])
    COVERAGE[p.id] = row.get("measured_coverage") or ""
    PARTS[p.id] = {name: float(row.get(f"{name}_time_s") or 0.0) for name in PART_NAMES}
    value = row.get("time_s")
    return float(value) if value is not None else None


def floored(coverage: str) -> str:
    """The operators an estimate kept at their roofline floor (no table), from its measured_coverage."""
    found = [part.split(":", 1)[1].strip() for part in coverage.split(" | ") if part.startswith("roofline floor")]
    return ", ".join(dict.fromkeys(", ".join(found).split(", "))) if found else ""


def spread(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    return (f"{len(ratios)} points: median {statistics.median(ratios):.2f}x, "
            f"range {min(ratios):.2f}x-{max(ratios):.2f}x")


def run(points: list[Point], with_estimate: bool = True) -> tuple[list[dict], Optional[str]]:
    results, unavailable = [], None if with_estimate else "not asked for (--no-estimate)"
    for p in points:
        f = floor(p)
        est = None
        if unavailable is None:
            try:
                est = estimate(p)
            except NotAvailable as exc:
                unavailable = f"--timing measured is not available in this costcalc ({exc})"
        serial = floor(p, "none")["time_s"] if p.tp * p.ep > 1 else f["time_s"]
        results.append({"point": p, "measured_s": p.measured_s(), "floor": f, "estimate_s": est,
                        "serial_s": serial, **fits(p)})
    return results, unavailable


def report(results: list[dict], unavailable: Optional[str]) -> str:
    lines = ["# Published end-to-end measurements against costcalc", "",
             "Generated by `PYTHONPATH=$PWD python bench/published.py` from `bench/data/published.csv` "
             "(how it was gathered and how each number maps onto a workload: `bench/data/README.md`). "
             f"The floor is the roofline (`--timing roofline`, collectives under `--overlap {OVERLAP}`); "
             "`measured/floor` >= 1 everywhere is the check that the floor is one.", ""]
    lines.append(f"Estimate (`--timing measured`): {unavailable}." if unavailable else
                 "Estimate: `--timing measured` with `--engine` of the point (gpt-fast: `trtllm`, the only engine "
                 "whose A100 tables hold its int8/int4 weight-only formats).")
    if REFUSED:
        lines += ["", f"`--timing measured` gave no time for {len(REFUSED)} points:", ""] + [f"- {r}" for r in REFUSED]
    lines += ["", "## Summary", "", "| phase | measured / floor | measured / estimate | measured / estimate before |",
              "|---|---|---|---|"]
    kept = [r for r in results if not r["point"].excluded]
    for phase in PHASES:
        own = [r for r in kept if r["point"].phase == phase]
        f = [r["measured_s"] / r["floor"]["time_s"] for r in own]
        e = [r["measured_s"] / r["estimate_s"] for r in own if r["estimate_s"]]
        lines.append(f"| {phase} | {spread(f)} | {spread(e)} | {BEFORE[phase]} |")
    allf = [r["measured_s"] / r["floor"]["time_s"] for r in kept]
    alle = [r["measured_s"] / r["estimate_s"] for r in kept if r["estimate_s"]]
    lines += [f"| all | {spread(allf)} | {spread(alle)} | |", "",
              "Before: the estimate of the previous report (c40d7d0): without the mem ops, fp16 read from the "
              "bfloat16 tables, the int8/int4 weight-only tables and windows the positions never reach, and "
              "with no measured collectives (its layouts' prefill points had no estimate) "
              "(docs/cost-model.md, Measured time).", ""]
    for label, test in (("by source", lambda p: p.source), ("by device", lambda p: p.device), ("by layout", lambda p: "tp1" if p.tp == 1 else "tp>1"),
                        ("by prompt length (prefill)", lambda p: p.input_len if p.phase == "prefill" else None)):
        for what, ratio in (("floor", lambda r: r["measured_s"] / r["floor"]["time_s"]),
                            ("estimate", lambda r: r["measured_s"] / r["estimate_s"] if r["estimate_s"] else None)):
            groups: dict = {}
            for r in kept:
                key = test(r["point"])
                if key is not None and ratio(r) is not None:
                    groups.setdefault(key, []).append(ratio(r))
            lines.append(f"Measured / {what} {label}: " + "; ".join(f"{k}: {spread(v)}" for k, v in sorted(
                groups.items(), key=lambda kv: str(kv[0]))) + ".")
            lines.append("")
    lines += _outside(kept) + _decode_parts(kept)
    bad = [r for r in kept if r["floor"]["time_s"] > r["measured_s"]]
    lines += ["## Points where the floor exceeds the measured time", ""]
    lines.append("None." if not bad else "\n".join(
        f"- {r['point'].id} {r['point'].model} on {r['point'].device}: floor {r['floor']['time_s']:.4g} s > "
        f"measured {r['measured_s']:.4g} s" for r in bad))
    close = sorted(kept, key=lambda r: r["measured_s"] / r["floor"]["time_s"])[:5]
    lines += ["", "Closest to the floor (the floor's memory part is the weights and KV read once at the datasheet "
              "bandwidth: a ratio near 1 means the engine ran near that bandwidth or peak):", ""]
    lines += [f"- {r['point'].id} {r['point'].model} on {r['point'].device} tp{r['point'].tp}, {r['point'].phase}, "
              f"batch {r['point'].batch}, {r['point'].input_len}/{r['point'].output_len}: "
              f"{r['measured_s'] / r['floor']['time_s']:.3f}x (compute {r['floor']['compute_time_s']:.4g} s, memory "
              f"{r['floor']['memory_time_s']:.4g} s, comm {r['floor']['comm_time_s']:.4g} s)" for r in close]
    serial = [r for r in kept if r["serial_s"] > r["measured_s"]]
    lines += ["", "Under `--overlap none` (every collective added after the roofline; the default is `full`) the "
              f"time exceeds the measured one at {len(serial)} point(s)"
              + (": " + "; ".join(f"{r['point'].id} {r['point'].model} on {r['point'].device} tp{r['point'].tp} "
                                   f"({r['serial_s']:.4g} s > {r['measured_s']:.4g} s)" for r in serial) if serial else "")
              + ". The engines overlap (or fuse) their all-reduces, so the floor is taken under `--overlap full`, "
              "costcalc's default for that reason."]
    lines += ["", "## Published numbers left out (impossible as printed)", ""]
    lines += [f"- {r['point'].id} {r['point'].published_model} on {r['point'].device} ({r['point'].section}, batch "
              f"{r['point'].batch}, {r['point'].input_len}/{r['point'].output_len}): floor {r['floor']['time_s']:.4g} s, "
              f"measured {r['measured_s']:.4g} s -- {r['point'].note}" for r in results if r["point"].excluded] or ["None."]
    unfit = [r for r in results if not r["fits"]]
    lines += ["", "## Published runs costcalc's `memory` says do not fit", "",
              f"{len(unfit)} of {len(results)} points do not fit under the default 10% reserve"
              + (f" ({sum(not r['fits_no_reserve'] for r in unfit)} with no reserve at all)" if unfit else "")
              + " (weights and the KV cache of the batch at input + output tokens, per device of the layout); "
              "every one of them ran, so each is a memory-model or profile question (issue 22, 'Device memory as it is'):", ""]
    lines += [f"- {r['point'].id} {r['point'].model} on {r['point'].device} tp{r['point'].tp}, batch {r['point'].batch}, "
              f"{r['point'].input_len}+{r['point'].output_len} tokens, {r['point'].weight_dtype}"
              f"{'' if r['fits_no_reserve'] else ' (not even with no reserve)'}" for r in unfit]
    lines += ["", "## Every point", "",
              "| id | model | device | layout | dtypes w/kv/act | phase | B | in | out | published | measured s | "
              "floor s | measured/floor | bound | fits | estimate s | measured/estimate |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, f, est = r["point"], r["floor"], r["estimate_s"]
        layout = f"tp{p.tp}" + (f".ep{p.ep}" if p.ep > 1 else "")
        parts = {"compute": f["compute_time_s"], "memory": f["memory_time_s"], "comm": f["comm_time_s"]}
        bound = max(parts, key=parts.get)
        lines.append(f"| {p.id} | {p.model} | {p.device} | {layout} | {p.weight_dtype}/{p.kv_dtype}/{p.act_dtype} | "
                     f"{p.phase} | {p.batch} | {p.input_len} | {p.output_len} | {p.value:g} {p.metric} | "
                     f"{r['measured_s']:.4g} | {f['time_s']:.4g} | {r['measured_s'] / f['time_s']:.2f}{' (left out)' if p.excluded else ''} | {bound} | "
                     f"{'yes' if r['fits'] else 'no'} | "
                     f"{'' if est is None else f'{est:.4g}'} | "
                     f"{'' if not est else format(r['measured_s'] / est, '.2f')} |")
    lines += ["", "Sources: " + "; ".join(sorted({f"{p.source}: {p.url}" for p in (r['point'] for r in results)})), ""]
    return "\n".join(lines)


def _outside(kept: list[dict]) -> list[str]:
    """The points whose estimate lies outside +-BAND of the measured time, each with what its estimate
    kept at the roofline floor (no table) and its layout."""
    far = [r for r in kept if r["estimate_s"] and abs(r["measured_s"] / r["estimate_s"] - 1) > BAND]
    if not far:
        return []
    out = ["## Estimates outside +-15% of the measured time", "",
           f"{len(far)} of {sum(1 for r in kept if r['estimate_s'])} points, each with the operators its estimate "
           "kept at their floor (no table; from `measured_coverage`).", ""]
    for r in far:
        p = r["point"]
        held = floored(COVERAGE.get(p.id, ""))
        out.append(f"- {p.id} {p.model} on {p.device} tp{p.tp}, {p.phase}, {p.weight_dtype}, batch {p.batch}, "
                   f"{p.input_len}/{p.output_len} ({p.source}): measured / estimate "
                   f"{r['measured_s'] / r['estimate_s']:.2f}" + (f"; at the floor: {held}" if held else ""))
    return out + [""]


def _decode_parts(kept: list[dict]) -> list[str]:
    """The decode points' estimates by term (shares of the estimate), beside measured / estimate."""
    own = [r for r in kept if r["point"].phase == "decode" and r["estimate_s"] and r["point"].id in PARTS]
    if not own:
        return []
    out = ["## The decode points' estimate by term", "",
           "Share of the estimate per term (`<term>_time_s`; `mem_ops`: norms, adds, activation, embedding), the "
           "operators kept at their floor, and measured / estimate:", "",
           "| id | model | layout | weights | " + " | ".join(PART_NAMES) + " | at the floor | measured / estimate |",
           "|---|---|---|---|" + "---|" * len(PART_NAMES) + "---|---|"]
    for r in own:
        p, parts = r["point"], PARTS[r["point"].id]
        shares = " | ".join(f"{parts[name] / r['estimate_s']:.1%}" for name in PART_NAMES)
        out.append(f"| {p.id} | {p.model} | tp{p.tp} | {p.weight_dtype} | {shares} | "
                   f"{floored(COVERAGE.get(p.id, '')) or '-'} | {r['measured_s'] / r['estimate_s']:.2f} |")
    return out + [""]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=REPORT)
    parser.add_argument("--no-estimate", action="store_true", help="the floor only")
    args = parser.parse_args(argv)
    results, unavailable = run(load(args.data), not args.no_estimate)
    if unavailable:
        print(f"note: {unavailable}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(results, unavailable))
    bad = sum(r["floor"]["time_s"] > r["measured_s"] for r in results if not r["point"].excluded)
    out = sum(r["point"].excluded for r in results)
    print(f"{len(results)} points ({out} left out as impossible as printed); floor above measured at {bad}; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
