"""``costcalc verify``: the only command that imports torch (lazily, inside the command)."""
from __future__ import annotations

import importlib.util
from typing import Annotated, Optional

import typer

from .. import outputs
from ..core.registry import WORKLOADS as REGISTRY
from ..errors import CostcalcError
from .options import (ConfigOpt, FormatOpt, Mla, MlaOpt, OutputOpt, PresetFileOpt, WideOpt, WindowCacheOpt, int_list,
                      mla_form, model, warn, LAYOUT_OPTIONS, bundled)
from .emit import TABLE_WIDTH, Out, emit, output_format
from .options import window_cache as cache_choice
from ..vocab import WindowCache
from .options import tile as parse_tile

MAX_LENGTHS = 64   # lengths one verify run takes (each runs every workload on the model)
VERIFIED = [name for name, w in REGISTRY.items() if w.verified]   # costcalc.verify.jobs.JOBS (a test holds it)
WORKLOADS = ",".join(VERIFIED)


VerifyPresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", "-p", metavar="NAME", help="Built-in preset name (see 'costcalc presets').")]


PARALLEL_WORKLOADS = ("prefill", "decode")   # costcalc.verify.parallel.WORKLOADS (a test holds it)
PARALLEL_TIMEOUT_S = 300                     # costcalc.verify.parallel.TIMEOUT_S (a test holds it)


VerifySpOpt = Annotated[bool, typer.Option(
    "--sp", help="Sequence parallel (with --tp): each sum after o_proj and down_proj as a reduce_scatter, "
                 "then an all_gather (the collectives' op names).")]


def _layout_options(command):
    """--tp and --ep as the workload commands have them; --sp with a help that fits verify's columns."""
    return bundled("layout", {"tp": LAYOUT_OPTIONS["tp"], "ep": LAYOUT_OPTIONS["ep"], "sp": (VerifySpOpt, False)},
                   lambda **given: given)(command)


