"""A hostile or odd cache (issue 21's audit, B1, C2, D3 and G6): an edited formula, a file copied
under another key, planted code with a valid signature, another user's or a world-writable
cache, a FIFO in place of a file, a failed write, an empty HOME or a relative XDG_CACHE_HOME.
Each is refused or worked around: the numbers stay right and nothing runs."""
import errno
import hashlib
import hmac
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from costcalc import cachefile, compiled, grammar, presets
from costcalc.blocks import coerce
from costcalc.vocab import Convention, Logits

ROOT = Path(__file__).resolve().parent.parent
KEY = "prefill-gqa.dense-causal-last"
POINT = presets.load("llama-3.1-8b").numbers() | {"B": 2, "S": 4096}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("COSTCALC_CACHE_DIR", str(root))
    compiled.forget()
    yield root
    compiled.forget()


def again(convention="causal"):
    compiled.forget()
    return compiled.get("prefill", coerce("dense"), Convention(convention), Logits.last)


def recipe_file(root, key=KEY):
    return root / compiled.core_hash() / f"{key}.json"


def write_signed(path, recipe, secret):
    """What someone holding ``secret`` (or, with a sha256 in its place, anyone) could write."""
    body = json.dumps(recipe).encode()
    digest = hmac.new(secret, body, "sha256").hexdigest() if secret else hashlib.sha256(body).hexdigest()
    path.write_bytes(b'{"hmac": "' + digest.encode() + b'", "recipe": ' + body + b"}\n")


def attention(recipe):
    return next(t for t in recipe["terms"] if t["name"] == "attention")


