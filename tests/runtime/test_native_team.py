"""Team walks: a native step program run on loom's threads in one parallel region by a static schedule."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.runtime import native, team
from tests.codegen.helpers import persistent_sync_kernels


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(request):
    with persistent_sync_kernels(request.config) as cache_dir:
        yield cache_dir


@pytest.fixture(autouse=True)
def _team_always(monkeypatch):
    # Every program that can runs as a team walk, on the count each test sets (no picking one thread).
    monkeypatch.setattr(native, "_TEAM_WALK", "always")
    monkeypatch.setenv("LOOM_ADAPT_THREADS", "0")
    old = loom.get_num_threads()
    yield
    loom.set_num_threads(old)


SIZES = (256, 256, 256, 10)  # Every product of the step has 2^23 multiply-adds: large enough to share.


def _training(threads, steps=3, labels=None):
    """The parameters and losses after `steps` SGD-momentum steps of an MLP (loom.function, parameters donated)
    on `threads` threads, and the step's native program."""
    loom.set_num_threads(threads)
    loom.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(SIZES) - 2 else [])
    model = nn.Sequential(*layers)
    opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    @loom.function
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(1)
    x = loom.tensor(rng.standard_normal((128, SIZES[0])).astype(np.float32))
    y = loom.tensor(np.arange(128) % SIZES[-1] if labels is None else labels)
    step(x, y)
    step(x, y)
    prog = next(iter(step._cache.values())).exe._native
    assert prog.wait(300)
    losses = [float(step(x, y).numpy()) for _ in range(steps)]
    return [p.detach().numpy().copy() for p in model.parameters()], losses, prog, (step, x, model)


def _same(a, b):
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_team_walk_gives_the_one_thread_bits():
    params1, losses1, prog1, _ = _training(1)
    assert not prog1._teams, "one thread: the sequential walk"
    for n in (2, 3):
        params, losses, prog, _ = _training(n)
        sched = prog._teams.get(n)
        assert sched is not None, f"{n} threads: a team walk"
        assert losses == losses1
        _same(params, params1)


def test_schedule_shares_a_lone_product_and_runs_independent_ones_side_by_side():
    _, _, prog, _ = _training(2, steps=1)
    table = prog._table
    owner = prog._teams[2].owner
    records = prog._team_records(table)
    anc = team._ancestors(team._dependencies(records))
    gemms = [k for k, r in enumerate(records) if r.kind == team.GEMM]
    assert any(owner[k] == -1 for k in gemms), "the first layer's product has nothing beside it: shared"
    kernels = [k for k, r in enumerate(records) if r.kind == team.KERNEL and owner[k] == -1]
    assert all(records[k].blocks is not None for k in kernels)
    assert kernels, "the optimizer's updates of the 256x256 weights are cut in row blocks"
    side = [(j, k) for j in gemms for k in gemms if j < k and owner[j] >= 0 and owner[k] >= 0 and
            owner[j] != owner[k] and not (anc[k] >> j) & 1]
    assert side, "a weight gradient and an input gradient run on two threads at once"


def test_team_walk_runs_the_steps_of_an_absent_thread():
    """Steps owned by a thread that never comes (owner 7 in a team of 2) are claimed by the others."""
    params1, losses1, _, _ = _training(1)
    params, losses, prog, (step, x, model) = _training(2, steps=0)
    n = len(prog._table[2])
    sched = prog._teams[2]
    owner = sched.array[1 + n:1 + 2 * n]  # (A view: the driver reads the owners from here.)
    owner[owner >= 0] = 7
    y = loom.tensor(np.arange(128) % SIZES[-1])
    losses = [float(step(x, y).numpy()) for _ in range(3)]
    assert prog._teams[2] is sched
    assert losses == losses1
    _same([p.detach().numpy() for p in model.parameters()], params1)


