"""The one domain exception. The CLI turns it into a one-line message and exit code 2."""


class CostcalcError(ValueError):
    """Bad input a user can fix: the message names the problem in one line."""
