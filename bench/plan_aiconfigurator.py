"""costcalc plan beside NVIDIA's aiconfigurator on one serving question, both searches timed in one
run, written to reports/plan/aiconfigurator.md.

The question (issue 23): Qwen3-235B-A22B on 8 H200, prompts of 4096 tokens, 1024 out, TTFT <= 2 s,
TPOT <= 30 ms. aiconfigurator runs as its own process (`aiconfigurator cli default`: its aggregated
and disaggregated searches), from a separate install so that its pandas/numpy never meet the
project's environment:

    pip install --target /tmp/h6/site aiconfigurator==0.12.0
    python bench/plan_aiconfigurator.py [--aic-site /tmp/h6/site] [--measured-site /tmp/h8/site]

costcalc's searches run in this process: roofline timing (its own formats: the model's bf16 and fp8;
then bf16 alone, aiconfigurator's format here) and, where the measured tables import (aiconfigurator-core
0.12.0 and pyarrow on --measured-site), measured timing with TensorRT-LLM's kernels, the engine
aiconfigurator chose; each with static batches (`generate`) and, beside aiconfigurator's aggregated
mode (the like-for-like comparison), with continuous batching (`--batching continuous`: `serve`'s engine).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costcalc import plan, presets, units  # noqa: E402

ISL, OSL, TTFT, TPOT, GPUS = 4096, 1024, 2.0, 0.030, 8
PRESET, DEVICE, AIC_MODEL, AIC_SYSTEM = "qwen3-235b-a22b", "h200", "Qwen/Qwen3-235B-A22B", "h200_sxm"
REPORT = ROOT / "reports" / "plan" / "aiconfigurator.md"


def costcalc_search(label: str, given: dict, weights: str | None, batching: str = "static",
                    disagg: bool = False) -> dict:
    """One costcalc search (the options ``given`` as the CLI takes them; ``batching`` static or
    continuous, ``disagg`` the pool splits too: the best of those alone is the run's), timed."""
    from costcalc.cli.options import traffic
    from costcalc.weights import parse

    spec = presets.load(PRESET)
    chosen = traffic({"device": DEVICE, **given})
    formats = [parse(w) for w in weights.split(",")] if weights else None
    flags = ["--device", DEVICE] + [x for k, v in given.items() if v for x in (f"--{k.replace('_', '-')}", v)]
    setup = plan.Setup(spec, chosen.precision, chosen.machine, GPUS,
                       plan.weight_choices(spec, chosen.precision, chosen.machine, formats), ("--preset", PRESET),
                       tuple(flags), batching=batching, disagg=disagg)
    request = plan.Request(ISL, OSL, TTFT, TPOT)
    start = time.perf_counter()
    found = plan.search(setup, request)
    seconds = time.perf_counter() - start
    rows = [r for r in found.rows if r["batching"] == plan.DISAGGREGATED] if disagg else found.rows
    best, met = plan.chosen(rows, request)
    return {"label": label, "seconds": seconds, "candidates": len(found.rows), "best": best, "met": met,
            "batching": plan.DISAGGREGATED if disagg else batching,
            "command": "costcalc plan -p {} --device {} --devices {} --isl 4k --osl 1k --ttft 2s --tpot 30ms{}{}{}{}".format(
                PRESET, DEVICE, GPUS, f" --weight-dtype {weights}" if weights else "",
                "".join(f" --{k.replace('_', '-')} {v}" for k, v in given.items() if v),
                " --batching continuous" if batching == "continuous" else "", " --disagg" if disagg else "")}


def at_their_choice(row: dict, given: dict, label: str) -> str:
    """costcalc's generate at aiconfigurator's aggregated choice: its layout (attention tp x dp, the experts
    over ep), all its concurrent requests as one static batch, its format (bf16)."""
    from costcalc.cli.options import traffic
    from costcalc.composites import rates
    from costcalc.layout import Layout
    from costcalc.weights import parse

    tp, dp, ep = (int(row[k]) for k in ("tp", "dp", "moe_ep"))
    batch = int(row["concurrency"])
    chosen = traffic({"device": DEVICE, **given})
    setup = plan.Setup(presets.load(PRESET), chosen.precision, chosen.machine, GPUS)
    layout = Layout(tp, ep if ep > 1 else 1, 1, dp)
    got = rates(plan.query(setup, layout, parse("bf16"), None), [batch], [ISL], [OSL])
    ttft, tpot, rate = got["ttft_s"][0], got["tpot_s"][0], got["batch_tokens_per_s"][0]
    flags = "".join(f" --{k.replace('_', '-')} {v}" for k, v in given.items() if v)
    return (f"| costcalc generate at aiconfigurator's agg choice, {label} | {layout.label}, bf16 | batch {batch} | "
            f"{units.seconds(ttft)} | {units.seconds(tpot)} | {rate / layout.devices:.1f} | {1 / tpot:.1f} | "
            f"`costcalc generate -p {PRESET} --device {DEVICE} --prompt {ISL} --new {OSL} --batch {batch} "
            f"{layout.flags} --weight-dtype bf16{flags}` |")


def served_at_their_choice(row: dict, given: dict, label: str) -> str:
    """costcalc's serve (continuous batching) at aiconfigurator's aggregated choice as it is: its
    concurrency, format (bf16) and layout -- attention tp x dp replicas, the experts over every replica
    where it spreads them (ep > 1: serve's --dp with --ep tp x dp)."""
    from costcalc import serving
    from costcalc.cli.options import traffic
    from costcalc.evaluate import Options, Query
    from costcalc.weights import parse

    tp, dp, ep = (int(row[k]) for k in ("tp", "dp", "moe_ep"))
    concurrency = int(row["concurrency"])
    chosen = traffic({"device": DEVICE, "weight_dtype": "bf16", **given})
    query = Query(presets.load(PRESET), "decode", Options(tp=tp, ep=tp * dp if ep > 1 else 1, dp=dp),
                  chosen.precision, chosen.machine)
    got = serving.aggregated(query, serving.Shape(ISL, OSL), [concurrency])
    got = {k: v[0] for k, v in got.items()}
    flags = "".join(f" --{k.replace('_', '-')} {v}" for k, v in given.items() if v)
    return (f"| costcalc serve at aiconfigurator's agg choice, {label} | {got['layout']}, bf16 | "
            f"concurrency {concurrency} | {units.seconds(got['ttft_s'])} | {units.seconds(got['tpot_s'])} | "
            f"{got['tokens_per_s_per_gpu']:.1f} | {got['tokens_per_s_per_user']:.1f} | "
            f"`costcalc serve -p {PRESET} --device {DEVICE} --isl {ISL} --osl {OSL} --concurrency {concurrency} "
            f"{query.options.layout.flags} --weight-dtype bf16{flags}` |")


def aiconfigurator(site: str) -> dict:
    """aiconfigurator's `cli default` on the question, timed (wall clock, and the time it reports), and
    the rank-1 configuration of each mode it ran (its best_config_topn.csv)."""
    with tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, "-m", "aiconfigurator.main", "cli", "default", "--model-path", AIC_MODEL,
                "--total-gpus", str(GPUS), "--system", AIC_SYSTEM, "--isl", str(ISL), "--osl", str(OSL),
                "--ttft", str(TTFT * 1000), "--tpot", str(TPOT * 1000), "--save-dir", out]
        env = {**os.environ, "PYTHONPATH": site}
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        log = done.stdout + done.stderr
        if done.returncode != 0:
            raise SystemExit(f"aiconfigurator failed ({done.returncode}):\n{log[-3000:]}")
        reported = re.findall(r"All experiments completed in ([\d.]+) seconds", log)
        version = re.search(r"aiconfigurator[- ]core?[ =]*([\d.]+)", log)
        modes = {}
        for path in sorted(Path(out).rglob("best_config_topn.csv")):
            with open(path) as handle:
                rows = list(csv.DictReader(handle))
            if rows:
                modes[path.parent.name] = rows[0]
        db = re.search(r"Perf-DB version: (\S+)", log)
    return {"wall": wall, "reported": float(reported[-1]) if reported else None, "modes": modes,
            "perf_db": db.group(1) if db else "?", "argv": " ".join(["aiconfigurator"] + argv[3:-2]),
            "version": version.group(1) if version else None}


