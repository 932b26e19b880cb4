"""A tiny document model rendered to Markdown and to standalone HTML (no network assets)."""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from .model import STATE_LABELS, STATES


@dataclass
class Cell:
    text: str
    cls: str = ""        # css class: st-passed, st-failed, ..., zero, flag
    href: str | None = None


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Cell | str | int]]
    note: str = ""       # shown under the table (e.g. "and 12 more")


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    level: int = 2


@dataclass
class Document:
    title: str
    subtitle: str = ""
    verdict: tuple[str, str] | None = None   # (text, css class)
    sections: list[Section] = field(default_factory=list)


def cell(v) -> Cell:
    return v if isinstance(v, Cell) else Cell(str(v))


def count_cell(state: str, n: int) -> Cell:
    return Cell(str(n), f"st-{state} num" if n else "zero")


def state_counts_row(counts: dict[str, int]) -> list[Cell]:
    return [count_cell(s, counts.get(s, 0)) for s in STATES] + [Cell(str(sum(counts.values())))]


STATE_HEADERS = [STATE_LABELS[s] for s in STATES] + ["total"]

_URL = re.compile(r"https?://\S+")


def link_cell(text: str) -> Cell:
    m = _URL.fullmatch(text.strip())
    return Cell(text, href=m.group(0)) if m else Cell(text)


# ------------------------------------------------------------------ Markdown

def _md_escape(s: str) -> str:
    s = s.replace("\r", "").replace("\n", " ⏎ ")
    return s.replace("|", "\\|")


def _md_cell(c: Cell) -> str:
    t = _md_escape(c.text)
    if c.href:
        return f"[{t}]({c.href})"
    if set(c.cls.split()) & {"st-failed", "st-could-not-build", "st-harness-error", "flag"} \
            and c.text not in ("", "0"):
        return f"**{t}**"
    return t


def to_markdown(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    if doc.subtitle:
        out += [doc.subtitle, ""]
    if doc.verdict:
        out += [f"**{doc.verdict[0]}**", ""]
    for s in doc.sections:
        out += ["#" * s.level + " " + s.title, ""]
        for p in s.paragraphs:
            out += [p, ""]
        for t in s.tables:
            out.append("| " + " | ".join(_md_escape(h) for h in t.headers) + " |")
            out.append("|" + "|".join("---" for _ in t.headers) + "|")
            for row in t.rows:
                out.append("| " + " | ".join(_md_cell(cell(c)) for c in row) + " |")
            if t.note:
                out += ["", t.note]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------ HTML

_CSS = """
:root { --pass:#1a7f37; --fail:#cf222e; --known:#9a6700; --skip:#57606a; --nobuild:#8250df; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color:#1f2328; margin: 24px auto; max-width: 1200px; padding: 0 16px; background:#fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color:#57606a; margin-bottom: 12px; }
.verdict { display:inline-block; padding: 6px 14px; border-radius: 6px; font-weight: 700; color:#fff; margin: 6px 0 4px; }
.verdict.ok { background: var(--pass); } .verdict.bad { background: var(--fail); } .verdict.warn { background: var(--known); }
table { border-collapse: collapse; margin: 6px 0 4px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background:#f6f8fa; font-weight: 600; }
td.num, th.num, td.zero { text-align: right; font-variant-numeric: tabular-nums; }
td.zero { color:#afb8c1; text-align: right; }
td.st-passed { background:#dafbe1; color: var(--pass); font-weight: 600; }
td.st-failed { background:#ffebe9; color: var(--fail); font-weight: 700; }
td.st-known-issue { background:#fff8c5; color: var(--known); font-weight: 600; }
td.st-skipped { background:#f6f8fa; color: var(--skip); }
td.st-could-not-build { background:#fbefff; color: var(--nobuild); font-weight: 700; }
td.st-harness-error { background:#fff1e5; color: var(--nobuild); font-weight: 700; }
td.flag { background:#ffebe9; color: var(--fail); font-weight: 700; }
td.mono, code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
td.msg { max-width: 620px; white-space: pre-wrap; word-break: break-word; }
.note { color:#57606a; font-size: 12px; margin: 2px 0 10px; }
.legend span { display:inline-block; padding: 1px 8px; border-radius: 10px; margin-right: 6px; font-size: 12px; }
"""


def _h(s: str) -> str:
    return html.escape(s, quote=True)


def _html_cell(c: Cell) -> str:
    cls = c.cls
    if not cls and re.fullmatch(r"-?\d+(\.\d+)?", c.text or ""):
        cls = "num"
    if c.text and (len(c.text) > 80 or "\n" in c.text):
        cls = (cls + " msg").strip()
    inner = _h(c.text)
    if c.href:
        inner = f'<a href="{_h(c.href)}">{inner}</a>'
    return f'<td class="{cls}">{inner}</td>' if cls else f"<td>{inner}</td>"


def to_html(doc: Document) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_h(doc.title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_h(doc.title)}</h1>"]
    if doc.subtitle:
        parts.append(f'<div class="sub">{_h(doc.subtitle)}</div>')
    if doc.verdict:
        parts.append(f'<div class="verdict {_h(doc.verdict[1])}">{_h(doc.verdict[0])}</div>')
    for s in doc.sections:
        parts.append(f"<h{s.level}>{_h(s.title)}</h{s.level}>")
        for p in s.paragraphs:
            parts.append(f"<p>{_h(p)}</p>")
        for t in s.tables:
            parts.append("<table><thead><tr>" + "".join(f"<th>{_h(h)}</th>" for h in t.headers)
                         + "</tr></thead><tbody>")
            for row in t.rows:
                parts.append("<tr>" + "".join(_html_cell(cell(c)) for c in row) + "</tr>")
            parts.append("</tbody></table>")
            if t.note:
                parts.append(f'<div class="note">{_h(t.note)}</div>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
