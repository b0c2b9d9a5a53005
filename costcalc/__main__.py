from costcalc.cli import run

run()
