"""loom.torch.hub: entrypoints from local directories and the cache, weights from the checkpoints folder."""
import os
import pathlib

import pytest

import loom
import loom.torch as torch

HUBCONF = '''
dependencies = ["numpy"]
import loom

def linear(n=2, bias=True):
    """A Linear(n, 1) model."""
    return loom.nn.Linear(n, 1, bias=bias)

def _private():
    return None
'''


@pytest.fixture
def hub_dir(tmp_path):
    old = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / "hub"))
    yield tmp_path / "hub"
    torch.hub.set_dir(old)


def _repo(path):
    path.mkdir(parents=True)
    (path / "hubconf.py").write_text(HUBCONF)
    return path


def test_local_directory(tmp_path):
    repo = _repo(tmp_path / "repo")
    assert torch.hub.list(str(repo), source="local") == ["linear"]
    assert torch.hub.help(str(repo), "linear", source="local") == "A Linear(n, 1) model."
    m = torch.hub.load(str(repo), "linear", 3, source="local", bias=False)
    assert isinstance(m, loom.nn.Linear) and m.in_features == 3 and m.bias is None
    with pytest.raises(loom.LoomError, match="cannot find callable 'nope'"):
        torch.hub.load(str(repo), "nope", source="local")
    with pytest.raises(loom.LoomError, match="cannot find callable '_private'"):
        torch.hub.load(str(repo), "_private", source="local")


def test_github_names_read_the_cache(hub_dir):
    _repo(hub_dir / "someone_models_main")
    assert torch.hub.list("someone/models") == ["linear"]
    assert torch.hub.load("someone/models", "linear").in_features == 2
    _repo(hub_dir / "someone_models_v1.0")
    assert torch.hub.load("someone/models:v1.0", "linear", n=4).in_features == 4
    with pytest.raises(loom.LoomError, match="not in the hub cache .* clone it to"):
        torch.hub.load("someone/other", "linear")
    with pytest.raises(loom.LoomError, match="does not download"):
        torch.hub.load("someone/models", "linear", force_reload=True)
    with pytest.raises(loom.LoomValueError, match="owner/repo"):
        torch.hub.list("no-slash")
    with pytest.raises(loom.LoomValueError, match="unknown source"):
        torch.hub.list("a/b", source="gitlab")


def test_missing_dependency_is_named(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "hubconf.py").write_text("dependencies = ['no_such_module_xyz']\ndef f():\n    return 1\n")
    with pytest.raises(loom.LoomError, match="no_such_module_xyz"):
        torch.hub.load(str(repo), "f", source="local")


def test_state_dict_from_cache_file_url_and_no_network(hub_dir, tmp_path):
    ckpt = hub_dir / "checkpoints"
    ckpt.mkdir(parents=True)
    torch.save({"w": torch.ones(2)}, str(ckpt / "net-abc.pt"))
    assert torch.hub.load_state_dict_from_url("https://example.com/x/net-abc.pt")["w"].tolist() == [1.0, 1.0]
    src = tmp_path / "weights.pt"
    torch.save({"b": torch.zeros(3)}, str(src))
    got = torch.hub.load_state_dict_from_url(src.as_uri(), file_name="copied.pt")
    assert got["b"].tolist() == [0.0] * 3 and (ckpt / "copied.pt").exists()
    with pytest.raises(loom.LoomError, match="invalid hash"):
        torch.hub.load_state_dict_from_url(src.as_uri(), file_name="w-0000.pt", check_hash=True)
    assert not (ckpt / "w-0000.pt").exists()
    with pytest.raises(loom.LoomError, match="could not download .* put the file at"):
        torch.hub.load_state_dict_from_url("http://127.0.0.1:9/none.pt")
    assert not any(p.name.startswith(".download_") for p in ckpt.iterdir())


def test_get_dir_follows_torch_home(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    assert torch.hub.get_dir() == os.path.join(str(tmp_path), "hub")
    assert pathlib.Path(torch.hub.get_dir()).name == "hub"
