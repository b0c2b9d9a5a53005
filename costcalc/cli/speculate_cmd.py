"""``costcalc speculate``: a speculative step for each K, beside plain decoding."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import notes, speculation
from ..errors import CostcalcError
from ..evaluate import Options, Query
from .emit import emit
from .options import (AcceptanceOpt, ConfigOpt, DraftOpt, DraftTpOpt, FormatOpt, Mla, MlaOpt, OutputOpt, PresetFileOpt,
                      PresetOpt, Traffic, WideOpt, count, for_models, mla_form, models, whole_number, with_layout,
                      with_traffic)
from .options import speculation as speculation_fields

KmaxOpt = Annotated[Optional[int], typer.Option(
    "--kmax", parser=whole_number("--kmax"), metavar="KMAX", show_default=False,
    help=f"Largest K searched (default {speculation.DEFAULT_KMAX}, or as many rates as --acceptance gives).")]


@with_layout
@with_traffic
def speculate(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    context: Annotated[int, typer.Option(
        "--context", "-t", metavar="T", parser=count("--context"), help="Tokens T already cached.")] = ...,
    batch: Annotated[int, typer.Option(
        "--batch", "-b", metavar="B", parser=count("--batch"), help="Sequences B.")] = 1,
    draft: DraftOpt = None,
    acceptance: AcceptanceOpt = None,
    kmax: KmaxOpt = None,
    draft_tp: DraftTpOpt = None,
    mla: MlaOpt = Mla.auto,
    layout: dict = None,
    traffic: Traffic = Traffic(),
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Speculative decoding for K = 1..KMAX: each step's cost per accepted token beside a plain decode
    step's, the speedup, the break-even acceptance (with a device) and the best K.

    Example: costcalc speculate -p llama-3.1-70b --draft llama-3.1-8b --acceptance 0.8 --context 4k --device h200
    """
    if draft is None or acceptance is None:
        raise CostcalcError("speculate needs --draft (mtp or a draft model's preset) and --acceptance")
    specs = models(preset, preset_file, config)
    precision, machine = for_models(traffic, specs)
    fields = speculation_fields(draft, None, acceptance, draft_tp=draft_tp)
    rows = []
    for spec in specs:
        query = Query(spec, "decode", Options(mla=mla_form(mla, specs), **fields, **layout), precision, machine)
        rows.append(speculation.over_k(query, batch, context, kmax))
    from .emit import concat

    emit(concat(rows), fmt, output, [notes.SPECULATION, notes.SPECULATE], wide)
