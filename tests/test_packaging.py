"""What `pip install .` ships: every package of the source tree, and the data files."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_of_the_tree_is_listed_for_the_wheel():
    text = (ROOT / "pyproject.toml").read_text()   # read as text: tomllib is Python 3.11+
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"^packages = \[(.*?)\]", text, re.M | re.S).group(1)))
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "costcalc").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    found |= {"costcalc." + ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "verify").rglob("__init__.py")
              if "__pycache__" not in p.parts}      # verify/ ships as costcalc.verify, never a top-level `verify`
    assert found <= listed, f"not shipped by `pip install .`: {sorted(found - listed)}"
    # core has no __init__.py (a namespace package): it must be listed too, as must the data
    assert {"costcalc.core", "costcalc.preset_data"} <= listed
    data = re.search(r'^"costcalc.preset_data" = \[(.*?)\]', text, re.M).group(1)
    assert '"*.json"' in data and '"devices/*.json"' in data
    modules = {p.parent for p in (ROOT / "costcalc").rglob("*.py") if "__pycache__" not in p.parts}
    packaged = {ROOT / Path(*name.split(".")) for name in listed if name.startswith("costcalc")}
    assert modules <= packaged, f"modules in folders no package lists: {sorted(map(str, modules - packaged))}"


def test_verify_ships_inside_costcalc_and_runs_from_the_tree():
    """The top-level verify/ is costcalc.verify: mapped so in the wheel, and a link in the tree
    (an editable install, or a bare checkout with PYTHONPATH=.: verify/gpu_check.sh)."""
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^"costcalc.verify" = "verify"', text, re.M)
    link = ROOT / "costcalc" / "verify"
    assert link.is_symlink() and link.resolve() == (ROOT / "verify").resolve()
    assert '"verify"' not in re.search(r"^packages = \[(.*?)\]", text, re.M | re.S).group(1)
