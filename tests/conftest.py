import os
import tempfile

import pytest

# The generated-code cache of this test run: its own directory, never the user's -- one for the
# whole run, shared by its xdist workers (a recipe is derived once, by whichever worker needs it
# first: the cache is safe for processes racing on it, tests/test_cache_trust.py).
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN and _RUN.isalnum():
    _DIR = os.path.join(tempfile.gettempdir(), f"costcalc-test-cache-{os.getuid()}-{_RUN}")
    os.makedirs(_DIR, mode=0o700, exist_ok=True)
    os.environ["COSTCALC_CACHE_DIR"] = _DIR
else:
    os.environ["COSTCALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="costcalc-test-cache-")

from costcalc import presets  # noqa: E402


@pytest.fixture(scope="session")
def toy():
    return presets.load("toy")
