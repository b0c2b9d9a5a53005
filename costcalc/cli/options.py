"""What every command shares: the model options, the output options, list parsing, emitting rows."""
from __future__ import annotations

import enum
import itertools
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional, Sequence

import typer

from .. import presets
from ..errors import CostcalcError
from ..render import FORMATS, SUFFIXES, render
from ..spec import ModelSpec


class Format(str, enum.Enum):
    table = "table"
    csv = "csv"
    markdown = "markdown"
    json = "json"


class Convention(str, enum.Enum):
    causal = "causal"
    full = "full"
    tiled = "tiled"
    both = "both"   # causal and full
    all = "all"     # causal, full and tiled


class Logits(str, enum.Enum):
    last = "last"
    all = "all"


assert {f.value for f in Format} == set(FORMATS)

PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", "-p", help="Built-in preset name (see 'costcalc presets').")]
PresetFileOpt = Annotated[Optional[Path], typer.Option(
    "--preset-file", help="A preset JSON file of your own (same fields as presets/*.json).")]
FormatOpt = Annotated[Optional[Format], typer.Option(
    "--format", "-f", help="Output format [default: from --output's suffix, else table].")]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write to this file instead of standard output.")]
ConventionOpt = Annotated[Convention, typer.Option(
    help="Attention convention: causal (legal pairs), full (rectangle), tiled (blocks a "
         "tile kernel visits), both (causal+full) or all three.")]
TileOpt = Annotated[str, typer.Option(
    help="Tile of the tiled convention: queries x keys, e.g. 128 or 128x64.")]
LogitsOpt = Annotated[Logits, typer.Option(
    help="LM head on the last position of each sequence, or on all positions.")]
BatchOpt = Annotated[str, typer.Option(
    "--batch", "-b", help="Batch size B; a comma list sweeps.")]


def model(preset: Optional[str], preset_file: Optional[Path]) -> ModelSpec:
    if preset and preset_file:
        raise CostcalcError("give --preset or --preset-file, not both")
    if preset:
        return presets.load(preset)
    if preset_file:
        return presets.load_file(preset_file)
    raise CostcalcError("no model: give --preset NAME or --preset-file PATH")


def conventions(choice: Convention) -> list[str]:
    if choice is Convention.both:
        return ["causal", "full"]
    if choice is Convention.all:
        return ["causal", "full", "tiled"]
    return [choice.value]


def int_list(text: Optional[str], option: str, minimum: int = 1) -> list[int]:
    """``"1024,4096"`` -> ``[1024, 4096]``; each item an integer >= ``minimum``."""
    if text is None:
        return []
    items = [item.strip() for item in text.split(",")]
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise CostcalcError(f"{option}: {item!r} is not an integer") from None
        if value < minimum:
            kind = "positive" if minimum == 1 else f">= {minimum}"
            raise CostcalcError(f"{option}: {value} is not {kind}")
        values.append(value)
    return values


def tile(text: str) -> tuple[int, int]:
    """``"128"`` -> (128, 128); ``"128x64"`` -> (128, 64) (queries x keys)."""
    parts = text.lower().split("x")
    if len(parts) > 2 or any("," in p for p in parts):
        raise CostcalcError(f"--tile: {text!r} is not N or NxM")
    sizes = [int_list(p, "--tile")[0] for p in parts]
    return (sizes[0], sizes[-1])


def product(**lists: Sequence[Any]) -> list[dict[str, Any]]:
    """Every combination of the given lists, as keyword dicts (a sweep)."""
    names = list(lists)
    return [dict(zip(names, combo)) for combo in itertools.product(*lists.values())]


def emit(rows: Sequence[dict[str, Any]], fmt: Optional[Format], output: Optional[Path],
         notes: Sequence[str] = ()) -> None:
    """Render the rows and print them or write them to ``output`` whole (never half a file)."""
    chosen = fmt.value if fmt else SUFFIXES.get(output.suffix.lower(), "table") if output else "table"
    text = render(rows, chosen, notes)
    if output is None:
        typer.echo(text, nl=False)
        return
    target = output.resolve()
    if not target.parent.is_dir():
        raise CostcalcError(f"cannot write {str(output)!r}: no directory {str(target.parent)!r}")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    typer.echo(f"wrote {len(rows)} rows ({chosen}) to {output}", err=True)
