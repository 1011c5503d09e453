"""HTML rendering of a parity run's summary (static, offline, names escaped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

_ENV = Environment(
    loader=PackageLoader("harness.report", "templates"),
    autoescape=select_autoescape(["html"]),
)


def write_html(summary: dict[str, Any], path: Path) -> Path:
    """Render `summary` (as written to summary.json) into a self-contained HTML page."""
    html = _ENV.get_template("index.html.j2").render(summary=summary)
    path.write_text(html)
    return path
