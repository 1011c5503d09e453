"""The `chrome` WebGPU implementation: a page (`host/chrome_host.html`) in headless Chromium
running the browser's own WebGPU (Dawn inside Chrome, on its bundled SwiftShader here: no
`shader-f16`), driven by the module the `dawn` host runs (`host/webgpu_host.mjs`), reached
by the remote client (`remote.py`).

Transport: a localhost HTTP server in a thread of this process serves the page and its module
(localhost is a secure context, where `navigator.gpu` exists; a page from file:// may not
import modules) and exchanges frames with the page by long poll: the page POSTs each answer to
`/exchange` and receives the next request as the response. The browser is started directly
(`--headless=new` with the page's URL), not through chromedriver: nothing but loading the page
is asked of it, and its process is what tells a crashed browser from a slow one.
"""

from __future__ import annotations

import atexit
import contextlib
import http.server
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import IO

from graph_format import BackendUnavailable
from webgpu_backend.gpu.remote import (
    HOST_DIR,
    ROUND_TRIP_TIMEOUT_S,
    HostGone,
    Message,
    RemoteImplementation,
    Transport,
    decode_frame,
    encode_frame,
)

PAGE = "chrome_host.html"
# The files the server serves, by URL path.
_FILES = {
    f"/{PAGE}": (PAGE, "text/html; charset=utf-8"),
    "/webgpu_host.mjs": ("webgpu_host.mjs", "text/javascript; charset=utf-8"),
}
# WebGPU on Chrome's Vulkan (as verified with Debian's chromium 156), with no traffic but the
# page's own; timers and rendering of the page are not
# throttled (a headless page counts as hidden).
FLAGS = (
    "--headless=new",
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-vulkan=native",
    "--use-angle=vulkan",
    "--ignore-gpu-blocklist",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
)
# How long the server holds a long poll before answering {"idle": true}: the page asks again at
# once, so this only bounds how long a connection stays open without traffic.
_IDLE_S = 20.0
# How often a wait for the page checks that the browser still runs.
_CHECK_S = 0.5
_TAIL = 1500
_IDLE_FRAME = encode_frame({"idle": True})
# The browser must not outlive this process, however that ends (a SIGKILL runs no atexit):
# a shell starts it (printing its pid), stops it at the end of the shell's stdin, a pipe whose
# only writer is this process, and exits when it ends. (A background job's stdin is
# /dev/null, hence fd 3.)
_WATCHDOG = """
exec 3<&0
"$@" </dev/null 3<&- 1>&2 &
browser=$!
echo "$browser"
{ read -r _ <&3; kill -TERM "$browser" 2>/dev/null; } &
wait "$browser"
"""


