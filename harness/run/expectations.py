"""Known divergences: an expectations file whose entries say which findings are expected.

Each entry names the divergences it covers by the fields of their bug key
(`harness.check.divergence.BugKey`: op type, failure class, blamed backend, numeric band,
precision; each optional) and optionally family, regime and a message pattern, the device
and driver it applies to, a reason and a link to the bug. A divergence that matches an
applicable entry is reported as *known* and does not fail the run; a case whose
divergences are all known does not count as a Hypothesis failure either, so the search
keeps hunting for unexpected ones. An entry that applies to the run's device, whose op or
family the run exercised, and that matched nothing is reported as *stale*: the bug is fixed
or the entry is wrong, so it should go.

The file is TOML (`expectations.toml` at the repo root):

    [[known]]
    id = "lavapipe-rms-norm-vec4"     # unique, used in reports
    op = "rms_norm"                   # op type (optional)
    kind = "numeric"                  # failure class, harness.check.divergence.Kind (optional)
    blame = "webgpu"                  # webgpu | vulkan | both | model (optional)
    band = "x1000"                    # numeric band of error/budget: x1, x10, x1000 (optional)
    dtype = "float16"                 # the precision the op ran in: float32 | float16 (optional)
    family = "rms_norm"               # case family (optional)
    regime = "rows=1"                 # shape regime (optional)
    message = "over its error budget" # regular expression searched in the message (optional)
    device = "llvmpipe*"              # glob on the adapter name (required; "*" for any)
    driver = "Mesa 22.*"              # glob on the driver string (required; "*" for any)
    reason = "why it is expected"     # required
    link = "https://..."              # required: the bug or discussion
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from graph_format.signatures import SIGNATURES
from harness.check.backends import ALL_BACKENDS
from harness.check.divergence import NUMERIC_BANDS, BugKey, Kind


class MatchableDivergence(Protocol):
    """What an entry is matched against: harness.run.records.DivergenceRecord has it (a
    protocol, since records imports this module to read run.json's entries)."""

    @property
    def bug(self) -> BugKey: ...

    blame: str
    message: str
    regime: str


DEFAULT_FILE = Path(__file__).resolve().parents[2] / "expectations.toml"
# A backend (every WebGPU implementation's runtime, and Vulkan), `both` (every backend of
# the run) or `model`; several backends are comma-separated (harness.check.divergence).
_BLAMES = (*ALL_BACKENDS, "both", "model")


def _known_blame(blame: object) -> bool:
    if not isinstance(blame, str):
        return False
    parts = blame.split(",")
    return blame in _BLAMES or (
        len(parts) > 1 and len(set(parts)) == len(parts) and set(parts) <= set(ALL_BACKENDS)
    )


_BANDS = tuple(name for name, _ in NUMERIC_BANDS)
_MATCH_FIELDS = ("op", "kind", "blame", "band", "dtype", "family", "regime", "message")
_DTYPES = ("float32", "float16")
_REQUIRED = ("id", "device", "driver", "reason", "link")


class ExpectationsError(ValueError):
    """A malformed expectations file; the message names the file and the entry."""


@dataclass(frozen=True)
class Expectation:
    """One known divergence."""

    id: str
    device: str
    driver: str
    reason: str
    link: str
    op: str | None = None
    kind: str | None = None
    blame: str | None = None
    band: str | None = None
    dtype: str | None = None
    family: str | None = None
    regime: str | None = None
    message: str | None = None

    def applies_to(self, adapters: Mapping[str, Mapping[str, Any]]) -> bool:
        """Whether the device and driver globs match the adapter of a backend it blames."""
        blamed = self.blame
        backends = [blamed] if blamed is not None and blamed in adapters else list(adapters)
        return any(self._adapter_matches(adapters[b]) for b in backends)

    def _adapter_matches(self, info: Mapping[str, Any]) -> bool:
        drivers = [str(info.get(k, "")) for k in ("driver", "driver_info", "driver_name")]
        return fnmatch.fnmatchcase(str(info.get("adapter", "")), self.device) and any(
            fnmatch.fnmatchcase(d, self.driver) for d in drivers if d
        )

    def covers(self, bug: BugKey) -> bool:
        """Whether the bug key fields this entry names (op, kind, blame, band, dtype) match."""
        wanted = {
            "op": bug.op_type,
            "kind": bug.kind,
            "blame": bug.blame,
            "band": bug.band,
            "dtype": bug.dtype or "float32",
        }
        return all(getattr(self, k) in (None, v) for k, v in wanted.items())

    def matches(
        self,
        divergence: MatchableDivergence,
        family: str,
        adapters: Mapping[str, Mapping[str, Any]],
    ) -> bool:
        """Whether a divergence (its bug key, family, regime, message) is this one, on a
        device and driver the entry applies to."""
        if not self.covers(divergence.bug):
            return False
        if self.family not in (None, family) or self.regime not in (None, divergence.regime):
            return False
        if self.message is not None and not re.search(self.message, divergence.message):
            return False
        blamed = divergence.blame
        backends = [blamed] if blamed in adapters else list(adapters)
        return any(self._adapter_matches(adapters[b]) for b in backends)

    def to_json(self) -> dict[str, str]:
        """The entry as plain data (recorded in run.json), without fields it leaves open."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Expectations:
    """The entries of one file (empty when there is none)."""

    entries: list[Expectation] = field(default_factory=list)
    source: str | None = None

    def match(
        self,
        divergence: MatchableDivergence,
        family: str,
        adapters: Mapping[str, Mapping[str, Any]],
    ) -> str | None:
        """Id of the first entry matching a divergence record, or None."""
        for entry in self.entries:
            if entry.matches(divergence, family, adapters):
                return entry.id
        return None

    def to_json(self) -> list[dict[str, str]]:
        """The entries as plain data (recorded in run.json)."""
        return [entry.to_json() for entry in self.entries]


def load_expectations(path: str | Path) -> Expectations:
    """Read and check an expectations file.

    Raises:
        ExpectationsError: the file is missing, not TOML, or an entry is malformed; the
            message names the file, the entry and what was expected.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        doc = tomllib.loads(text)
    except FileNotFoundError:
        raise ExpectationsError(f"{path}: no such expectations file") from None
    except OSError as err:
        raise ExpectationsError(f"{path}: cannot be read: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ExpectationsError(f"{path}: not valid TOML: {err}") from None
    unknown_top = set(doc) - {"known"}
    if unknown_top:
        raise ExpectationsError(
            f"{path}: unexpected top-level keys {sorted(unknown_top)}; expected only [[known]] "
            "tables"
        )
    raw = doc.get("known", [])
    if not isinstance(raw, list):
        raise ExpectationsError(f"{path}: 'known' must be an array of tables ([[known]])")
    entries: list[Expectation] = []
    seen: set[str] = set()
    for n, entry in enumerate(raw, 1):
        where = f"{path}: [[known]] entry {n}"
        _check_entry_keys(where, entry)
        if entry["id"] in seen:
            raise ExpectationsError(f"{where}: id {entry['id']!r} is used twice")
        seen.add(entry["id"])
        _check_entry_values(where, entry)
        _check_entry_names(path, text, n, entry)
        entries.append(Expectation(**entry))
    return Expectations(entries, str(path))


def _check_entry_keys(where: str, entry: Any) -> None:
    """An entry is a table of strings with every required key and no unknown one."""
    if not isinstance(entry, dict):
        raise ExpectationsError(f"{where}: expected a table, got {type(entry).__name__}")
    missing = [k for k in _REQUIRED if not entry.get(k)]
    if missing:
        raise ExpectationsError(
            f"{where}: missing {missing}: every entry needs an id, the device and driver "
            "it applies to ('*' for any), a reason and a link"
        )
    allowed = set(_REQUIRED) | set(_MATCH_FIELDS)
    extra = set(entry) - allowed
    if extra:
        raise ExpectationsError(
            f"{where} ({entry['id']!r}): unknown keys {sorted(extra)}; allowed: {sorted(allowed)}"
        )
    bad = {k: v for k, v in entry.items() if not isinstance(v, str)}
    if bad:
        raise ExpectationsError(f"{where} ({entry['id']!r}): values must be strings: {bad}")


def _check_entry_values(where: str, entry: Mapping[str, str]) -> None:
    """An entry's kind, band, dtype and blame are values they can take, its message a
    regular expression."""
    if "kind" in entry and entry["kind"] not in {k.value for k in Kind}:
        raise ExpectationsError(
            f"{where} ({entry['id']!r}): kind must be one of {sorted(k.value for k in Kind)}, "
            f"got {entry['kind']!r}"
        )
    if "band" in entry and entry["band"] not in _BANDS:
        raise ExpectationsError(
            f"{where} ({entry['id']!r}): band must be one of {list(_BANDS)}, got {entry['band']!r}"
        )
    if "dtype" in entry and entry["dtype"] not in _DTYPES:
        raise ExpectationsError(
            f"{where} ({entry['id']!r}): dtype must be one of {list(_DTYPES)}, "
            f"got {entry['dtype']!r}"
        )
    if "blame" in entry and not _known_blame(entry["blame"]):
        raise ExpectationsError(
            f"{where} ({entry['id']!r}): blame must be one of {list(_BLAMES)} or several "
            f"backends comma-separated (webgpu,webgpu-dawn), got {entry['blame']!r}"
        )


def _check_entry_names(path: Path, text: str, n: int, entry: Mapping[str, str]) -> None:
    """An entry's op and family name ones that exist (a name that is no op or family would
    match nothing, silently), with the line of the key; its message is a regular expression."""
    for key, known in (("op", SIGNATURES), ("family", _families())):
        if key in entry and entry[key] not in known:
            close = difflib.get_close_matches(entry[key], list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            line = _line_of(text, n, key)
            place = f"{path}:{line}" if line is not None else str(path)
            what = "an op type" if key == "op" else "a case family"
            raise ExpectationsError(
                f"{place}: [[known]] entry {n} ({entry['id']!r}): {key} {entry[key]!r} is "
                f"not {what}{hint}; expected {what} that `parity list` shows"
            )
    if "message" in entry:
        try:
            re.compile(entry["message"])
        except re.error as err:
            raise ExpectationsError(
                f"{path}: [[known]] entry {n} ({entry['id']!r}): message is not a valid "
                f"regular expression: {err}"
            ) from None


def _families() -> Collection[str]:
    """The case families' names (imported here: the registry imports every op module)."""
    from harness.families import FAMILIES

    return FAMILIES


def _line_of(text: str, entry: int, key: str) -> int | None:
    """The line (from 1) of `key = ...` in the `entry`-th [[known]] table of `text`, or
    None when the file does not lay it out that way (an inline table, say)."""
    tables = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            tables += stripped.replace(" ", "") == "[[known]]"
        elif tables == entry and re.match(rf"{re.escape(key)}\s*=", stripped):
            return number
    return None


def entry_status(
    entry: Expectation,
    matches: int,
    adapters_seen: Iterable[Mapping[str, Mapping[str, Any]]],
    ops_run: set[str],
    families_run: set[str],
) -> str:
    """`matched`, `stale`, `not_applicable` (other device/driver) or `not_exercised`.

    Args:
        matches: how many divergences it matched.
        adapters_seen: the adapter sets the run (or each merged shard) ran on.
    """
    if matches:
        return "matched"
    if not any(entry.applies_to(adapters) for adapters in adapters_seen):
        return "not_applicable"
    exercised = (entry.op is None or entry.op in ops_run) and (
        entry.family is None or entry.family in families_run
    )
    return "stale" if exercised else "not_exercised"
