"""The docs stay short and their links lead somewhere: README.md and bench/RESULTS.md within
their lengths, and every relative link of README.md, docs/*.md and bench/RESULTS.md naming a
file of the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_README_LINES = 200
MAX_RESULTS_LINES = 400
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](target) and ![..](..)


def _docs() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "bench" / "RESULTS.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]


def _relative_links(text: str) -> list[str]:
    """Link targets that point into the repository: no scheme, no bare #anchor."""
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines, more than {MAX_README_LINES}"


def test_the_results_are_short():
    n = len((ROOT / "bench" / "RESULTS.md").read_text().splitlines())
    assert n <= MAX_RESULTS_LINES, f"bench/RESULTS.md has {n} lines, more than {MAX_RESULTS_LINES}"


def test_every_relative_link_names_a_file_of_the_repository():
    broken = []
    for doc in _docs():
        for target in _relative_links(doc.read_text()):
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, f"links to nothing: {broken}"


def test_the_link_reader_finds_links_and_skips_urls():
    text = '[a](docs/a.md) ![b](../assets/b.png "title") [c](https://x.org) [d](#top) [e](f.md#g)'
    assert _relative_links(text) == ["docs/a.md", "../assets/b.png", "f.md#g"]
