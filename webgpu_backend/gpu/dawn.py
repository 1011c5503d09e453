"""The `dawn` WebGPU implementation: Dawn (its Tint WGSL compiler, as ExecuTorch's WebGPU
backend ships it) in a node process running the pinned npm package `webgpu`
(`host/dawn_host.mjs`), reached through pipes by the remote client (`remote.py`).

Set-up: the pinned package and, where the machine's drivers give Dawn no adapter (Debian
bookworm's lavapipe, Mesa 22.3), Mesa 25's lavapipe unpacked privately; the host process
alone runs with it (`dawn_setup.dawn_environment`).

Adapter: Dawn's "high-performance" adapter (its ranking: discrete GPUs first), as wgpu's
default; with `VULKAN_PARITY_ADAPTER` set, that adapter of Dawn's ranked list
(`graph_format.pick_adapter`). dawn.node selects adapters by name only, so of several
identical GPUs it always opens the first.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import IO

from graph_format import ADAPTER_VARIABLE, BackendUnavailable, pick_adapter
from webgpu_backend.gpu import dawn_setup
from webgpu_backend.gpu.remote import (
    HOST_DIR,
    ROUND_TRIP_TIMEOUT_S,
    HostGone,
    Message,
    RemoteImplementation,
    Transport,
    decode_frame,
    encode_frame,
    frame_length,
)

HOST = HOST_DIR / "dawn_host.mjs"
_SETUP = (
    "run scripts/setup.sh (it installs node, the npm package webgpu at the version pinned in "
    f"{dawn_setup.VERSIONS.relative_to(dawn_setup.ROOT)} and, where the system's Vulkan drivers "
    f"give Dawn no adapter, Mesa 25's lavapipe into {dawn_setup.MESA_DIR})"
)
# How long the host's last output may be in a message.
_TAIL = 1500


class PipeTransport(Transport):
    """A host process: requests on its stdin, answers on a pipe it gets as an extra file
    descriptor (its stdout and stderr, where Dawn and the driver print warnings, go to a
    temporary file that messages quote)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        # Open for the transport's life (closed in `close`).
        self._log: IO[bytes] = tempfile.TemporaryFile(prefix="webgpu-host-")  # noqa: SIM115
        read_fd, write_fd = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [*argv, str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
            )
        except OSError as err:
            os.close(read_fd)
            raise HostGone(f"could not start {argv[0]}: {err}") from None
        finally:
            os.close(write_fd)  # the host holds the only write end: its end is our EOF
        self._answers = read_fd
        self._closed = False

    @property
    def pid(self) -> int:
        """The host's process id."""
        return self._proc.pid

    def exchange(
        self, message: Message, blob: bytes | bytearray | memoryview = b""
    ) -> tuple[Message, bytes]:
        if self._closed:
            raise HostGone("the host was stopped")
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(encode_frame(message, blob))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise HostGone(self._ended()) from None
        frame = bytearray()
        deadline = time.monotonic() + ROUND_TRIP_TIMEOUT_S
        while (length := frame_length(frame)) is None or len(frame) < length:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                self.close()
                raise HostGone(f"it did not answer within {ROUND_TRIP_TIMEOUT_S:.0f} s; stopped")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise HostGone(self._ended())
            frame += chunk
        if len(frame) != length:
            raise HostGone("it answered more than one frame")
        return decode_frame(frame)

    def _ended(self) -> str:
        """How the host ended, with its last output."""
        try:
            status: int | None = self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            status = None
        self._log.seek(0, os.SEEK_END)
        self._log.seek(max(0, self._log.tell() - _TAIL))
        tail = " ".join(self._log.read().decode(errors="replace").split())
        how = "it is still running" if status is None else f"it ended with status {status}"
        return f"{how}; its last output: {tail or '(none)'}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # the host exits at the end of its input
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        os.close(self._answers)
        self._log.close()


def _start(node: str, env: dict[str, str], first: Message) -> tuple[PipeTransport, Message]:
    """A host and its answer to `first`.

    Raises:
        BackendUnavailable: the host could not start, or answered `unavailable`.
    """
    modules = dawn_setup.webgpu_package().parent
    try:
        transport = PipeTransport([node, str(HOST), str(modules)], env)
    except HostGone as gone:
        raise BackendUnavailable(f"webgpu-dawn: {gone}; {_SETUP}") from None
    try:
        answer, _ = transport.exchange(first)
    except HostGone as gone:
        transport.close()
        raise BackendUnavailable(f"webgpu-dawn: the node host failed: {gone}; {_SETUP}") from None
    if "unavailable" in answer:
        transport.close()
        raise BackendUnavailable(
            f"webgpu-dawn: {answer['unavailable']}. Dawn needs a Vulkan driver it accepts: a "
            "GPU's, or lavapipe of Mesa 25 (it refuses Debian bookworm's Mesa 22.3); " + _SETUP
        )
    return transport, answer


class DawnImplementation(RemoteImplementation):
    """Dawn in a node host process (module docstring)."""

    @classmethod
    def open(cls) -> DawnImplementation:
        """Start the host and open its device.

        Raises:
            BackendUnavailable: node, the npm package or an adapter Dawn accepts is missing;
                the message says what to install.
        """
        node = shutil.which("node")
        package = dawn_setup.webgpu_package()
        missing = [
            *(["node (Debian package 'nodejs')"] if node is None else []),
            *([f"the npm package webgpu in {package.parent}"] if not package.exists() else []),
        ]
        if node is None or missing:
            raise BackendUnavailable(f"webgpu-dawn needs {' and '.join(missing)}; {_SETUP}")
        env = dawn_setup.dawn_environment()
        adapter = None
        if os.environ.get(ADAPTER_VARIABLE, "").strip():
            lister, answer = _start(node, env, {"adapters": True})
            lister.close()
            names: list[str] = answer["adapters"]
            best = sum(1 for name in names if names and name == names[0])
            adapter = pick_adapter("webgpu-dawn", names, best, str)
        transport, opened = _start(node, env, {"open": {"adapter": adapter}})
        api = f"Dawn (npm webgpu {opened['webgpu']}) in node {opened['node']}"
        return cls("dawn", transport, opened, api)

    @property
    def host_pid(self) -> int:
        """The node host's process id (tests end it to see a lost device)."""
        transport = self._transport
        assert isinstance(transport, PipeTransport)
        return transport.pid
