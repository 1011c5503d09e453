"""The work plan of a run: deterministic chunks, and which shard runs which.

A run's example budget is split, per family, into chunks of at most the profile's
`chunk_examples` examples. Each chunk is its own Hypothesis search with its own seed,
derived from (run seed, family, chunk index) alone, and its own example budget. A chunk's
outcome therefore does not depend on what ran before it in the same process, so the chunks
can be dealt out to shards (`--shard I/N` runs chunks I-1, I-1+N, I-1+2N, ... of the plan)
and a merge of all N shards finds exactly what one unsharded run finds with the same seed,
provided no example database feeds earlier failures back in (`--no-database`).

The plan interleaves the families chunk by chunk (chunk 0 of each requested family, then
chunk 1 of each, ...), so that a run stopped by `--time-budget` has given every family its
share of the time instead of spending it all on the first families.

A chunk may run under a lowered workgroups-per-dimension limit (`max_workgroups_per_dim`),
so that the backends fold their counts into 2-D grids as they would only above a device's
limit (65535 and up). The limit is part of the chunk, fixed by the plan: every k-th chunk
of each family under a profile's `fold_limit`, or every chunk under
`--max-workgroups-per-dim`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Chunk:
    """One deterministic unit of work: a Hypothesis search over one family."""

    family: str
    index: int  # within the family
    seed: int  # Hypothesis seed of this chunk
    max_examples: int
    max_workgroups_per_dim: int | None = None  # a lowered limit the backends honour

    @property
    def id(self) -> str:
        """`family/index`, unique within a plan."""
        return f"{self.family}/{self.index}"


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int = 1
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Parse `I/N` (1 <= I <= N).

        Raises:
            ValueError: saying what was expected and what arrived.
        """
        parts = text.split("/")
        try:
            index, count = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"--shard must be I/N with integers, e.g. 1/2; got {text!r}") from None
        if count < 1 or not 1 <= index <= count:
            raise ValueError(f"--shard I/N needs 1 <= I <= N; got {text!r}")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def chunk_seed(seed: int, family: str, index: int) -> int:
    """The Hypothesis seed of chunk `index` of `family` in a run seeded `seed`."""
    digest = hashlib.sha256(f"parity:{seed}:{family}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**63


def make_plan(
    families: Sequence[str],
    seed: int,
    max_examples: int,
    chunk_examples: int,
    *,
    max_workgroups_per_dim: int | None = None,
    fold_every: int | None = None,
    fold_limit: int | None = None,
) -> list[Chunk]:
    """All chunks of a run, the families interleaved: round robin over `families` (in the
    given order), one chunk of each at a time.

    Args:
        max_examples: the example budget of each family.
        chunk_examples: the most examples one chunk gets.
        max_workgroups_per_dim: a lowered limit for every chunk (wins over the next two).
        fold_every, fold_limit: chunks k-1, 2k-1, ... of each family (k = `fold_every`) run
            under the limit `fold_limit`.
    """
    if max_examples < 1 or chunk_examples < 1:
        raise ValueError(
            f"example budgets must be >= 1, got max_examples={max_examples}, "
            f"chunk_examples={chunk_examples}"
        )
    per_family: list[list[Chunk]] = []
    for family in families:
        chunks = []
        left, index = max_examples, 0
        while left > 0:
            n = min(chunk_examples, left)
            limit = max_workgroups_per_dim
            if limit is None and fold_every and (index + 1) % fold_every == 0:
                limit = fold_limit
            chunks.append(Chunk(family, index, chunk_seed(seed, family, index), n, limit))
            left -= n
            index += 1
        per_family.append(chunks)
    rounds = max((len(chunks) for chunks in per_family), default=0)
    return [chunks[i] for i in range(rounds) for chunks in per_family if i < len(chunks)]


def shard_of(plan: Sequence[Chunk], shard: Shard) -> list[Chunk]:
    """The chunks shard `shard` runs: every N-th chunk of the plan, starting at I-1."""
    return [c for k, c in enumerate(plan) if k % shard.count == shard.index - 1]


def plan_digest(plan: Sequence[Chunk]) -> str:
    """A hash identifying a plan, so that a merge only combines shards of the same one."""
    text = json.dumps([asdict(c) for c in plan], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
