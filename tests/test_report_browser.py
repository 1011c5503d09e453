"""The HTML report in a real headless browser: Debian's chromium through its chromedriver.

On the report of a run with a planted bug (tests/cli_support.py), every page must render
without script errors, every link must resolve (pages load, files exist, anchors exist),
every image must decode, the filters must work, and names and messages must stay text: a
divergence message carrying markup is injected into the records and must not execute.

Chromium runs with a fresh profile and no network, as CI has none. Missing chromium or
chromedriver fails the test with the package to install (scripts/setup.sh installs both);
PARITY_SKIP_BROWSER_TESTS=1 skips it instead.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.cli_support import parity

pytestmark = [pytest.mark.gpu, pytest.mark.browser]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
)
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def _missing(reason: str) -> None:
    if os.environ.get("PARITY_SKIP_BROWSER_TESTS") == "1":
        pytest.skip(reason)
    pytest.fail(reason, pytrace=False)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A headless chromium session with browser console logging."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed: pip install -e '.[test]'")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            _missing(f"{path} not found: apt-get install {package} (scripts/setup.sh does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def report(planted_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the planted run whose first divergence message carries markup, re-rendered."""
    copy = tmp_path_factory.mktemp("browser") / "run"
    shutil.copytree(planted_run, copy)
    lines = (copy / "cases.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["record"] == "case" and record["divergences"]:
            for d in record["divergences"]:
                d["message"] = XSS + d["message"]
            for step in record.get("timeline", []):
                for d in step.get("divergences", []):
                    d["message"] = XSS + d["message"]
            lines[i] = json.dumps(record)
    (copy / "cases.jsonl").write_text("\n".join(lines) + "\n")
    proc = parity("report", copy)
    assert proc.returncode == 1, proc.stderr
    return copy


def _pages(root: Path) -> list[Path]:
    failures = sorted((root / "failures").glob("*.html"))
    return [root / "index.html", *failures, *sorted((root / "cases").glob("*.html"))]


def _severe(driver: object) -> list[dict[str, object]]:
    logs = driver.get_log("browser")  # type: ignore[attr-defined]
    return [entry for entry in logs if entry.get("level") == "SEVERE"]


def test_every_page_renders_without_script_errors_and_every_link_resolves(
    browser: object, report: Path
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    pages = _pages(report)
    assert len(pages) >= 3  # index, the failure page of its one finding, a cases page
    checked_links = 0
    for page in pages:
        driver.get(page.as_uri())  # type: ignore[attr-defined]
        body = driver.find_element(By.TAG_NAME, "body")  # type: ignore[attr-defined]
        assert body.get_attribute("data-ready") == "1", f"{page}: the page script did not run"
        assert driver.title, page  # type: ignore[attr-defined]
        assert _severe(driver) == [], f"{page}: console errors"
        assert driver.execute_script("return window.__xss === undefined"), page  # type: ignore[attr-defined]
        for img in driver.find_elements(By.TAG_NAME, "img"):  # type: ignore[attr-defined]
            assert driver.execute_script(  # type: ignore[attr-defined]
                "return arguments[0].complete && arguments[0].naturalWidth > 0", img
            ), f"{page}: an image did not decode"
        links = [
            a.get_attribute("href")
            for a in driver.find_elements(By.CSS_SELECTOR, "a[href]")  # type: ignore[attr-defined]
        ]
        for href in links:
            url = urlparse(href)
            assert url.scheme == "file", f"{page}: link leaves the report: {href}"
            target = Path(unquote(url.path))
            assert target.is_file(), f"{page}: broken link {href}"
            assert target.resolve().is_relative_to(report.resolve()), href
            if url.fragment and target.suffix == ".html":
                found = driver.execute_script(  # type: ignore[attr-defined]
                    "return document.getElementById(arguments[0]) !== null", url.fragment
                )
                if target == page:
                    assert found, f"{page}: no element #{url.fragment}"
            checked_links += 1
    # (The failure page links the kernels that ran, no longer every shader of the bundle.)
    assert checked_links > 15


def test_index_shows_totals_bugs_and_coverage(browser: object, report: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get((report / "index.html").as_uri())  # type: ignore[attr-defined]
    verdict = driver.find_element(By.ID, "verdict").text  # type: ignore[attr-defined]
    assert "unexpected divergences found" in verdict
    rows = driver.find_elements(By.CSS_SELECTOR, "#bug-table tbody tr")  # type: ignore[attr-defined]
    assert rows and all("rms_norm" in r.text and "webgpu" in r.text for r in rows)
    coverage = driver.find_element(By.ID, "coverage-table").text  # type: ignore[attr-defined]
    assert "rms_norm" in coverage
    # The filter hides rows that do not match and shows them again.
    box = driver.find_element(By.CSS_SELECTOR, "input[data-filter=bug-table]")  # type: ignore[attr-defined]
    box.send_keys("no-such-bug")
    assert all(not r.is_displayed() for r in rows)
    box.clear()
    box.send_keys(" ")  # an input event with a blank needle
    box.clear()
    driver.execute_script(  # type: ignore[attr-defined]
        "arguments[0].dispatchEvent(new Event('input'))", box
    )
    assert all(r.is_displayed() for r in rows)
    # The injected markup is shown as text, not run.
    assert "<script>" in driver.find_element(By.ID, "bug-table").text  # type: ignore[attr-defined]
    assert _severe(driver) == []


def test_failure_page_shows_timeline_heatmaps_and_replay(browser: object, report: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    summary = json.loads((report / "summary.json").read_text())
    finding = summary["findings"][0]
    driver.get((report / "failures" / f"{finding['id']}.html").as_uri())  # type: ignore[attr-defined]
    commands = driver.find_element(By.ID, "replay-commands").text  # type: ignore[attr-defined]
    assert f"{finding['bundle']}\n" in commands and "parity replay " in commands
    assert "--shaders worktree" in commands
    first = driver.find_element(By.ID, "first-divergent").text  # type: ignore[attr-defined]
    assert "rms_norm" in first and "webgpu" in first
    heatmaps = driver.find_elements(By.CSS_SELECTOR, "img.heatmap")  # type: ignore[attr-defined]
    assert len(heatmaps) >= 2  # WebGPU and Vulkan side by side
    steps = driver.find_elements(By.CSS_SELECTOR, ".step")  # type: ignore[attr-defined]
    assert steps
    table = driver.find_element(By.CSS_SELECTOR, ".step table.dims").text  # type: ignore[attr-defined]
    assert "model" in table and "webgpu" in table and "vulkan" in table
    messages = driver.find_element(By.ID, "divergence-table").text  # type: ignore[attr-defined]
    assert "onerror" in messages  # escaped markup shown as text
    toggle = driver.find_element(By.ID, "only-mismatch")  # type: ignore[attr-defined]
    toggle.click()
    shown = [s for s in steps if s.is_displayed()]
    assert all("has-mismatch" in s.get_attribute("class") for s in shown)
    assert _severe(driver) == []
