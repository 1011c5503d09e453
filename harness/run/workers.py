"""The worker processes of `parity run --jobs N`: chunks of the plan spread over N processes.

Each worker is a fresh interpreter (multiprocessing's *spawn*, never *fork*: a forked copy
of a process holding wgpu or Vulkan state would share its driver's threads and handles).
It opens both runtimes once (a `ChunkRunner`: pools and pipelines live as long as the
worker; the SPIR-V cache on disk is shared by all) and then runs one chunk after another as
the parent deals them, shrinking, re-running and bundling its findings itself.

Records: the parent is the only writer of `cases.jsonl`. A worker sends each record as its
finished line over its pipe, with a small tally (`CaseTally`, `ChunkTally`); the parent
writes the line and counts the tally. One writer means no lock and no interleaving, a
worker killed mid-write can never leave half a line in the middle of the file (only the
parent's own death can cut its last line, which the reader skips), and the parent's totals,
and so its exit status, come from exactly the lines it wrote, never from re-reading them.
Nothing assumes the order of the lines: the summary keys everything by chunk and case.

Lifetimes and signals:
- The parent holds the run folder's lock for the run's life (harness.run.session).
- Adapters: worker k opens the k-th GPU of the machine (modulo their number; every worker
  the default adapter where there is no GPU), or the adapter `--adapters` gives it, through
  graph_format's ADAPTER_VARIABLE, which both runtimes honour.
- Workers die with their parent: each asks the kernel for SIGKILL when its parent dies
  (`PR_SET_PDEATHSIG`, Linux), and a watchdog thread also ends it when the parent's pid
  changes (other systems, and the moment before the request took effect). So a SIGKILL of
  the parent leaves `cases.jsonl` with every record written so far, bundles on disk, and no
  orphan processes; `parity report` renders it.
- Workers run in their own process group, so a Ctrl-C at the terminal reaches the parent
  alone; the parent passes each SIGINT/SIGTERM on to every worker, which then stops after
  its current case (a second: at once), exactly as a single-process run does.
- An output the disk would not take (a full or read-only disk): the worker that met it
  sends it to the parent, which stops the run and has every worker stop after its current
  case (SIGUSR1: stop for `OUTPUT_ERROR`), so the run ends promptly, with exit status 2.
- A worker that dies (a driver crash, a lost device, `os._exit`) does not end the run: its
  chunk gets an `error` chunk record naming how it died and after how many cases, keeping
  the provisional findings its cases had; a new worker takes its place and the rest of the
  plan is dealt to the workers alive. Chunks are dealt one at a time, so a worker never
  holds more than the chunk it runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from graph_format import ADAPTER_VARIABLE, BackendUnavailable
from harness.check import timing
from harness.check.divergence import BugKey
from harness.run.bundle import existing_bundle
from harness.run.chunks import (
    OUTPUT_ERROR,
    CaseTally,
    ChunkRunner,
    ChunkTally,
    RunConfig,
    RunSetupError,
    Stop,
)
from harness.run.plan import Chunk
from harness.run.records import (
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    OutputError,
    RunMeta,
    WorkerLine,
    record_line,
)

# Replacement workers started over a run's life, beyond the first N, before giving up.
SPARE_WORKERS = 4
# After a second signal, how long the parent waits for its workers to finish their records.
LAST_WAIT_S = 20.0

_PR_SET_PDEATHSIG = 1


class WorkerSetupError(RuntimeError):
    """A worker could not start for a reason that is not bad input (its traceback follows)."""


class PoolSession(Protocol):
    """What the pool needs of the session that owns it (harness.run.session.RunSession)."""

    stop: Stop

    def deal(self, worker: int) -> Chunk | None:
        """The next chunk to run, or None when none is left (skipped ones are recorded)."""

    def case_line(self, line: str, tally: CaseTally) -> None:
        """A worker's case record."""

    def chunk_line(self, line: str, tally: ChunkTally) -> None:
        """A worker's chunk record."""

    def lost(self, chunk: Chunk, reason: str, findings: list[ChunkFinding], seconds: float) -> None:
        """A chunk whose worker died before it ended."""

    def error(self, text: str) -> None:
        """A failure to report among the run's errors."""

    def output_error(self, error: OutputError) -> None:
        """An output a worker could not write (a bundle): the run stops."""

    def log(self, line: str) -> None:
        """A line for stderr."""

    def tick(self) -> None:
        """Called at least once a second while the pool waits (progress lines)."""


