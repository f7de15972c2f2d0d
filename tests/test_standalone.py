"""The repository stands alone: nothing it ships points at a file outside it.

Every clone, wheel and image carries only what git tracks, so a reference to a sibling
folder or to a design file kept outside the repository is a dead link for every reader.
Two checks over the tracked files (``git ls-files``):

- no tracked file contains the forbidden references below;
- every relative link in a tracked Markdown file resolves to a tracked file or folder
  (relative to the Markdown file; ``/x`` relative to the repository root, as GitHub does).

Both name the offending file and line. Outside a git checkout (an sdist, an image) they skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[1]

# Spelled in pieces so that this file does not contain what it forbids.
FORBIDDEN = ("../" + "shared", "DESIGN" + ".md")

# Fenced code block delimiters (CommonMark: up to 3 spaces, then 3+ backticks or tildes).
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# Inline code spans on one line: `x`, ``x ` y``.
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# Inline links and images: [text](target "title"), ![alt](<target with spaces>).
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*\]\(\s*(?P<target><[^<>\n]*>|[^\s()]+)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
# Reference definitions: [label]: target "title".
_REFERENCE = re.compile(
    r"^ {0,3}\[(?:[^\[\]\\]|\\.)+\]:[ \t]*(?P<target><[^<>\n]*>|\S+)", re.MULTILINE
)
# HTML links and images written inside Markdown.
_HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"'](?P<target>[^\"']*)[\"']")
# A scheme (https:, mailto:, data:...) or a protocol-relative URL: not a repository path.
_EXTERNAL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|//)")


@dataclass(frozen=True)
class Problem:
    """One offending place: ``path`` (repository-relative), 1-based ``line``, what is wrong."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def tracked_files(repo: Path) -> list[str] | None:
    """Paths git tracks in ``repo`` (relative, ``/``-separated), or ``None`` when ``repo`` is
    not the top of a git checkout or git is not installed."""
    git = shutil.which("git")
    if git is None:
        return None
    top = subprocess.run(
        [git, "rev-parse", "--show-toplevel"], cwd=repo, capture_output=True, text=True
    )
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != repo.resolve():
        return None
    listed = subprocess.run(
        [git, "ls-files", "-z"], cwd=repo, capture_output=True, check=True
    ).stdout.decode()
    return [p for p in listed.split("\0") if p]


