"""Hypothesis settings profiles for quick local runs, PR runs and nightly runs.

`quick` is for a developer's loop, `pr` is what CI and the test suite use (derandomized, so a
CI failure reproduces), `nightly` searches longer, keeps its example database between runs
and steers generation toward high error-budget utilization with `target()`.

`parity run` splits each family's example budget into chunks of `chunk_examples` (see
harness/run/plan.py), each its own seeded search, so that a sharded run finds what an unsharded
one does. In `pr`, every `fold_every`-th chunk of each family runs under a lowered
workgroups-per-dimension limit (`fold_limit`), so the backends' 2-D grid folds, which a
device's own limit (65535 and up) never reaches, are tested on every PR; the test suite's
generated tests do the same (tests/diff/test_parity.py). `pr` also requires the long paths
the op models name (`pr_regimes`: the q4 GEMV's main loop, a decode at a long context, long
rows, the flat elementwise kernels over several workgroups), which a quarter of their
families' cases reach, of a family that ran its whole budget (issue 20).

`parity run` shrinks each distinct bug on its own, in the order the bugs were found (bugs not
shrunk before in the process first), after its chunk's search, and reports each on the
console as it is bundled (harness/run/chunks.py). `shrink_budget_s` caps the seconds a
process spends shrinking over the whole run and `shrink_finding_s` those of one finding (the
last of a chunk's findings, which no other waits for, may take what the run has left);
once the first is spent, the remaining findings are bundled as found, marked "unshrunk:
shrink budget spent" (a bug every op shows, 15-41 keys, would otherwise shrink for tens of
minutes). Each finding's cold re-run in a fresh process (harness.check.cold) counts against
the same budget; past it, findings are bundled without one, as with `--no-cold-rerun`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import HypothesisWarning
from hypothesis.reporting import current_reporter, with_reporter

from harness.check.coverage import dtype_regime
from harness.model import model_dtypes
from harness.ops import MODELS

# Generating a graph and running it on two devices is slow by Hypothesis's standards.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


@dataclass(frozen=True)
class Profile:
    """A named search budget, and the coverage cells a run of it must fill.

    `required_coverage` maps an op type to regime tags and kernel variants
    (harness/check/coverage.py) that every backend must have exercised by the end of a run
    of the op's own family; harness/run/exitrule.py decides which a run requires, and its
    exit status.
    """

    name: str
    max_examples: int  # per family
    derandomize: bool
    keep_database: bool
    chunk_examples: int = 50  # examples per chunk of `parity run`'s work plan
    steer: bool = False  # `parity run` feeds target() with the case's error/budget utilization
    required_coverage: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Cells required only of a family that ran the profile's whole example budget
    # (`max_examples`): paths a share of its cases reaches, which a shorter run may miss.
    full_budget_cells: frozenset[str] = frozenset()
    fold_every: int | None = None  # every k-th chunk of a family runs under `fold_limit`
    fold_limit: int | None = None  # workgroups per grid dimension in those chunks
    shrink_budget_s: float = 120.0  # seconds of shrinking per process, over the whole run
    shrink_finding_s: float = 30.0  # seconds of shrinking per finding


# Per op, the regimes its model names as where its resize bugs live and every kernel variant
# (`OpModel.required_regimes`, `OpModel.kernels`): what a nightly run of the op's own family
# must fill (harness/run/exitrule.py).
# An op with f16 kernels must also have run in half precision (`dtype=float16`; required
# only where both devices offer f16: harness/check/coverage.py, `available_cells`).
_NIGHTLY_CELLS = {
    op: (
        *model.required_regimes,
        *model.kernels,
        *((dtype_regime("float16"),) if "float16" in model_dtypes(op) and model.kernels else ()),
    )
    for op, model in sorted(MODELS.items())
}

# The workgroups per grid dimension of a fold chunk. Every kernel's logical count is 1-D
# (harness/ops): rows for rms_norm, ceil(elements / 64) for the elementwise, view and
# rotary kernels, min(ceil(N / 2), 8192) for the GEMV, heads x rows for attention's
# softmax. Above the limit both backends fold it into a 2-D grid; above its square no grid
# holds it and the step is refused alike. Measured over 40 cases per family (seed 1), the
# steps whose largest count falls in 5-16, and so folds under 4, are 20-51 % of the steps
# of 12 of the 16 families (7-9 % for sigmoid, silu, silu_mul and linear_q4gsw, whose
# families draw large or tiny counts). Under 2 more than half of the steps of 8 families
# would be refused (counts above 4); under 8 fewer than 15 % of the steps of the add, rope,
# rope_hf, random and linear_q4gsw families would fold. A fold chunk searches only cases
# that fold a grid of an op its family answers for (harness.run.chunks.chunk_cases), and the
# exit rule (harness/run/exitrule.py) checks that every such op folded on both backends.
FOLD_LIMIT = 4

# A fold of every op with a kernel (all but sym_size): all kernels' counts are 1-D and grow
# with the live sizes, so each can fold. Required only of the ops whose own family ran a
# chunk under a lowered limit (harness/run/exitrule.py).
_FOLD_CELLS: dict[str, tuple[str, ...]] = {
    op: ("fold",) for op, model in sorted(MODELS.items()) if model.kernels
}

# Per op, the long paths of its kernels (`pr_regimes` of its model: a GEMV's main loop...)
# that a share of its family's cases reaches within pr's time (harness/ops/linear_q4gsw.py).
# pr requires them of a family that ran its whole budget (30 examples), beside the fold.
_PR_REGIMES: dict[str, tuple[str, ...]] = {
    op: tuple(model.pr_regimes) for op, model in sorted(MODELS.items())
}
_PR_CELLS: dict[str, tuple[str, ...]] = {
    op: (*_FOLD_CELLS.get(op, ()), *_PR_REGIMES[op])
    for op in MODELS
    if _FOLD_CELLS.get(op) or _PR_REGIMES[op]
}

PROFILES = {
    "quick": Profile(
        "quick",
        10,
        derandomize=False,
        keep_database=True,
        chunk_examples=10,
        shrink_budget_s=60.0,
        shrink_finding_s=20.0,
    ),
    "pr": Profile(
        "pr",
        30,
        derandomize=True,
        keep_database=False,
        chunk_examples=15,
        required_coverage=_PR_CELLS,
        full_budget_cells=frozenset(c for cells in _PR_REGIMES.values() for c in cells),
        fold_every=2,
        fold_limit=FOLD_LIMIT,
        # A reviewer reads the first shrunk finding within a minute, the run ends in minutes.
        shrink_budget_s=120.0,
        shrink_finding_s=20.0,
    ),
    "nightly": Profile(
        "nightly",
        400,
        derandomize=False,
        keep_database=True,
        chunk_examples=50,
        steer=True,
        required_coverage=_NIGHTLY_CELLS,
        shrink_budget_s=1800.0,
        shrink_finding_s=300.0,
    ),
}
# Where `parity run --profile nightly` keeps its example database unless told otherwise.
DEFAULT_DATABASE_DIR = ".hypothesis/parity"


def hypothesis_settings(
    profile: str, *, max_examples: int | None = None, database_dir: str | None = None
) -> settings:
    """Hypothesis settings for a profile (optionally with another example budget)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {sorted(PROFILES)}")
    p = PROFILES[profile]
    database = (
        DirectoryBasedExampleDatabase(database_dir) if p.keep_database and database_dir else None
    )
    return settings(
        max_examples=max_examples or p.max_examples,
        derandomize=p.derandomize,
        database=database,
        deadline=None,  # pipeline creation makes first examples slow
        print_blob=True,
        suppress_health_check=_SLOW_OK,
        report_multiple_bugs=True,
    )


