"""Shared fixtures: the device grid and hypothesis profiles."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from singa_lite import autograd, device

# "ci" (the default) draws the same examples on every run, so a red CI run is reproducible;
# "thorough" (HYPOTHESIS_PROFILE=thorough) explores with fresh random examples.
settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("SINGA_LITE_EXAMPLES", "12")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "thorough",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _gpu_skip_reason() -> str:
    from singa_lite.backend import cupy as cupy_backend

    return f"needs a CUDA GPU: {cupy_backend.UNAVAILABLE_REASON}"


@pytest.fixture(params=["cpu", "gpu"])
def dev(request: pytest.FixtureRequest) -> device.Device:
    """Every device-parametrised test runs on the CPU and, where CuPy sees one, on a GPU."""
    if request.param == "gpu":
        if device.get_num_gpus() == 0:
            pytest.skip(_gpu_skip_reason())
        return device.create_cuda_gpu()
    return device.create_cpu_device()


@pytest.fixture(autouse=True)
def _no_device_error_left_over() -> object:
    """A device check that a test leaves pending (an error on the GPU it never read back) fails
    that test's teardown, not the next test that happens to read an array on the worker."""
    yield
    from singa_lite.backend import cupy as cupy_backend

    if cupy_backend.AVAILABLE:
        cupy_backend.raise_deferred()


@pytest.fixture(autouse=True)
def _training_off() -> object:
    """Each test starts with autograd.training off and leaves it that way."""
    autograd.training = False
    yield
    autograd.training = False


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say how many distributed tests ran: pytest's default norecursedirs skips folders named
    ``dist``, so without the setting in pyproject.toml they would silently not be collected."""
    reports = [r for key in ("passed", "failed", "skipped") for r in terminalreporter.stats.get(key, [])]
    dist = {r.nodeid for r in reports if r.nodeid.startswith(("tests/dist/", "singa_lite/dist/"))}
    if dist:
        terminalreporter.write_line(
            f"distributed tests (tests/dist, singa_lite/dist doctests): {len(dist)} run"
        )
