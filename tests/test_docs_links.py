"""Every relative link in README.md and docs/ resolves.

A link ``[text](path)`` must name a file of the repository, relative to the page
that holds it; ``[text](path#anchor)`` (or ``#anchor`` alone) must also name a
heading of that file, by the anchor GitHub gives a heading: lower case, every
character other than a letter, digit, space, ``-`` or ``_`` dropped, spaces
turned into ``-``, and ``-1``, ``-2`` ... after a repeated heading.  Links to
other sites (``https:``, ``mailto:``) and anything inside code are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, CODE_SPAN.sub("", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication)."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a page's headings, repeated ones numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """``page:line: target: why`` for each relative link that does not resolve."""
    bad = []
    for number, line in prose_lines(page.read_text()):
        for target in LINK.findall(line):
            if EXTERNAL.match(target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.is_file():
                bad.append(f"{page.name}:{number}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                bad.append(f"{page.name}:{number}: {target}: no such heading")
    return bad


def test_slug_matches_githubs_anchors_worked_by_hand() -> None:
    assert slug("The 70B question: measured 2026-11-24 (commit 8e5c785)") == (
        "the-70b-question-measured-2026-11-24-commit-8e5c785"
    )
    assert slug("fio as the replay engine (`--engine auto|fio|python`)") == (
        "fio-as-the-replay-engine---engine-autofiopython"
    )
    assert anchors("# A\n## Notes\n```\n# not a heading\n```\n## Notes\n") == {
        "a",
        "notes",
        "notes-1",
    }


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n\n## Part two\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#part-two) [ok](#page) [web](https://x.y/z)\n"
        "`[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
        "# Page\n"
        "[gone](nowhere.md) [no heading](there.md#part-three)\n"
    )
    assert broken_links(page) == [
        "page.md:7: nowhere.md: no such file",
        "page.md:7: there.md#part-three: no such heading",
    ]


def test_the_readme_links_into_docs() -> None:
    readme = prose_lines((ROOT / "README.md").read_text())
    targets = {t.partition("#")[0] for _, line in readme for t in LINK.findall(line)}
    assert {"docs/README.md", "docs/architecture.md", "docs/changes.md"} <= targets


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []
