"""Running the CLI in-process from tests: the exit code, stdout and stderr of one command line."""
from costcalc.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str, message: str) -> bool:
    """stderr is exactly one ``error:`` line naming ``message`` (and no traceback)."""
    lines = err.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0] and "Traceback" not in err