# Hypothesis's notes about itself rather than about the case under test, which would reach
# the console of every run that meets them: its notice that shrinking was stopped after five
# minutes of slow progress ("PLEASE REPORT THIS"), and its warning that a failing example's
# repr is large (a case holds arrays; the harness writes its own bundle, never that repr).
_SLOW_SHRINK = "WARNING: Hypothesis has spent more than five minutes working to shrink"
_LARGE_REPR = "Generating overly large repr"


@contextmanager
def quiet_hypothesis(log: Callable[[str], None], where: str) -> Iterator[None]:
    """Run Hypothesis with its slow-shrink notice turned into one line to `log` and its
    large-repr warning dropped; every other report, warning and error passes as before.

    Args:
        log: where the run's progress lines go.
        where: what ran (a chunk's id), for the line.
    """
    previous = current_reporter()

    def reporter(value: object) -> None:
        if str(value).startswith(_SLOW_SHRINK):
            log(
                f"parity: {where}: Hypothesis stopped shrinking after five minutes of slow "
                "progress; the finding is the smallest case it had reached"
            )
        else:
            previous(value)

    with with_reporter(reporter), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_LARGE_REPR, category=HypothesisWarning)
        yield


def register_profiles() -> None:
    """Register the profiles with Hypothesis under their names (for pytest)."""
    for name in PROFILES:
        settings.register_profile(
            name, hypothesis_settings(name, database_dir=".hypothesis/examples")
        )