def cli(args, env, cwd, timeout=60):
    env = {**{k: v for k, v in os.environ.items() if k not in ("COSTCALC_CACHE_DIR", "XDG_CACHE_HOME", "HOME")},
           "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "costcalc", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


ARGS = ["prefill", "-p", "llama-3.1-8b", "--seq", "1024,4096", "-f", "csv"]


def test_an_edited_formula_with_a_recomputed_checksum_is_derived_again(tmp_path):
    env = {"COSTCALC_CACHE_DIR": str(tmp_path / "c")}
    right = cli(ARGS, env, tmp_path)
    assert right.returncode == 0
    path = recipe_file(tmp_path / "c")
    recipe = json.loads(path.read_bytes())["recipe"]
    attention(recipe)["expr"] = f"3*({attention(recipe)['expr']})//2"   # 1.5 times the attention FLOPs
    write_signed(path, recipe, secret=None)
    edited = cli(["-v", *ARGS], env, tmp_path)
    assert edited.returncode == 0 and edited.stdout == right.stdout
    assert f"deriving {KEY}: unusable (its signature does not hold" in edited.stderr
    assert "3*(" not in path.read_text()   # rewritten


def test_a_file_copied_under_another_key_is_derived_again(cache, caplog):
    full = again("full").evaluate(POINT)
    causal = again("causal").evaluate(POINT)
    assert full != causal
    recipe_file(cache, "prefill-gqa.dense-full-last").write_bytes(recipe_file(cache).read_bytes())
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again("full").evaluate(POINT) == full
    assert "deriving prefill-gqa.dense-full-last: unusable (stored for another key or core)" in caplog.text


@pytest.mark.parametrize("planted", [
    "__import__('os').system('touch {marker}')",
    "B.__class__.__base__.__subclasses__()",
    "open('{marker}', 'w')",
    "(lambda: open('{marker}', 'w'))()",
    "_min.__globals__",
    "sum(open('{marker}', 'w') for t in range(1))",
    "sum(B for t in range(1) if open('{marker}', 'w'))",
    "_min(B, key=print)",
    "B[0]", "'text'", "1.5", "B < S", "B ** S", "B ** 100", "[B]", "B if S else L", "B @ S", "B % S",
    "B; import os", "print(B)",
])
def test_planted_code_with_a_valid_signature_never_runs(cache, tmp_path, caplog, planted):
    good = again().evaluate(POINT)
    marker = tmp_path / "marker"
    path = recipe_file(cache)
    recipe = json.loads(path.read_bytes())["recipe"]
    attention(recipe)["expr"] = planted.format(marker=marker)
    write_signed(path, recipe, (cache / "secret").read_bytes())   # as if the secret had leaked
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again().evaluate(POINT) == good
    assert f"deriving {KEY}: unusable (ValueError: attention:" in caplog.text
    assert not marker.exists()


def test_the_grammar_names_the_helpers_compiled_defines():
    assert set(grammar.CALLS) == set(compiled.CALLS)
    assert grammar.check("sum(_min(S, t) for t in range(0, _cdiv(S, b_q)))", ["S", "b_q"])
    with pytest.raises(ValueError, match="hides a parameter"):
        grammar.check("sum(S for S in range(1))", ["S"])
    with pytest.raises(ValueError, match="not a parameter"):
        grammar.check("sum(t for t in range(1)) + t", ["S"])


@pytest.mark.parametrize("params", [["__import__"], ["sum"], ["B", "B"], ["not an identifier"], ["zz"]])
def test_parameters_outside_the_recipe_are_refused(cache, caplog, params):
    good = again().evaluate(POINT)
    path = recipe_file(cache)
    recipe = json.loads(path.read_bytes())["recipe"]
    attention(recipe)["params"] = params
    write_signed(path, recipe, (cache / "secret").read_bytes())
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again().evaluate(POINT) == good
    assert f"deriving {KEY}: unusable (ValueError:" in caplog.text


@pytest.mark.parametrize("what, mode", [("root", 0o777), ("core", 0o777), ("root", 0o720), ("file", 0o666),
                                        ("secret", 0o644)])
def test_a_cache_open_to_others_is_not_used(cache, caplog, what, mode):
    good = again().evaluate(POINT)
    path = {"root": cache, "core": cache / compiled.core_hash(), "file": recipe_file(cache),
            "secret": cache / "secret"}[what]
    path.chmod(mode)
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again().evaluate(POINT) == good
    assert f"deriving {KEY}:" in caplog.text and "group or others" in caplog.text


def test_a_cache_owned_by_another_user_is_not_used(cache, caplog, monkeypatch):
    good = again().evaluate(POINT)
    before = recipe_file(cache).read_bytes()
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again().evaluate(POINT) == good
    assert f"not used: owned by uid {os.getuid()}, not by you (uid 4242)" in caplog.text
    assert recipe_file(cache).read_bytes() == before   # derived in memory: nothing written there


@pytest.mark.parametrize("link", [False, True])
def test_a_fifo_in_place_of_a_cache_file_does_not_block(tmp_path, link):
    env = {"COSTCALC_CACHE_DIR": str(tmp_path / "c")}
    right = cli(ARGS, env, tmp_path)
    path = recipe_file(tmp_path / "c")
    path.unlink()
    if link:
        os.mkfifo(tmp_path / "fifo")
        path.symlink_to(tmp_path / "fifo")
    else:
        os.mkfifo(path)
    done = cli(["-v", *ARGS], env, tmp_path, timeout=30)
    assert done.returncode == 0 and done.stdout == right.stdout
    assert ("a symbolic link" if link else "is not a regular file") in done.stderr


def test_a_fifo_as_the_secret_does_not_block(cache, caplog):
    good = again().evaluate(POINT)
    (cache / "secret").unlink()
    os.mkfifo(cache / "secret")
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again().evaluate(POINT) == good
    assert "secret is not a regular file" in caplog.text


def test_a_file_larger_than_the_limit_is_not_read(cache, caplog, monkeypatch):
    good = again().evaluate(POINT)
    monkeypatch.setattr(cachefile, "LIMIT", 100)
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again().evaluate(POINT) == good
    assert "is larger than 100 bytes" in caplog.text


def test_a_failed_write_leaves_no_temp_file(cache, caplog, monkeypatch):
    good = again().evaluate(POINT)
    path = recipe_file(cache)
    path.unlink()
    path.mkdir()   # a folder where the file goes: the rename fails
    assert again().evaluate(POINT) == good
    assert path.is_dir() and not list(path.parent.glob(".*.tmp"))

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    path.rmdir()
    monkeypatch.setattr(os, "replace", full)
    with caplog.at_level(logging.INFO, logger="costcalc.compiled"):
        assert again().evaluate(POINT) == good
    assert "could not cache" in caplog.text and "No space left" in caplog.text
    assert not path.exists() and not list(path.parent.glob(".*.tmp"))


@pytest.mark.parametrize("home, xdg, expected", [
    ("", None, None), ("/", None, None), ("relhome", None, None), (None, None, None),
    ("/.", None, None), ("//", None, None), ("/h/..", None, None), ("/", "/", None), ("/h", "/./", "/h/.cache/costcalc"),
    ("/h/./", None, "/h/.cache/costcalc"),
    ("/h", "relcache", "/h/.cache/costcalc"), ("/h", "/x", "/x/costcalc"), ("", "/x", "/x/costcalc")])
def test_the_cache_folder_is_never_the_root_nor_the_working_directory(monkeypatch, home, xdg, expected):
    monkeypatch.delenv("COSTCALC_CACHE_DIR", raising=False)
    for name, value in (("HOME", home), ("XDG_CACHE_HOME", xdg)):
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    root, why = cachefile.locate()
    assert (str(root) if root else None) == expected
    assert bool(why) == (root is None)


def test_a_relative_costcalc_cache_dir_is_made_absolute_once(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCALC_CACHE_DIR", "rel-cache")
    monkeypatch.chdir(tmp_path)
    assert cachefile.cache_dir() == tmp_path / "rel-cache"
    monkeypatch.chdir(ROOT)
    assert cachefile.cache_dir() == tmp_path / "rel-cache"


def test_no_usable_home_means_no_cache_not_one_at_the_root(tmp_path):
    existed = os.path.exists("/.cache/costcalc")
    done = cli(["-v", *ARGS], {"HOME": ""}, tmp_path)
    assert done.returncode == 0 and "nor HOME='' is an absolute path below /" in done.stderr
    assert os.path.exists("/.cache/costcalc") == existed and not os.listdir(tmp_path)


def test_a_relative_xdg_cache_home_creates_nothing_in_the_working_directory(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    done = cli(ARGS, {"HOME": str(home), "XDG_CACHE_HOME": "relcache"}, work)
    assert done.returncode == 0 and not os.listdir(work)
    assert recipe_file(home / ".cache" / "costcalc").is_file()


def test_processes_racing_on_an_empty_cache_agree(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COSTCALC_CACHE_DIR": str(tmp_path / "c")}
    args = [sys.executable, "-m", "costcalc", "prefill", "-p", "llama-3.1-8b", "--seq", "1024,4096",
            "--convention", "both", "-f", "json"]
    runs = [subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(4)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert all(run.returncode == 0 for run in runs) and len({out for out, _ in outputs}) == 1
    last = subprocess.run([*args[:3], "-v", *args[3:]], env=env, cwd=tmp_path, capture_output=True, timeout=60)
    assert last.stdout == outputs[0][0] and b"deriving" not in last.stderr   # every file signed with the one secret
    assert not list((tmp_path / "c").rglob(".*.tmp"))
