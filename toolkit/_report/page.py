"""The report's self-contained HTML page: style, chart embedding and layout."""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Sequence

from toolkit import __version__
from toolkit._report.blocks import PARTS, _Section
from toolkit._report.measure import _Run
from toolkit._report.tiles import stat_tiles

__all__: list[str] = []


_CSS = """
:root { --fg: #1b1b1b; --muted: #5f6368; --bg: #ffffff; --card: #f4f7f6; --line: #d9e0de; --accent: #00897B; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e8eaed; --muted: #a8adb3; --bg: #121212; --card: #1e2422; --line: #333a38; }
}
body { font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg); max-width: 1200px;
       margin: 0 auto; padding: 1.5rem; }
h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 2px solid var(--accent); padding-bottom: 0.2rem; margin-top: 2.5rem; }
.muted, figcaption { color: var(--muted); font-size: 0.9em; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(220px, 1fr)); gap: 1rem; margin: 1rem 0; }
.tile { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 0.8rem 1rem; }
.tile .value { font-size: 2rem; font-weight: 700; color: var(--accent); }
.tile .label { color: var(--muted); }
figure { margin: 1rem 0; overflow-x: auto; }
.table { overflow-x: auto; } table { border-collapse: collapse; font-size: 0.85em; }
th, td { padding: 0.2rem 0.5rem; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
dl.conditions { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 1rem; }
dl.conditions dt { color: var(--muted); }
h3 { border-bottom: 1px solid var(--accent); padding-bottom: 0.2rem; margin-top: 2rem; }
ul.lead { font-size: 1.05em; } ul.lead li { margin-bottom: 0.4rem; }
p.warn { border-left: 4px solid #E65100; background: var(--card); padding: 0.4rem 0.8rem; }
nav ol { columns: 2; }
a { color: var(--accent); }
"""


# Dark pages get a matching chart config; the bar hue needs none (it keeps 3:1 on both).
_EMBED_JS = """
const dark = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
const darkConfig = {background: '#121212', view: {stroke: '#333a38'},
  axis: {labelColor: '#e8eaed', titleColor: '#e8eaed', gridColor: '#333a38', domainColor: '#a8adb3', tickColor: '#a8adb3'},
  legend: {labelColor: '#e8eaed', titleColor: '#e8eaed'}, title: {color: '#e8eaed', subtitleColor: '#a8adb3'},
  header: {labelColor: '#e8eaed', titleColor: '#e8eaed'}, text: {color: '#e8eaed'}};
for (const el of document.querySelectorAll('div.chart')) {
  const spec = JSON.parse(document.getElementById('spec-' + el.dataset.chart).textContent);
  const opts = {renderer: 'svg', actions: false};
  if (dark) opts.config = darkConfig;
  vegaEmbed(el, spec, opts).catch(err => { el.textContent = 'chart failed: ' + err; });
}
"""


def _page(title: str, run: _Run, summary: str, sections: Sequence[_Section]) -> str:
    """The whole page: the conclusion (``summary``, plain text, one finding a line) and tiles, the run's conditions, a table
    of contents, then ``sections`` grouped under the headings of ``PARTS`` in its order."""
    import vl_convert
    from altair.utils.html import vl_version_for_vl_convert

    bundle = vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())
    conditions = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in run.conditions.items())
    parts, contents = [], []
    for key, heading in PARTS.items():
        members = [s for s in sections if s.part == key]
        if not members:
            continue
        body = "".join(
            f'<section id="{_slug(s.title)}"><h3>{html.escape(s.title)}</h3>{s.body}</section>' for s in members
        )
        parts.append(f'<section class="part" id="part-{key}"><h2>{html.escape(heading)}</h2>{body}</section>')
        links = "".join(f'<li><a href="#{_slug(s.title)}">{html.escape(s.title)}</a></li>' for s in members)
        contents.append(f'<li><a href="#part-{key}">{html.escape(heading)}</a><ol>{links}</ol></li>')
    findings = "".join(f"<li>{html.escape(line)}</li>" for line in summary.splitlines())
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_CSS}</style>
<script>{bundle}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p class="muted">Generated {stamp} by toolkit {__version__}; self-contained, opens offline.</p>
<section id="conclusion"><h2>Conclusion</h2><ul class="lead">{findings}</ul>{stat_tiles(run.levels)}</section>
<dl class="conditions">{conditions}</dl>
<nav><ol>{"".join(contents)}</ol></nav>
{"".join(parts)}
<script>{_EMBED_JS}</script>
</body></html>
"""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "run"
