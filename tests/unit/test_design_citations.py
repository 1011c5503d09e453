"""Citations of the design: every one names a section of docs/design.md that exists, and
none cites a document that is not in the repository.

Code comments, docstrings, docs, shaders and tests cite the design as `docs/design.md §N`
(in docs/, as a link: `[docs/design.md](design.md) §N`); docs/design.md cites its own
sections as `§N`. The design once lived outside the repository, in a design document and a
reference of upstream facts cited by section; those citations must not come back.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
# The files that may cite it: sources, docs, shaders, configuration.
SUFFIXES = {".py", ".md", ".wgsl", ".comp", ".glslh", ".toml"}
# Not the project's own text: environments, caches, generated reports.
SKIPPED = {".venv", ".cache", ".git", ".hypothesis", ".mypy_cache", "node_modules", "reports"}

# A section number, after the file name (a link's target may sit between) and any line break
# or comment marker of the text around it.
CITATION = re.compile(r"design\.md\S*[\s#/*]*§(\d+(?:\.\d+)?)")
OWN_CITATION = re.compile(r"§(\d+(?:\.\d+)?)")
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.M)
# Spelled in pieces so that this file does not match itself.
GONE = re.compile("DESIGN" + r"\.md|\breference[\s#/*]*\(?" + "§")


def project_files() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*")
        if path.suffix in SUFFIXES
        and path.is_file()
        and not SKIPPED & set(path.relative_to(ROOT).parts)
    )


def sections() -> set[str]:
    return set(HEADING.findall(DESIGN.read_text()))


def test_the_design_numbers_its_sections() -> None:
    found = sections()
    assert {str(n) for n in range(1, 13)} <= found, sorted(found)
    assert {"4.1", "4.2", "4.3"} <= found, sorted(found)


def test_every_cited_section_exists() -> None:
    found = sections()
    missing = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: §{m.group(1)}"
        for path in project_files()
        for text in [path.read_text(errors="replace")]
        for m in (OWN_CITATION if path == DESIGN else CITATION).finditer(text)
        if m.group(1) not in found
    ]
    assert not missing, "cited sections docs/design.md does not have:\n" + "\n".join(missing)


def test_nothing_cites_the_design_documents_outside_the_repository() -> None:
    stale = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for path in project_files()
        for text in [path.read_text(errors="replace")]
        for m in GONE.finditer(text)
    ]
    assert not stale, "cite docs/design.md §N instead:\n" + "\n".join(stale)


def test_the_readme_links_the_design() -> None:
    assert "(docs/design.md)" in (ROOT / "README.md").read_text()
