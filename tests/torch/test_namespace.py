"""loom.torch: PyTorch's namespace over loom (devices, legacy types, switches, submodules, forwarding)."""
import importlib
import warnings

import numpy as np
import pytest

import loom
import loom.torch as torch
from loom.errors import DeviceError, LoomError


def test_core_objects_are_looms():
    assert torch.Tensor is loom.Tensor and torch.nn.Linear is loom.nn.Linear
    assert torch.nn.functional.relu is loom.nn.functional.relu and torch.optim.SGD is loom.optim.SGD
    assert torch.utils.data.DataLoader is loom.data.DataLoader and torch.cat.__wrapped__ is loom.cat  # + out=.
    assert torch.float32 is loom.float32 and torch.long is loom.int64 and isinstance(torch.float32, torch.dtype)


def test_forwarding_finds_names_added_to_loom_later(monkeypatch):
    monkeypatch.setattr(loom.nn, "BrandNewLayer", object, raising=False)
    monkeypatch.setattr(loom.optim, "BrandNewOptimizer", object, raising=False)
    assert torch.nn.BrandNewLayer is object and torch.optim.BrandNewOptimizer is object
    assert "BrandNewLayer" in dir(torch.nn)
    with pytest.raises(AttributeError, match="loom does not provide torch.nn.NoSuchLayer"):
        _ = torch.nn.NoSuchLayer


@pytest.mark.parametrize("name", ["torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.utils",
                                  "torch.nn.utils.rnn", "torch.nn.parallel", "torch.nn.parameter", "torch.optim",
                                  "torch.optim.lr_scheduler", "torch.optim.optimizer", "torch.utils.data",
                                  "torch.utils.data.distributed", "torch.utils.data.dataloader", "torch.autograd",
                                  "torch.cuda", "torch.cuda.amp", "torch.cpu.amp", "torch.amp", "torch.backends",
                                  "torch.backends.cudnn", "torch.backends.cuda", "torch.backends.mps", "torch.mps",
                                  "torch.accelerator", "torch.distributed", "torch.jit", "torch.random",
                                  "torch.version"])
def test_submodules_import(name):
    mod = importlib.import_module("loom." + name)
    assert mod.__name__ == "loom." + name


def test_cuda_answers_honestly():
    assert torch.cuda.is_available() is False and torch.cuda.device_count() == 0
    assert torch.cuda.is_bf16_supported() is False
    torch.cuda.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    with pytest.raises(DeviceError, match="no CUDA device"):
        torch.cuda.get_device_name(0)
    with pytest.raises(DeviceError):
        torch.cuda.current_device()
    assert torch.accelerator.is_available() is False and torch.accelerator.current_accelerator() is None
    assert torch.mps.is_available() is False and torch.backends.mps.is_available() is False
    assert torch.version.cuda is None


def test_backend_flags_are_settable():
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = False
    assert torch.backends.cudnn.benchmark and torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cudnn.is_available() is False and torch.backends.cudnn.enabled
    torch.backends.cudnn.benchmark = torch.backends.cudnn.deterministic = False


def test_tensor_device_queries_and_moves():
    x = torch.ones(2)
    assert not (x.is_cuda or x.is_xpu or x.is_mps or x.is_meta) and x.is_cpu
    assert x.pin_memory() is x and x.is_pinned() is False and x.get_device() == -1
    with pytest.raises(DeviceError):
        x.cuda()
    with pytest.raises(DeviceError):
        x.to("cuda")
    assert x.to(torch.device("cpu")) is x
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert dev == torch.device("cpu") and x.device == dev and repr(dev) == "device(type='cpu')"
    assert torch.device("mps").type == "mps" and torch.device("cuda:1").index == 1
    with pytest.raises(DeviceError):
        torch.zeros(2, device="mps")


def test_legacy_constructor_semantics():
    assert torch.Tensor(3).shape == (3,) and torch.Tensor(3).dtype is torch.float32
    assert torch.Tensor(2, 3).tolist() == [[0.0] * 3] * 2
    t = torch.Tensor([1, 2])
    assert t.dtype is torch.float32 and t.tolist() == [1.0, 2.0]
    assert torch.Tensor().shape == (0,) and torch.Tensor(torch.Size([2, 1])).shape == (2, 1)
    with pytest.raises(loom.LoomTypeError, match="loom.tensor"):
        torch.Tensor(3.5)


