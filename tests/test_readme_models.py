"""The README's model counts and list are the library's: the families the config import maps, and
every preset by name."""
import re
from pathlib import Path

from costcalc import presets
from costcalc.hf.families import MAPPERS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_the_readme_counts_the_families_the_import_maps():
    stated = re.search(r"a Hugging Face config of one of (\d+) decoder families", README)
    assert stated and int(stated.group(1)) == len(MAPPERS)


def test_the_readme_lists_every_preset_and_counts_them():
    section = README.split("### Models", 1)[1].split("```", 1)[0]
    count = re.search(r"(\d+) presets, each with its source", section)
    assert count and int(count.group(1)) == len(presets.names())
    listed = {token.rstrip(".") for token in re.findall(r"[\w.-]+", section)}   # a sentence's full stop
    for short in re.findall(r"([\w.]+(?:-[\w.]+)*?)-(\w+(?:/\w+)+)", section):   # llama-3.1-8b/70b/405b
        listed |= {f"{short[0]}-{size}" for size in short[1].split("/")}
    missing = [name for name in presets.names() if name not in listed]
    assert not missing, missing
