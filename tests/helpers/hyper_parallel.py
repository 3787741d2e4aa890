"""Markers for tests that need hyper-parallel (not on PyPI) or its absence."""

import importlib.util

import pytest

INSTALLED = importlib.util.find_spec("hyper_parallel") is not None
SKIP_REASON = (
    "hyper-parallel is not installed: it is not on PyPI; "
    "pip install --no-deps -e <checkout of mindspore-ai/hyper-parallel> (needs numpy<2, pyyaml)"
)

# Tests that run hyper-parallel: marked `hyper_parallel`, skipped without it.
needs_hyper_parallel = [pytest.mark.hyper_parallel, pytest.mark.skipif(not INSTALLED, reason=SKIP_REASON)]
# Tests of the message a user gets when it is missing: skipped where it is installed.
needs_no_hyper_parallel = pytest.mark.skipif(
    INSTALLED, reason="hyper-parallel is installed: this case checks what happens without it"
)