@_layout_options
def verify(
    preset: VerifyPresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    device: Annotated[str, typer.Option(metavar="DEVICE", help="auto, cpu or cuda.")] = "auto",
    dtype: Annotated[str, typer.Option(
        metavar="DTYPE", help="float32, float64, bfloat16 or float16 (the toy: float64).")] = "float32",
    layers: Annotated[Optional[int], typer.Option(
        metavar="N", help="Run N of the model's layers, taken in turn from its layer groups "
                          "(FLOPs are linear in L); every shape stays real.")] = None,
    vocab: Annotated[Optional[int], typer.Option(metavar="V", help="A smaller vocabulary of V tokens.")] = None,
    workloads: Annotated[str, typer.Option(
        metavar="NAMES", show_default=False,
        help=f"Some of {', '.join(VERIFIED)} (the workload names; varlen and chunk too), as a comma "
             "list.  (default: all)")] = WORKLOADS,
    seq: Annotated[str, typer.Option("--seq", "-s", metavar="S", help="Lengths to run; a comma list.")] = "64",
    batch: Annotated[int, typer.Option(metavar="B", help="Batch size.")] = 1,
    layout: dict = None,
    tile: Annotated[str, typer.Option(metavar="QxK", help="Tile of the tiled convention (queries x keys).")] = "16",
    repeats: Annotated[int, typer.Option(metavar="N", help="Timed repeats per workload (0: count only).")] = 1,
    attention_lengths: Annotated[Optional[str], typer.Option(
        metavar="S", help="Lengths at which to time causal against full attention; a comma list.")] = None,
    mla: MlaOpt = Mla.auto,
    window_cache: WindowCacheOpt = WindowCache.whole,
    save_profile: Annotated[Optional[str], typer.Option(
        "--save-profile", metavar="FILE", help="Write the device profile this run measures (GEMM peak, memory "
                                               "bandwidth) as JSON, for --device-file.")] = None,
    report: Annotated[Optional[str], typer.Option(
        metavar="DIR", help="Write report.md and the CSVs of checks, timings and attention to DIR.")] = None,
    timeout: Annotated[float, typer.Option(
        metavar="SECONDS", help="With a layout: end the ranks and fail after this long.")] = PARALLEL_TIMEOUT_S,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Run the workloads on a real torch decoder; hold counted FLOPs against the formulas.

    Example: costcalc verify --preset toy --device cpu

    With a layout (--tp, --ep, --sp) the decoder runs sharded over that many processes
    (torch.distributed: gloo on CPU, nccl on GPUs), and each rank's FLOPs per operator and
    collectives are held to the per-device numbers: costcalc verify --preset-file verify/dry/dense.json --tp 2
    """
    spec = model(preset, preset_file, config)
    from ..layout import Layout

    Layout(layout["tp"], layout["ep"], sp=layout["sp"])     # a bad degree: one error, as the workload commands say it
    if layout["tp"] > 1 or layout["ep"] > 1 or layout["sp"]:
        return _parallel(spec, layout, dict(device=device, dtype=dtype, layers=layers, vocab=vocab, seq=seq,
                                            batch=batch, workloads=workloads, repeats=repeats, timeout=timeout,
                                            attention_lengths=attention_lengths, save_profile=save_profile,
                                            report=report), Out(fmt, output, wide))
    plan = _plan(spec, dict(device=device, dtype=dtype, layers=layers, vocab=vocab, workloads=workloads, seq=seq,
                            batch=batch, tile=tile, repeats=repeats, attention_lengths=attention_lengths, mla=mla,
                            window_cache=window_cache))
    targets = _targets(Out(fmt, output, wide), save_profile, report, plan["repeats"])
    outcome = _run(spec, plan)
    _write(outcome, targets, Out(fmt, output, wide))
    if not outcome.ok:
        raise CostcalcError(f"{outcome.mismatches} counted terms differ from the formulas")


def _plan(spec, given: dict) -> dict:
    """The run's arguments (``costcalc.verify.run.verify``'s keywords) from the options, each checked."""
    names = [w.strip() for w in given["workloads"].split(",") if w.strip()]
    if not names:
        raise CostcalcError(f"--workloads: no workload in {given['workloads']!r}")
    batch, layers, vocab, repeats = given["batch"], given["layers"], given["vocab"], given["repeats"]
    for n, label in ((batch, "--batch"), (layers, "--layers"), (vocab, "--vocab")):
        if n is not None and n < 1:
            raise CostcalcError(f"{label}: {n} is not positive")
    if layers is not None and layers > spec["L"]:
        raise CostcalcError(f"--layers {layers}: {spec.name} has {spec['L']} layers")
    if repeats < 0:
        raise CostcalcError(f"--repeats: {repeats} is negative")
    seqs, lengths = int_list(given["seq"], "--seq"), int_list(given["attention_lengths"], "--attention-lengths")
    for option, values in (("--seq", seqs), ("--attention-lengths", lengths)):
        if len(values) > MAX_LENGTHS:
            raise CostcalcError(f"{option}: verify runs each length on the model: at most {MAX_LENGTHS}, "
                                f"got {len(values):,}")
    chosen_tile, mla = parse_tile(given["tile"]), mla_form(given["mla"], [spec])
    cache = cache_choice(given["window_cache"], [spec], ["full"])
    if lengths and not repeats:
        warn(f"--attention-lengths {given['attention_lengths']} does nothing with --repeats 0 (nothing is timed)")
    return dict(device=given["device"], dtype=given["dtype"], layers=layers, vocab=vocab, workloads=names, seqs=seqs,
                batch=batch, tile=chosen_tile, repeats=repeats, attention_lengths=lengths, mla=mla, window_cache=cache)


def _targets(out: Out, save_profile: Optional[str], report: Optional[str], repeats: int) -> dict:
    """Where the results go, checked before any work (a run is never lost to a bad path): the
    output and its format, the measured profile's file, the report's files."""
    from ..verify import report as report_mod   # no torch in it

    dest = outputs.target(out.output)
    profile = outputs.target(save_profile, "--save-profile") if save_profile is not None else None
    if profile is not None and not repeats:
        raise CostcalcError("--save-profile needs timing: --repeats 0 measures nothing")
    chosen = output_format(out.fmt, dest)
    files = report_mod.targets(report) if report is not None else {}
    return {"dest": dest, "format": chosen, "profile": profile, "report": report, "report_files": files}


def _run(spec, plan: dict):
    """The verifier's outcome: the workloads run and counted (torch loads here)."""
    if importlib.util.find_spec("torch") is None:   # torch itself loads only inside costcalc.verify
        raise CostcalcError("verify needs torch: pip install 'costcalc[verify]'")
    from ..verify.run import verify as run

    try:
        return run(spec, **plan)
    except MemoryError:
        raise CostcalcError("out of memory: use --layers, --vocab or shorter --seq") from None
    except RuntimeError as exc:
        if any(text in str(exc).lower() for text in ("out of memory", "can't allocate memory")):
            raise CostcalcError("out of memory: use --layers, --vocab or shorter --seq") from None
        raise


