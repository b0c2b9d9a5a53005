"""Built-in presets (one JSON file per model in the repository's ``presets/``) and user files.

An installed costcalc (wheel or editable) carries ``presets/`` as the package
``costcalc.preset_data``; a source tree run with ``PYTHONPATH=.`` reads it in place.
"""
from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from . import jsonfile
from .errors import CostcalcError
from .spec import ModelSpec, from_dict



def _root():
    try:
        return resources.files("costcalc.preset_data")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "presets"


def _files() -> dict:
    root = _root()
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".json")}


def names() -> list[str]:
    """Names of the built-in presets, sorted."""
    return sorted(_files())


def load(name: str) -> ModelSpec:
    """A built-in preset by name; an unknown name suggests the nearest ones."""
    files = _files()
    if name not in files:
        near = difflib.get_close_matches(name, list(files), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else f"; see 'costcalc presets' ({len(files)} built in)"
        raise CostcalcError(f"unknown preset {name!r}{hint}")
    spec = from_dict(jsonfile.read(files[name], f"preset {name!r}"), origin=f"{name!r}")
    if spec.name != name:
        raise CostcalcError(f"preset {name!r}: field 'name' is {spec.name!r}, expected the file name")
    return spec


def load_file(path: str | Path) -> ModelSpec:
    """A preset from a user's JSON file."""
    return from_dict(jsonfile.read(path, "preset file"), origin=repr(str(path)))


def load_all() -> list[ModelSpec]:
    return [load(n) for n in names()]

