"""The typer application: thin commands over the library, registered in one place."""
from __future__ import annotations

import typer

from . import info, plot_cmd, verify_cmd, workloads

app = typer.Typer(
    name="costcalc",
    help="Exact FLOPs of decoder LLM inference, derived symbolically (matrix products, 1 multiply-add = 2 FLOPs).",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

app.command()(workloads.prefill)
app.command()(workloads.chunked)
app.command()(workloads.decode)
app.command()(workloads.generate)
app.command()(workloads.train)
app.command()(info.formula)
app.command()(info.crossover)
app.command()(plot_cmd.plot)
app.command()(verify_cmd.verify)
app.add_typer(info.presets_app, name="presets")
