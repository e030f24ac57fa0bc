"""The README and the documentation pages are executed and checked, so they cannot drift.

Every ```python block of README.md and of docs/**/*.md runs, in order, one namespace per page. A
block that needs data or a long run is skipped only with a visible marker on the line before it:
``<!-- skip-test: reason -->``.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CI = ROOT / ".ci" / "run"
SKIP = re.compile(r"<!--\s*skip-test:\s*(.*?)\s*-->")
FENCE = re.compile(r"^```python\s*\n(.*?)^```\s*$", re.S | re.M)
ROUND_WORDS = re.compile(r"\bsession \d+|\bsession-\d+|\bthis round\b|\bQA\b|\baudit", re.I)


def pages():
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]


def python_blocks(path):
    """``(line, code, skip_reason)`` for every python block of ``path``."""
    text = path.read_text()
    blocks = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        if skip and not skip.group(1):
            raise AssertionError(f"{path}: a skip-test marker needs a reason")
        blocks.append((text.count("\n", 0, m.start()) + 1, m.group(1), skip.group(1) if skip else None))
    return blocks


def _name(path):
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", [p for p in pages() if python_blocks(p)], ids=_name)
def test_python_blocks_run(page):
    namespace = {"__name__": f"docs_{page.stem}"}
    for line, code, skip in python_blocks(page):
        if skip:
            continue
        exec(compile("\n" * line + code, str(page), "exec"), namespace)  # tracebacks name the page line


def test_readme_layer_example_is_run():
    blocks = python_blocks(README)
    assert blocks and all(skip is None for _, _, skip in blocks), "the README's examples must all run"
    assert any("GraphSelfAttention" in code for _, code, _ in blocks)


def _readme_commands():
    """Lines of the README's bash blocks that install, test or build the docs."""
    blocks = re.findall(r"^```bash\s*\n(.*?)^```\s*$", README.read_text(), flags=re.S | re.M)
    lines = [ln.strip() for block in blocks for ln in block.splitlines()]
    return [ln for ln in lines if re.match(r"(\S+=\S+ )?python -m (pip install|pytest|sphinx)", ln)]


def test_readme_test_command_is_what_ci_runs():
    ci_lines = [ln.strip() for ln in CI.read_text().splitlines()]
    commands = _readme_commands()
    tests = [c for c in commands if "python -m pytest" in c]
    assert len(tests) == 1, f"the README should show one test command, found {tests}"
    for cmd in commands:
        assert cmd in ci_lines, f".ci/run must run the README's line verbatim: {cmd!r}"
    assert any(c.startswith("python -m pip install torch==") for c in commands)
    assert any("python -m sphinx -W" in c for c in commands)
    assert "graphattn train karate" in README.read_text()


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).is_file(), f"README links to a missing page: {target}"


@pytest.mark.parametrize("page", pages(), ids=_name)
def test_pages_do_not_narrate_rounds_of_work(page):
    hits = [ln for ln in page.read_text().splitlines() if ROUND_WORDS.search(ln)]
    assert not hits, f"{_name(page)} dates results by a round of work; give the command and date: {hits}"


def test_every_page_is_linked_from_a_toctree():
    text = "\n".join(p.read_text() for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    entries = set(re.findall(r"^([\w/-]+)$", "\n".join(re.findall(r"```\{toctree\}(.*?)```", text, re.S)), re.M))
    for page in DOCS.rglob("*.md"):
        if "_build" in page.parts or page.name == "index.md" and page.parent == DOCS:
            continue
        rel = page.relative_to(DOCS).with_suffix("")
        local = rel.name if page.parent != DOCS else str(rel)
        assert str(rel) in entries or local in entries, f"docs/{rel}.md is in no toctree"
