"""scripts/setup.sh's steps for the `dawn` implementation, without network or device.

- The npm `webgpu` version is pinned in one place (`webgpu_backend/gpu/host/versions.json`):
  setup.sh and `webgpu_backend.gpu.dawn_setup` read it there, and no code file says it again.
- The npm packages are installed in one npm call that names them all, and only when one is
  not at its pinned version.
- The lavapipe for dawn: fetched only where nothing else gives Dawn an adapter; unpacked into
  the private folder with a relocatable ICD manifest; selected by the dawn host's environment
  only (`dawn_environment`), never by the Vulkan runtime, wgpu or the scripts.

setup.sh's functions run in a scratch copy of the files they read (`source scripts/setup.sh`
defines them and runs nothing). Where a step would ask apt, dpkg or Dawn, the test defines
what they answer: a `dpkg-query` and an `npm` on PATH that report and record, and
`dawn_finds_adapter` redefined in the shell. Needs node and dpkg-deb (setup.sh's own tools
on the Debian machines it sets up).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from webgpu_backend.gpu import dawn_setup

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"
# What setup.sh reads: itself and the two files that pin the npm packages.
READ_BY_SETUP = (
    Path("scripts/setup.sh"),
    Path("webgpu_backend/wgsl_reflect.mjs"),
    dawn_setup.VERSIONS.relative_to(ROOT),
)


def _scratch(tmp_path: Path) -> Path:
    """A scratch repository holding what setup.sh's functions read."""
    root = tmp_path / "repo"
    for rel in READ_BY_SETUP:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    (root / "bin").mkdir()
    return root


