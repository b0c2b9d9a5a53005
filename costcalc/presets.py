"""Built-in presets (one JSON file per model in the repository's ``presets/``) and user files.

An installed costcalc (wheel or editable) carries ``presets/`` as the package
``costcalc.preset_data``; a source tree run with ``PYTHONPATH=.`` reads it in place.
"""
from __future__ import annotations

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


def load(name: str) -> ModelSpec:
    """A built-in preset by name; an unknown name suggests the nearest ones."""
    spec = from_dict(jsonfile.built_in(_root(), name, "preset", "costcalc presets"), origin=f"preset {quote(name)}")
    if spec.name != name:
        raise CostcalcError(f"preset {quote(name)}: field 'name' is {quote(spec.name)}, expected the file name")
    return spec


def load_file(path: str | Path) -> ModelSpec:
    """A preset from a user's JSON file."""
    return from_dict(jsonfile.read(path, "preset file"), origin=f"preset file {str(path)!r}")


def load_all() -> list[ModelSpec]:
    return [load(n) for n in names()]

