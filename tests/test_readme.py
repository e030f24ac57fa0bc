"""The README's code blocks are executed, so the docs cannot drift."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_python_examples_run():
    blocks = python_blocks()
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})


def test_readme_commands_match_ci():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    test_cmd = re.search(r"python -m pytest[^\n`]*", text).group(0)
    assert test_cmd in ci, "the README's test command must be what .ci/run runs"
    assert "pip install torch==2.13.0" in text and "pip install torch==2.13.0" in ci
    assert "graphattn train karate" in text