def _costcalc_row(run: dict) -> str:
    best = run["best"]
    config = f"{best['layout']}, {best['weight_dtype']}" + (f", draft {best['speculation']}" if best["speculation"] else "")
    said = "" if run["met"] else " (closest; none meets)"
    size = "batch" if run["batching"] == "static" else "concurrency"
    return (f"| costcalc, {run['label']} | {config}{said} | {size} {best['batch']} | {units.seconds(best['ttft_s'])} | "
            f"{units.seconds(best['tpot_s'])} | {best['tokens_per_s_per_gpu']:.1f} | "
            f"{best['tokens_per_s_per_user']:.1f} | {run['candidates']} candidates, {run['seconds']:.2f} s |")


def _aic_row(mode: str, row: dict, aic: dict) -> str:
    keys = {k.lower(): v for k, v in row.items()}
    parallel = keys.get("parallel") or "; ".join(f"{k.replace('parallel', '').strip('()')} {v}"
                                                 for k, v in row.items() if "parallel" in k.lower() and v)
    dtype = keys.get("gemm") or keys.get("(p)gemm") or "?"
    concurrency = keys.get("concurrency", "?")
    batch = keys.get("bs") or keys.get("(d)bs") or "?"
    ttft, tpot = float(keys.get("ttft", "nan")), float(keys.get("tpot", "nan"))
    gpu = float(keys.get("tokens/s/gpu", keys.get("tokens/s/gpu_cluster", "nan")))
    user = float(keys.get("tokens/s/user", "nan"))
    backend = keys.get("backend") or keys.get("(p)backend") or "?"
    return (f"| aiconfigurator {mode} ({backend}) | {parallel}, {dtype} | concurrency {concurrency} (batch {batch}) | "
            f"{ttft / 1000:.3f} s | {tpot:.2f} ms | {gpu:.1f} | {user:.1f} | "
            f"all modes {aic['wall']:.1f} s wall |")


