"""Commands that describe rather than evaluate: formula, crossover, presets."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import calc, notes, presets
from ..vocab import ARCHS, FORMULAS
from .options import (Convention, ConventionOpt, Format, FormatOpt, Logits, LogitsOpt, OutputOpt,
                      PresetFileOpt, PresetOpt, conventions, emit, model)

FORMULA_WORKLOADS = list(FORMULAS)


def formula(
    workload: Annotated[str, typer.Argument(help=f"One of: {', '.join(FORMULA_WORKLOADS)}.")],
    arch: Annotated[str, typer.Option(help=f"Architecture: {' or '.join(ARCHS)}.")] = "dense",
    convention: ConventionOpt = Convention.causal,
    logits: LogitsOpt = Logits.last,
    latex: Annotated[bool, typer.Option("--latex", help="Print LaTeX instead of plain text.")] = False,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """The symbolic formula of a workload, term by term, as derived by the core."""
    from ..errors import CostcalcError
    from ..formulas import describe, formula_rows

    if arch not in ARCHS:
        raise CostcalcError(f"--arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    rows = [r for c in conventions(convention) for r in formula_rows(workload, arch, c, logits.value)]
    if fmt not in (None, Format.table) or (output is not None and fmt is None and output.suffix != ".txt"):
        emit(rows, fmt, output)
        return
    key = "latex" if latex else "formula"
    lines = []
    for conv in conventions(convention):
        lines.append(f"{workload} ({describe(workload)}) | arch {arch} | convention {conv}"
                     + ("" if workload == "crossover" else f" | logits {logits.value}"))
        group = [r for r in rows if r["convention"] == conv]
        width = max(len(r["term"]) for r in group)
        lines += [f"  {r['term']:<{width}} = {r[key]}" for r in group] + [""]
    lines += notes.footer(set(conventions(convention)), {logits.value})
    text = "\n".join(lines) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


def crossover(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """T_equal for decode, and the prefill length where attention equals the linear layers."""
    emit(calc.crossover(model(preset, preset_file)), fmt, output, [notes.CROSSOVER])


presets_app = typer.Typer(help="Built-in model presets.", invoke_without_command=True,
                          no_args_is_help=False)


@presets_app.callback()
def presets_list(ctx: typer.Context, fmt: FormatOpt = None, output: OutputOpt = None) -> None:
    """List the built-in presets with their key sizes."""
    if ctx.invoked_subcommand is not None:
        return
    rows = [_summary(spec) for spec in presets.load_all()]
    emit(rows, fmt, output)


@presets_app.command("show")
def presets_show(
    name: Annotated[Optional[str], typer.Argument(help="Preset name.")] = None,
    preset_file: PresetFileOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Every field of one preset, with where it came from."""
    spec = model(name, preset_file)
    row = {**_summary(spec), **{f"source.{k}": v for k, v in spec.source.items()}}
    if fmt in (None, Format.table) and output is None:
        width = max(map(len, row))
        typer.echo("\n".join(f"{k:<{width}}  {v}" for k, v in row.items()))
        return
    emit([row], fmt, output)


def _summary(spec) -> dict:
    row = {"preset": spec.name, "title": spec.title, "arch": spec.arch, **spec.sizes,
           "d_q": spec.d_q, "d_kv": spec.d_kv}
    row["p_lin"] = calc.executed_linear_params(spec)
    return row
