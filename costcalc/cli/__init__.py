"""The command line: ``main`` is the one boundary where errors become a line and an exit code;
``run`` (the console script, and ``python -m costcalc``) adds the process's signals.

Imports stay inside the functions (not even ``typing`` here): ``import costcalc.cli`` must be
quick, so that ``run`` is in place before Ctrl-C can land in an import.
"""
from __future__ import annotations

import sys

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130      # 128 + SIGINT: what a shell reports for Ctrl-C
STOP_SIGNALS = ("SIGTERM", "SIGHUP")


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived. Raised where the process stands, so that a file being written
    is removed on the way out (``outputs`` removes its temporary file on any exception); not
    an ``Exception``, so that nothing on the way catches it as an error."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def main(argv: list[str] | None = None) -> int:
    """Run costcalc; bad input prints one ``error:`` line on stderr and exits non-zero."""
    from .. import outputs

    outputs.forget()          # a new command: no file read or target checked yet
    _escape_what_cannot_be_encoded()
    import typer

    from ..errors import CostcalcError
    from .app import for_arguments

    # typer >= 0.28 vendors click; older typer re-exports click's classes. Find the
    # base of both kinds without importing click by name.
    click_exception = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(for_arguments(args))
    try:
        result = command.main(args=args, prog_name="costcalc", standalone_mode=False)
    except CostcalcError as exc:
        return _fail(str(exc))
    except outputs.ReaderGone:
        return 0
    except click_exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            outputs.say(exc.format_message())
            return exc.exit_code
        return _fail(_meant(exc) or exc.format_message().replace("Value error, ", ""))   # typer's enum wording
    except typer.Abort:
        return _fail("aborted")
    except MemoryError:     # numpy's too; nothing was written (files are filled aside, then moved)
        return _fail("out of memory: this machine cannot hold the work asked for; narrow the ranges (or "
                     "write a large sweep with -f csv -o FILE)")
    return result if isinstance(result, int) else 0


def _meant(exc) -> "str | None":
    """"No such option" for an option named as another tool names it: the option meant
    (``app.ALIASES``); None for any other error."""
    if type(exc).__name__ != "NoSuchOption" or getattr(exc, "ctx", None) is None:
        return None
    from .app import no_such_option

    takes = {o for p in exc.ctx.command.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    return no_such_option(exc.option_name, exc.ctx.command_path.removeprefix("costcalc "), takes)


def _fail(message: str) -> int:
    """One ``error:`` line on stderr (dropped, never sent to stdout, where stderr is closed)."""
    from ..outputs import say

    say(f"error: {' '.join(message.split())}")
    return EXIT_BAD_INPUT


def _escape_what_cannot_be_encoded() -> None:
    """A standard output or error that is not UTF-8 (``PYTHONIOENCODING=ascii``, a C locale
    without UTF-8 mode) writes the characters it cannot encode as backslash escapes (a title
    ``Llamá`` as ``Llam\\xe1``), never a ``UnicodeEncodeError``."""
    import codecs

    for stream in (sys.stdout, sys.stderr):
        try:
            if codecs.lookup(stream.encoding).name != "utf-8":
                stream.reconfigure(errors="backslashreplace")
        except (AttributeError, LookupError, TypeError, ValueError):
            pass   # closed (None), or not a text stream that can be reconfigured


def run() -> None:
    """The console script: ``main`` as a process. Ctrl-C at any moment, the imports included,
    exits 130 without a traceback. SIGTERM and SIGHUP raise ``Stopped`` where the work stands:
    a file being written is removed, the target is left as it was, and the process then ends
    by that signal, as if it had not been caught (a shell reports 143 or 129). A signal the
    parent ignores (``nohup``) stays ignored."""
    try:
        _stop_on_signals()
        code = main()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Stopped as stop:
        _end_by(stop.signum)
    if code == EXIT_INTERRUPTED:
        _interrupted()
    sys.exit(code)


def _interrupted() -> None:
    """Exit 130 at once, the standard streams flushed. CPython 3.11 was seen to end a run whose
    interrupt landed in an import (caught, and 130 asked for) by SIGINT instead, silently: it
    remembers an interrupt that escaped code it ran from a string, as dataclasses and
    namedtuple generate their methods. ``os._exit`` leaves before that."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(EXIT_INTERRUPTED)


def _stop_on_signals() -> None:
    import signal

    numbers = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]   # no SIGHUP on Windows

    def stop(signum, frame):
        outputs = sys.modules.get("costcalc.outputs")      # not imported: no file is being written
        if outputs is not None and outputs.deferring(signum):
            return                 # raised again once the temporary file being created has a name
        for number in numbers:     # once: a second signal does not cut the clean-up short
            signal.signal(number, signal.SIG_IGN)
        raise Stopped(signum)

    for number in numbers:
        if signal.getsignal(number) != signal.SIG_IGN:
            signal.signal(number, stop)


def _end_by(signum: int) -> None:
    """End the process by ``signum``, its default action restored."""
    import os
    import signal

    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    sys.exit(128 + signum)      # only if the signal is blocked: the status a shell would show
