"""``costcalc plot``: figures of the cost model (matplotlib, imported only here)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import CostcalcError
from ..outputs import printable
from ..ranges import number, parse
from .options import (RANGE_HELP, ConfigOpt, Convention, ConventionOpt, Logits, LogitsOpt, PresetFileOpt, PresetOpt,
                      TileOpt, Traffic, conventions, models, with_some_traffic)
from .options import tile as parse_tile

MAX_POINTS = 1_000_000     # x values one figure draws (a line of more is no clearer, and slow)


@with_some_traffic("device", "device_file", "weight_dtype", "kv_dtype", "act_dtype", "state_dtype", "index_dtype")
def plot(
    what: Annotated[str, typer.Argument(metavar="WHAT", help="prefill (by prompt length), decode (by context) or "
                                             "generate (per generated token).")],
    output: Annotated[str, typer.Option("--output", "-o", metavar="FILE",
                                        help="The figure: a .png or .svg file (a FIFO is written in place).")],
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    seq: Annotated[Optional[str], typer.Option("--seq", "-s", metavar="S", help=f"prefill: prompt lengths; {RANGE_HELP}.")] = None,
    context: Annotated[Optional[str], typer.Option("--context", "-t", metavar="T", help=f"decode: cached contexts; {RANGE_HELP}.")] = None,
    prompt: Annotated[Optional[str], typer.Option("--prompt", metavar="S", help="generate: the prompt length S.")] = None,
    new: Annotated[Optional[str], typer.Option("--new", "-n", metavar="N", help="generate: output tokens N (tokens 1..N are drawn).")] = None,
    batch: Annotated[str, typer.Option("--batch", "-b", metavar="B", help="Batch size B.")] = "1",
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = None,
    logits: LogitsOpt = Logits.last,
    style: Annotated[str, typer.Option(metavar="STYLE", help="auto (stacked areas, or lines on log axes for wide "
                                            "ranges), stacked or lines.")] = "auto",
    size: Annotated[str, typer.Option(metavar="WxH", help="Panel size in inches, WxH.")] = "7x4.5",
    dpi: Annotated[int, typer.Option(metavar="DPI", help="Resolution of a PNG.")] = 150,
    title: Annotated[Optional[str], typer.Option(metavar="TEXT", help="Figure title.")] = None,
    traffic: Traffic = Traffic(),
) -> None:
    """Draw FLOPs by term against length for one or several presets, crossovers marked.

    Example: costcalc plot prefill -p llama-3.1-8b,mixtral-8x7b --seq 1k:1M:x2 -o prefill.png
    """
    from .. import plot as plotting

    plotting.check_output(output)          # before any work
    specs = models(preset, preset_file, config)
    xs = _xs(what, {"--seq": seq, "--context": context, "--new": new, "--prompt": prompt})
    sizes = parse(batch, "--batch")
    if len(sizes) != 1:
        raise CostcalcError("--batch: a plot takes one batch size")
    first = parse(prompt, "--prompt") if prompt is not None else [1]
    if len(first) != 1:
        raise CostcalcError("--prompt: a plot takes one prompt length")
    precision, machine = traffic.precision, traffic.machine
    if precision is not None and machine is None:
        raise CostcalcError("plot: dtypes draw time only with --device")
    kinds = tuple(conventions(convention))
    request = plotting.Figure(what, tuple(xs), kinds, sizes[0], first[0], logits.value, parse_tile(tile, kinds),
                              (precision, machine) if machine else None)
    drawn = plotting.draw(request, specs, output, plotting.Look(style, _size(size), dpi, title))
    marks = [m["label"] for p in drawn.panels for m in p["markers"]]
    typer.echo(f"wrote {printable(str(output))} ({len(specs)} panel{'s' if len(specs) > 1 else ''}, {len(xs)} points"
               + (f"; marked: {'; '.join(marks)}" if marks else "") + ")", err=True)


def _xs(what: str, given: dict) -> list[int]:
    """The x values of a figure from the option that gives them (``given``: flag -> text):
    --seq (prefill), --context (decode), or the tokens 1..N of --new (generate)."""
    flag = {"prefill": "--seq", "decode": "--context", "generate": "--new"}.get(what)
    if flag is None:
        raise CostcalcError(f"plot: expected prefill, decode or generate, got {what!r}")
    text = given[flag]
    if text is None:
        raise CostcalcError(f"plot {what} needs {flag}")
    if what == "generate":
        if given["--prompt"] is None:
            raise CostcalcError("plot generate needs --prompt")
        tokens = number(text, "--new")
        if tokens > MAX_POINTS:
            raise CostcalcError(f"--new: at most {MAX_POINTS:,} tokens are drawn, got {tokens:,}")
        return list(range(1, tokens + 1))
    values = parse(text, flag)
    if len(values) > MAX_POINTS:
        raise CostcalcError(f"{flag}: at most {MAX_POINTS:,} points are drawn, got {len(values):,}")
    return list(values)


def _size(text: str) -> tuple[float, float]:
    try:
        w, h = (float(v) for v in text.lower().split("x"))
    except ValueError:
        raise CostcalcError(f"--size: {text!r} is not WxH in inches, e.g. 7x4.5") from None
    if not (1 <= w <= 40 and 1 <= h <= 40):
        raise CostcalcError(f"--size: {text!r} is outside 1..40 inches")
    return w, h
