"""The documentation builds without a warning, covers every public name, and its tutorials run.

Runs what a reader of docs/ would: ``sphinx-build -W -b html docs <out>`` (the
build fails on any warning, and `docs/_ext/loom_api.py` fails it when a public
name has no docstring), then the doctest builder over the same parsed pages,
which executes every tutorial's code and compares its printed output.
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_requirements_are_installed():
    missing = [m for m in ("sphinx", "furo", "myst_parser") if importlib.util.find_spec(m) is None]
    assert not missing, f"the docs build needs {missing}: pip install -e '.[docs]' (the test extra includes it)"


def _build(builder: str, out: Path, doctrees: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, LOOM_CODEGEN="0", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder,
                           "-d", str(doctrees), str(ROOT / "docs"), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_docs_build_and_tutorials_run(tmp_path):
    doctrees = tmp_path / "doctrees"
    html = _build("html", tmp_path / "html", doctrees)
    assert html.returncode == 0, f"sphinx-build -b html failed:\n{html.stdout}\n{html.stderr}"
    match = re.search(r"loom docs coverage: all (\d+) public names documented", html.stdout + html.stderr)
    assert match and int(match.group(1)) > 700, html.stdout + html.stderr
    for page in ["index", "architecture", "api/loom", "api/loom.nn", "api/loom.nn.functional", "api/loom.optim",
                 "api/loom.optim.lr_scheduler", "api/loom.data", "api/loom.autograd", "api/loom.compiler",
                 "api/loom.io", "api/loom.bench", "tutorials/quickstart", "tutorials/from-pytorch"]:
        assert (tmp_path / "html" / f"{page}.html").is_file(), page
    api = (tmp_path / "html" / "api" / "loom.optim.html").read_text()
    assert 'id="loom.optim.Adam"' in api  # An autodoc entry, with its docstring, not just a heading.
    assert (tmp_path / "html" / "searchindex.js").is_file()

    doctest = _build("doctest", tmp_path / "doctest", doctrees)
    report = (tmp_path / "doctest" / "output.txt").read_text() if (tmp_path / "doctest" / "output.txt").exists() \
        else ""
    assert doctest.returncode == 0, f"the tutorials' code failed:\n{report}\n{doctest.stdout}\n{doctest.stderr}"
    tests = re.search(r"^\s*(\d+) tests\s*$", report, re.M)
    assert tests and int(tests.group(1)) >= 30 and " 0 failures in tests" in report, report
    for page in ["quickstart", "eager-vs-function", "compiler-pass", "data-pipeline", "checkpoints",
                 "benchmarking", "from-pytorch"]:
        assert f"Document: tutorials/{page}" in report, f"tutorials/{page} ran no tests"
