"""The one domain exception. The CLI turns it into a one-line message and exit code 2."""


class CostcalcError(ValueError):
    """Bad input a user can fix: the message names the problem in one line."""


def quote(value: object, limit: int = 60) -> str:
    """``repr(value)`` for an error line, cut to its first ``limit`` characters when longer (with
    the whole length): a message quotes hostile input, never megabytes of it."""
    try:
        text = repr(value)
    except ValueError:       # an int past Python's 4,300-digit conversion limit
        return f"an integer of {value.bit_length():,} bits" if isinstance(value, int) else "a value"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text):,} characters)"