def _shell(root: Path, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `script` in bash at `root` after `source scripts/setup.sh`, with root/bin first on
    PATH (the test's stand-ins for dpkg-query and npm)."""
    full_env = {**os.environ, "PATH": f"{root / 'bin'}:{os.environ['PATH']}", **env}
    return subprocess.run(
        ["bash", "-c", f"source scripts/setup.sh\n{script}"],
        cwd=root,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _tool(root: Path, name: str, body: str) -> None:
    path = root / "bin" / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


def _installed(root: Path, package: str, version: str) -> None:
    folder = root / ".cache" / "node" / "node_modules" / package
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps({"name": package, "version": version}))


# --- the pin ---------------------------------------------------------------------------


def test_setup_reads_the_webgpu_pin_where_the_runtime_does(tmp_path: Path) -> None:
    root = _scratch(tmp_path)
    said = _shell(root, "npm_pin webgpu")
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == dawn_setup.pinned_webgpu_version()

    # Moving the pin moves what setup installs: it is read, not repeated.
    pins = root / dawn_setup.VERSIONS.relative_to(ROOT)
    pins.write_text(json.dumps({"webgpu": "9.8.7"}))
    assert _shell(root, "npm_pin webgpu").stdout.strip() == "9.8.7"


def test_no_code_file_repeats_the_webgpu_pin() -> None:
    version = dawn_setup.pinned_webgpu_version()
    # A version as code states it: a string literal or an npm spec (`webgpu@X.Y.Z`).
    said = re.compile(rf"""["']{re.escape(version)}["']|webgpu@{re.escape(version)}""")
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.mjs", "*.js", "*.sh", "*.json", "*.toml", "*.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = [
        path
        for path in tracked
        if ROOT / path != dawn_setup.VERSIONS
        and (ROOT / path).is_file()
        and said.search((ROOT / path).read_text(errors="replace"))
    ]
    assert not found, f"the webgpu version is pinned in {dawn_setup.VERSIONS} only, also in {found}"


def test_the_pin_file_must_name_webgpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pins = tmp_path / "versions.json"
    pins.write_text(json.dumps({"wgsl_reflect": "1.6.0"}))
    monkeypatch.setattr(dawn_setup, "VERSIONS", pins)
    with pytest.raises(ValueError, match="expected a string entry 'webgpu'"):
        dawn_setup.pinned_webgpu_version()


# --- the npm packages ------------------------------------------------------------------


def test_npm_runs_once_naming_every_package_only_when_one_is_stale(tmp_path: Path) -> None:
    root = _scratch(tmp_path)
    calls = tmp_path / "npm-calls"
    _tool(root, "npm", f'echo "$*" >> {calls}')
    webgpu = dawn_setup.pinned_webgpu_version()
    reflect = _shell(root, "npm_pin wgsl_reflect").stdout.strip()
    _installed(root, "wgsl_reflect", reflect)
    _installed(root, "webgpu", webgpu)

    done = _shell(root, "install_npm_packages")
    assert done.returncode == 0, done.stderr
    assert not calls.exists(), "npm ran though every package was at its pinned version"

    _installed(root, "webgpu", "0.0.1")
    stale = _shell(root, "install_npm_packages")
    assert stale.returncode == 0, stale.stderr
    (call,) = calls.read_text().splitlines()
    assert f"wgsl_reflect@{reflect}" in call.split() and f"webgpu@{webgpu}" in call.split()
    assert "--prefix .cache/node" in call


# --- the lavapipe for dawn ---------------------------------------------------------------


def _mesa_deb(tmp_path: Path) -> Path:
    """A mesa-vulkan-drivers-shaped .deb: lavapipe's library and its manifest naming it bare,
    as Debian's does."""
    tree = tmp_path / "deb"
    lib = tree / "usr" / "lib" / "x86_64-linux-gnu" / "libvulkan_lvp.so"
    icd = tree / "usr" / "share" / "vulkan" / "icd.d" / "lvp_icd.json"
    for path in (lib, icd, tree / "DEBIAN" / "control"):
        path.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(b"\x7fELF")
    icd.write_text(json.dumps({"ICD": {"api_version": "1.4.305", "library_path": lib.name}}))
    (tree / "DEBIAN" / "control").write_text(
        "Package: mesa-vulkan-drivers\nVersion: 25.0.7\nArchitecture: amd64\n"
        "Maintainer: test <test@example.org>\nDescription: test\n"
    )
    deb = tmp_path / "mesa-vulkan-drivers_25.0.7_amd64.deb"
    subprocess.run(["dpkg-deb", "--build", str(tree), str(deb)], check=True, capture_output=True)
    return deb


def test_unpacked_lavapipe_is_selected_for_dawn_only(tmp_path: Path) -> None:
    root = _scratch(tmp_path)
    deb = _mesa_deb(tmp_path)
    unpacked = _shell(root, f"dawn_finds_adapter() {{ true; }}\nunpack_lavapipe {deb}")
    assert unpacked.returncode == 0, unpacked.stderr

    mesa = root / ".cache" / "mesa"
    icd = dawn_setup.private_icd(mesa)
    assert icd == mesa / "lvp_icd.json"
    manifest = json.loads(icd.read_text())
    # Relative to the manifest, so the repository may move (the Vulkan loader reads it so).
    assert manifest["ICD"] == {
        "library_path": "./root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so",
        "api_version": "1.4.305",
    }
    assert sorted(p.name for p in (root / ".cache").iterdir()) == ["mesa"]

    inherited = {"PATH": "/usr/bin", "VK_DRIVER_FILES": "/elsewhere.json"}
    env = dawn_setup.dawn_environment(inherited, mesa)
    assert env == {"PATH": "/usr/bin", "VK_ICD_FILENAMES": str(icd)}
    assert inherited == {"PATH": "/usr/bin", "VK_DRIVER_FILES": "/elsewhere.json"}
    # Without a private lavapipe the dawn host inherits the system's drivers unchanged.
    assert dawn_setup.dawn_environment(inherited, tmp_path / "none") == inherited

    # setup.sh now sees the work done.
    assert _shell(root, "lavapipe_for_dawn_needed").stdout.strip() == "none"


def test_a_lavapipe_dawn_refuses_replaces_nothing(tmp_path: Path) -> None:
    root = _scratch(tmp_path)
    deb = _mesa_deb(tmp_path)
    earlier = root / ".cache" / "mesa" / "earlier"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("kept")
    refused = _shell(root, f"dawn_finds_adapter() {{ false; }}\nunpack_lavapipe {deb}")
    assert refused.returncode == 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Dawn finds no adapter with the lavapipe of" in lines[0]
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["earlier"]
    assert sorted(p.name for p in (root / ".cache").iterdir()) == ["mesa"]


@pytest.mark.parametrize(
    ("system_mesa", "dawn_adapter", "needed"),
    [
        ("22.3.6-1+deb12u2", False, "private"),  # Debian bookworm's lavapipe: Dawn refuses it
        ("25.0.7-2~bpo12+1", False, "none"),  # a Mesa >= 24 on the system is enough
        ("22.3.6-1+deb12u2", True, "none"),  # a GPU driver Dawn accepts
        ("", False, "private"),  # no Mesa at all, no adapter
    ],
)
def test_lavapipe_is_fetched_only_where_nothing_gives_dawn_an_adapter(
    tmp_path: Path, system_mesa: str, dawn_adapter: bool, needed: str
) -> None:
    root = _scratch(tmp_path)
    answer = f"printf '%s' {system_mesa}" if system_mesa else "exit 1"
    _tool(root, "dpkg-query", answer)
    probe = "true" if dawn_adapter else "false"
    said = _shell(root, f"dawn_finds_adapter() {{ {probe}; }}\nlavapipe_for_dawn_needed")
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == needed


def test_only_the_dawn_host_selects_a_driver_manifest() -> None:
    """No other code points the Vulkan loader anywhere: the Vulkan runtime and wgpu run on the
    system's driver (docs/benchmarks.md, "Mesa 25 lavapipe for every runtime?")."""
    # What names the private lavapipe, and what would set a driver manifest for a process.
    private = re.compile(r"\.cache/mesa|lvp_icd\.json|MESA_DIR|private_icd|dawn_environment")
    sets = re.compile(
        r"""(VK_ICD_FILENAMES|VK_DRIVER_FILES)=|environ\[["']VK_|putenv|setdefault\(["']VK_"""
    )
    # The dawn implementation's modules (its client starts the host with dawn_environment).
    dawn = {"webgpu_backend/gpu/dawn.py", "webgpu_backend/gpu/remote.py"}
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.sh", "*.mjs", "*.js"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for path in tracked:
        if path.startswith("tests/") or not (ROOT / path).is_file():
            continue
        text = (ROOT / path).read_text(errors="replace")
        if path in {"webgpu_backend/gpu/dawn_setup.py", "scripts/setup.sh"}:
            continue
        if (private.search(text) and path not in dawn) or sets.search(text):
            found.append(path)
    assert not found, f"only the dawn host's environment selects the private lavapipe: {found}"
    # setup.sh sets a manifest for its own probe of Dawn only, for nothing it runs afterwards.
    assert not re.search(r"^\s*export\s+VK_", SETUP.read_text(), re.MULTILINE)
