"""The documentation stays true to the code: generated pages current, links that resolve, a
short README, every public name and every tutorial file accounted for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docs import gen_reference

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_MOST_LINES = 300
# [text](target) and ![alt](target), with an optional "title"; code is left out before matching.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:", "#")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]


def relative_links(path: Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", path.read_text()))
    return [target for target in LINK.findall(text) if not target.startswith(EXTERNAL)]


def test_the_generated_reference_pages_are_current() -> None:
    stale = gen_reference.stale_pages()
    assert not stale, (
        f"stale generated pages in docs/reference: {', '.join(stale)}; "
        f"refresh them with `{gen_reference.REFRESH}` and commit the result"
    )


def test_a_stale_page_is_noticed(tmp_path: Path) -> None:
    # Given the committed pages, one of them edited by hand
    for name in gen_reference.PAGES:
        (tmp_path / name).write_text((DOCS / "reference" / name).read_text())
    (tmp_path / "exit-codes.md").write_text("edited by hand\n")
    # Then it is the one reported, and writing the pages again makes them current
    assert gen_reference.stale_pages(tmp_path) == ["exit-codes.md"]
    assert gen_reference.write_pages(tmp_path) == ["exit-codes.md"]
    assert gen_reference.stale_pages(tmp_path) == []


def test_the_readme_fits_on_a_few_screens() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MOST_LINES, (
        f"README.md has {lines} lines (at most {README_MOST_LINES}): move detail into docs/"
    )


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(path: Path) -> None:
    missing = [
        target
        for target in relative_links(path)
        if not (path.parent / target.split("#", 1)[0]).exists()
    ]
    assert not missing, f"{path.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md) [gone](nowhere.md#x) `[code](x.md)` [web](https://x.org)\n")
    assert relative_links(page) == ["page.md", "nowhere.md#x"]


def test_the_python_api_page_lists_every_public_name() -> None:
    import worker

    page = (DOCS / "reference" / "python-api.md").read_text()
    listed = set(re.findall(r"^\s+- (\w+)$", page, re.MULTILINE))
    # ``app`` is the Celery app (``celery -A worker``), not an API to call.
    public = set(worker.__all__) - {"app"}
    assert not public - listed, f"add to docs/reference/python-api.md: {sorted(public - listed)}"


def test_every_tutorial_file_is_shown_and_executed() -> None:
    from tests.integration.test_tutorial import EXECUTED

    page = (DOCS / "tutorial" / "index.md").read_text()
    included = set(re.findall(r'--8<-- "docs/tutorial/([^"]+)"', page))
    files = {p.name for p in (DOCS / "tutorial").iterdir() if p.suffix in {".py", ".sh"}}
    assert files == included, f"shown in docs/tutorial/index.md: {sorted(included)}"
    assert files == set(EXECUTED), f"executed by tests/integration/test_tutorial.py: {EXECUTED}"