@dataclass
class _Worker:
    """The parent's view of one worker."""

    line: WorkerLine
    process: BaseProcess
    conn: Connection
    state: str = "starting"  # starting, idle, busy, exiting, dead
    chunk: Chunk | None = None
    dealt: float = 0.0
    # Per bug, the unexpected case records of the current chunk (for a chunk lost with it).
    seen: dict[BugKey, CaseTally] = field(default_factory=dict)
    cases: int = 0  # of the current chunk


class WorkerPool:
    """N worker processes and the loop that deals them chunks (see the module docstring).

    Args:
        config: the run's configuration (`jobs`, `adapters`, `timings` included).
        limits: the workgroup limits the plan's chunks use (each worker opens runtimes for
            every one of them before it reports ready).
    """

    def __init__(self, config: RunConfig, limits: Sequence[int | None]) -> None:
        self.config = config
        self.limits = list(dict.fromkeys(limits))
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[_Worker] = []
        self.spares = SPARE_WORKERS
        self.timings: dict[str, float] = {}
        self.adapters: dict[str, dict[str, Any]] = {}
        self._begin: tuple[RunMeta, float] | None = None
        self._signals = 0
        self._ready_adapters: dict[int, dict[str, dict[str, Any]]] = {}

    # ------------------------------------------------------------------ start and stop

    def start(self) -> dict[str, dict[str, Any]]:
        """Start every worker and wait until each has opened its runtimes; the adapters of
        the first (run.json's `adapters`).

        Raises:
            BackendUnavailable: a worker found a driver missing (the message names it).
            RunSetupError: a workgroup limit above a device's.
            WorkerSetupError: a worker failed otherwise, or died while starting.
        """
        for _ in range(self.config.jobs):
            self._spawn()
        try:
            while any(w.state == "starting" for w in self.workers):
                self._wait(timeout=1.0, starting=True)
        except BaseException:
            self.close()
            raise
        first = next(w for w in self.workers if w.state == "idle")
        self.adapters = self._ready_adapters[first.line.index]
        return self.adapters

    @property
    def lines(self) -> list[WorkerLine]:
        """Every worker's line (run.json's `workers`)."""
        return [w.line for w in self.workers]

    def begin(self, meta: RunMeta, started: float) -> None:
        """Hand every worker the run's metadata (for its bundles) and the search's start."""
        self._begin = (meta, started)
        for w in self.workers:
            if w.state == "idle":
                self._send(w, ("begin", meta, started))

    def forward(self, signum: int) -> None:
        """Pass a signal the parent received on to every live worker."""
        self._signals += 1
        for w in self.workers:
            if w.state != "dead" and w.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.process.pid, signum)

    def stop_writing(self) -> None:
        """Have every worker running a chunk stop after its current case: the run's output
        failed. (Only those: one still starting has no handler yet, and SIGUSR1 would end
        it; an idle one is dealt no more chunks.)"""
        for w in self.workers:
            if w.state == "busy" and w.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.process.pid, signal.SIGUSR1)

    def close(self) -> None:
        """End every worker still running (those asked to exit get a moment to)."""
        for w in self.workers:
            if w.state in ("idle", "starting"):
                self._send(w, ("exit",))
        deadline = time.monotonic() + 5.0
        for w in self.workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5.0)
            w.conn.close()
            if w.state != "dead":
                w.state = "dead"

    # ------------------------------------------------------------------ the run

    def run(self, session: PoolSession) -> None:
        """Deal the session's chunks to the workers until none is left and every worker
        has ended its last one."""
        self.session = session
        last_signal_at: float | None = None
        while True:
            for w in list(self.workers):
                if w.state == "idle" and self._worn(w):
                    self._send(w, ("exit",))
                    w.state = "exiting"
                    replacement = self._spawn()
                    session.log(
                        f"parity: worker {w.line.index} ran {w.line.cases} cases; started "
                        f"worker {replacement.line.index} in its place (--worker-cases)"
                    )
                elif w.state == "idle":
                    chunk = session.deal(w.line.index)
                    if chunk is None:
                        self._send(w, ("exit",))
                        w.state = "exiting"
                    else:
                        self._deal(w, chunk)
            if all(w.state == "dead" for w in self.workers):
                break
            if self._signals >= 2:
                last_signal_at = last_signal_at or time.monotonic()
                if time.monotonic() - last_signal_at > LAST_WAIT_S:
                    session.log("parity: workers did not stop in time; ending them")
                    break
            self._wait(timeout=1.0)
            session.tick()
        self.close()

    def _worn(self, w: _Worker) -> bool:
        """Whether a worker has run its share of cases (`RunConfig.worker_cases`) and is to
        be replaced before it runs another chunk (not once the run is stopping)."""
        limit = self.config.worker_cases
        return limit is not None and w.line.cases >= limit and self.session.stop.reason is None

    def _deal(self, w: _Worker, chunk: Chunk) -> None:
        w.chunk, w.dealt, w.seen, w.cases = chunk, time.monotonic(), {}, 0
        w.state = "busy"
        self._send(w, ("chunk", chunk))

    # ------------------------------------------------------------------ processes

    def _spawn(self) -> _Worker:
        index = max((w.line.index for w in self.workers), default=0) + 1
        chosen = self.config.adapters
        adapter = chosen[(index - 1) % len(chosen)] if chosen else None
        ours, theirs = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=worker_main,
            args=(theirs, index, os.getpid(), self.config, self.limits, adapter),
            name=f"parity-worker-{index}",
            daemon=True,
        )
        process.start()
        theirs.close()
        worker = _Worker(WorkerLine(index, pid=process.pid or 0, adapter=adapter), process, ours)
        self.workers.append(worker)
        return worker

    def _send(self, w: _Worker, message: tuple[Any, ...]) -> None:
        # A worker that died cannot read: its sentinel says so, and `_died` handles it.
        with contextlib.suppress(OSError):
            w.conn.send(message)

    def _wait(self, timeout: float, starting: bool = False) -> None:
        """Handle whatever the workers sent or did within `timeout` seconds."""
        waiting = [w for w in self.workers if w.state != "dead"]
        handles: list[Any] = [w.conn for w in waiting] + [w.process.sentinel for w in waiting]
        for ready in wait(handles, timeout=timeout):
            for w in waiting:
                if w.state == "dead":
                    continue
                if ready is w.conn:
                    self._receive(w, starting)
                elif ready == w.process.sentinel:
                    self._drain(w, starting)
                    self._died(w, starting)

    def _receive(self, w: _Worker, starting: bool) -> None:
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            w.process.join(5.0)
            self._died(w, starting)
            return
        self._handle(w, message, starting)

    def _drain(self, w: _Worker, starting: bool) -> None:
        """Every message a worker sent before it ended."""
        try:
            while w.conn.poll():
                self._handle(w, w.conn.recv(), starting)
        except (EOFError, OSError):
            pass

    def _handle(self, w: _Worker, message: tuple[Any, ...], starting: bool) -> None:
        """One message of a worker (see `worker_main` for what each kind carries)."""
        kind = message[0]
        if kind == "case":
            self._on_case(w, message)
        elif kind == "chunk":
            _, line, tally, figures, w.line.peak_rss_mb = message
            timing.merge(self.timings, figures)
            w.line.chunks += 1
            w.chunk, w.state = None, "idle"
            self.session.chunk_line(line, tally)
        elif kind == "error":
            self.session.error(message[1])
        elif kind == "output_error":
            self.session.output_error(message[1])
        elif kind == "log":
            self.session.log(message[1])
        elif kind == "ready":
            self._on_ready(w, message)
        elif kind == "failed":
            self._on_failed(w, message, starting)
        elif kind == "bye":
            _, figures, w.line.peak_rss_mb = message
            timing.merge(self.timings, figures)
            w.line.exit = "done"
            w.state = "dead"
            w.process.join(5.0)

    def _on_case(self, w: _Worker, message: tuple[Any, ...]) -> None:
        """A case ran: counted, and kept per bug for a chunk the worker may not finish (the
        first case of each bug, or one with a provisional bundle)."""
        _, line, tally = message
        w.cases += 1
        w.line.cases += 1
        if tally.bug is not None and tally.unexpected:
            kept = w.seen.get(tally.bug)
            if kept is None or (tally.provisional_bundle and not kept.provisional_bundle):
                w.seen[tally.bug] = tally
            for other in tally.others:  # keys beside the case's own: the first case
                w.seen.setdefault(other, tally)
        self.session.case_line(line, tally)

    def _on_ready(self, w: _Worker, message: tuple[Any, ...]) -> None:
        """A worker opened its runtimes: its pid and adapters; a replacement begins at once."""
        _, pid, adapters = message
        w.line.pid = pid
        w.line.adapters = {b: str(info.get("adapter", "?")) for b, info in adapters.items()}
        self._ready_adapters[w.line.index] = adapters
        w.state = "idle"
        if self._begin is not None:  # a replacement, started mid-run
            self._send(w, ("begin", *self._begin))

    def _on_failed(self, w: _Worker, message: tuple[Any, ...], starting: bool) -> None:
        """A worker could not open its runtimes: a set-up error while the pool starts, else
        an error of the run."""
        _, what, text = message
        w.line.exit = f"failed to start: {text.splitlines()[-1] if text else what}"
        w.state = "dead"
        w.process.join(5.0)
        if what == "BackendUnavailable" and w.line.adapter is not None:
            given = f"worker {w.line.index} was given adapter {w.line.adapter}"
            text = f"--adapters: {given}: {text}"
        if starting and not self._begin:
            raise _setup_error(what, text)
        self.session.error(f"worker {w.line.index}: {w.line.exit}")

    def _died(self, w: _Worker, starting: bool) -> None:
        """A worker ended without saying goodbye: its chunk is recorded as lost."""
        if w.state == "dead":
            return
        w.process.join(5.0)
        how = _how_it_ended(w.process.exitcode)
        was = w.state
        w.state = "dead"
        if was == "exiting":  # asked to exit, and did: its goodbye was lost with its pipe
            w.line.exit = "done"
            return
        w.line.exit = f"died: {how}"
        adapter = " + ".join(sorted(set(w.line.adapters.values()))) or "its adapter"
        if starting and not self._begin:
            raise WorkerSetupError(
                f"worker {w.line.index} (pid {w.line.pid}) {how} while opening the runtimes "
                f"on {adapter}"
            )
        session = self.session
        if w.chunk is not None:
            reason = (
                f"worker {w.line.index} (pid {w.line.pid}, {adapter}) {how} while running "
                f"chunk {w.chunk.id}, after {w.cases} of its cases; the rest of the chunk "
                "was not run"
            )
            session.log(f"parity: {reason}")
            findings = [_lost_finding(self.config.out, tally, bug) for bug, tally in w.seen.items()]
            session.lost(w.chunk, reason, findings, time.monotonic() - w.dealt)
            w.chunk = None
        else:
            session.error(f"worker {w.line.index} (pid {w.line.pid}) {how} between chunks")
        if self.spares > 0 and session.stop.reason is None:
            self.spares -= 1
            replacement = self._spawn()
            session.log(f"parity: started worker {replacement.line.index} in its place")


