"""``costcalc compare`` and ``costcalc mfu``: other tools' numbers for a workload, reproduced
and explained term by term; and the MFU a run reads as under each of them."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..core.registry import workload as find
from ..errors import CostcalcError
from ..peers import TOOLS
from ..peers.base import WORKLOADS, Case, Setup
from ..ranges import check_rows
from ..vocab import Choice
from .options import (ActDtypeOpt, BatchOpt, ConfigOpt, DeviceFileOpt, DeviceOpt, FormatOpt, OutputOpt,
                      PresetFileOpt, PresetOpt, WideOpt, axes, bundled, models, warn)
from .emit import Out, emit_to


Workload = Choice("Workload", {name: name for name in WORKLOADS})     # the workloads the recipes answer
WorkloadArg = Annotated[Workload, typer.Argument(help=", ".join(WORKLOADS[:-1]) + " or " + WORKLOADS[-1] + ".")]
SeqOpt = Annotated[Optional[str], typer.Option(
    "--seq", "--prompt", "-s", metavar="S", help="Sequence length S (prefill, train; generate: the prompt).")]
ContextOpt = Annotated[Optional[str], typer.Option(
    "--context", "-t", metavar="T", help="Tokens T already cached (decode).")]
NewOpt = Annotated[Optional[str], typer.Option("--new", "-n", metavar="N", help="Output tokens N (generate).")]
ToolsOpt = Annotated[str, typer.Option(
    "--tools", metavar="all|a,b", help=f"Tools to compare: all, or a comma list of {', '.join(TOOLS)} "
                                       "(see docs/conventions.md).")]
AttentionOpt = Annotated[str, typer.Option(
    "--hf-attention", metavar="eager|sdpa",
    help="Attention of the Hugging Face model the executed counters run (transformers' default is sdpa).")]
ExpertsOpt = Annotated[str, typer.Option(
    "--hf-experts", metavar="grouped_mm|batched_mm|eager",
    help="MoE experts of that model (transformers 5's default grouped_mm is counted by no tool).")]


MAX_CASES = 10_000   # a recipe case takes ~2 ms: beyond this a comparison runs for minutes


FLAGS = {"seq": "--seq", "context": "--context", "new_tokens": "--new"}   # an input column's option here


def _cases(workload: Workload, given: dict) -> list[Case]:
    """The cases of the case options (``CASE_OPTIONS``): every model x every point of the
    inputs the workload's registry entry names (each given, no other)."""
    name = workload.value
    wanted = [FLAGS[i.column] for i in find(name).inputs if i.column in FLAGS]
    texts = {"--seq": given["seq"], "--context": given["context"], "--new": given["new"]}
    for flag, value in texts.items():
        if value is not None and flag not in wanted:
            raise CostcalcError(f"{flag} does not apply to {name} (it takes {', '.join(wanted)})")
    for flag in wanted:
        if texts[flag] is None:
            raise CostcalcError(f"{name} needs {flag}")
    specs = models(given["preset"], given["preset_file"], given["config"])
    grid = axes(name, len(specs), **{column: (texts[flag], flag) for column, flag in FLAGS.items() if flag in wanted},
                batch=(given["batch"], "--batch"))
    n = len(grid["batch"])
    if n * len(specs) > MAX_CASES:
        raise CostcalcError(f"compare works each tool's recipe out case by case: {n * len(specs):,} cases "
                            f"(presets x points) is too many, at most {MAX_CASES:,}")
    points = [{k: int(v[i]) for k, v in grid.items()} for i in range(n)]
    return [Case(spec, name, p["batch"], p.get("seq", 0), p.get("context", 0), p.get("new_tokens", 0))
            for spec in specs for p in points]


def _emit(rows: list[dict], text, fmt, output, wide: bool) -> None:
    """The rows through the shared ``emit``: a table of case blocks (``text``), JSON with each
    row's own keys (a convention row has no tool), Markdown with numbers as text (exact, and
    as the tool printed them); CSV the shared way."""
    from ..peers import report

    def own(chosen: str, width):
        if chosen == "table":
            body = "\n".join(text(group, width or 10_000) for group in _groups(rows))
        elif chosen == "json":
            import json

            body = json.dumps(report.jsonable(rows), indent=2) + "\n"
        elif chosen == "markdown":
            from ..render import frame

            body = frame(report.flat(rows)).to_markdown(index=False, disable_numparse=True) + "\n"
        else:
            return None
        return lambda handle: handle.write(body)

    emit_to(report.flat(rows), Out(fmt, output, wide), own=own)


def _groups(rows: list[dict]) -> list[list[dict]]:
    """Rows of one case together (a case: preset, workload and sizes)."""
    out: dict[tuple, list[dict]] = {}
    for row in rows:
        key = tuple(row.get(k) for k in ("preset", "workload", "batch", "seq", "context", "new_tokens"))
        out.setdefault(key, []).append(row)
    return list(out.values())