def browser_executable() -> str | None:
    """Debian's chromium (or a Chrome) on PATH."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class PageTransport(Transport):
    """A headless browser on a page that this process serves and long-polls (see above)."""

    def __init__(self, executable: str) -> None:
        self._requests: queue.Queue[bytes] = queue.Queue()
        self._answers: queue.Queue[bytes] = queue.Queue()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        port = self._server.server_address[1]
        self._profile = tempfile.TemporaryDirectory(
            prefix="webgpu-chrome-", ignore_cleanup_errors=True
        )
        # Open for the transport's life (closed in `close`).
        self._log: IO[bytes] = tempfile.TemporaryFile(prefix="webgpu-chrome-")  # noqa: SIM115
        flags = [*FLAGS, f"--user-data-dir={self._profile.name}"]
        if os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        try:
            self._shell = subprocess.Popen(
                [
                    "sh",
                    "-c",
                    _WATCHDOG,
                    "sh",
                    executable,
                    *flags,
                    f"http://127.0.0.1:{port}/{PAGE}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                start_new_session=True,  # its own process group: `close` ends all its processes
            )
        except OSError as err:
            self._stop_server()
            self._log.close()
            self._profile.cleanup()
            raise HostGone(f"could not start {executable}: {err}") from None
        assert self._shell.stdout is not None
        line = self._shell.stdout.readline()
        self._browser_pid = int(line) if line.strip().isdigit() else 0
        self._closed = False
        # A process-wide implementation is never closed: at exit, stop the browser and remove
        # its profile here (the shell would stop it, but only after this process is gone).
        atexit.register(self.close)
        try:
            message, _ = decode_frame(self._wait())
            if not message.get("hello"):
                raise HostGone(f"the page began with {message!r}, not a hello")
        except HostGone:
            self.close()
            raise

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        transport = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: one connection for every exchange
            # Headers and body are two writes: with Nagle's algorithm the body would wait for
            # the browser's delayed ACK (40 ms a step).
            disable_nagle_algorithm = True

            def handle(self) -> None:
                # The browser may go away mid-poll (stopped, or crashed): no traceback for that.
                with contextlib.suppress(ConnectionError):
                    super().handle()

            def do_GET(self) -> None:
                served = _FILES.get(self.path)
                if served is None:
                    self.send_error(404)
                    return
                self._reply((HOST_DIR / served[0]).read_bytes(), served[1])

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if body != _IDLE_FRAME:
                    transport._answers.put(body)
                try:
                    request = transport._requests.get(timeout=_IDLE_S)
                except queue.Empty:
                    request = _IDLE_FRAME
                self._reply(request, "application/octet-stream")

            def _reply(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # not on stderr: a request is no news

        return Handler

    def _wait(self) -> bytes:
        """The page's next answer, while the browser runs."""
        deadline = time.monotonic() + ROUND_TRIP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                return self._answers.get(timeout=_CHECK_S)
            except queue.Empty:
                if self._shell.poll() is not None:
                    raise HostGone(self._ended()) from None
        self.close()
        raise HostGone(f"the page did not answer within {ROUND_TRIP_TIMEOUT_S:.0f} s; stopped")

    def exchange(
        self, message: Message, blob: bytes | bytearray | memoryview = b""
    ) -> tuple[Message, bytes]:
        if self._closed:
            raise HostGone("the browser was stopped")
        self._requests.put(encode_frame(message, blob))
        return decode_frame(self._wait())

    @property
    def pid(self) -> int:
        """The browser's process id."""
        return self._browser_pid

    def _ended(self) -> str:
        self._log.seek(0, os.SEEK_END)
        self._log.seek(max(0, self._log.tell() - _TAIL))
        tail = " ".join(self._log.read().decode(errors="replace").split())
        return f"the browser ended with status {self._shell.poll()}; its last output: {tail}"

    def _stop_server(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._requests.put(encode_frame({"exit": True}))
        group = self._shell.pid  # the shell leads the group of every browser process
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        # The browser's processes write into the profile until they end: wait for the whole
        # group (not only the shell) before removing it; SIGKILL what a generous while leaves.
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                if self._shell.poll() is not None:
                    os.killpg(group, 0)  # ProcessLookupError once the group is empty
                time.sleep(0.02)
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._shell.wait()
        for pipe in (self._shell.stdin, self._shell.stdout):
            if pipe is not None:
                pipe.close()
        self._stop_server()
        self._log.close()
        self._profile.cleanup()


class ChromeImplementation(RemoteImplementation):
    """A page in headless Chromium (module docstring)."""

    @classmethod
    def open(cls) -> ChromeImplementation:
        """Start the browser on the page and open its device.

        Raises:
            BackendUnavailable: no browser, or its WebGPU found no adapter; the message says
                what to install.
        """
        executable = browser_executable()
        if executable is None:
            raise BackendUnavailable(
                "webgpu-chrome needs a Chromium: on Debian install 'chromium' "
                "(scripts/setup.sh does)"
            )
        try:
            transport = PageTransport(executable)  # stops the browser itself when it fails
        except HostGone as gone:
            raise BackendUnavailable(f"webgpu-chrome: the browser failed: {gone}") from None
        try:
            opened, _ = transport.exchange({"open": {}})
        except HostGone as gone:
            transport.close()
            raise BackendUnavailable(f"webgpu-chrome: the browser failed: {gone}") from None
        if "unavailable" in opened:
            transport.close()
            raise BackendUnavailable(
                f"webgpu-chrome: {opened['unavailable']} ({executable} with {' '.join(FLAGS)})"
            )
        browser = re.search(r"\S*Chrome/[\d.]+", opened["browser"])
        return cls(
            "chrome", transport, opened, f"Chrome's WebGPU ({browser[0] if browser else '?'})"
        )

    @property
    def host_pid(self) -> int:
        """The browser's process id (tests end it to see a lost device)."""
        transport = self._transport
        assert isinstance(transport, PageTransport)
        return transport.pid
