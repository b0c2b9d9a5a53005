"""The typer application: thin commands over the library, registered in one place."""
from __future__ import annotations

from typing import Annotated

import typer

from . import compare_cmd, hardware, info, plot_cmd, verify_cmd, workloads

app = typer.Typer(
    name="costcalc",
    help="Exact FLOPs of decoder LLM inference, derived symbolically (matrix products, 1 multiply-add = 2 FLOPs).",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 80},
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"costcalc {__version__}")
        raise typer.Exit()


@app.callback()
def costcalc(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Say what happens behind a number (e.g. formulas derived "
                                               "again, and why) on stderr.")] = False,
) -> None:
    """Exact FLOPs of decoder LLM inference, derived symbolically (matrix products, 1 multiply-add = 2 FLOPs).

    Example: costcalc prefill --preset llama-3.1-8b --seq 4096
    """
    if verbose:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("costcalc: %(message)s"))
        logger = logging.getLogger("costcalc")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


app.command(short_help="B prompts of S tokens; varlen; over a cached prefix.")(workloads.prefill)
app.command(short_help="A chunk schedule: every chunk, the total, unchunked.")(workloads.chunked)
app.command(short_help="One decode step over T cached tokens, per token.")(workloads.decode)
app.command(short_help="Prefill plus N-1 decode steps: a whole generation.")(workloads.generate)
app.command(short_help="A training step (3 x forward) beside the 6P rule.")(workloads.train)
app.command(short_help="The derived formula of a workload, term by term.")(info.formula)
app.command(short_help="Where attention FLOPs equal the linear layers'.")(info.crossover)
app.command(short_help="Other tools' numbers, reproduced and explained.")(compare_cmd.compare)
app.command(short_help="MFU of a run under each convention and tool.")(compare_cmd.mfu)
app.command(short_help="Does it fit: weights, KV cache, largest batch.")(hardware.memory)
app.command(short_help="A figure: FLOPs by term against length.")(plot_cmd.plot)
app.command(short_help="Hold the formulas to a real torch decoder's FLOPs.")(verify_cmd.verify)
app.add_typer(info.presets_app, name="presets", short_help="Built-in models: list, show, import a config.")
app.add_typer(hardware.devices_app, name="devices", short_help="Device profiles: peaks, bandwidth, memory.")
