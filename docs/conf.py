"""Sphinx configuration for loom's documentation (``sphinx-build -W -b html docs docs/_build/html``)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # The checkout's loom, not an installed one.
sys.path.insert(0, os.path.join(HERE, "_ext"))

# Tutorials run on the NumPy path: no C compiler needed, nothing written to the user's kernel cache.
os.environ.setdefault("LOOM_CODEGEN", "0")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

project = "loom"
author = "the loom authors"
copyright = "the loom authors"  # noqa: A001
release = version = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.viewcode",
    "myst_parser",
    "loom_api",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# NumPy-style docstrings.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": False}
add_module_names = False
default_role = "code"  # `x` in docstrings is code, as in the Markdown pages.

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

# Tutorials are executed by `-b doctest`; docstring examples have their own tests (tests/docs).
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import os, tempfile
import numpy as np
import loom
"""

html_theme = "furo"
html_title = "loom"
html_static_path = []

# The API pages hold ~1,000 entries; listing each in the navigation tree made every page's sidebar
# (and the build) several times slower. Entries are still in the index and in search.
toc_object_entries = False

# A bare `Module` in an annotation (the quantization stubs subclass loom.nn.Module) has two same-named
# targets since loom.tf gained tf.Module; Sphinx resolves such a name to the first target (loom.nn's).
# Only this ambiguity warning ("more than one target found") is silenced.
suppress_warnings = ["ref.python"]
