"""Papers are cited by name and their own numbering (docs/references.md), never by the internal
documents the project was planned from ("seed 000", "spec §3.8", "diet_spec.md"), which are not in
the repository."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("solo_diet", "README.md", "docs", "scripts", "benchmarks")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".cfg", ".toml"}
FORBIDDEN = re.compile(
    r"\bseed 0\d\d\b"  # "seed 000 Eq. 18": the planning documents' names for the papers
    r"|\bspec \(?(§|Sec\.)"  # "spec §3.8", "spec (§1.6)", "spec Sec. 6.5": their section numbers
    r"|\bspec [AVT]\d+\b|\bclaims? V\d+\b"  # "spec A29", "claim V10": their item numbers
    r"|\w+_spec\.md|shared/specs",  # "diet_spec.md", "shared/specs/sem_spec.md"
    re.IGNORECASE,
)


def _files(name: str) -> list[Path]:
    path = ROOT / name
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def _offending_lines(name: str) -> list[str]:
    found = []
    for path in _files(name):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_pattern_catches_old_citations_and_spares_paper_citations():
    old = [
        "seed 000 §5.2",
        "Seed 002 Lemma 1",
        "(spec §3.1)",
        "weighting of the spec (§1.6)",
        "DIET spec Sec. 6.5",
        "spec A29",
        "Spec V16",
        "claims V10 and V13",
        "diet_spec.md §2.6",
        "see shared/specs/sem_spec.md",
    ]
    new = [
        "s-DIET paper, Eq. 18",
        "SEM paper, §3.1",
        "seed 0 (stratified split)",
        "seed 5",
        "the comparison spec's keys",
        "Spec keys",
        "spec.yaml",
        "compare SPEC.yaml",
    ]
    assert [text for text in old if not FORBIDDEN.search(text)] == []
    assert [text for text in new if FORBIDDEN.search(text)] == []


@pytest.mark.parametrize("name", CHECKED)
def test_no_internal_document_citations(name):
    found = _offending_lines(name)
    assert not found, (
        f"{len(found)} citation(s) of internal planning documents under {name}; cite the paper by "
        "name and its own numbering (docs/references.md):\n" + "\n".join(found)
    )