def _line_of(text: str | bytes, offset: int) -> int:
    """The 1-based line number of ``offset`` in ``text``."""
    if isinstance(text, bytes):
        return text.count(b"\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1


def forbidden_references(path: str, data: bytes) -> list[Problem]:
    """Every occurrence of a :data:`FORBIDDEN` string in ``data`` (the bytes of ``path``)."""
    problems = []
    for needle in FORBIDDEN:
        raw = needle.encode()
        start = data.find(raw)
        while start != -1:
            line_start = data.rfind(b"\n", 0, start) + 1
            line_end = data.find(b"\n", start)
            line = data[line_start : line_end if line_end != -1 else len(data)]
            shown = line.decode("utf-8", "replace").strip()[:120]
            problems.append(Problem(path, _line_of(data, start), f"{needle!r} in: {shown}"))
            start = data.find(raw, start + len(raw))
    return sorted(problems, key=lambda p: p.line)


def _closes(fence: str, marker: str, rest: str) -> bool:
    """Whether ``marker`` (followed by ``rest``) closes a block opened with ``fence``:
    the same character, at least as long, and nothing after it."""
    return marker[0] == fence[0] and len(marker) >= len(fence) and not rest.strip()


def _without_code(text: str) -> str:
    """``text`` with fenced blocks and inline code spans blanked out (offsets and newlines
    kept), so that code that looks like a link is not taken for one."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        opened = _FENCE.match(body)
        if fence is not None:
            if opened is not None and _closes(fence, opened.group(1), body[opened.end() :]):
                fence = None
            out.append(" " * len(body) + ending)
        elif opened is not None:
            fence = opened.group(1)
            out.append(" " * len(body) + ending)
        else:
            out.append(_CODE_SPAN.sub(lambda m: " " * len(m.group(0)), body) + ending)
    return "".join(out)


def markdown_links(text: str) -> Iterator[tuple[int, str]]:
    """``(line, target)`` of every link in Markdown ``text``, outside code, in text order."""
    prose = _without_code(text)
    found = []
    for pattern in (_INLINE_LINK, _REFERENCE, _HTML_LINK):
        for m in pattern.finditer(prose):
            found.append((m.start("target"), m.group("target")))
    for offset, target in sorted(found):
        yield _line_of(prose, offset), target


def broken_links(path: str, text: str, repo: Path, tracked: Iterable[str]) -> list[Problem]:
    """Relative links of Markdown file ``path`` (its ``text``) whose target is not in the
    repository: no tracked file there, and no folder holding tracked files."""
    present = set(tracked)
    folders = {str(Path(p).parent.as_posix()) for p in present}
    folders |= {parent.as_posix() for p in present for parent in Path(p).parents}
    root = repo.resolve()
    base = (repo / path).parent
    problems = []
    for line, raw in markdown_links(text):
        target = raw[1:-1] if raw.startswith("<") and raw.endswith(">") else raw
        if not target or target.startswith("#") or _EXTERNAL.match(target):
            continue
        local = unquote(target.split("#", 1)[0].split("?", 1)[0])
        if not local:
            continue
        resolved = (repo / local.lstrip("/") if local.startswith("/") else base / local).resolve()
        try:
            inside = resolved.relative_to(root).as_posix()
        except ValueError:
            problems.append(Problem(path, line, f"link {raw!r} leaves the repository"))
            continue
        if inside in present or inside in folders:
            continue
        why = "is not tracked by git" if resolved.exists() else "does not exist"
        problems.append(Problem(path, line, f"link {raw!r}: {inside} {why}"))
    return problems


def _tracked_or_skip() -> list[str]:
    files = tracked_files(REPO)
    if files is None:
        pytest.skip(f"{REPO} is not a git checkout (or git is missing): nothing to list")
    return files


def _report(problems: list[Problem]) -> str:
    return "\n".join(str(p) for p in problems)


# ---------------------------------------------------------------- the repository


def test_no_tracked_file_points_outside_the_repository() -> None:
    problems = []
    for path in _tracked_or_skip():
        file = REPO / path
        # A symlink's target is checked as a path (it must stay inside the repository), its
        # content through the tracked target; a tracked file deleted in the work tree has
        # nothing to read.
        if file.is_symlink():
            target = (file.parent / os.readlink(file)).resolve()
            if not target.is_relative_to(REPO.resolve()):
                problems.append(Problem(path, 0, f"symlink to {os.readlink(file)}"))
            continue
        if not file.is_file():
            continue
        problems += forbidden_references(path, file.read_bytes())
    assert not problems, "references to files outside the repository:\n" + _report(problems)


def test_relative_markdown_links_resolve_inside_the_repository() -> None:
    tracked = _tracked_or_skip()
    problems = []
    for path in tracked:
        file = REPO / path
        if not path.endswith(".md") or file.is_symlink() or not file.is_file():
            continue
        text = file.read_text(encoding="utf-8", errors="replace")
        problems += broken_links(path, text, REPO, tracked)
    assert not problems, "Markdown links to nothing in the repository:\n" + _report(problems)


def test_the_checks_see_the_readme() -> None:
    # Guards the two tests above against passing on an empty listing.
    tracked = _tracked_or_skip()
    assert "README.md" in tracked
    links = [target for _, target in markdown_links((REPO / "README.md").read_text())]
    assert "docs/architecture.md" in links


# ---------------------------------------------------------------- the checkers


def test_forbidden_references_name_file_and_line() -> None:
    data = ("line one\nsee " + FORBIDDEN[1] + " here\nand " + FORBIDDEN[0] + "/x\n").encode()
    problems = forbidden_references("pkg/mod.py", data)
    assert [(p.path, p.line) for p in problems] == [("pkg/mod.py", 2), ("pkg/mod.py", 3)]
    assert str(problems[0]).startswith("pkg/mod.py:2: ")
    assert "here" in str(problems[0])
    assert forbidden_references("ok.py", b"design notes live in docs/architecture.md\n") == []


def test_broken_links_resolve_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("x")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x")
    (tmp_path / "untracked.md").write_text("x")
    tracked = ["README.md", "docs/guide.md", "pkg/mod.py"]
    text = "\n".join(
        [
            "[ok](docs/guide.md) [ok with anchor](docs/guide.md#part) [folder](pkg)",
            "[ok from root](/pkg/mod.py) ![image](<docs/guide.md>) [web](https://example.org/x.md)",
            "[anchor](#terms) [mail](mailto:a@b.c)",
            "[missing](docs/nothing.md)",
            "[outside](../sibling/notes.md)",
            "[untracked](untracked.md)",
            "[ref]: pkg/gone.py",
            '<a href="docs/absent.md">html</a>',
        ]
    )
    problems = broken_links("README.md", text, tmp_path, tracked)
    assert [(p.line, p.what.split(":")[0]) for p in problems] == [
        (4, "link 'docs/nothing.md'"),
        (5, "link '../sibling/notes.md' leaves the repository"),
        (6, "link 'untracked.md'"),
        (7, "link 'pkg/gone.py'"),
        (8, "link 'docs/absent.md'"),
    ]
    assert "does not exist" in problems[0].what
    assert "is not tracked by git" in problems[2].what


def test_links_in_a_nested_file_and_code_are_handled(tmp_path: Path) -> None:
    tracked = ["README.md", "docs/a.md"]
    text = "\n".join(
        [
            "[up](../README.md) [split",
            "text](missing.md)",
            "```python",
            "x = y[0](z)  # [not](a-link.md)",
            "```",
            "Inline `[no](code.md)` is code.",
            "~~~",
            "[still](code.md)",
            "~~~",
        ]
    )
    problems = broken_links("docs/a.md", text, tmp_path, tracked)
    assert [str(p) for p in problems] == [
        "docs/a.md:2: link 'missing.md': docs/missing.md does not exist"
    ]


def test_outside_a_git_checkout_nothing_is_listed(tmp_path: Path) -> None:
    assert tracked_files(tmp_path) is None
