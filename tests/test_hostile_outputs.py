"""Hostile places for output: a target that is an input, someone else's file, a link whose
target names another format, long names, a removed working directory, closed or non-UTF-8
standard streams, and signals in the middle of a write.

What a single process can show runs in-process (``main``); signals, closed descriptors and
stream encodings run ``python -m costcalc`` (or the console script) as a subprocess, with a
timeout. Nothing here touches a system file: links, FIFOs and pipes are made in tmp_path.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_run import one_error, run
from costcalc import calc, jsonfile, outputs
from costcalc.errors import CostcalcError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "data" / "hf-configs" / "llama-3.1-8b.json"
PRESET = ROOT / "presets" / "llama-3.1-8b.json"
TOY = ROOT / "presets" / "toy.json"
DEVICE = ROOT / "presets" / "devices" / "h100.json"
COSTCALC = [sys.executable, "-m", "costcalc"]
BIG = ["prefill", "-p", "toy", "--seq", "1:200000"]     # about 1 s to compute, 0.6 s to write here


def costcalc(*args, cwd, env=None, shell=None):
    """Run the CLI as a process: (exit status, stdout, stderr). ``shell``: a redirection such
    as ``>&-`` applied by /bin/sh before costcalc starts."""
    command = [*COSTCALC, *args]
    if shell:
        command = ["/bin/sh", "-c", f'exec "$@" {shell}', "sh", *command]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})
    return done.returncode, done.stdout, done.stderr


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture
def no_work(monkeypatch):
    """Any computation fails the test: a refusal must come before the work."""
    def computed(*args, **kwargs):
        raise AssertionError("the work ran before the refusal")
    monkeypatch.setattr(calc, "table", computed)


# --- A1: an input is never replaced ----------------------------------------------------

INPUTS = {"--config": CONFIG, "--preset-file": PRESET, "--device-file": DEVICE}


def _input_args(option: str, path: Path) -> list[str]:
    model = [] if option != "--device-file" else ["-p", "llama-3.1-8b"]
    return ["prefill", *model, option, str(path), "--seq", "1024"]


@pytest.mark.parametrize("option", list(INPUTS))
@pytest.mark.parametrize("how", ["same name", "-o a link to it", "read through a link", "-o a hard link",
                                 "-o through /proc"])
def test_an_input_is_never_the_output(option, how, tmp_path, capsys, no_work):
    source = tmp_path / "input.json"
    source.write_bytes(INPUTS[option].read_bytes())
    given, output = source, source
    if how == "-o a link to it":
        output = tmp_path / "out.json"
        output.symlink_to(source.name)
    elif how == "read through a link":
        given = tmp_path / "in-link.json"
        given.symlink_to(source.name)
    elif how == "-o a hard link":
        output = tmp_path / "hard.json"
        os.link(source, output)
    elif how == "-o through /proc":     # a path under /proc that is no descriptor: the file it leads to
        output = Path(f"/proc/self/root{source}")
    code, out, err = run(capsys, *_input_args(option, given), "-o", str(output))
    assert code == 2 and one_error(err, "this command reads"), err
    assert str(output) in err and out == ""
    assert source.read_bytes() == INPUTS[option].read_bytes()
    assert temporaries(tmp_path) == []


def test_standard_output_sent_to_an_input_is_refused(tmp_path):
    """``costcalc --config c.json >> c.json``: stdout is the input, appended to; refused."""
    source = tmp_path / "input.json"
    source.write_bytes(CONFIG.read_bytes())
    code, out, err = costcalc("prefill", "--config", "input.json", "--seq", "4", "-o", "input.json",
                              cwd=tmp_path, shell=">> input.json")
    assert code == 2 and one_error(err, "this command reads"), err
    assert source.read_bytes() == CONFIG.read_bytes()


def test_a_regular_file_reached_under_proc_is_replaced_not_appended_to(tmp_path, capsys):
    out = tmp_path / "out.csv"
    out.write_text("old\n")
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-f", "csv", "-o", f"/proc/self/root{out}")
    assert code == 0, err
    text = out.read_text()
    assert not text.startswith("old") and text.count("preset,") == 1 and temporaries(tmp_path) == []


def test_presets_import_with_force_does_not_replace_its_config(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_bytes(CONFIG.read_bytes())
    code, _, err = run(capsys, "presets", "import", str(config), "--name", "mine", "-o", str(config), "--force")
    assert code == 2 and one_error(err, "this command reads") and config.read_bytes() == CONFIG.read_bytes()


def test_an_input_moved_onto_the_target_during_the_work_is_not_replaced(tmp_path):
    path = tmp_path / "out.json"
    dest = outputs.target(path)             # a new file when checked
    path.write_bytes(PRESET.read_bytes())   # then an input appears there, and is read
    jsonfile.read(path, "preset file")
    with pytest.raises(CostcalcError, match="this command reads"):
        outputs.write_text(dest, "[]\n")
    assert path.read_bytes() == PRESET.read_bytes() and temporaries(tmp_path) == []


def test_an_output_of_an_earlier_command_may_be_read_then_written(tmp_path, capsys):
    """The files read are this command's: a later command in the same process starts afresh."""
    preset = tmp_path / "p.json"
    preset.write_bytes(TOY.read_bytes())
    assert run(capsys, "prefill", "--preset-file", str(preset), "--seq", "4", "-f", "csv")[0] == 0
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-f", "json", "-o", str(preset))
    assert code == 0, err


