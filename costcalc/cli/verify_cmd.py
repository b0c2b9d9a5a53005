"""``costcalc verify``: the only command that imports torch (lazily, inside the command)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import CostcalcError
from .options import ConfigOpt, FormatOpt, MlaOpt, Mla, mla_form, OutputOpt, PresetFileOpt, PresetOpt, emit, int_list, model
from .options import tile as parse_tile


def verify(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32, float64, bfloat16 or float16 (toy: float64).")] = "float32",
    layers: Annotated[Optional[int], typer.Option(help="Run N layers (FLOPs are linear in L); every shape stays real.")] = None,
    vocab: Annotated[Optional[int], typer.Option(help="A smaller vocabulary, only where asked.")] = None,
    workloads: Annotated[str, typer.Option(help="Comma list of prefill,varlen,chunk,chunked,decode,generate.")] =
        "prefill,varlen,chunk,chunked,decode,generate",
    seq: Annotated[str, typer.Option("--seq", "-s", help="Lengths to run; a comma list.")] = "64",
    batch: Annotated[int, typer.Option(help="Batch size.")] = 1,
    tile: Annotated[str, typer.Option(help="Tile of the tiled convention (queries x keys).")] = "16",
    repeats: Annotated[int, typer.Option(help="Timed repeats per workload (0: count only).")] = 1,
    attention_lengths: Annotated[Optional[str], typer.Option(help="Lengths at which to time causal vs full attention.")] = None,
    mla: MlaOpt = Mla.auto,
    report: Annotated[Optional[Path], typer.Option(help="Write report.md and CSVs to this folder.")] = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Run the workloads on a real torch decoder; hold counted FLOPs against the formulas."""
    spec = model(preset, preset_file, config)
    names = [w.strip() for w in workloads.split(",") if w.strip()]
    for n, label in ((batch, "--batch"), (layers, "--layers"), (vocab, "--vocab")):
        if n is not None and n < 1:
            raise CostcalcError(f"{label}: {n} is not positive")
    if repeats < 0:
        raise CostcalcError(f"--repeats: {repeats} is negative")
    if importlib.util.find_spec("torch") is None:   # torch itself loads only inside verify/
        raise CostcalcError("verify needs torch: pip install 'costcalc[verify]'")
    from verify import report as report_mod
    from verify.run import verify as run

    try:
        outcome = run(spec, device, dtype, layers, vocab, names, int_list(seq, "--seq"), batch,
                      parse_tile(tile), repeats, attention_lengths=int_list(attention_lengths, "--attention-lengths"),
                      mla=mla_form(mla, [spec]))
    except MemoryError:
        raise CostcalcError("out of memory: use --layers, --vocab or shorter --seq") from None
    except RuntimeError as exc:
        if "out of memory" in str(exc).lower():
            raise CostcalcError("out of memory: use --layers, --vocab or shorter --seq") from None
        raise
    emit(outcome.checks, fmt, output, outcome.extras)
    if outcome.timings:
        emit(outcome.timings, fmt, None) if output is None else None
    if outcome.attention and output is None:
        emit(outcome.attention, fmt, None)
    if report is not None:
        for path in report_mod.write(outcome, report, f"costcalc verify: {spec.name}"
                                         + "".join(f", {flag} {v}" for flag, v in (("--layers", layers), ("--vocab", vocab)) if v)):
            typer.echo(f"wrote {path}", err=True)
    if not outcome.ok:
        raise CostcalcError(f"{sum(not r['match'] for r in outcome.checks)} counted terms differ from the formulas")
