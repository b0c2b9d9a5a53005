"""``python -m costcalc``: the console script's entry, ``costcalc.cli.run``."""
try:
    from costcalc.cli import run
except KeyboardInterrupt:      # Ctrl-C before run() is in place: as quiet as run() would be
    import os

    os._exit(130)              # cli.EXIT_INTERRUPTED, which could not be imported

run()
