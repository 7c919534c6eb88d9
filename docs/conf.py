"""Sphinx configuration: the guides (Markdown, read by MyST) and an API reference built from
the docstrings by autodoc.

Sphinx rather than MkDocs because the docstrings are reStructuredText (``:func:`` roles,
double-backquoted literals, ``>>>`` examples), which autodoc renders as written.
Build: ``sphinx-build -W --keep-going -q docs docs/_build/html`` (``./test.sh`` does).
"""

from __future__ import annotations

import singa_lite

project = "singa_lite"
author = "the singa_lite authors"
copyright = "the singa_lite authors, Apache-2.0"  # noqa: A001 (Sphinx reads this name)
version = release = singa_lite.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Guides link to each other's sections by heading (`performance.md#knobs`).
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Show NumPy's alias by name instead of the union it expands to.
autodoc_type_aliases = {"DTypeLike": "numpy.typing.DTypeLike"}
# The docstrings use Google-style sections only; NumPy-style parsing would misread prose.
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"singa_lite {release}"
html_static_path = ["_static"]
html_css_files = ["side-by-side.css"]
html_theme_options = {
    "description": "Apache SINGA's Python API on NumPy and CuPy",
    "page_width": "1180px",
    "sidebar_width": "230px",
    "fixed_sidebar": True,
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}

# Every cross-reference must resolve (a renamed function breaks the build), except names
# outside singa_lite (no intersphinx: the build runs offline), private base classes that
# show-inheritance names, and sonnx's modules: its page documents the package's names only
# while its modules are being reorganised.
nitpicky = True
nitpick_ignore_regex = [
    ("py:.*", r"(abc|collections|typing|os|pathlib|numpy|cupy|onnx|h5py|threading)(\..*)?"),
    ("py:class", r"singa_lite\..*\._\w+"),
    ("py:.*", r"singa_lite\.sonnx\..+"),
    ("py:func", r"fusion\.optimize"),
]
