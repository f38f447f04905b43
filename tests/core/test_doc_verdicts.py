"""The docs repeat an evidence report's verdicts only in the report's own words.

A verdict quoted in README, docs/compare.md, docs/benchmarks.md or a method page is written in bold
(``**held (at 300 of 1000 epochs; ...)**``) in a list item, table row or paragraph that links the
report it quotes.
Every such bold verdict must be one of the verdicts that report opens with (its claim lines), and
a failing verdict ("did not hold", "not met") may not appear there at all unless the report reads
it: the docs cannot drift from the reports again. README's evidence table is checked row by row:
each row links one report, its verdicts are that report's claim lines, and every number in the row
is a number that report prints.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "docs" / "compare.md",
    ROOT / "docs" / "benchmarks.md",
    *sorted((ROOT / "docs" / "methods").glob("*.md")),
]
VERDICTS = ("held", "did not hold", "not resolved", "partly held", "budget-limited", "not met")
VERDICTS += ("not checked",)
FAILING = ("did not hold", "not met")
REPORT_LINK = re.compile(r"\]\(([^)\s]*compare/\w+/report\w*\.md)\)")
BOLD = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
CLAIM_HEAD = re.compile(r"^- \*\*(.+?)\*\*:", re.MULTILINE)
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
EVIDENCE_COLUMNS = ["claim (the paper's number, budget)", "ours", "steps, share of the paper's"]
EVIDENCE_COLUMNS += ["seeds", "probe", "verdict"]
EVIDENCE_MAX_LINES = 25


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


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def evidence_table(readme: Path) -> list[str]:
    """The lines of the table under ``readme``'s ``## Evidence`` heading, header and rule too."""
    section = readme.read_text(encoding="utf-8").split("\n## Evidence\n", 1)[1]
    lines = section.split("\n## ", 1)[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def evidence_rows_off(readme: Path) -> list[str]:
    """What ``readme``'s evidence table says that the reports its rows link do not, one per line."""
    table = evidence_table(readme)
    found = [] if _cells(table[0]) == EVIDENCE_COLUMNS else [f"columns {_cells(table[0])}"]
    if len(table) > EVIDENCE_MAX_LINES:
        found.append(f"{len(table)} lines, more than {EVIDENCE_MAX_LINES}")
    for row in table[2:]:
        where = f"row {_words(row)[:60]}..."
        links = REPORT_LINK.findall(row)
        if len(links) != 1 or len(_cells(row)) != len(EVIDENCE_COLUMNS):
            found.append(f"{where} has {len(links)} report links and {len(_cells(row))} cells")
            continue
        report = (readme.parent / links[0]).resolve()
        text = report.read_text(encoding="utf-8")
        verdicts = [_words(span) for span in BOLD.findall(_cells(row)[-1])]
        if not verdicts:
            found.append(f"{where} gives no verdict")
        for verdict in verdicts:
            if verdict not in _report_verdicts(report):
                found.append(f"{where} quotes **{verdict}**, which {links[0]} does not read")
        printed = set(NUMBER.findall(text))
        unlinked = REPORT_LINK.sub("", row)
        for number in NUMBER.findall(unlinked):
            if number not in printed:
                found.append(f"{where} says {number}, which {links[0]} does not print")
    return found


def test_readme_evidence_table_says_what_its_reports_say():
    assert evidence_rows_off(ROOT / "README.md") == []


def test_an_evidence_row_that_drifted_from_its_report_is_caught(tmp_path):
    report = tmp_path / "docs" / "compare" / "ev" / "report.md"
    report.parent.mkdir(parents=True)
    report.write_text("- **held (at 300 of 1000 epochs)**: a claim: a − b = +0.33 (3 seeds)\n")
    header = "| " + " | ".join(EVIDENCE_COLUMNS) + " |\n|" + "---|" * len(EVIDENCE_COLUMNS) + "\n"
    rows = [
        "| a claim; [ev](docs/compare/ev/report.md) | +0.33 | 300 of 1000 | 3 | linear |"
        " **held (at 300 of 1000 epochs)** |",
        "| a claim; [ev](docs/compare/ev/report.md) | +0.35 | 300 of 1000 | 3 | linear |"
        " **held (at 300 of 1000 epochs)** |",
        "| a claim; [ev](docs/compare/ev/report.md) | +0.33 | 300 of 1000 | 3 | linear | held |",
        "| a claim; [ev](docs/compare/ev/report.md) | +0.33 | 300 of 1000 | 3 | linear |"
        " **not met (at 300 of 1000 epochs)** |",
        "| a claim without its report | +0.33 | 300 of 1000 | 3 | linear | **held** |",
    ]
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Evidence\n\n" + header + "\n".join(rows) + "\n\n## Manual\n")
    off = evidence_rows_off(readme)
    assert len(off) == 4, off
    assert "says 0.35, which docs/compare/ev/report.md does not print" in off[0]
    assert "gives no verdict" in off[1]
    assert "quotes **not met (at 300 of 1000 epochs)**" in off[2]
    assert "has 0 report links" in off[3]
    readme.write_text("# x\n\n## Evidence\n\n" + header + "\n".join(rows[:1] * 24) + "\n")
    assert evidence_rows_off(readme) == ["26 lines, more than 25"]


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
