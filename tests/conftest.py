import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile("default", deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="module")
def nvrtc_cache(tmp_path_factory):
    """A fresh CUBIN cache directory for NVRTC's compiles, or a skip when NVRTC is not
    installed (the cuda target's tests that compile for the GPU without one)."""
    from gradc.backends.cuda import rt
    from gradc.errors import UnsupportedError

    try:
        rt.nvrtc_version()
    except UnsupportedError as e:
        pytest.skip(str(e))
    return str(tmp_path_factory.mktemp("cubin"))
