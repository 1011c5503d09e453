"""A sink that records what a `ChunkRunner` hands on, for tests that run a chunk in process."""

from __future__ import annotations

from harness.run.chunks import ChunkTally
from harness.run.records import CaseRecord, ChunkRecord, OutputError


class RecordingSink:
    """Collects what a ChunkRunner hands on (harness.run.chunks.ChunkSink)."""

    def __init__(self) -> None:
        self.cases: list[CaseRecord] = []
        self.chunks: list[ChunkRecord] = []
        self.errors: list[str] = []

    def case(self, record: CaseRecord) -> None:
        self.cases.append(record)

    def chunk(self, record: ChunkRecord, tally: ChunkTally) -> None:
        self.chunks.append(record)

    def error(self, text: str) -> None:
        self.errors.append(text)

    def output_error(self, error: OutputError) -> None:
        self.errors.append(str(error))

    def log(self, line: str) -> None:
        pass
