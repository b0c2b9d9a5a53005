"""Attention counted by brute force, query by query and key by key, for tests to hold the derived
formulas against: a query at 1-based position p reads keys first_key(p)..p."""
from costcalc import symbols as s

UNIT = {s.L: 1, s.d_q: 1, s.d_h: 1, s.B: 1}   # per pair of one head and layer: 4 FLOPs


def first_key(pos, window=None, chunk=None):
    """The first key a query at ``pos`` may read: the window's start, its chunk's start, or 1."""
    if chunk:
        return chunk * ((pos - 1) // chunk) + 1
    return max(1, pos - window + 1) if window else 1


def keys(pos, window=None, chunk=None):
    return pos - first_key(pos, window, chunk) + 1


def pairs(past, new, window=None, chunk=None, full=False):
    """Query-key pairs of ``new`` queries after ``past`` cached tokens (full: every key the shapes hold)."""
    return sum(past + new if full else keys(pos, window, chunk) for pos in range(past + 1, past + new + 1))


def tiled(past, new, bq, bk, window=None, chunk=None):
    """Pairs a tile kernel computes: each query tile of ``bq`` rows multiplies every key tile of
    ``bk`` (aligned at key 0, clipped to the keys there are) holding a key one of its rows reads."""
    total = 0
    for t0 in range(0, new, bq):
        rows = range(past + t0 + 1, past + min(t0 + bq, new) + 1)
        tiles = {(key - 1) // bk for p in rows for key in range(first_key(p, window, chunk), p + 1)}
        total += len(rows) * sum(min((t + 1) * bk, past + new) - t * bk for t in tiles)
    return total
