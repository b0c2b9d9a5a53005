"""The typer application: thin commands over the library, registered in one place."""
from __future__ import annotations

from typing import Annotated, Optional

import typer


SETTINGS = dict(
    name="costcalc",
    help=("Exact FLOPs of decoder LLM inference, derived symbolically (matrix products, 1 multiply-add = 2 "
          "FLOPs); with --device, the bytes moved, a roofline time and whether it fits."),
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 80,
                      "token_normalize_func": str.lower},   # names of choices (and options) in any case
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"costcalc {__version__}")
        raise typer.Exit()


def costcalc(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Say what happens behind a number (e.g. formulas derived "
                                               "again, and why) on stderr.")] = False,
) -> None:
    """Exact FLOPs of decoder LLM inference, derived symbolically (matrix products, 1 multiply-add
    = 2 FLOPs); with --device, the bytes moved, a roofline time and whether it fits.

    Example: costcalc prefill --preset llama-3.1-8b --seq 4096 --device h100
    """
    if verbose:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("costcalc: %(message)s"))
        logger = logging.getLogger("costcalc")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


# Every command once: name -> (module, function, the line the command list shows). A run
# builds only the command it is asked for (typer's work grows with every option of every
# command); help with no command lists them all.
COMMANDS = {
    "prefill": ("workloads", "prefill", "B prompts of S tokens; varlen; over a cached prefix."),
    "chunked": ("workloads", "chunked", "A chunk schedule: every chunk, the total, unchunked."),
    "decode": ("workloads", "decode", "One decode step over T cached tokens, per token."),
    "generate": ("workloads", "generate", "Prefill plus N-1 decode steps: a whole generation."),
    "serve": ("serve_cmd", "serve", "Continuous batching: TTFT, TPOT, tokens/s per GPU."),
    "speculate": ("speculate_cmd", "speculate", "Speculative decoding over K: per token, best K, break-even."),
    "train": ("workloads", "train", "A training step (3 x forward) beside the 6P rule."),
    "formula": ("info", "formula", "The derived formula of a workload, term by term."),
    "crossover": ("info", "crossover", "Where attention FLOPs equal the linear layers'."),
    "compare": ("compare_cmd", "compare", "Other tools' numbers, reproduced and explained."),
    "mfu": ("compare_cmd", "mfu", "MFU of a run under each convention and tool."),
    "plan": ("plan_cmd", "plan_command", "Serving plans: layouts x batch under latency targets."),
    "memory": ("hardware", "memory", "Does it fit: weights, KV cache, largest batch."),
    "plot": ("plot_cmd", "plot", "A figure: FLOPs by term against length."),
    "verify": ("verify_cmd", "verify", "Hold the formulas to a real torch decoder's FLOPs."),
}
GROUPS = {
    "presets": ("info", "presets_app", "Built-in models: list, show, import a config."),
    "devices": ("hardware", "devices_app", "Device profiles: peaks, bandwidth, memory."),
}


def build(only: Optional[str] = None) -> typer.Typer:
    """The application with every command, or with ``only`` that one (for a run of it)."""
    import importlib

    def load(module: str, name: str):
        return getattr(importlib.import_module(f".{module}", __package__), name)

    built = typer.Typer(**SETTINGS)
    built.callback()(costcalc)
    for name, (module, function, short) in COMMANDS.items():
        if only in (None, name):
            built.command(name=name, short_help=short)(load(module, function))
    for name, (module, group, short) in GROUPS.items():
        if only in (None, name):
            built.add_typer(load(module, group), name=name, short_help=short)
    return built


# Options other tools (vLLM, llm-analysis, calculators) name otherwise: what was written -> the
# options costcalc may mean, in order; "No such option" names those the command takes.
ALIASES = {
    **dict.fromkeys(("--seq", "--seq-len", "--seqlen", "--sequence-length", "--input-tokens", "--input-len",
                     "--prompt-len", "--prompt-tokens", "--isl"), ("--seq", "--context", "--prompt")),
    "--prompt": ("--seq",),
    **dict.fromkeys(("--output-tokens", "--output-len", "--new-tokens", "--max-new-tokens", "--max-tokens",
                     "--gen-len", "--osl"), ("--new",)),
    **dict.fromkeys(("--gpu", "--hardware", "--hw", "--accelerator", "--chip"), ("--device",)),
    **dict.fromkeys(("--model", "--model-name"), ("--preset", "--config")),
    **dict.fromkeys(("--batch-size", "--bs", "--batch_size"), ("--batch",)),
    **dict.fromkeys(("--dtype", "--precision"), ("--weight-dtype", "--act-dtype")),
    **dict.fromkeys(("--quantization", "--quant"), ("--weight-dtype",)),
    "--kv-cache-dtype": ("--kv-dtype",),
    **dict.fromkeys(("--tensor-parallel-size", "--tensor-parallel"), ("--tp",)),
    **dict.fromkeys(("--pipeline-parallel-size", "--pipeline-parallel"), ("--pp",)),
    **dict.fromkeys(("--expert-parallel-size", "--expert-parallel"), ("--ep",)),
    **dict.fromkeys(("--data-parallel-size", "--data-parallel"), ("--dp",)),
}


def no_such_option(option: str, command: str, takes: set[str]) -> Optional[str]:
    """The line for an option ``command`` does not take where ``ALIASES`` knows what was meant
    (``decode --seq``: "decode takes --context"); None where it does not."""
    meant = [o for o in ALIASES.get(option, ()) if o in takes and o != option]
    if not meant:
        return None
    return f"No such option: {option}; {command} takes {' or '.join(meant)}"


def for_arguments(args: list[str]) -> typer.Typer:
    """The application a command line needs: its command alone when it names one."""
    named = next((a for a in args if not a.startswith("-")), None)
    return build(named if named in COMMANDS or named in GROUPS else None)


def __getattr__(name: str):
    if name == "app":          # the whole application, for whoever imports it
        return build()
    raise AttributeError(name)
