"""Built-in presets (one JSON file per model in the repository's ``presets/``), the user's
own presets folder, and user files.

An installed costcalc (wheel or editable) carries ``presets/`` as the package
``costcalc.preset_data``; a source tree run with ``PYTHONPATH=.`` reads it in place.

The user's presets are ``NAME.json`` files in ``$COSTCALC_HOME/presets`` (default
``$XDG_CONFIG_HOME/costcalc/presets``, else ``~/.config/costcalc/presets``): ``-p NAME`` finds
them after the built-in ones (a built-in name wins), and ``costcalc presets import --user``
writes there.
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from . import jsonfile
from .errors import CostcalcError, quote
from .spec import ModelSpec, from_dict



def _root():
    try:
        return resources.files("costcalc.preset_data")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "presets"


def names() -> list[str]:
    """Names of the built-in presets, sorted."""
    return jsonfile.names(_root())


def user_folder() -> Path:
    """The folder of the user's own presets (it need not exist)."""
    home = os.environ.get("COSTCALC_HOME")
    if home:
        return Path(home) / "presets"
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "costcalc" / "presets"


def load(name: str) -> ModelSpec:
    """A preset by name, in any case: a built-in one, else one of the user's folder; an unknown
    name suggests the nearest ones, and where a preset of one's own goes."""
    path = jsonfile.find(_root(), name)
    mine = user_folder()
    if path is None and name.strip() and mine.is_dir():
        path = jsonfile.find(mine, name)
    if path is None:
        try:
            jsonfile.built_in(_root(), name, "preset", "costcalc presets")   # the error, with the nearest names
        except CostcalcError as exc:
            raise CostcalcError(f"{exc}{_own_hint(name, mine)}") from None
    spec = from_dict(jsonfile.read(path, f"preset {quote(name)}"), origin=f"preset {quote(name)}")
    if spec.name != path.name[:-5]:
        raise CostcalcError(f"preset {quote(name)}: field 'name' is {quote(spec.name)}, expected the file name")
    return spec


def _own_hint(name: str, mine: Path) -> str:
    """Where a preset of one's own is read from: a file here named like it, or the user's folder."""
    here = Path(f"{name}.json")
    if name.strip() and "/" not in name and here.is_file():
        return f"; {here} here is a file: give --preset-file {here} (or move it into {mine} for -p)"
    return f"; a preset of your own: --preset-file PATH, or NAME.json in {mine} for -p NAME"


def load_file(path: str | Path) -> ModelSpec:
    """A preset from a user's JSON file; a Hugging Face config.json given as one says --config."""
    data = jsonfile.read(path, "preset file")
    if isinstance(data, dict) and "model_type" in data and "name" not in data:
        raise CostcalcError(f"preset file {str(path)!r} is a Hugging Face config.json (it has model_type): "
                            f"give it as --config {path}")
    return from_dict(data, origin=f"preset file {str(path)!r}")


def load_all() -> list[ModelSpec]:
    return [load(n) for n in names()]

