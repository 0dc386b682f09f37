"""TF-style GradientTape over loom's autograd."""
import pytest

import loom


def test_watch_and_gradient():
    x = loom.tensor(3.0)
    with loom.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    assert tape.gradient(y, x).item() == 6.0
    assert tape.watched_variables() == (x,)


def test_watching_is_scoped_to_the_tape():
    x = loom.tensor(3.0)
    with loom.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    assert not x.requires_grad  # The tensor is not changed for good.
    z = x * 5  # Outside the block: not recorded.
    assert not z.requires_grad
    assert tape.gradient(y, x).item() == 6.0


def test_non_persistent_tape_refuses_a_second_gradient():
    x = loom.tensor(3.0)
    with loom.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    tape.gradient(y, x)
    with pytest.raises(loom.AutogradError, match="non-persistent tape can only compute gradients once"):
        tape.gradient(y, x)


def test_persistent_tape_gives_several_gradients():
    x = loom.tensor([1.0, 2.0])
    with loom.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * x
    assert tape.gradient(y, x).tolist() == [2.0, 4.0]
    assert tape.gradient(z, x).tolist() == [3.0, 12.0]
    assert tape.gradient(z, x).tolist() == [3.0, 12.0]


def test_nested_tapes_give_second_order():
    x = loom.tensor(2.0)
    with loom.GradientTape() as outer:
        outer.watch(x)
        with loom.GradientTape() as inner:
            inner.watch(x)
            y = x ** 3
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    assert dy.item() == 12.0 and d2y.item() == 12.0


def test_persistent_tape_gradient_inside_the_block_is_differentiable():
    x = loom.tensor(1.5)
    with loom.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x ** 4
        dy = tape.gradient(y, x)
    d2y = tape.gradient(dy, x)
    assert d2y.item() == pytest.approx(12 * 1.5 ** 2)


def test_unconnected_gradients():
    a, b = loom.tensor(1.0), loom.tensor([2.0, 3.0])
    with loom.GradientTape(persistent=True) as tape:
        tape.watch([a, b])
        y = a * 2
    ga, gb = tape.gradient(y, [a, b])
    assert ga.item() == 2.0 and gb is None
    ga, gb = tape.gradient(y, [a, b], unconnected_gradients="zero")
    assert gb.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="unconnected_gradients"):
        tape.gradient(y, [a, b], unconnected_gradients="bogus")


def test_unwatched_source_gives_none():
    x = loom.tensor(2.0)
    with loom.GradientTape() as tape:
        y = x * x
    assert tape.gradient(y, x) is None


def test_non_scalar_target_is_summed_and_output_gradients_weight_it():
    x = loom.tensor([1.0, 2.0])
    with loom.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
    assert tape.gradient(y, x).tolist() == [2.0, 4.0]
    assert tape.gradient(y, x, output_gradients=loom.tensor([1.0, -1.0])).tolist() == [2.0, -4.0]


def test_trainable_tensors_are_seen_without_watch():
    w = loom.tensor([1.0, 2.0], requires_grad=True)
    with loom.GradientTape() as tape:
        y = (w * 3).sum()
    assert tape.gradient(y, w).tolist() == [3.0, 3.0]


def test_nested_list_of_sources_and_watch_errors():
    a, b = loom.tensor(1.0), loom.tensor(2.0)
    with loom.GradientTape() as tape:
        tape.watch([[a], b])
        y = a * b
    ga, gb = tape.gradient(y, [a, b])
    assert (ga.item(), gb.item()) == (2.0, 1.0)
    with pytest.raises(TypeError, match="expected Tensors"):
        loom.GradientTape().watch([1.0])