def _lost_finding(out: Path, tally: CaseTally, bug: BugKey) -> ChunkFinding:
    """The finding a lost chunk keeps of a bug its cases showed: the case with a provisional
    bundle, named only when the bundle was written whole (and is of this bug: a key that
    showed beside the case's own has none)."""
    own = bug == tally.bug
    bundle = tally.provisional_bundle if own else None
    if bundle is not None and existing_bundle(out / bundle) is None:
        bundle = None
    return ChunkFinding(
        case_id=tally.case_id,
        unexpected=tally.unexpected,
        bundle=bundle,
        seq=tally.seq,
        shrunk=False,
        bug=bug,
        beside=None if own else tally.bug,
    )


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with status {exitcode}"


def _setup_error(what: str, text: str) -> Exception:
    """The error a worker's failed start stands for, raised again in the parent."""
    if what == "BackendUnavailable":
        return BackendUnavailable(text)
    if what == "RunSetupError":
        return RunSetupError(text)
    return WorkerSetupError(f"a worker failed to start:\n{text}")


# ---------------------------------------------------------------------------- the worker


class _PipeSink:
    """A worker's ChunkSink: everything goes to the parent over the pipe."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def case(self, record: CaseRecord) -> None:
        self.conn.send(("case", record_line(record), CaseTally.of(record)))

    def chunk(self, record: ChunkRecord, tally: ChunkTally) -> None:
        self.conn.send(("chunk", record_line(record), tally, timing.take(), peak_rss_mb()))

    def error(self, text: str) -> None:
        self.conn.send(("error", text))

    def output_error(self, error: OutputError) -> None:
        self.conn.send(("output_error", error))

    def log(self, line: str) -> None:
        self.conn.send(("log", line))


def peak_rss_mb() -> float | None:
    """This process's largest resident memory so far, in MiB (None where unknown).

    Linux: the address space's high-water mark (VmHWM). Not getrusage's ru_maxrss, which a
    spawned worker inherits across its exec from the fork of its parent, so that every
    worker reported at least the parent's size.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except OSError:  # not Linux
        pass
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux counts KiB, macOS bytes.
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent dies, and watch for it besides."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker_main(
    conn: Connection,
    index: int,
    parent: int,
    config: RunConfig,
    limits: list[int | None],
    adapter: int | None,
) -> None:
    """A worker process's life: open the runtimes, then run chunks until told to exit.

    Args:
        index: the worker's number (1-based).
        adapter: the adapter `--adapters` gave it; None: worker k opens GPU k - 1 modulo the
            machine's GPUs (graph_format's ADAPTER_VARIABLE, `spread:`), so workers spread
            over every GPU, and all open the default adapter of a machine without one.
    """
    _die_with(parent)
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the parent alone, which passes it on
    stop = Stop(config.time_budget_s)

    _install_signal_handlers(stop)
    os.environ[ADAPTER_VARIABLE] = str(adapter) if adapter is not None else f"spread:{index - 1}"
    if config.timings:
        timing.enable()
    runner = ChunkRunner(config, stop)
    try:
        adapters = runner.open(limits)
    except (BackendUnavailable, RunSetupError) as err:
        conn.send(("failed", type(err).__name__, str(err)))
        return
    except BaseException:
        conn.send(("failed", "internal", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid(), adapters))
    _serve(conn, runner, stop, adapters)


