"""Headless Chromium (Debian's `chromium`, installed by .ci/run where missing) for tests that check
what a person sees on a page: the DOM after the page's scripts ran, and screenshots."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
REQUIRED = "HANDOFF_REQUIRE_BROWSER"  # set by .ci/run: a missing chromium fails instead of skipping


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get(REQUIRED):
            pytest.fail("chromium is not installed (apt-get install -y chromium; .ci/run does)")
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run does)")
    return found


def _run(url: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="handoff-chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                               *args, url], capture_output=True, text=True, timeout=180, check=True)


def dom(path: Path, fragment: str = "") -> str:
    """The page's DOM once its scripts ran (what is on screen), for a file and a #fragment."""
    return _run(Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else ""), "--dump-dom").stdout


def screenshot(path: Path, out: Path, width: int = 1200, height: int = 900, fragment: str = "") -> Path:
    url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
    _run(url, f"--screenshot={out}", f"--window-size={width},{height}", "--hide-scrollbars")
    return out


class Elements(HTMLParser):
    """Every element's tag and attributes, with the attributes of its enclosing elements and its text."""

    def __init__(self, html: str):
        super().__init__()
        self.found: list[dict] = []
        self._open: list[dict] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, **{k: v or "" for k, v in attrs}, "parents": list(self._open), "text": ""}
        self.found.append(element)
        if tag not in ("meta", "link", "br", "img", "input", "hr"):
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()["tag"] == tag:
                break

    def handle_data(self, data):
        for element in self._open:
            element["text"] += data

    def having(self, **attrs) -> list[dict]:
        """Elements whose attributes include these (class: one of its classes)."""
        def ok(e):
            return all(v in e.get("class", "").split() if k == "class_" else e.get(k) == v for k, v in attrs.items())
        return [e for e in self.found if ok(e)]