# --- A2: owner and group ---------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can give a file away")
def test_a_replaced_file_keeps_its_owner_and_group(tmp_path, capsys):
    target = tmp_path / "owned.csv"
    target.write_text("x\n")
    os.chown(target, 65534, 65534)
    os.chmod(target, 0o640)
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(target))
    assert code == 0 and "warning" not in err, err
    info = os.stat(target)
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (65534, 65534, 0o640)
    assert target.read_text().startswith("preset,")


def test_an_owner_that_cannot_be_kept_is_one_warning(tmp_path, capsys, monkeypatch):
    target = tmp_path / "theirs.csv"
    target.write_text("x\n")
    mine = os.stat(target)
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: os.stat_result(
        (*tuple(mine)[:4], mine.st_uid + 1, mine.st_gid + 1, *tuple(mine)[6:]))
        if str(p) in (str(target), os.path.realpath(target)) else real_stat(p, *a, **k))   # someone else's file, as seen before the move

    def refused(*args):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "chown", refused)
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(target))
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warnings) == 1 and "owner" in warnings[0] and "group" in warnings[0], err
    assert target.read_text().startswith("preset,") and temporaries(tmp_path) == []


# --- B4, G3: the name typed --------------------------------------------------------------

def test_the_format_follows_the_name_typed_not_the_link_target(tmp_path, capsys):
    store = tmp_path / "store_1234"
    store.write_text("x\n")
    (tmp_path / "result.csv").symlink_to(store.name)
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(tmp_path / "result.csv"))
    assert code == 0 and "(csv)" in err and store.read_text().startswith("preset,workload,")
    (tmp_path / "y.txt").write_text("x\n")
    (tmp_path / "r.csv").symlink_to("y.txt")
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-f", "csv", "-o", str(tmp_path / "r.csv"))
    assert code == 0 and "warning" not in err, err      # the user typed .csv


def test_the_wrote_line_escapes_control_characters(tmp_path, capsys):
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(tmp_path / "new\nline.csv"))
    assert code == 0 and err.count("\n") == 1 and err.rstrip().endswith("new\\nline.csv"), err
    assert (tmp_path / "new\nline.csv").read_text().startswith("preset,")


def test_a_name_of_255_bytes_is_written_and_256_refused_before_the_work(tmp_path, capsys, monkeypatch):
    longest = tmp_path / ("a" * 251 + ".csv")
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(longest))
    assert code == 0 and longest.read_text().startswith("preset,"), err
    assert temporaries(tmp_path) == []
    monkeypatch.setattr(calc, "table", lambda *a, **k: pytest.fail("the work ran"))
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(tmp_path / ("a" * 252 + ".csv")))
    assert code == 2 and one_error(err, "too long"), err