def test_team_walk_resumes_after_a_kernel_refusal(monkeypatch):
    """A misaligned arena makes every kernel refuse: the team stops at one, Python reruns it, the driver runs
    the steps not done yet in order, and so on; the results do not change."""
    params1, losses1, _, _ = _training(1)
    made = native._Ctx.__init__

    def misaligned(self, nbytes, buffer=None):  # (A buffer from the function's arena pool is left unused.)
        made(self, nbytes + 64)
        self.arena = self.arena[1:1 + max(nbytes, 1)]

    params, _, prog, (step, x, model) = _training(2, steps=0)
    monkeypatch.setattr(native._Ctx, "__init__", misaligned)
    monkeypatch.setattr(native.NativeProgram, "share_arenas", lambda self, pool: None)
    prog._pool = None
    prog._ctxs.clear()
    y = loom.tensor(np.arange(128) % SIZES[-1])
    losses = [float(step(x, y).numpy()) for _ in range(3)]
    assert prog._forced, "the refused kernels now run from Python"
    assert losses == losses1
    _same([p.detach().numpy() for p in model.parameters()], params1)


def test_a_failing_check_stops_the_team_before_any_update():
    """A label out of range stops the walk at its check, which every later step waits for: the error is loom's
    and no parameter has changed."""
    _, _, prog, (step, x, model) = _training(2, steps=1)
    assert prog._teams.get(2) is not None
    before = [p.detach().numpy().copy() for p in model.parameters()]
    bad = np.arange(128) % SIZES[-1]
    bad[77] = SIZES[-1] + 3
    with pytest.raises(loom.LoomError, match="13|out of range|bounds|class"):
        step(x, loom.tensor(bad))
    _same([p.detach().numpy() for p in model.parameters()], before)
    step(x, loom.tensor(np.arange(128) % SIZES[-1]))  # Still usable.


def _rec(kind=team.KERNEL, reads=(), writes=(), fallible=False, gemm=None):
    return team.Record(kind, list(reads), list(writes), fallible, gemm=gemm)


def test_dependencies_follow_memory_and_checks():
    a, b, c, d = (0, 0, 64), (0, 64, 128), (1, 0, 64), (0, 128, 192)
    records = [
        _rec(writes=[a]),                       # 0
        _rec(reads=[a], writes=[b]),            # 1 reads what 0 wrote
        _rec(reads=[c], writes=[d]),            # 2 independent
        _rec(reads=[c], writes=[a]),            # 3 overwrites what 1 reads and 0 wrote
        _rec(kind=team.CHECK, reads=[c], writes=[c], fallible=True),  # 4 may stop the walk
        _rec(reads=[c], writes=[(2, 0, 8)]),    # 5 after the check
    ]
    deps = team._dependencies(records)
    assert deps[1] == [0]
    assert deps[2] == []
    assert sorted(deps[3]) == [0, 1]
    assert deps[4] == [0, 1, 2, 3]
    assert deps[5] == [4]


def test_independent_products_go_side_by_side_and_a_lone_one_is_shared():
    big = 1 << 24
    records = [
        _rec(team.GEMM, reads=[(1, 0, 64)], writes=[(0, 0, 64)], gemm=(256, big, 0, 1)),           # lone
        _rec(team.GEMM, reads=[(0, 0, 64)], writes=[(0, 64, 128)], gemm=(256, big, 0, 1)),         # pair
        _rec(team.GEMM, reads=[(0, 0, 64)], writes=[(0, 128, 192)], gemm=(256, big, 0, 1)),        # pair
    ]
    sched = team.plan(records, 2, 1 << 15, always=True)
    owner = sched.owner
    assert owner[0] == -1
    assert sorted(owner[1:]) == [0, 1]
    assert team.plan(records, 1, 1 << 15, always=True) is None
    assert team.plan(records + [_rec(team.PY)], 2, 1 << 15, always=True) is None


def test_concurrent_team_walks_from_two_threads():
    """Two Python threads calling the same team-walked program at once: one walk has loom's team, the other
    runs alone on its caller (each on an arena of its own); both give the one-thread results."""
    import threading

    _, _, prog, _ = _training(2, steps=0)
    exe = prog.exe
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(n.shape).astype(n.dtype.np) if n.dtype.np.kind == "f" else
              (np.arange(int(np.prod(n.shape))) % SIZES[-1]).reshape(n.shape).astype(n.dtype.np)
              for n in exe._inputs]
    loom.set_num_threads(1)
    want = [np.array(a) for a in exe(*arrays)]
    loom.set_num_threads(2)
    assert prog._team_plan(prog._table, 2) is not None
    got, errors = [], []

    def work():
        try:
            for _ in range(10):
                got.append([np.array(a) for a in exe(*arrays)])
        except Exception as e:  # Reported below: a thread's exception would otherwise be lost.
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(got) == 20
    for g in got:
        _same(g, want)