def test_legacy_tensor_types():
    assert torch.LongTensor([1, 2]).dtype is torch.int64 and torch.FloatTensor(2, 2).shape == (2, 2)
    assert torch.ByteTensor([1]).dtype is torch.uint8 and torch.BoolTensor([True]).dtype is torch.bool
    assert torch.DoubleTensor([1]).dtype is torch.float64 and torch.IntTensor([1]).dtype is torch.int32
    x = torch.ones(2)
    assert isinstance(x, torch.FloatTensor) and not isinstance(x, torch.LongTensor)
    assert x.type(torch.LongTensor).dtype is torch.int64 and torch.typename(x) == "torch.FloatTensor"
    with pytest.raises(DeviceError):
        torch.cuda.FloatTensor(2)
    torch.set_default_tensor_type(torch.DoubleTensor)
    try:
        assert torch.get_default_dtype() is torch.float64 and torch.Tensor(1).dtype is torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def test_new_tensor_methods():
    x = torch.ones(2, dtype=torch.int32)
    assert x.new_zeros(3).tolist() == [0, 0, 0] and x.new_zeros((2, 1)).dtype is torch.int32
    assert x.new_ones(2, 2).shape == (2, 2) and x.new_empty(4).shape == (4,)
    assert x.new_full((2,), 7).tolist() == [7, 7]
    assert x.new_tensor([1.7, -2.5]).tolist() == [1, -2]
    assert x.new_tensor([1.5], dtype=torch.float64).dtype is torch.float64
    assert x.new_zeros(2, requires_grad=False).requires_grad is False
    assert torch.ones(1).new_zeros(1, requires_grad=True).requires_grad


def test_seeding_and_generator():
    torch.manual_seed(7)
    a = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(a, torch.rand(3))
    g = torch.Generator().manual_seed(3)
    b = torch.randn(2, generator=g)
    assert torch.equal(b, torch.randn(2, generator=torch.Generator(device="cpu").manual_seed(3)))
    with pytest.raises(DeviceError):
        torch.Generator(device="cuda")
    with torch.random.fork_rng():
        torch.rand(5)
    after = torch.rand(1)
    torch.manual_seed(7)
    torch.rand(3)
    assert torch.equal(after, torch.rand(1))


def test_switches_round_trip():
    torch.set_float32_matmul_precision("high")
    assert torch.get_float32_matmul_precision() == "high"
    torch.set_float32_matmul_precision("highest")
    with pytest.raises(loom.LoomValueError):
        torch.set_float32_matmul_precision("fast")
    torch.use_deterministic_algorithms(True)
    assert torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    n = torch.get_num_threads()
    torch.set_num_threads(n)
    assert torch.get_num_threads() == n
    torch.set_printoptions(precision=2)
    assert "1.23" in repr(torch.tensor([1.2345]))
    torch.set_printoptions(profile="default")


def test_dtype_info():
    assert torch.finfo(torch.float32).eps == float(np.finfo(np.float32).eps)
    assert torch.finfo(torch.bfloat16).eps == 2.0 ** -7 and torch.finfo().bits == 32
    assert torch.iinfo(torch.int8).min == -128 and torch.iinfo(torch.uint8).max == 255
    with pytest.raises(loom.LoomTypeError):
        torch.finfo(torch.int32)


def test_version_parses():
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    assert (major, minor) >= (2, 0)
    from packaging.version import Version
    assert Version(torch.__version__) >= Version("2.0")


def test_functions_scripts_use():
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.is_tensor(x) and torch.numel(x) == 6 and torch.is_floating_point(x)
    assert torch.allclose(x, x + 1e-9) and not torch.allclose(x, x + 1)
    assert torch.isclose(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]),
                         equal_nan=True).tolist() == [True, True]
    assert torch.equal(torch.from_numpy(np.ones(2)), torch.as_tensor([1.0, 1.0], dtype=torch.float64))
    with torch.no_grad():
        assert not (torch.ones(1, requires_grad=True) * 2).requires_grad
    with torch.inference_mode():
        assert not torch.is_grad_enabled()
    assert torch.broadcast_shapes((2, 1), (3,)) == torch.Size([2, 3])
    assert torch.scalar_tensor(2).dtype is torch.float32
    assert torch.get_default_device() == torch.device("cpu")


