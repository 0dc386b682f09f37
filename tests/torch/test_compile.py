"""torch.compile over loom.function: modules keep their parameters, state and modes; results match eager."""
import pytest

import loom
import loom.torch as torch


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_compiled_module_behaves_like_the_module():
    net = _net()
    cnet = torch.compile(net)
    assert isinstance(cnet, torch.nn.Module) and cnet._orig_mod is net
    assert [p is q for p, q in zip(cnet.parameters(), net.parameters())] == [True] * 4
    assert sorted(cnet.state_dict()) == sorted("_orig_mod." + k for k in net.state_dict())
    cnet.eval()
    assert not net.training
    cnet.train()
    assert net.training and cnet[0] is net[0]


def test_compiled_inference_is_traced_and_matches_eager():
    net = _net()
    cnet = torch.compile(net, mode="max-autotune")
    x = torch.randn(3, 4)
    with torch.no_grad():
        want = net(x)
        outs = [cnet(x) for _ in range(3)]
    assert cnet._compiled.traced.trace_count == 1
    for y in outs:
        assert torch.allclose(y, want, atol=1e-6)


def test_compiled_training_forward_keeps_gradients():
    net = _net()
    cnet = torch.compile(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(cnet(x), y)
        loss.backward()
        opt.step()
    assert all(p.grad is not None for p in net.parameters())


def test_compiled_step_function_matches_eager():
    def run(compiled):
        net = _net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            return loss
        fn = torch.compile(step) if compiled else step
        x, y = torch.ones(5, 4), torch.zeros(5, 2)
        return [fn(x, y).item() for _ in range(4)]
    ours, eager = run(True), run(False)
    assert ours == pytest.approx(eager, rel=1e-5)


def test_compile_decorator_forms_and_fallback():
    @torch.compile
    def f(x):
        return x * 2

    @torch.compile(fullgraph=True)
    def g(x):
        return x + 1
    x = torch.ones(2)
    assert [f(x).tolist() for _ in range(3)][-1] == [2.0, 2.0] and g(x).tolist() == [2.0, 2.0]

    @torch.compile
    def reads(x):
        return x * float((x.sum() > 0).item())
    with pytest.warns(UserWarning, match="cannot be traced"):
        results = [reads(x).tolist() for _ in range(3)]
    assert results[-1] == [1.0, 1.0]
    assert torch.compile(f, disable=True) is f
    with pytest.raises(loom.LoomError):
        torch.compile(3)
