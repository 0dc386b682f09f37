"""loom.convert: the source converter (imports rewritten, missing names listed, the converted program runs and
matches PyTorch) and loom.from_torch on live modules (same outputs, gradients and modes)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import loom
from loom.convert import convert_source
from loom.errors import LoomError

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent('''
    import numpy as np
    import torch  # the framework
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset
    from torch import optim

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((64, 6)).astype(np.float32))
    y = torch.tensor(rng.integers(0, 3, 64))
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
    w = np.random.default_rng(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(w.uniform(-0.3, 0.3, tuple(p.shape)).astype(np.float32)))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=16):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        print(f"{loss.item():.6f}")
''')


def test_imports_are_rewritten_and_the_rest_kept():
    conv = convert_source(PROGRAM)
    assert "import loom.torch as torch  # the framework" in conv.code
    assert "import loom.torch.nn as nn" in conv.code and "import loom.torch.nn.functional as F" in conv.code
    assert "from loom.torch.utils.data import DataLoader, TensorDataset" in conv.code
    assert "from loom.torch import optim" in conv.code
    assert conv.rewritten == 5 and conv.missing == []
    assert conv.code.count("\n") == PROGRAM.count("\n")  # line numbers are kept


def test_converted_program_runs_and_matches_pytorch(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(PROGRAM)
    out = tmp_path / "train_loom.py"
    proc = subprocess.run([sys.executable, "-m", "loom.convert", str(src), "-o", str(out)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "every torch name the program uses is provided by loom" in proc.stdout
    ref = subprocess.run([sys.executable, str(src)], capture_output=True, text=True, timeout=120)
    got = subprocess.run([sys.executable, str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert ref.returncode == 0 and got.returncode == 0, got.stderr
    np.testing.assert_allclose([float(v) for v in got.stdout.split()], [float(v) for v in ref.stdout.split()],
                               rtol=1e-5)


def test_missing_names_are_listed_with_their_lines(tmp_path):
    code = "import torch\nx = torch.zeros(2)\ny = torch.not_here.load(x)\nz = torch.no_such_thing(x)\n" \
           "from torch.linalg import svd\n"
    conv = convert_source(code)
    names = {name for _, name in conv.missing}
    assert {"torch.not_here", "torch.no_such_thing"} <= names
    assert (4, "torch.no_such_thing") in conv.missing
    assert not any(n.startswith("torch.zeros") for n in names)
    src = tmp_path / "p.py"
    src.write_text(code)
    proc = subprocess.run([sys.executable, "-m", "loom.convert", str(src)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 1 and "line 4: torch.no_such_thing" in proc.stdout
    assert (tmp_path / "p_loom.py").read_text().startswith("import loom.torch as torch\n")


def test_syntax_error_is_a_loom_error():
    with pytest.raises(LoomError, match="does not parse"):
        convert_source("import torch\ndef f(:\n")


def test_from_torch_copies_structure_weights_and_mode():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(0.2), torch.nn.Linear(4 * 4 * 4, 10), torch.nn.LogSoftmax(dim=1))
    tm.train()
    tm(torch.randn(8, 1, 8, 8))  # running statistics move away from their initial values
    tm.eval()
    lm = loom.from_torch(tm)
    assert not lm.training and isinstance(lm[0], loom.nn.Conv2d) and isinstance(lm[1], loom.nn.BatchNorm2d)
    x = np.random.default_rng(0).standard_normal((3, 1, 8, 8)).astype(np.float32)
    want = tm(torch.tensor(x)).detach().numpy()
    got = lm(loom.tensor(x)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(lm[1].running_var.numpy(), tm[1].running_var.numpy())


def test_from_torch_recurrent_and_embedding_gradients():
    torch.manual_seed(1)
    tm = torch.nn.ModuleDict({"emb": torch.nn.Embedding(10, 4), "lstm": torch.nn.LSTM(4, 5, batch_first=True)})
    lm = loom.from_torch(tm)
    idx = np.array([[1, 2, 3], [4, 5, 9]])
    tout, _ = tm["lstm"](tm["emb"](torch.tensor(idx)))
    lout, _ = lm["lstm"](lm["emb"](loom.tensor(idx)))
    np.testing.assert_allclose(lout.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    tout.sum().backward()
    lout.sum().backward()
    np.testing.assert_allclose(lm["emb"].weight.grad.numpy(), tm["emb"].weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_from_torch_refuses_user_modules_by_name():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x).relu()

    with pytest.raises(LoomError, match="Net is not one of PyTorch's own layers.*python -m loom.convert"):
        loom.from_torch(Net())
    with pytest.raises(LoomError, match="expected a torch.nn.Module"):
        loom.from_torch(3)
