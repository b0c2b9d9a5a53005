"""``costcalc serve``: throughput under continuous batching, aggregated or disaggregated
(``costcalc.serving``)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import notes, ranges, serving
from ..errors import CostcalcError
from ..evaluate import Options, Query
from .emit import emit
from .options import (BudgetOpt, ConfigOpt, FormatOpt, Mla, MlaOpt, OutputOpt, PresetFileOpt, PresetOpt, Traffic, WideOpt,
                      for_models, mla_form, model, warn, whole_number, with_layout, with_traffic)

PoolOpt = Optional[int]


def _pool(option: str, what: str) -> object:
    return Annotated[PoolOpt, typer.Option(option, parser=whole_number(option), metavar="N", show_default=False,
                                           help=f"With --disagg: {what}")]


@with_layout
@with_traffic
def serve(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    isl: Annotated[str, typer.Option("--isl", metavar="S", help="Input (prompt) tokens of each request, e.g. 4k.")] = ...,
    osl: Annotated[str, typer.Option("--osl", metavar="N", help="Output tokens of each request, e.g. 1k.")] = ...,
    concurrency: Annotated[str, typer.Option(
        "--concurrency", "-c", metavar="C", help="Requests in flight (each decode engine's with --disagg); a list or "
                                                 "range sweeps (8,64 or 1:256:x2); max: the most whose weights and "
                                                 "KV caches fit (and, aggregated, whose prompts keep up).")] = "1",
    budget: BudgetOpt = None,
    disagg: Annotated[bool, typer.Option(
        "--disagg", help="Prompts on a prefill pool, decode steps on a decode pool, each request's KV cache moved "
                         "between them.")] = False,
    prefill_tp: _pool("--prefill-tp", "the prefill engine's --tp (default: --tp).") = None,
    prefill_ep: _pool("--prefill-ep", "the prefill engine's --ep (default: --ep).") = None,
    prefill_devices: _pool("--prefill-devices", "devices of the prefill pool, a whole number of engines "
                                                "(default: one engine's).") = None,
    decode_tp: _pool("--decode-tp", "the decode engine's --tp (default: --tp).") = None,
    decode_ep: _pool("--decode-ep", "the decode engine's --ep (default: --ep).") = None,
    decode_devices: _pool("--decode-devices", "devices of the decode pool, a whole number of engines "
                                              "(default: one engine's).") = None,
    mla: MlaOpt = Mla.auto,
    layout: dict = None,
    traffic: Traffic = Traffic(),
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Throughput under continuous batching: TTFT, TPOT, tokens/s per GPU and per user.

    Example: costcalc serve --preset llama-3.1-8b --isl 4k --osl 1k --concurrency 64 --device h200
    """
    spec = model(preset, preset_file, config)
    precision, machine = for_models(traffic, [spec])
    if machine is None:
        raise CostcalcError("serve needs a device: --device NAME (see 'costcalc devices') or --device-file PATH")
    shape = serving.Shape(ranges.number(isl, "--isl"), ranges.number(osl, "--osl"),
                          serving.BUDGET if budget is None else budget)
    asked = [item for part in concurrency.split(",") for item in
             (["max"] if part.strip().lower() == "max" else ranges.parse(part, "--concurrency", 1))]
    ranges.check_rows(len(asked), "--concurrency")
    options = Options(mla=mla_form(mla, [spec]), **layout)
    pools = {"--prefill-tp": prefill_tp, "--prefill-ep": prefill_ep, "--prefill-devices": prefill_devices,
             "--decode-tp": decode_tp, "--decode-ep": decode_ep, "--decode-devices": decode_devices}
    if not disagg:
        given = [flag for flag, value in pools.items() if value is not None]
        if given:
            warn(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} nothing without --disagg")
        table = serving.aggregated(Query(spec, "decode", options, precision, machine), shape, asked)
    else:
        base = Query(spec, "decode", options, precision, machine)
        first, second = (_engine(base, prefill_tp, prefill_ep, "prefill"),
                         _engine(base, decode_tp, decode_ep, "decode"))
        table = serving.disaggregated(serving.Pools(
            first, second, prefill_devices or first.options.layout.devices,
            decode_devices or second.options.layout.devices), shape, asked)
    if False in table["fits"]:
        warn(f"does not fit on {machine.device.name} at concurrency "
             f"{', '.join(str(c) for c, f in zip(table['concurrency'], table['fits']) if f is False)} (weights + KV "
             f"caches of the requests at isl + osl - 1 tokens: fits false; see 'costcalc memory')")
    emit(table, fmt, output, [notes.SERVE], wide)


def _engine(base: Query, tp: PoolOpt, ep: PoolOpt, pool: str) -> Query:
    """A pool's engine: the command's question with its own --tp/--ep where given (an error names the
    pool's options, --prefill-tp or --decode-ep, where those were given)."""
    own = base.options
    try:
        return base.but(tp=own.tp if tp is None else tp, ep=own.ep if ep is None else ep)
    except CostcalcError as exc:
        if tp is None and ep is None:
            raise
        given = " ".join(f"--{pool}-{name} {value}" for name, value in (("tp", tp), ("ep", ep)) if value is not None)
        raise CostcalcError(f"{given}: {str(exc).split(': ', 1)[-1]}") from None
