"""Strings from a server or a user reach the HTML report as text, never as markup; the key never does.

One report is built against a :class:`fault_server.FaultServer` on 127.0.0.1, with markup as the model
name, the report name and the server's error bodies (the first requests fail with a 500 whose message
is the payload), and a sentinel API key.
"""

from __future__ import annotations

import html
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fault_server import FaultServer

import toolkit

PAYLOAD = "<script>alert(1)</script><img src=x onerror=alert(2)>"
# markup only starts at a "<": inside the charts' JSON specs the payload is a string with "<" written
# as \u003c, which no parser reads as a tag
RAW_PIECES = ("<script>alert(1)", "alert(1)</script>", "<img src=x")
SENTINEL = "sk-sentinel-report-93e1c7a0b5"


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._in_script: dict[str, str | None] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        else:
            self.text.append(data)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    from toolkit._report import build as _report

    out = tmp_path_factory.mktemp("report")
    patch = pytest.MonkeyPatch()
    # a small sweep: the escaping does not depend on how many lanes ran
    patch.setattr(_report, "REMOTE_SWEEP", {"lanes": 4, "limits": (1, 2), "max_tokens": 8})
    try:
        with FaultServer(tokens=3, token_delay_s=0, error_message=PAYLOAD, schedule=["500", "500"]) as server:
            index = toolkit.build_report(
                out_dir=out,
                base_url=server.root_url,
                model=PAYLOAD,
                name=PAYLOAD,
                execute_notebooks=False,
                api_key=SENTINEL,
            )
            assert server.chat_requests(), "the report did not measure the server"
            assert all(r["authorization"] == f"Bearer {SENTINEL}" for r in server.chat_requests())
    finally:
        patch.undo()
    return Path(index)


def test_markup_from_the_server_and_the_user_renders_as_text(report):
    page = report.read_text(encoding="utf-8")
    for piece in RAW_PIECES:
        assert piece not in page, f"raw markup {piece!r} in index.html"
    assert html.escape(PAYLOAD) in page  # the model name is shown, as text
    parsed = _Tags()
    parsed.feed(page)
    assert PAYLOAD in "".join(parsed.text)  # what a browser displays is the payload itself
    assert not [t for t, _ in parsed.tags if t == "img"]
    handlers = [(t, a) for t, a in parsed.tags for a in a if a.lower().startswith("on")]
    assert not handlers, f"event-handler attributes in the page: {handlers[:3]}"
    for attrs, body in parsed.scripts:
        assert "src" not in attrs, "the report loads a script from elsewhere"
        if attrs.get("type") != "application/json":
            assert "alert(" not in body, "the payload reached an executable script"


def test_the_api_key_is_in_no_report_file(report):
    hits = [p.name for p in report.parent.rglob("*") if p.is_file() and SENTINEL.encode() in p.read_bytes()]
    assert not hits, f"the API key was written to {hits}"
