"""Fixtures shared by the suite: one WebGPU and one Vulkan runtime per test process.

Hypothesis profile: $HYPOTHESIS_PROFILE (quick | pr | nightly), `pr` by default. Tests that
need a device fail with the reason when none is available, so that a CI machine without
lavapipe cannot pass silently; set PARITY_SKIP_GPU_TESTS=1 to skip them instead.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from graph_format import BackendUnavailable, Runtime
from harness.check.backends import open_runtime
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import CaseChecker
from harness.run.profiles import register_profiles
from tests.cli_support import planted_run, planted_wgsl  # noqa: F401 - shared CLI fixtures

register_profiles()
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pr"))


def _runtime(name: str) -> Runtime:
    try:
        return open_runtime(name)
    except BackendUnavailable as err:
        if os.environ.get("PARITY_SKIP_GPU_TESTS") == "1":
            pytest.skip(f"{name} unavailable: {err}")
        pytest.fail(f"{name} unavailable: {err}", pytrace=False)


@pytest.fixture(scope="session")
def webgpu() -> Runtime:
    """The WebGPU runtime on the default adapter."""
    return _runtime("webgpu")


@pytest.fixture(scope="session")
def vulkan() -> Runtime:
    """The Vulkan reference runtime (validation layer on unless VULKAN_PARITY_VALIDATION=0)."""
    return _runtime("vulkan")


@pytest.fixture(scope="session")
def runtimes(webgpu: Runtime, vulkan: Runtime) -> list[Runtime]:
    """Both runtimes."""
    return [webgpu, vulkan]


@pytest.fixture(scope="session")
def runner(runtimes: list[Runtime]) -> LockstepRunner:
    """A lockstep runner over both runtimes with every oracle on."""
    return LockstepRunner(runtimes)


@pytest.fixture(scope="session")
def checker(runner: LockstepRunner) -> CaseChecker:
    """Runs cases with repeatability classification and signature-keyed verdicts."""
    return CaseChecker(runner)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Name the Hypothesis profile and the validation setting in the header."""
    return [
        f"hypothesis profile: {settings._current_profile}",
        f"vulkan validation: {os.environ.get('VULKAN_PARITY_VALIDATION', '1')}",
    ]
