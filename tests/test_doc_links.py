"""Every relative link of the project's Markdown (README.md, docs/, each package's README) resolves: its file
exists, and an anchor (``#section``) names a heading of the target as GitHub spells it. Links to web
addresses are not fetched. Issue 38: the README became one screen and its details moved into docs/, so a
moved or renamed section must not leave a dangling link behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".venv", ".git", "build", "out", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}

# [text](target) and ![alt](target), the text possibly wrapped over lines, an optional "title" after it
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = ("http://", "https://", "mailto:", "ftp://")


def markdown_files() -> list[Path]:
    """README.md, everything under docs/ and every other Markdown file of the tree (not .venv, build, out)."""
    found = []
    for path in sorted(ROOT.rglob("*.md")):
        parts = path.relative_to(ROOT).parts
        if any(p in SKIP_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        found.append(path)
    return found


def prose(text: str) -> str:
    """The text with fenced code blocks and inline code spans blanked (a link there is literal text)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of ``text``: lower case, punctuation dropped (letters, digits,
    ``_`` and ``-`` of any script kept), spaces as ``-``, a repeated heading suffixed ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out = set()
    for title in HEADING.findall(FENCE.sub("", text)):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` that does not resolve, as ``file:line: target (why)``."""
    text = path.read_text(encoding="utf-8")
    body = prose(text)
    problems = []
    for match in LINK.finditer(body):
        target = match.group(1)
        if target.startswith(EXTERNAL):
            continue
        line = body.count("\n", 0, match.start()) + 1
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: {target}"
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{where} (no such file: {dest})")
            continue
        if anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest.read_text("utf-8")):
            problems.append(f"{where} (no heading with the anchor #{anchor} in {dest.name})")
    return problems


def test_every_relative_link_resolves() -> None:
    files = markdown_files()
    names = {p.relative_to(ROOT).as_posix() for p in files}
    assert {"README.md", "docs/BENCHMARKS.md", "docs/DEPLOYMENT.md"} <= names, sorted(names)
    problems = [p for path in files for p in broken_links(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_links_its_docs() -> None:
    """The README is the way in: it links every page of docs/ (an unlinked page is one nobody finds)."""
    readme = prose((ROOT / "README.md").read_text(encoding="utf-8"))
    linked = {m.group(1).partition("#")[0] for m in LINK.finditer(readme)}
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if p.name != "bench-all.md"}
    missing = sorted(pages - linked)
    assert not missing, f"README.md does not link {missing}"


def test_the_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A title, with `code`\n\n## Same\n\n## Same\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "See [the other](other.md#a-title-with-code), [again](other.md#same-1), [gone](missing.md),\n"
        "[a wrong\nanchor](other.md#nothing), ![an image](pic.png), [web](https://example.org/x.md),\n"
        "`[in code](nowhere.md)` and\n```\n[in a fence](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    problems = broken_links(page)
    assert len(problems) == 3, problems
    assert "page.md:1: missing.md (no such file" in problems[0]
    assert "page.md:2: other.md#nothing (no heading with the anchor #nothing in other.md)" in problems[1]
    assert "page.md:3: pic.png (no such file" in problems[2]