def report(runs: list[dict], aic: dict, theirs: list[str]) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# costcalc plan beside aiconfigurator: Qwen3-235B-A22B on 8 H200",
        "",
        f"Generated by `python bench/plan_aiconfigurator.py` on {stamp} ({platform.machine()}, "
        f"{os.cpu_count()} CPUs shared with other jobs, load average {os.getloadavg()[0]:.1f} at the end: the "
        f"seconds are this run's; one run times both tools). The question: prompts of {ISL} tokens, "
        f"{OSL} out, TTFT <= {TTFT:g} s, TPOT <= {TPOT * 1000:g} ms, {GPUS} H200 SXM.",
        "",
        "- costcalc: " + "; ".join(f"`{r['command']}`" for r in runs),
        f"- aiconfigurator 0.12.0 (perf database {aic['perf_db']}): `{aic['argv']}`"
        + (f" -- it reported its experiments done in {aic['reported']:.1f} s" if aic["reported"] else ""),
        "",
        "| tool, mode | chosen configuration | batch | TTFT | TPOT | tokens/s/GPU | tokens/s/user | search (or command) |",
        "|---|---|---|---|---|---|---|---|",
        *[_costcalc_row(r) for r in runs if r["batching"] == "static"],
        *[_aic_row(mode, row, aic) for mode, row in aic["modes"].items() if mode == "agg"],
        *[_costcalc_row(r) for r in runs if r["batching"] == "continuous"],
        *[_aic_row(mode, row, aic) for mode, row in aic["modes"].items() if mode != "agg"],
        *[_costcalc_row(r) for r in runs if r["batching"] == plan.DISAGGREGATED],
        *theirs,
        "",
        "The costcalc rows beside aiconfigurator's agg row are `plan --batching continuous`'s: `serve`'s engine,",
        "continuous batching with chunked prefill as aiconfigurator's aggregated mode models it (the",
        "like-for-like comparison; its `batch` is the requests in flight); those beside its disagg row are",
        "the best of `plan --batching continuous --disagg`'s prefill x decode pool splits alone (`serve",
        "--disagg`: its `batch` each decode engine's requests; the search's candidates counted whole). The",
        "last rows take aiconfigurator's aggregated choice as it is and ask costcalc's `generate` for it (its concurrent",
        "requests as one static batch), then `serve` at its concurrency and layout (continuous batching,",
        "its attention data-parallel replicas with the experts over all of them): the same configuration,",
        "costcalc's time model.",
        "",
        "Layouts are written each tool's way: costcalc's `tp4.ep8.dp2` is tensor parallel 4 for attention, the",
        "experts over all 8 devices, 2 data-parallel replicas; aiconfigurator's `tp1pp1dp8etp1ep8` is attention",
        "data parallel over 8 (tp 1), experts tensor parallel 1 and expert parallel 8.",
        "",
        "## Why the numbers differ",
        "",
        "- **Batching.** costcalc's default candidate is a static batch: B prompts prefilled in one step, then B",
        "  sequences decoded together (`generate`), so TTFT is the whole batch's prefill and the 2 s target",
        "  caps the batch; the decode steps then run at that batch. aiconfigurator's aggregated mode models",
        "  an engine with in-flight (continuous) batching, each step mixing one request's prefill with the",
        "  others' decode tokens, so its TTFT is a request's own and its TPOT includes the prefill work",
        "  sharing the steps; it raises concurrency until TPOT reaches the target (TPOT near 30 ms), where",
        "  costcalc's chosen batch ends with TPOT far below it. Its disaggregated mode puts prefill and",
        "  decode on separate GPU pools (xPyD) with the KV cache sent between them. `plan --batching",
        "  continuous` searches `costcalc serve`'s continuous-batching engines instead (tp x ep engines and",
        "  tp x dp replicas with the experts over them -- aiconfigurator's attention-dp layouts --, the spare",
        "  devices running copies; serve runs no pipeline), and its chosen concurrency, the largest power of",
        "  two under the TPOT target, also ends near it; with `--disagg` it adds `serve --disagg`'s prefill x",
        "  decode pool splits (tp x ep engines).",
        "- **Time per operator.** costcalc's roofline timing is a floor: each operator at max(FLOPs / peak,",
        "  bytes / bandwidth) at the datasheet's dense peaks, every collective at alpha + factor x bytes /",
        "  link bandwidth, hidden behind compute where shorter (`--overlap full`). aiconfigurator looks every",
        "  GEMM, attention, MoE and communication kernel up in tables measured on H200 with TensorRT-LLM, and",
        "  adds engine overheads; measured kernels run well below the peaks, so its times are longer and its",
        "  throughput lower. costcalc's `--timing measured --engine trtllm` reads the same tables (the",
        "  database version above) for GEMMs, attention, the collectives and the MoE experts' fused kernel --",
        "  the experts only where a device runs all of them, tensor-parallel shards (`--tp`): the tables",
        "  measured no expert-parallel kernel costcalc looks up, so under `--ep` the experts keep their floor",
        "  (the coverage column of `generate` names them) --, so it lands between the floor and",
        "  aiconfigurator. The rows at aiconfigurator's own choice hold the configuration fixed: what is left",
        "  between costcalc's TPOT there and aiconfigurator's is the experts at their floor under its ep 8,",
        "  the engine's overheads and, for the `generate` rows, the prefill work sharing the decode steps",
        "  (the `serve` rows count it).",
        "- **Formats.** Qwen3-235B-A22B ships in bf16; aiconfigurator keeps the checkpoint's format (bf16",
        "  GEMMs, KV cache and MoE here). costcalc's default search adds fp8 weights (the device has an fp8",
        "  peak), which halves the weight bytes a decode step reads: its first row's choice is fp8; the",
        "  `--weight-dtype bf16` rows are the like-for-like ones.",
        "- **Search space.** Both search tensor, expert and data parallelism on 8 GPUs; costcalc also",
        "  searches pipelines and layouts of fewer devices run as copies, aiconfigurator also attention",
        "  tensor/expert splits of the experts' own (etp x ep) and its engine's kernels; both search",
        "  disaggregated pools (costcalc with `--batching continuous --disagg`). costcalc's search is",
        "  exhaustive over its axes and every candidate is a `costcalc generate` (static) or `costcalc",
        "  serve` (continuous) line that reproduces it.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic-site", default="/tmp/h6/site", help="where aiconfigurator 0.12.0 is installed (--target)")
    ap.add_argument("--measured-site", default="/tmp/h8/site",
                    help="aiconfigurator-core 0.12.0 and pyarrow, for costcalc's --timing measured")
    ap.add_argument("--output", default=str(REPORT))
    args = ap.parse_args()
    from costcalc import devices
    from costcalc.roofline import Machine, Precision

    spec = presets.load(PRESET)      # every recipe derived and cached before any search is timed
    plan.search(plan.Setup(spec, Precision(), Machine(devices.load(DEVICE)), GPUS), plan.Request(256, 4, 100.0, 100.0))
    runs = [costcalc_search("roofline", {}, None), costcalc_search("roofline, bf16", {}, "bf16"),
            costcalc_search("roofline, bf16, continuous", {}, "bf16", "continuous"),
            costcalc_search("roofline, bf16, disaggregated", {}, "bf16", "continuous", True)]
    measured = False
    if Path(args.measured_site).is_dir():
        sys.path.append(args.measured_site)     # after the project's own packages
        given = {"timing": "measured", "engine": "trtllm"}
        try:
            runs.append(costcalc_search("measured trtllm, bf16", given, "bf16"))
            runs.append(costcalc_search("measured trtllm, bf16, continuous", given, "bf16", "continuous"))
            runs.append(costcalc_search("measured trtllm, bf16, disaggregated", given, "bf16", "continuous", True))
            measured = True
        except Exception as exc:        # the extra missing: said in the report's absence of the row
            print(f"costcalc --timing measured not run: {exc}", file=sys.stderr)
    aic = aiconfigurator(args.aic_site)
    theirs = []
    if "agg" in aic["modes"]:
        measured_given = {"timing": "measured", "engine": "trtllm"}
        theirs.append(at_their_choice(aic["modes"]["agg"], {}, "roofline"))
        if measured:
            theirs.append(at_their_choice(aic["modes"]["agg"], measured_given, "measured trtllm"))
        theirs.append(served_at_their_choice(aic["modes"]["agg"], {}, "roofline"))
        if measured:
            theirs.append(served_at_their_choice(aic["modes"]["agg"], measured_given, "measured trtllm"))
    text = report(runs, aic, theirs)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
