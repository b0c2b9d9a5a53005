"""Hostile places: output targets. Every failure is one `error:` line, nothing is clobbered.

Non-regular targets are a FIFO made in a temporary folder (never a system file); device
paths are classified through a stubbed ``os.stat``.
"""
import json
import os
import stat
import threading

import pytest

from cli_run import one_error, run
from costcalc import calc, outputs
from costcalc.errors import CostcalcError


# --- output targets -------------------------------------------------------------------

def through_fifo(capsys, fifo, *args):
    """Run a command writing into a new FIFO while a thread reads it: (code, err, text read)."""
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("text", fifo.read_text()), daemon=True)
    reader.start()     # a daemon: a command that fails before opening the FIFO cannot hang the run
    code, _, err = run(capsys, *args, "-o", str(fifo))
    reader.join(timeout=30)
    return code, err, got.get("text", "")


def test_a_fifo_is_written_in_place_never_replaced(tmp_path, capsys):
    fifo = tmp_path / "pipe.csv"
    code, err, text = through_fifo(capsys, fifo, "prefill", "-p", "toy", "--seq", "4", "-f", "csv")
    assert code == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)                 # still a FIFO
    assert text.splitlines()[0].startswith("preset,workload")
    assert [p.name for p in tmp_path.iterdir()] == ["pipe.csv"]   # no temporary left beside it


def test_a_fifo_named_csv_gets_csv(tmp_path, capsys):
    code, err, text = through_fifo(capsys, tmp_path / "rows.csv", "prefill", "-p", "toy", "--seq", "4")
    assert code == 0 and "(csv)" in err, err
    assert text.startswith("preset,workload,")


def test_the_file_standard_output_goes_to_is_standard_output(tmp_path):
    """``-o`` naming the very file stdout is redirected to (as /dev/stdout does) writes on after
    what is there: never truncated, never replaced."""
    import subprocess
    import sys

    log = tmp_path / "log.csv"          # its name still picks the format
    log.write_text("header\n")
    inode = os.stat(log).st_ino
    with open(log, "a") as handle:
        done = subprocess.run([sys.executable, "-m", "costcalc", "prefill", "-p", "toy", "--seq", "4",
                               "-o", str(log)], stdout=handle, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = log.read_text()
    assert text.startswith("header\npreset,workload,") and text.count("preset,workload,") == 1
    assert os.stat(log).st_ino == inode and done.stderr == ""


def test_a_target_made_a_fifo_while_the_work_ran_is_not_replaced(tmp_path):
    path = tmp_path / "out.csv"
    dest = outputs.target(path)

    def fill(handle):
        handle.write("x\n")
        os.mkfifo(path)                     # made between the check and the move into place

    with pytest.raises(CostcalcError, match="no longer a regular file"):
        outputs.write(dest, fill)
    assert stat.S_ISFIFO(os.stat(path).st_mode) and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


@pytest.mark.parametrize("args, message", [
    (["plot", "generate", "-p", "toy", "--prompt", "8", "--new", "1099511627776"], "at most 1,000,000 tokens"),
    (["plot", "prefill", "-p", "toy", "--seq", "1:1099511627776"], "at most 10,000,000 rows"),
    (["plot", "prefill", "-p", "toy", "--seq", "1:2000000"], "at most 1,000,000 points"),
    (["prefill", "-p", "toy", "--lengths", "1:1099511627776"], "at most 10,000,000 rows"),
    (["prefill", "-p", "toy", "--seq", "1:5,1:10000000"], "10,000,005 values"),
    (["verify", "-p", "toy", "--device", "cpu", "--seq", "1:1099511627776"], "at most 10,000,000 rows"),
    (["verify", "-p", "toy", "--device", "cpu", "--attention-lengths", "1:65"], "at most 64"),
])
def test_long_ranges_are_refused_before_they_are_built(args, message, tmp_path, capsys):
    if args[0] == "plot":
        args = [*args, "-o", str(tmp_path / "p.png")]
    code, _, err = run(capsys, *args)
    assert code == 2 and one_error(err, message), err
    assert list(tmp_path.iterdir()) == []


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    def exhausted(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(calc, "answer", exhausted)
    code, out, err = run(capsys, "prefill", "-p", "toy", "--seq", "4")
    assert code == 2 and one_error(err, "out of memory") and out == ""


@pytest.mark.parametrize("mode", [stat.S_IFCHR, stat.S_IFIFO])
def test_devices_and_fifos_are_streams(mode, monkeypatch, tmp_path):
    real_stat = os.stat
    node = tmp_path / "node"
    node.write_text("")
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: os.stat_result((mode | 0o666,) + tuple(real_stat(node))[1:])
                        if str(p) in (str(node), "/dev/fake") else real_stat(p, *a, **k))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: True if str(p) == "/dev/fake" else real_access(p, m))
    assert outputs.target(node).kind == "stream"
    assert outputs.target("/dev/fake").kind == "stream"   # under /dev: never replaced, whatever it is


def test_dash_is_standard_output(capsys):
    code, out, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-f", "json", "-o", "-")
    assert code == 0 and json.loads(out)[0]["seq"] == 4 and err == ""


@pytest.mark.parametrize("make, message", [
    (lambda d: str(d), "is a directory"),
    (lambda d: "", "the path is empty"),
    (lambda d: "   ", "the path is empty"),
    (lambda d: str(d / "missing" / "x.csv"), "no directory"),
    (lambda d: str(d / "newdir") + os.sep, "names a directory"),
])
@pytest.mark.parametrize("command", [
    ["prefill", "-p", "toy", "--seq", "4"],
    ["formula", "prefill"],
    ["presets"],
    ["crossover", "-p", "toy"],
    ["plot", "prefill", "-p", "toy", "--seq", "1:8"],
])
def test_outputs_that_cannot_be_files_are_one_line(command, make, message, tmp_path, capsys):
    code, out, err = run(capsys, *command, "-o", make(tmp_path))
    assert code == 2 and one_error(err, message), err
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_folder_is_named(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(os, "access", lambda path, mode: False)   # root may write anywhere: stub it
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(tmp_path / "x.csv"))
    assert code == 2 and one_error(err, "is not writable")


def test_a_symlinked_file_is_replaced_through_the_link_keeping_its_mode(tmp_path, capsys):
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    os.chmod(real, 0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and real.read_text().startswith("preset,")
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o640


def test_a_format_that_contradicts_the_suffix_is_warned_and_written_as_asked(tmp_path, capsys):
    target = tmp_path / "x.csv"
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-f", "json", "-o", str(target))
    assert code == 0 and "warning: --format json" in err
    assert json.loads(target.read_text())[0]["preset"] == "toy"
