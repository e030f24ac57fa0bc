"""Sphinx configuration of the graphattn documentation (Markdown pages through MyST)."""
import sys
from pathlib import Path

from sphinx.util.docstrings import prepare_docstring

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's graphattn, installed or not

import graphattn  # noqa: E402

project = "graphattn"
author = "graphattn contributors"
copyright = "graphattn contributors"
release = graphattn.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_parser",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# API reference: documented under their public names (graphattn.X), members in source order
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_inherit_docstrings = False  # no torch.nn.Module texts on our methods
autoclass_content = "class"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_custom_sections = ["Shapes", "Shape"]  # free text (lists or sentences), shown as written
nitpicky = False

html_theme = "furo"  # a wide content column: code blocks and tables are not clipped
html_title = f"graphattn {release}"


def _drop_type_docstrings(app, what, name, obj, options, lines):
    """A constant without a doc comment would show its type's docstring (``dict``'s, ``tuple``'s):
    drop it; the page's own text describes the constant."""
    if what == "data" and lines and type(obj).__doc__:
        if [ln.strip() for ln in lines if ln.strip()] == [
                ln.strip() for ln in prepare_docstring(type(obj).__doc__) if ln.strip()]:
            lines.clear()


def setup(app):
    app.connect("autodoc-process-docstring", _drop_type_docstrings)