def test_data_parallel_is_transparent():
    net = torch.nn.Linear(2, 3)
    dp = torch.nn.DataParallel(net)
    x = torch.ones(4, 2)
    assert torch.equal(dp(x), net(x)) and dp.module is net
    assert list(dp.state_dict()) == ["module.weight", "module.bias"]
    from loom.torch.nn.parallel import DistributedDataParallel as DDP
    with pytest.raises(LoomError, match="the default process group is not initialised"):
        DDP(net)


def test_distributed_guards_take_the_single_process_path():
    import loom.distributed
    import loom.torch.distributed as dist
    assert dist.is_initialized() is False and dist.init_process_group is loom.distributed.init_process_group
    rank = dist.get_rank() if dist.is_initialized() else 0
    assert rank == 0
    with pytest.raises(LoomError, match="not initialised"):
        dist.get_world_size()
    assert dist.is_nccl_available() is False
    with pytest.raises(LoomError, match="not initialised"):
        dist.all_gather_object([None], 1)


def test_distributed_sampler_shards():
    from loom.torch.utils.data import DistributedSampler
    parts = [list(DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=True, seed=1)) for r in range(3)]
    assert all(len(p) == 4 for p in parts) and set(sum(parts, [])) == set(range(10))
    s = DistributedSampler(range(10), num_replicas=3, rank=0, drop_last=True)
    assert len(list(s)) == len(s) == 3
    with pytest.raises(LoomError, match="num_replicas and rank"):
        DistributedSampler(range(4))
    import loom.data
    assert DistributedSampler is loom.data.DistributedSampler  # One sampler, reading the process group.


def test_jit_is_a_passthrough():
    def f(x):
        return x + 1
    assert torch.jit.script(f) is f and not torch.jit.is_scripting()


def test_autograd_names():
    x = torch.ones(2, requires_grad=True)
    (g,) = torch.autograd.grad((x * x).sum(), [x])
    assert g.tolist() == [2.0, 2.0]
    v = torch.autograd.Variable(torch.ones(1), requires_grad=True)
    assert v.requires_grad
    with torch.autograd.set_detect_anomaly(True):
        assert torch.is_anomaly_enabled()
    assert not torch.is_anomaly_enabled()


def test_save_load_round_trip(tmp_path):
    sd = torch.nn.Linear(2, 2).state_dict()
    torch.save(sd, tmp_path / "m.pt")
    back = torch.load(tmp_path / "m.pt", map_location="cpu")
    assert all(torch.equal(sd[k], back[k]) for k in sd)


def test_vision_is_mapped_lazily():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            importlib.import_module("loom.torch.vision")
        except ModuleNotFoundError:
            with pytest.raises(ModuleNotFoundError, match="loom.torch.vision"):
                _ = torch.vision
            return
    assert torch.vision.__name__ == "loom.torch.vision"


def test_multiprocessing_spawn_runs_workers_and_names_the_one_that_raised(tmp_path):
    import subprocess
    import sys
    import textwrap
    from pathlib import Path
    script = tmp_path / "spawn_prog.py"
    script.write_text(textwrap.dedent("""
        import loom.torch as torch
        import loom.torch.multiprocessing as mp

        def worker(rank, q, scale):
            q.put((rank, torch.ones(3) * (rank + 1) * scale))

        def bad(rank):
            if rank == 1:
                raise ValueError("boom")

        if __name__ == "__main__":
            q = mp.get_context("spawn").SimpleQueue()
            mp.spawn(worker, args=(q, 2.0), nprocs=2)
            got = sorted([q.get() for _ in range(2)], key=lambda r: r[0])
            print([(r, t.tolist()) for r, t in got])
            try:
                mp.spawn(bad, nprocs=2)
            except mp.ProcessRaisedException as e:
                print("raised", "process 1" in str(e), "boom" in str(e))
    """))
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert "[(0, [2.0, 2.0, 2.0]), (1, [4.0, 4.0, 4.0])]" in out.stdout, out.stdout + out.stderr
    assert "raised True True" in out.stdout, out.stdout + out.stderr
    assert torch.multiprocessing.spawn is not None and callable(torch.multiprocessing.Queue)
