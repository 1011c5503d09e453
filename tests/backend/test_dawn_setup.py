"""What scripts/setup.sh installed for dawn gives Dawn an adapter, in the dawn host's
environment only.

Runs the installed npm `webgpu` (Dawn) under node, as the dawn host does, in
`dawn_setup.dawn_environment()`: on this machine's Vulkan drivers where Dawn accepts them (a
GPU, Mesa >= 24), else on the lavapipe setup.sh unpacked into `.cache/mesa`. A machine where
this fails cannot run `--webgpu dawn`: the message says what to run.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from webgpu_backend.gpu import dawn_setup

pytestmark = pytest.mark.gpu

# Prints what Dawn's first adapter is (or null) as one JSON line.
PROBE = """
const { create } = await import(process.argv[1]);
const adapter = await create([]).requestAdapter();
console.log(JSON.stringify(adapter && { vendor: adapter.info.vendor,
  description: adapter.info.description, f16: adapter.features.has("shader-f16") }));
process.exit(0);
"""


def _adapter(env: dict[str, str]) -> object:
    node = shutil.which("node")
    module = dawn_setup.webgpu_package() / "index.js"
    assert node is not None and module.exists(), (
        f"dawn needs node and the npm package webgpu in {module.parent}; run scripts/setup.sh"
    )
    proc = subprocess.run(
        [node, "--input-type=module", "-e", PROBE, str(module)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_dawn_finds_an_adapter_in_its_environment() -> None:
    assert dawn_setup.installed_webgpu_version() == dawn_setup.pinned_webgpu_version(), (
        "the installed npm webgpu is not the pinned one; run scripts/setup.sh"
    )
    adapter = _adapter(dawn_setup.dawn_environment())
    assert adapter is not None, (
        "Dawn finds no adapter in the dawn host's environment "
        f"(private lavapipe: {dawn_setup.private_icd()}); run scripts/setup.sh"
    )
