import os
import tempfile

import pytest

# The generated-code cache of this test run: its own directory, never the user's.
os.environ["COSTCALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="costcalc-test-cache-")

from costcalc import presets  # noqa: E402


@pytest.fixture(scope="session")
def toy():
    return presets.load("toy")
