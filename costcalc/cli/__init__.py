"""The command line: ``main`` is the one boundary where errors become a line and an exit code."""
from __future__ import annotations

import sys
from typing import Optional, Sequence

EXIT_BAD_INPUT = 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run costcalc; bad input prints one ``error:`` line on stderr and exits non-zero."""
    import typer

    from ..errors import CostcalcError
    from ..outputs import ReaderGone
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
    except ReaderGone:
        return 0
    except click_exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            print(exc.format_message(), file=sys.stderr)
            return exc.exit_code
        return _fail(exc.format_message().replace("Value error, ", ""))   # typer's enum wording
    except typer.Abort:
        return _fail("aborted")
    except MemoryError:     # numpy's too; nothing was written (files are filled aside, then moved)
        return _fail("out of memory: this machine cannot hold the work asked for; narrow the ranges (or "
                     "write a large sweep with -f csv -o FILE)")
    return result if isinstance(result, int) else 0


def _fail(message: str) -> int:
    first = " ".join(message.split())
    print(f"error: {first}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run() -> None:
    sys.exit(main())