def _write(outcome, targets: dict, out: Out) -> None:
    """The checks (CSV, Markdown) or the whole outcome (table, JSON); the measured profile and
    the report where asked for."""
    from ..verify import report as report_mod

    chosen, dest = targets["format"], targets["dest"]
    if chosen in ("csv", "markdown"):   # one table: the checks
        left = [name for name in ("timings", "attention") if getattr(outcome, name)]
        if left:
            typer.echo(f"note: {chosen} holds the checks only; the {' and '.join(left)} are in "
                       f"--report DIR or -f json", err=True)
        emit(outcome.checks, out.fmt, out.output, wide=out.wide)
        typer.echo(outcome.summary, err=True)
    else:
        text = (report_mod.json_document(outcome) if chosen == "json"
                else report_mod.table_document(outcome, None if out.wide else TABLE_WIDTH))
        outputs.write_text(dest, text)
        if dest.kind != "stdout":
            typer.echo(f"wrote {outcome.summary} ({chosen}) to {dest.printed}", err=True)
    if targets["profile"] is not None and outcome.profile is not None:
        import json

        outputs.write_text(targets["profile"], json.dumps(outcome.profile.to_dict(), indent=2) + "\n")
        typer.echo(f"wrote the measured device profile to {targets['profile'].printed}", err=True)
    if targets["report"] is not None:
        for path in report_mod.write(outcome, targets["report_files"], f"costcalc verify: {outcome.title}"):
            typer.echo(f"wrote {outputs.printable(str(path))}", err=True)


def _parallel(spec, layout: dict, given: dict, out: Out) -> None:
    """``verify --tp/--ep/--sp``: the sharded run (``costcalc.verify.parallel``), its checks emitted."""
    from ..layout import Layout

    chosen = Layout(layout["tp"], layout["ep"], sp=layout["sp"])
    for flag, value in (("--attention-lengths", given["attention_lengths"]), ("--save-profile", given["save_profile"]),
                        ("--report", given["report"])):
        if value is not None:
            raise CostcalcError(f"{flag} with {chosen.flags}: the sharded verifier counts FLOPs and collectives; "
                                f"it does not time")
    if given["repeats"] > 1:
        raise CostcalcError(f"--repeats {given['repeats']} with {chosen.flags}: the sharded verifier counts FLOPs "
                            f"and collectives; it does not time")
    if given["timeout"] <= 0:
        raise CostcalcError(f"--timeout: {given['timeout']:g} is not positive")
    names = (list(PARALLEL_WORKLOADS) if given["workloads"] == WORKLOADS
             else [w.strip() for w in given["workloads"].split(",") if w.strip()])
    for name in names:
        if name not in PARALLEL_WORKLOADS:
            raise CostcalcError(f"--workloads {name} with {chosen.flags}: the sharded verifier runs "
                                f"{' and '.join(PARALLEL_WORKLOADS)}")
    if not names:
        raise CostcalcError(f"--workloads: no workload in {given['workloads']!r}")
    batch, layers, vocab = given["batch"], given["layers"], given["vocab"]
    for n, label in ((batch, "--batch"), (layers, "--layers"), (vocab, "--vocab")):
        if n is not None and n < 1:
            raise CostcalcError(f"{label}: {n} is not positive")
    seqs = int_list(given["seq"], "--seq")
    if len(seqs) > MAX_LENGTHS:
        raise CostcalcError(f"--seq: verify runs each length on the model: at most {MAX_LENGTHS}, got {len(seqs):,}")
    if importlib.util.find_spec("torch") is None:
        raise CostcalcError("verify needs torch: pip install 'costcalc[verify]'")
    from ..verify import parallel, run as run_mod

    checked = run_mod.cut(spec, layers, vocab)
    rows = parallel.verify(checked, chosen, names, seqs, batch, given["dtype"], given["device"], given["timeout"])
    emit(rows, out.fmt, out.output, wide=out.wide)
    bad = sum(not r["match"] for r in rows)
    typer.echo(f"{chosen.label}: {len(rows)} checks over {chosen.devices} ranks, {bad} mismatches", err=True)
    if bad:
        raise CostcalcError(f"{bad} per-device counts differ from costcalc's")