CASE_OPTIONS = {   # name: (annotation, default) -- what compare and mfu are asked about
    "preset": (PresetOpt, None), "preset_file": (PresetFileOpt, None), "config": (ConfigOpt, None),
    "seq": (SeqOpt, None), "context": (ContextOpt, None), "new": (NewOpt, None), "batch": (BatchOpt, "1"),
}
COUNTER_OPTIONS = {   # the tools, and the Hugging Face model their executed counters run
    "tools": (ToolsOpt, "all"), "hf_attention": (AttentionOpt, "eager"), "hf_experts": (ExpertsOpt, "batched_mm"),
}


def _counters(tools: str, hf_attention: str, hf_experts: str):
    from .. import peers

    return peers.tools(tools), Setup(hf_attention, hf_experts)


@bundled("case", CASE_OPTIONS, dict)
@bundled("counters", COUNTER_OPTIONS, _counters)
def compare(
    workload: WorkloadArg,
    case: dict = None,
    counters: tuple = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Other tools' numbers for a workload, reproduced exactly and explained term by term.

    Example: costcalc compare prefill --preset llama-2-7b --seq 1024
    """
    from .. import peers
    from ..peers import report

    names, setup = counters
    cases = _cases(workload, case)
    check_rows(len(cases) * len(names), "the comparison (cases x tools)")
    rows = [row for case in cases for row in peers.compare(case, names, setup)]
    _emit(rows, report.compare_text, fmt, output, wide)


@bundled("case", CASE_OPTIONS, dict)
@bundled("counters", COUNTER_OPTIONS, _counters)
def mfu(
    workload: WorkloadArg,
    case: dict = None,
    time: Annotated[Optional[float], typer.Option("--time", metavar="SECONDS", help="Measured time of the run.")] = None,
    tokens_per_s: Annotated[Optional[float], typer.Option(
        "--tokens-per-s", metavar="N", help="Measured rate: tokens processed (prefill, train: B x S), "
                                            "decoded (decode: B) or generated (generate: B x N) per second.")] = None,
    peak: Annotated[Optional[str], typer.Option(
        "--peak", metavar="FLOPS", help="Peak FLOP/s, e.g. 989.5e12 or 989.5T.")] = None,
    device: DeviceOpt = None,
    device_file: DeviceFileOpt = None,
    act_dtype: ActDtypeOpt = None,
    counters: tuple = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """The MFU a run reads as under costcalc's conventions and under each tool's count.

    Example: costcalc mfu prefill -p llama-3.1-8b -s 8192 --time 0.2 --device h100
    """
    from ..peers import mfu as model_flops, report

    names, setup = counters
    peak_flops = _peak(peak, device, device_file, act_dtype)
    cases = _cases(workload, case)
    check_rows(len(cases) * (len(names) + 3), "the MFU table (cases x rows)")
    rows = [row for case in cases for row in model_flops.utilisation(
        case, model_flops.seconds(case, time, tokens_per_s), peak_flops, names, setup)]
    _emit(rows, report.mfu_text, fmt, output, wide)


PREFIXES = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def _peak(text: Optional[str], device: Optional[str], device_file: Optional[str], act_dtype) -> tuple[float, str]:
    """--peak (a number, optionally with an SI prefix: 989.5T), or a device's dense peak for the
    compute dtype (--act-dtype, default bf16)."""
    given = [f for f, v in (("--peak", text), ("--device", device), ("--device-file", device_file)) if v]
    if len(given) != 1:
        raise CostcalcError("give one of --peak FLOPS, --device NAME or --device-file PATH"
                            + (f", not {' and '.join(given)}" if given else ""))
    if text is not None:
        if act_dtype is not None:
            warn("--act-dtype does nothing with --peak (it picks a device's peak)")
        body = text.strip().upper().removesuffix("FLOPS").removesuffix("FLOP/S")
        scale = PREFIXES.get(body[-1:], None) if body[-1:].isalpha() else 1
        try:
            value = float(body[:-1] if body[-1:].isalpha() else body) * (scale if scale else float("nan"))
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise CostcalcError(f"--peak: {text!r} is not a positive number of FLOP/s (e.g. 989.5e12 or 989.5T)")
        from ..devices import PEAK_RANGE

        if not PEAK_RANGE[0] <= value <= PEAK_RANGE[1]:      # as a device file's peaks
            raise CostcalcError(f"--peak must be between {PEAK_RANGE[0]:g} and {PEAK_RANGE[1]:g} FLOP/s, got {value:g}")
        return value, "--peak"
    from .. import devices

    profile = devices.load(device) if device else devices.load_file(device_file)
    dtype = act_dtype.value if act_dtype is not None else "bf16"
    return profile.peak(dtype), f"{profile.name}, dense {dtype}"