def _install_signal_handlers(stop: Stop) -> None:
    """SIGINT/SIGTERM stop the worker after its current case (a second one: at once);
    SIGUSR1 (another process could not write the run's output) stops it like a signal."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.reason is not None and stop.reason != "time_budget":
            raise KeyboardInterrupt  # a second signal: stop now
        stop.reason = signal.Signals(signum).name

    def on_output_error(signum: int, frame: FrameType | None) -> None:
        if stop.reason in (None, "time_budget"):
            stop.reason = OUTPUT_ERROR  # another process could not write: stop, like a signal

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_output_error)


def _serve(
    conn: Connection, runner: ChunkRunner, stop: Stop, adapters: dict[str, dict[str, Any]]
) -> None:
    """Run the chunks the parent deals until it says exit (or its pipe closes)."""
    sink = _PipeSink(conn)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        except KeyboardInterrupt:  # a second signal while idle: nothing left to finish
            conn.send(("bye", timing.take(), peak_rss_mb()))
            return
        if message[0] == "begin":
            meta, started = message[1], message[2]
            # Its bundles name the adapters this worker ran on.
            runner.meta = dataclasses.replace(meta, adapters=adapters)
            stop.started = started
        elif message[0] == "chunk":
            runner.run_chunk(message[1], sink)
        else:  # "exit"
            conn.send(("bye", timing.take(), peak_rss_mb()))
            return


__all__ = ["WorkerPool", "WorkerSetupError", "peak_rss_mb", "worker_main"]
