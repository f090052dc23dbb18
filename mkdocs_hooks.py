"""mkdocs hook: the site's front page is the README (one source), its ``docs/`` links made
relative to the docs folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent / "README.md"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    return README.read_text().replace("](docs/", "](")
