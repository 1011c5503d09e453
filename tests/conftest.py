"""Fixtures shared by the suite: one WebGPU and one Vulkan runtime per test process.

Hypothesis profile: $HYPOTHESIS_PROFILE (quick | pr | nightly), `pr` by default. Tests that
need a device (marked `gpu`: those that open a runtime and those that start `parity` on one)
fail with the reason when a backend cannot open, so that a CI machine without lavapipe
cannot pass silently; set PARITY_SKIP_GPU_TESTS=1 to skip them instead.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from graph_format import BackendUnavailable, Runtime
from harness.check.backends import BACKENDS, open_runtime
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import CaseChecker
from harness.run.profiles import register_profiles
from tests.cli_support import planted_run, planted_wgsl  # noqa: F401 - shared CLI fixtures

register_profiles()
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pr"))


SKIP_GPU_VARIABLE = "PARITY_SKIP_GPU_TESTS"
# Each backend's runtime, opened once per test process, or why it could not open.
_opened: dict[str, Runtime | BackendUnavailable] = {}


def _open(name: str) -> Runtime:
    """The runtime `name`, opened on first use.

    Raises:
        BackendUnavailable: the backend cannot open here (raised again on every call).
    """
    if name not in _opened:
        try:
            _opened[name] = open_runtime(name)
        except BackendUnavailable as err:
            _opened[name] = err
    found = _opened[name]
    if isinstance(found, BackendUnavailable):
        raise found
    return found


def _no_device(name: str, err: BackendUnavailable) -> None:
    """Skip (PARITY_SKIP_GPU_TESTS=1) or fail the current test: backend `name` is missing."""
    if os.environ.get(SKIP_GPU_VARIABLE) == "1":
        pytest.skip(f"{name} unavailable: {err}")
    pytest.fail(
        f"{name} unavailable: {err} (set {SKIP_GPU_VARIABLE}=1 to skip the device tests)",
        pytrace=False,
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `gpu` test needs both backends, whether it opens them itself or a `parity` process
    it starts does: without one it is skipped or failed before any fixture runs (a fixture
    that starts a run would otherwise fail as an error, for a reason it cannot tell)."""
    if item.get_closest_marker("gpu") is None:
        return
    # Vulkan first: without a driver it fails at once, where wgpu may take seconds to fall
    # back to OpenGL before the test is skipped anyway.
    for name in sorted(BACKENDS, key=lambda n: n != "vulkan"):
        try:
            _open(name)
        except BackendUnavailable as err:
            _no_device(name, err)


def _runtime(name: str) -> Runtime:
    try:
        return _open(name)
    except BackendUnavailable as err:
        _no_device(name, err)
        raise  # not reached: _no_device skips or fails


@pytest.fixture(scope="session")
def webgpu() -> Runtime:
    """The WebGPU runtime on the default adapter."""
    return _runtime("webgpu")


@pytest.fixture(scope="session")
def vulkan() -> Runtime:
    """The Vulkan reference runtime (validation layer on unless VULKAN_PARITY_VALIDATION=0)."""
    return _runtime("vulkan")


@pytest.fixture(scope="session")
def dawn() -> Runtime:
    """The WebGPU runtime on Dawn (a node host; Mesa 25's lavapipe where the system's is older),
    opened on first use; like the others it fails without its set-up unless
    PARITY_SKIP_GPU_TESTS=1."""
    return _runtime("webgpu-dawn")


@pytest.fixture(scope="session")
def chrome() -> Runtime:
    """The WebGPU runtime in headless Chromium (its SwiftShader), opened on first use."""
    return _runtime("webgpu-chrome")


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
