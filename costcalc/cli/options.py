"""What every command shares: the model options, the output options, list parsing, emitting rows."""
from __future__ import annotations

import enum
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, Callable, Mapping, Optional, Sequence, Union

import typer

from .. import presets, ranges
from ..errors import CostcalcError
from ..render import FORMATS, SUFFIXES, Columns, length, render, write
from ..spec import ModelSpec
from ..vocab import TERM_ORDER


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
    "--preset", "-p", help="Built-in preset name (see 'costcalc presets'); a comma list compares several.")]
PresetFileOpt = Annotated[Optional[Path], typer.Option(
    "--preset-file", help="A preset JSON file of your own (same fields as presets/*.json).")]
ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", help="A Hugging Face config.json: the model it describes (see 'costcalc presets import').")]
MlaOpt = Annotated[str, typer.Option(
    "--mla", help="MLA form for models with MLA layers: auto (absorbed for decode steps, naive otherwise), "
                  "naive or absorbed.")]
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
    "--batch", "-b", help="Batch size B; a list or range sweeps (4,8 or 1:64:x2).")]
RANGE_HELP = "a list or range sweeps: 1024,4096 or 1k:128k:x2 or 512:4k:512 (k=1024, M=1024^2)"


def model(preset: Optional[str], preset_file: Optional[Path], config: Optional[Path] = None) -> ModelSpec:
    given = [flag for flag, value in (("--preset", preset), ("--preset-file", preset_file), ("--config", config))
             if value]
    if len(given) > 1:
        raise CostcalcError(f"give one of --preset, --preset-file or --config, not {' and '.join(given)}")
    if preset:
        return presets.load(preset)
    if preset_file:
        return presets.load_file(preset_file)
    if config:
        from .. import hf

        return hf.load(config)
    raise CostcalcError("no model: give --preset NAME, --preset-file PATH or --config config.json")


def conventions(choice: Convention) -> list[str]:
    if choice is Convention.both:
        return ["causal", "full"]
    if choice is Convention.all:
        return ["causal", "full", "tiled"]
    return [choice.value]


def int_list(text: Optional[str], option: str, minimum: int = 1) -> list[int]:
    """``"1024,4096"``, ``"1k:1M:x2"``, ... -> the integers (see ``costcalc.ranges``)."""
    return list(ranges.parse(text, option, minimum))


def models(preset: Optional[str], preset_file: Optional[Path], config: Optional[Path] = None) -> list[ModelSpec]:
    """One model, or several from ``--preset a,b`` (side by side)."""
    if preset and (preset_file or config):
        raise CostcalcError("give one of --preset, --preset-file or --config")
    if preset and "," in preset:
        names = [name.strip() for name in preset.split(",")]
        if not all(names):
            raise CostcalcError(f"--preset: empty name in {preset!r}")
        return [presets.load(name) for name in dict.fromkeys(names)]
    return [model(preset, preset_file, config)]


def interleave(tables: Sequence[Mapping[str, Sequence[Any]]], block: int = 1) -> Columns:
    """Tables over the same points, merged point by point: ``block`` rows of the first,
    then of the second, ... (conventions side by side for every point)."""
    merged = concat(tables)
    if len(tables) == 1:
        return merged
    n = len(next(iter(tables[0].values())))
    k = len(tables)
    order = [t * n + p * block + r for p in range(n // block) for t in range(k) for r in range(block)]
    return Columns({name: [col[i] for i in order] for name, col in merged.items()}, sparse=merged.sparse)


def concat(tables: Sequence[Mapping[str, Sequence[Any]]]) -> Columns:
    """Tables one after another; a column missing from some is None there.
    (A plain dict is a table from ``calc``: it has no missing cells.)"""
    if len(tables) == 1:
        return Columns(tables[0], sparse=getattr(tables[0], "sparse", set()))
    names: dict[str, None] = {}
    for t in tables:
        names.update(dict.fromkeys(t))
    out = Columns({name: [] for name in _ordered(list(names))}, sparse=set())
    for t in tables:
        known = getattr(t, "sparse", set())
        out.sparse |= known if known is not None else set(t)
        n = len(next(iter(t.values()), []))
        for name in names:
            if name in t:
                out[name].extend(t[name])
            else:
                out[name].extend([None] * n)
                out.sparse.add(name)
    return out


def tile(text: str) -> tuple[int, int]:
    """``"128"`` -> (128, 128); ``"128x64"`` -> (128, 64) (queries x keys)."""
    parts = text.lower().split("x")
    if len(parts) > 2 or any("," in p for p in parts):
        raise CostcalcError(f"--tile: {text!r} is not N or NxM")
    sizes = [int_list(p, "--tile")[0] for p in parts]
    return (sizes[0], sizes[-1])


def emit(rows: Union[Sequence[dict[str, Any]], Mapping[str, Sequence[Any]]], fmt: Optional[Format],
         output: Optional[Path], notes: Sequence[str] = ()) -> None:
    """Render rows (or columns) and print them, or write them to ``output`` whole (never half a file)."""
    chosen = fmt.value if fmt else SUFFIXES.get(output.suffix.lower(), "table") if output else "table"
    if output is None:
        if chosen == "csv":
            write(rows, chosen, sys.stdout)
        else:
            typer.echo(render(rows, chosen, notes), nl=False)
        return
    atomic_write(output, lambda handle: write(rows, chosen, handle, notes))
    count = length(rows)
    typer.echo(f"wrote {count} row{'' if count == 1 else 's'} ({chosen}) to {output}", err=True)


def write_text(path: Path, text: str) -> None:
    """Write a whole file atomically (never half a file), with the usual mode."""
    atomic_write(path, lambda handle: handle.write(text))


def atomic_write(path: Path, fill: Callable[[Any], Any]) -> None:
    """Fill a temporary file beside ``path``, then move it into place: a failure leaves no
    partial output. mkstemp makes 0600; the written file gets the usual mode."""
    target = path.resolve()
    if not target.parent.is_dir():
        raise CostcalcError(f"cannot write {str(path)!r}: no directory {str(target.parent)!r}")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            fill(handle)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _ordered(names: list[str]) -> list[str]:
    """Breakdown columns of several tables (dense and MoE) in the one term order."""
    terms = [f"{t}_flops" for t in TERM_ORDER if f"{t}_flops" in names]
    if not terms:
        return names
    at = min(names.index(t) for t in terms)
    rest = [n for n in names if n not in terms]
    return [n for n in rest if names.index(n) < at] + terms + [n for n in rest if names.index(n) > at]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
