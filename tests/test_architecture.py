"""The layers of docs/architecture.md, held mechanically: each module imports only its own
layer and those below (a lazy import inside a function counts; an ``if TYPE_CHECKING:``
import does not); no import cycle; ``compiled`` reached through one module; no signature
above the core taking more than five parameters."""
import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "costcalc"

# Bottom to top, as docs/architecture.md draws them. A name ending in ".*" is a package's
# modules; the package's __init__ is named by itself.
LAYERS = (
    ("names", ("errors", "vocab", "blocks", "symbols", "units", "notes", "roots", "ranges", "jsonfile", "outputs",
               "rows", "printable", "weights", "collectives", "pipeline", "forked")),
    ("models", ("spec", "presets", "devices", "measured", "measured_fused", "measured_comm", "layout", "stages", "hf",
                "hf.*")),
    ("core", ("core", "core.*", "formulas", "codegen", "compiled", "cachefile", "grammar")),
    ("evaluation", ("evaluate",)),
    ("calculator", ("params", "roofline", "memory", "fitting", "crossover", "composites", "parallel", "training",
                    "serving", "speculation", "steptimes")),
    ("api", ("calc", "plan")),
    ("presentation", ("render", "terminal", "plot", "peers", "peers.*")),
    ("cli", ("costcalc", "__main__", "cli", "cli.*")),
)
MAX_PARAMETERS = 5


def name_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "costcalc"


MODULES = {name_of(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> int:
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            if module == member or (member.endswith(".*") and module.startswith(member[:-1])):
                return index
    raise AssertionError(f"costcalc.{module} is in no layer of LAYERS (docs/architecture.md): give it one")


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(module: str) -> set[str]:
    """The modules of costcalc that ``module`` imports, at the top or inside functions."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "costcalc":
                target = node.module.removeprefix("costcalc").lstrip(".")
            else:
                target = None
            if target is not None:
                for alias in node.names:     # ``from . import calc`` names a module; else the module itself
                    sub = f"{target}.{alias.name}" if target else alias.name
                    found.add(sub if sub in MODULES else target or "costcalc")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "costcalc":
                    found.add(alias.name.removeprefix("costcalc").lstrip(".") or "costcalc")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    found.discard(module)
    return {m for m in found if m in MODULES}


@functools.lru_cache(maxsize=None)
def graph() -> dict[str, set[str]]:
    """Every module's costcalc imports, parsed once, when a test first asks (not at collection)."""
    return {m: imports(m) for m in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_nothing_from_a_layer_above_it(module):
    own = layer(module)
    above = sorted(m for m in graph()[module] if layer(m) > own)
    assert not above, (f"costcalc.{module} ({LAYERS[own][0]}) imports {', '.join(above)} from above it; "
                       "move what it needs down, or the module up")


def test_no_import_cycle():
    cycles = []
    state: dict[str, int] = {}   # 1: on the path, 2: done

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph()[module]):
            if state.get(dep) == 1:
                cycle = path[path.index(dep):]
                cycles.append(" -> ".join(cycle + [dep]))
            elif dep not in state:
                walk(dep, path + [dep])
        state[module] = 2

    for module in sorted(graph()):
        if module not in state:
            walk(module, [module])
    assert not cycles, cycles


def test_compiled_is_reached_through_the_query_alone():
    """``evaluate.Query.recipes`` is the one door to the compiled recipes (the cache's own
    ``codegen`` aside)."""
    assert {m for m, deps in graph().items() if "compiled" in deps} - {"codegen"} == {"evaluate"}


def _commands() -> set[tuple[str, str]]:
    """The typer commands and callbacks: registered in cli.app, or decorated on a Typer."""
    tree = ast.parse(MODULES["cli.app"].read_text())
    table = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "COMMANDS")
    out = {(f"cli.{ast.literal_eval(v)[0]}", ast.literal_eval(v)[1]) for v in table.values}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "attr", "") in ("command", "callback")
                    for d in node.decorator_list):
                out.add((module, node.name))
    out.add(("cli.app", "costcalc"))   # the application's callback
    return out


def test_no_signature_above_the_core_takes_more_than_five_parameters():
    """A long list of loose arguments is a record waiting to be named (a ``Query``, the
    ``Options``). Excepted: the typer commands, and the keyword API of ``calc``."""
    commands, core = _commands(), LAYERS.index(next(x for x in LAYERS if x[0] == "core"))
    tree = ast.parse(MODULES["calc"].read_text())
    public = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", "") == "__all__")
    long = []
    for module, path in sorted(MODULES.items()):
        if layer(module) <= core:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if (module, node.name) in commands or (module == "calc" and node.name in public):
                continue
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
            count = len(names) - (names[:1] in (["self"], ["cls"])) + (a.vararg is not None) + (a.kwarg is not None)
            if count > MAX_PARAMETERS:
                long.append(f"costcalc.{module}.{node.name} ({count})")
    assert not long, long
