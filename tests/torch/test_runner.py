"""`python -m loom.torch script.py` runs an unchanged PyTorch script, with PyTorch's losses."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "scripts" / "mnist_mlp.py"


def _run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _losses(text):
    return [float(v) for v in re.findall(r"loss ([-\d.e]+)", text)]


def test_mnist_script_runs_unchanged_and_matches_pytorch(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "loom").mkdir()
    (tmp_path / "torch").mkdir()
    ours = _run(["-m", "loom.torch", str(SCRIPT), str(tmp_path / "loom")], tmp_path)
    theirs = _run([str(SCRIPT), str(tmp_path / "torch")], tmp_path)
    assert "restored True" in ours and "restored True" in theirs
    a, b = _losses(ours), _losses(theirs)
    assert len(a) == len(b) == 20
    for k, (x, y) in enumerate(zip(a, b)):
        assert abs(x - y) <= 1e-5 * max(1.0, abs(y)), f"step {k}: loom {x} vs PyTorch {y}"


def test_runner_resolves_torch_names_and_sets_argv(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys\nimport torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader\n"
        "import torch.nn.functional as F\nimport loom\n"
        "assert torch.Tensor is loom.Tensor and nn.Linear is loom.nn.Linear\n"
        "assert DataLoader is loom.data.DataLoader and F.relu is loom.nn.functional.relu\n"
        "print('argv', sys.argv[1:], __name__)\n")
    out = _run(["-m", "loom.torch", str(script), "--flag", "3"], tmp_path)
    assert "argv ['--flag', '3'] __main__" in out


def test_runner_usage_and_missing_file(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "loom.torch", str(tmp_path / "nope.py")], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 2 and "no such file" in out.stderr


def test_runner_never_falls_back_to_real_pytorch(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("try:\n    import torch.no_such_module\nexcept ModuleNotFoundError as e:\n"
                      "    print('missing', 'loom runs this script in place of PyTorch' in str(e))\n"
                      "import sys\nprint('real', any(m.startswith('torch._C') for m in sys.modules))\n")
    out = _run(["-m", "loom.torch", str(script)], tmp_path)
    assert "missing True" in out and "real False" in out