# --- E7: the working directory removed ---------------------------------------------------

def test_a_relative_output_in_a_removed_directory_is_one_line(tmp_path, capsys, monkeypatch, no_work):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", "r.csv")
    assert code == 2 and one_error(err, "current directory no longer exists"), err


# --- E4, G5: closed standard streams -------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["prefill", "-p", "toy", "--seq", "4"],
    ["prefill", "-p", "toy", "--seq", "4", "-f", "json", "-o", "-"],
    ["formula", "prefill"],
    ["devices", "show", "h100"],
])
def test_writing_to_a_closed_stdout_is_one_line(args, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)      # what Python makes of a closed descriptor 1
    code, _, err = run(capsys, *args)
    assert code == 2 and one_error(err, "standard output: it is closed"), err


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["prefill", "-p", "toy", "--seq", "4", "-o", "FILE"]])
def test_what_needs_no_stdout_works_with_it_closed(args, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    code, _, err = run(capsys, *[str(tmp_path / "r.csv") if a == "FILE" else a for a in args])
    assert code == 0 and "error" not in err, err


def test_an_error_with_stderr_closed_never_goes_to_stdout(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", None)
    code, out, _ = run(capsys, "prefill", "-p", "nope", "--seq", "1")
    assert code == 2 and out == ""


def test_closed_streams_in_a_real_process(tmp_path):
    code, out, err = costcalc("prefill", "-p", "toy", "--seq", "4", cwd=tmp_path, shell=">&-")
    assert code == 2 and one_error(err, "standard output: it is closed"), err
    code, out, err = costcalc("prefill", "-p", "nope", "--seq", "1", cwd=tmp_path, shell="2>&-")
    assert code == 2 and out == ""


def test_a_stream_and_stderr_both_closed_early_exit_2_quietly(tmp_path):
    """A FIFO target whose reader stops after a few bytes, and a stderr pipe whose reader is
    gone (the audit's ``-o /dev/stderr`` into a closed pipe): exit 2, not a traceback's 1."""
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    read_end, write_end = os.pipe()
    os.close(read_end)                        # stderr's reader is gone before it starts
    child = subprocess.Popen([*COSTCALC, *BIG[:3], "--seq", "1:20000", "-o", str(fifo)], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=write_end)
    os.close(write_end)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)     # no waiting on a child that failed
    try:
        assert select.select([reader], [], [], 60)[0], "nothing written"
        assert os.read(reader, 100)
        os.close(reader)                      # the stream's reader stops early, as head does
        reader = None
        assert child.wait(timeout=120) == 2
    finally:
        if reader is not None:
            os.close(reader)
        child.kill()
        child.wait()


# --- E6: a non-UTF-8 stdout ----------------------------------------------------------------

@pytest.mark.parametrize("fmt, env", [
    ("table", {"PYTHONIOENCODING": "ascii"}),
    ("csv", {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}),
])
def test_non_ascii_on_an_ascii_stdout_is_escaped(fmt, env, tmp_path):
    data = json.loads(TOY.read_text())
    data["title"] = "Llamá 3 — 8B"
    (tmp_path / "pre_u.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    code, out, err = costcalc("presets", "show", "--preset-file", "pre_u.json", "-f", fmt, cwd=tmp_path, env=env)
    assert code == 0 and err == "", err
    assert "Llam\\xe1 3 \\u2014 8B" in out


# --- C1: SIGTERM and SIGHUP in the middle of a write -----------------------------------------

def _default_disposition(signum: int):
    """The child's ``signum`` at its default action: a runner started under nohup passes SIGHUP on ignored,
    and costcalc rightly keeps ignoring a signal it inherits ignored (cli._stop_on_signals)."""
    return lambda: signal.signal(signum, signal.SIG_DFL)


@pytest.mark.parametrize("signum, old", [(signal.SIGTERM, True), (signal.SIGHUP, False)])
def test_a_signal_during_a_write_removes_the_temporary_file(signum, old, tmp_path):
    """The process ends by the signal (a shell shows 143 or 129), the old target intact."""
    target = tmp_path / "big.csv"
    if old:
        target.write_text("old\n")
    child = subprocess.Popen([*COSTCALC, *BIG, "-o", str(target)], cwd=tmp_path, preexec_fn=_default_disposition(signum),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not temporaries(tmp_path) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert temporaries(tmp_path), "the write never started"
        child.send_signal(signum)
        err = child.communicate(timeout=60)[1]
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signum and "Traceback" not in err, err
    assert temporaries(tmp_path) == []
    assert (target.read_text() == "old\n") if old else not target.exists()


def test_a_stop_signal_while_the_temporary_file_is_created_waits_until_it_can_be_removed(tmp_path):
    """A process-directed SIGTERM may reach another thread, whose handler then runs in the main one
    whatever its mask: one landing inside mkstemp, the file made but its name not yet known, must
    not leave the file behind. It is raised again once the name is known, and the write stops."""
    script = f"""
import signal, tempfile
from costcalc import outputs
from costcalc.cli import Stopped, _stop_on_signals
_stop_on_signals()
real = tempfile.mkstemp
def landing(*args, **kwargs):
    made = real(*args, **kwargs)
    # the handler runs here, between the file and its name, as it does when another thread took the
    # signal (this thread's mask does not hold it back then)
    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    return made
tempfile.mkstemp = landing
try:
    outputs.write_text(outputs.target({str(tmp_path / "out.csv")!r}), "a,b\\n")
except Stopped:
    print("stopped")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "stopped", done.stderr
    assert temporaries(tmp_path) == [] and not (tmp_path / "out.csv").exists()


# --- E5: Ctrl-C during start-up ------------------------------------------------------------

def _signals_as_a_shell_leaves_them():
    """The child starts as from a terminal: SIGINT at its default and no signal blocked, whatever the
    test process (a pytest-xdist worker, which other tests ran in) left in place."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


@pytest.mark.parametrize("entry", ["module", "script"])
@pytest.mark.parametrize("after", ["signal", "typer"])
def test_ctrl_c_during_the_imports_exits_130_silently(entry, after, tmp_path):
    """SIGINT just after an import of start-up completes (``-X importtime`` says when, so the
    moment does not hang on this machine's load): ``signal``, the first import in ``run``, and
    ``typer``, midway through ``main``'s. Before ``run`` is called -- Python's own start-up
    (``site``) and the entry's ``from costcalc.cli import run`` -- nothing of costcalc can
    catch it; ``costcalc`` and ``costcalc.cli`` import nothing, so that window is a few
    hundred microseconds."""
    if entry == "module":
        command = [sys.executable, "-X", "importtime", "-m", "costcalc"]
    else:
        script = Path(sys.executable).with_name("costcalc")
        if not script.exists():
            pytest.skip("no console script beside this Python")
        command = [sys.executable, "-X", "importtime", str(script)]
    child = subprocess.Popen([*command, *BIG, "-o", "big.csv"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_signals_as_a_shell_leaves_them)
    try:
        seen = []
        for line in child.stderr:
            seen.append(line)
            if line.rstrip().endswith(f"| {after}"):
                break
        assert seen and seen[-1].rstrip().endswith(f"| {after}"), ("the import was never seen", seen[-3:])
        child.send_signal(signal.SIGINT)
        rest = child.communicate(timeout=60)[1]
    finally:
        child.kill()
        child.wait()
    err = "".join(line for line in [*seen, *rest.splitlines(True)] if not line.startswith("import time:"))
    assert child.returncode == 130 and err == "", err
    assert not (tmp_path / "big.csv").exists() and temporaries(tmp_path) == []
