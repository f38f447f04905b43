"""The docs repeat an evidence report's verdicts only in the report's own words.

A verdict quoted in README, docs/compare.md or a method page is written in bold (``**held (at 300 of
1000 epochs; ...)**``) in a list item, table row or paragraph that links the report it quotes.
Every such bold verdict must be one of the verdicts that report opens with (its claim lines), and
a failing verdict ("did not hold", "not met") may not appear there at all unless the report reads
it: the docs cannot drift from the reports again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "docs" / "compare.md",
    *sorted((ROOT / "docs" / "methods").glob("*.md")),
]
VERDICTS = ("held", "did not hold", "not resolved", "partly held", "budget-limited", "not met")
VERDICTS += ("not checked",)
FAILING = ("did not hold", "not met")
REPORT_LINK = re.compile(r"\]\(([^)\s]*compare/\w+/report\w*\.md)\)")
BOLD = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
CLAIM_HEAD = re.compile(r"^- \*\*(.+?)\*\*:", re.MULTILINE)


def _words(text: str) -> str:
    return " ".join(text.split())


def _blocks(text: str) -> list[str]:
    """List items, table rows and paragraphs, each with its continuation lines."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        starts = line.lstrip().startswith(("- ", "* ", "|"))
        if not line.strip():
            blocks.append([])
        elif starts or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return ["\n".join(block) for block in blocks if block]


def _report_verdicts(report: Path) -> list[str]:
    return [_words(head) for head in CLAIM_HEAD.findall(report.read_text(encoding="utf-8"))]


def quotes_off(doc: Path) -> list[str]:
    """The verdicts ``doc`` quotes that the reports it links do not read, one line each."""
    found = []
    for block in _blocks(doc.read_text(encoding="utf-8")):
        reports = [(doc.parent / link).resolve() for link in REPORT_LINK.findall(block)]
        verdicts = [v for report in reports if report.is_file() for v in _report_verdicts(report)]
        if not verdicts:
            continue
        where = f"{doc.name}: {_words(block)[:80]}..."
        for span in map(_words, BOLD.findall(block)):
            if span.lower().startswith(VERDICTS) and span not in verdicts:
                found.append(f"{where} quotes **{span}**, which its report does not read")
        plain = BOLD.sub("", _words(block))
        for failing in FAILING:
            if failing in plain and not any(v.startswith(failing) for v in verdicts):
                found.append(f"{where} says {failing!r}, which no verdict of its report reads")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_docs_quote_the_reports_verdicts_in_their_words(doc):
    assert quotes_off(doc) == []


def test_a_verdict_that_drifted_from_its_report_is_caught(tmp_path):
    report = tmp_path / "compare" / "ev" / "report.md"
    report.parent.mkdir(parents=True)
    report.write_text("# Comparison\n\n- **budget-limited (200 of 1000 epochs)**: a claim (...)\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "- [ev](compare/ev/report.md): **budget-limited (200 of 1000\n  epochs)**, as it reads.\n"
        "- [ev](compare/ev/report.md): **held (at 200 of 1000 epochs)**.\n\n"
        "The [report](compare/ev/report.md) thresholds were not met.\n"
    )
    off = quotes_off(doc)
    assert len(off) == 2
    assert "quotes **held (at 200 of 1000 epochs)**" in off[0]
    assert "says 'not met'" in off[1]
