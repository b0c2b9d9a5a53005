import pytest

from costcalc import presets


@pytest.fixture(scope="session")
def toy():
    return presets.load("toy")
