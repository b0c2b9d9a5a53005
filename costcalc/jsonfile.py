"""Reading a JSON file a user names (a preset, a config, a device profile): every failure is
one ``CostcalcError`` line naming the file and the problem. Every file read is noted
(``outputs.reading``): a command never replaces a file it reads."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

from . import outputs

MAX_BYTES = 50 * 2**20   # no model description is this large


def read(path: Union[str, Path], what: str) -> Any:
    """The parsed JSON of ``path``; ``what`` names it in errors ("preset file", "config")."""
    text = str(path)
    p = Path(path)
    try:
        if p.is_dir():
            raise IsADirectoryError(21, "is a directory")
        with open(p, "rb") as handle:
            outputs.reading(os.fstat(handle.fileno()), f"{what} {text!r}")
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _error(f"cannot read {what} {text!r}: {exc.strerror or exc}")
    if len(raw) > MAX_BYTES:
        raise _error(f"{what} {text!r}: larger than {MAX_BYTES // 2**20} MiB; not a JSON description")
    try:
        decoded = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _error(f"{what} {text!r}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})")
    try:
        return json.loads(decoded, object_pairs_hook=_unique)
    except _Duplicate as exc:
        from .errors import quote

        raise _error(f"{what} {text!r}: field {quote(exc.args[0])} appears twice in one object (which one is meant?)")
    except json.JSONDecodeError as exc:
        raise _error(f"{what} {text!r}: not valid JSON ({exc.msg} at line {exc.lineno})")
    except RecursionError:
        raise _error(f"{what} {text!r}: nested too deeply")
    except ValueError as exc:    # an integer past Python's 4,300-digit conversion limit
        raise _error(f"{what} {text!r}: not a JSON description ({str(exc).split(';')[0]})")


class _Duplicate(ValueError):
    pass


def kind(value: Any) -> str:
    """A JSON value's kind as JSON names it (object, array, string, number, true/false, null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), "a number")


def _unique(pairs: list) -> dict:
    """A JSON object whose keys are each given once (json keeps the last silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise _Duplicate(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def built_in(folder, name: str, kind: str, listing: str):
    """The JSON file ``name`` of a folder of built-in data (presets, devices), the name matched
    in any case (``H100`` is h100); an unknown name is an error that suggests the nearest
    ones, or says where to see them all."""
    import difflib

    found = find(folder, name)
    if found is None:
        files = names(folder)
        near = difflib.get_close_matches(name.lower(), files, n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(near)}?" if near else f"; see '{listing}' ({len(files)} built in)"
        raise _error(f"unknown {kind} {name!r}{hint}")
    return read(found, f"{kind} {name!r}")


def find(folder, name: str):
    """The file ``name``.json of ``folder``: its own spelling, else the one file whose name
    differs only in case; None where there is none (or several)."""
    files = {p.name[:-5]: p for p in folder.iterdir() if p.name.endswith(".json")}
    if name in files:
        return files[name]
    folded = [p for stem, p in files.items() if stem.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def names(folder) -> list[str]:
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def _error(message: str):
    from .errors import CostcalcError

    return CostcalcError(message)
