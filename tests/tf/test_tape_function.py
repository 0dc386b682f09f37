"""tf.GradientTape (persistent, nested, watch rules) and tf.function with AutoGraph, in TensorFlow and loom.tf."""
import numpy as np
import pytest

import loom
import loom.tf as ltf
from tests.tf.harness import real_tf


def both(program, *args):
    """`program(tf, *args)` in TensorFlow and in loom.tf, as nested lists of NumPy values."""
    def conv(v):
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if v is None:
            return None
        return np.asarray(v.numpy() if hasattr(v, "numpy") else v)
    return conv(program(real_tf, *args)), conv(program(ltf, *args))


def assert_same(got, want, rtol=1e-5):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol)
        return
    if want is None:
        assert got is None
        return
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)


# ---------------------------------------------------------------- GradientTape

def prog_persistent(tf):
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as g:
        g.watch(x)
        y = x * x
        z = tf.reduce_sum(y * y)
    return [g.gradient(z, x), g.gradient(y, x), g.gradient(z, y)]


def prog_nested_second_order(tf):
    x = tf.Variable(1.5)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = x ** 3 + tf.sin(x)
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    return [dy, d2y]


def prog_nested_watch(tf):
    x = tf.constant(2.0)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = tf.exp(x) * x
        g = t1.gradient(y, x)
    return [g, t2.gradient(g, x)]


def prog_variables_and_structures(tf):
    w = tf.Variable([[1.0, -2.0], [0.5, 3.0]])
    b = tf.Variable([0.1, 0.2])
    frozen = tf.Variable([1.0, 1.0], trainable=False)
    c = tf.constant([1.0, 2.0])
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w) + b) * frozen * c)
    grads = tape.gradient(y, {"w": w, "b": [b, frozen], "c": c})
    return [grads["w"], grads["b"][0], grads["b"][1], grads["c"]]


def prog_watch_accessed_false(tf):
    a = tf.Variable(2.0)
    b = tf.Variable(3.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(a)
        y = a * b
    return tape.gradient(y, [a, b])


def prog_stop_recording_and_zero(tf):
    x = tf.Variable(2.0)
    u = tf.Variable(5.0)
    with tf.GradientTape() as tape:
        y = x * x
        with tape.stop_recording():
            z = x * 10.0
        out = y + z
    g = tape.gradient(out, [x, u], unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return g


def prog_output_gradients_and_list_targets(tf):
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y1 = x * 3.0
        y2 = tf.reduce_sum(x * x)
    return tape.gradient([y1, y2], x, output_gradients=[tf.constant([1.0, -1.0]), tf.constant(2.0)])


def prog_custom_gradient(tf):
    @tf.custom_gradient
    def clip_grad(v):
        return v * 1.0, lambda dy: tf.clip_by_value(dy, -0.5, 0.5)

    @tf.custom_gradient
    def scaled_product(a, b):
        return a * b, lambda dy: (dy * b * 10.0, dy * a)
    x = tf.constant([[1.0, -2.0], [3.0, 0.5]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(clip_grad(x) * 3.0) + tf.reduce_sum(scaled_product(x, x + 1.0))
    return [y, tape.gradient(y, x)]


def prog_module_variables(tf):
    class Affine(tf.Module):
        def __init__(self):
            super().__init__(name="affine")
            self.w = tf.Variable(tf.ones([2, 2]) * 0.5)
            self.b = tf.Variable(tf.zeros([2]), trainable=False)
            self.parts = [tf.Module()]

        def __call__(self, v):
            return tf.matmul(v, self.w) + self.b
    m = Affine()
    x = tf.constant([[1.0, 2.0]])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(m(x) ** 2)
    return [np.array([len(m.variables), len(m.trainable_variables), len(m.submodules)]), y,
            tape.gradient(y, m.trainable_variables)]


@pytest.mark.parametrize("program", [prog_persistent, prog_nested_second_order, prog_nested_watch,
                                     prog_variables_and_structures, prog_watch_accessed_false,
                                     prog_stop_recording_and_zero, prog_output_gradients_and_list_targets,
                                     prog_custom_gradient, prog_module_variables],
                         ids=lambda p: p.__name__[5:])
def test_tape_matches_tensorflow(program):
    want, got = both(program)
    assert_same(got, want)


def test_non_persistent_tape_second_gradient_raises():
    x = ltf.constant(1.0)
    with ltf.GradientTape() as g:
        g.watch(x)
        y = x * x
    g.gradient(y, x)
    with pytest.raises(loom.LoomError, match="persistent"):
        g.gradient(y, x)


def test_jacobian():
    def prog(tf):
        x = tf.constant([1.0, 2.0, 3.0])
        with tf.GradientTape(persistent=True) as g:
            g.watch(x)
            y = x * x * tf.reduce_sum(x)
        return g.jacobian(y, x)
    want, got = both(prog)
    assert_same(got, want)


# ---------------------------------------------------------------- tf.function and AutoGraph

def prog_if(tf):
    @tf.function
    def f(x):
        if tf.reduce_sum(x) > 0:
            y = x * 2.0
            z = y + 1.0
        else:
            y = -x
            z = y - 1.0
        return y * z
    return [f(tf.constant(v)) for v in ([1.0, -3.0], [1.0, 3.0], [2.0, 1.0], [-5.0, 1.0], [0.5, 0.5])]


def prog_if_return_and_python_bool(tf):
    @tf.function
    def f(x, training):
        if training:              # A Python bool stays a Python branch.
            x = x * 10.0
        if tf.reduce_max(x) > 5.0:
            return x - 5.0
        return x
    return [f(tf.constant([1.0, 2.0]), False), f(tf.constant([1.0, 2.0]), True),
            f(tf.constant([7.0, 2.0]), False), f(tf.constant([0.1, 0.2]), True), f(tf.constant([0.1, 0.2]), False)]


def prog_if_bool_ops(tf):
    @tf.function
    def f(x):
        s = tf.reduce_sum(x)
        if s > 0 and not tf.reduce_min(x) < -1.0 or s > 10.0:
            out = x + 1.0
        else:
            out = x - 1.0
        return out
    return [f(tf.constant(v)) for v in ([1.0, 2.0], [3.0, -2.0], [20.0, -5.0], [-1.0, -1.0])]


def prog_while(tf):
    @tf.function
    def collatz_steps(n):
        steps = 0
        while n > 1:
            if n % 2 == 0:
                n = n // 2
            else:
                n = 3 * n + 1
            steps += 1
        return steps
    return [collatz_steps(tf.constant(v)) for v in (6, 7, 27, 1, 12)]


def prog_while_reads_outer(tf):
    @tf.function
    def f(x, limit):
        total = tf.zeros_like(x)
        i = 0
        while tf.reduce_sum(total) < limit:
            total = total + x
            i += 1
        return total, i
    return [f(tf.constant([1.0, 2.0]), tf.constant(v)) for v in (10.0, 4.0, 31.0)]


def prog_for_range(tf):
    @tf.function
    def f(x, n):
        acc = tf.constant(0.0)
        for i in tf.range(n):
            acc = acc + tf.reduce_sum(x) * tf.cast(i, tf.float32)
        return acc
    return [f(tf.constant([1.0, 2.0]), tf.constant(v)) for v in (3, 5, 0, 4)]


def prog_for_python_and_tensor(tf):
    @tf.function
    def f(x):
        out = tf.zeros([2])
        for k in range(3):          # Python range: unrolled.
            out = out + x[k]
        for row in x:               # Iterating a tensor: its rows.
            out = out * 0.5 + row
        return out
    return [f(tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2) + s)) for s in range(3)]


def prog_variables_in_function(tf):
    v = tf.Variable([1.0, 2.0])
    step = tf.Variable(0)

    @tf.function
    def update(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((v * x - 1.0) ** 2)
        g = tape.gradient(loss, v)
        v.assign_sub(0.1 * g)
        step.assign_add(1)
        return loss
    losses = [update(tf.constant([0.5, 1.5])) for _ in range(5)]
    return losses + [v.read_value(), step.read_value()]


def prog_input_signature(tf):
    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.float32)])
    def f(x):
        return tf.reduce_sum(x * x)
    return [f(tf.constant([1.0, 2.0])), f(tf.constant([3.0])), f(tf.constant([1.0, 1.0, 1.0]))]


def prog_functional_control_flow(tf):
    @tf.function
    def f(x):
        r = tf.cond(tf.reduce_sum(x) > 0, lambda: x + 1.0, lambda: x - 1.0)
        _, s = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + tf.reduce_sum(r)),
                             (tf.constant(0), tf.constant(0.0)))
        return r, s, tf.map_fn(lambda row: row * 2.0, x)
    x = tf.constant([[1.0, 2.0], [-3.0, 0.5]])
    return [f(x), f(x), f(-x)]


@pytest.mark.parametrize("program", [prog_if, prog_if_return_and_python_bool, prog_if_bool_ops, prog_while,
                                     prog_while_reads_outer, prog_for_range, prog_for_python_and_tensor,
                                     prog_variables_in_function, prog_input_signature, prog_functional_control_flow],
                         ids=lambda p: p.__name__[5:])
def test_function_matches_tensorflow(program):
    want, got = both(program)
    assert_same(got, want)


def test_function_traces_once_and_replays():
    calls = []

    @ltf.function
    def f(x):
        calls.append(1)
        if tf_sum(x) > 0:
            y = x + 1.0
        else:
            y = x - 1.0
        return y
    tf_sum = ltf.reduce_sum
    outs = [f(ltf.constant([float(s), 1.0])).numpy().tolist() for s in (1, -5, 2, -7)]
    assert outs == [[2.0, 2.0], [-6.0, 0.0], [3.0, 2.0], [-8.0, 0.0]]
    assert f.experimental_get_tracing_count() == 1
    assert len(calls) == 2  # The eager warm-up call and the one trace; replays run no Python.


def test_autograph_unsupported_statements_raise_clear_error():
    @ltf.function
    def f(x):
        while tf_sum(x) > 0:
            x = x - 1.0
            if tf_sum(x) < 3.0:
                break
        return x
    tf_sum = ltf.reduce_sum
    f(ltf.constant([5.0]))  # The eager call runs Python control flow.
    with pytest.raises(loom.LoomError, match="break, continue or return"):
        f(ltf.constant([5.0]))


def test_input_signature_mismatch():
    @ltf.function(input_signature=[ltf.TensorSpec(shape=[None], dtype=ltf.float32)])
    def f(x):
        return x
    with pytest.raises(loom.LoomTypeError, match="input_signature"):
        f(ltf.constant([[1.0]]))


def test_augmented_assign_does_not_write_through_aliases():
    @ltf.function
    def f(x):
        y = x
        y += 1.0
        return x, y
    for _ in range(3):
        x, y = f(ltf.constant([1.0]))
        assert x.numpy().tolist() == [1.0] and y.numpy().tolist() == [2.0]


def prog_nested_control_flow(tf):
    @tf.function
    def f(x, n):
        total = tf.constant(0.0)
        count = tf.constant(0)
        for i in tf.range(n):
            v = x[i % 3]
            if v > 0:
                j = 0
                while j < 2:
                    total = total + v
                    j += 1
            else:
                total = total - v * 0.5
            count += 1
        return total, count
    x = tf.constant([1.5, -2.0, 0.5])
    return [f(x, tf.constant(k)) for k in (0, 1, 4, 7)]


def test_nested_control_flow_matches_tensorflow():
    want, got = both(prog_nested_control_flow)
    assert_same(got, want)


def test_for_range_with_break_keeps_python_semantics_eagerly_and_errors_when_traced():
    @ltf.function
    def f(x):
        for i in ltf.range(5):
            if i > 2:
                break
            x = x + 1.0
        return x
    assert f(ltf.constant(0.0)).numpy() == 3.0
    with pytest.raises(loom.LoomError, match="break, continue or return"):
        f(ltf.constant(0.0))


def prog_method_with_super(tf):
    class Base(tf.keras.layers.Layer):
        def call(self, x):
            return x + 1.0

    class Child(Base):
        @tf.function
        def call(self, x):
            if tf.reduce_sum(x) > 0:
                y = super().call(x)
            else:
                y = x * 3.0
            return y
    layer = Child()
    return [layer(tf.constant([v])) for v in (1.0, -1.0, 2.0, -3.0)]


def test_tf_function_method_with_zero_argument_super_matches_tensorflow():
    want, got = both(prog_method_with_super)
    assert_same(got, want)


def test_iterating_a_dataset_inside_tf_function_raises_instead_of_freezing_it():
    ds = ltf.data.Dataset.range(3)

    @ltf.function
    def total(d):
        s = ltf.constant(0, dtype=ltf.int64)
        for x in ds:
            s = s + x
        return s + d
    assert int(total(ltf.constant(0, dtype=ltf.int64))) == 3  # Eager call.
    with pytest.raises(loom.LoomError, match="tf.data.Dataset inside tf.function"):
        total(ltf.constant(1, dtype=ltf.int64))


def test_tf_function_called_under_an_outer_tape_is_differentiable_on_every_call():
    """A tf.Module whose __call__ is a tf.function, trained by a tape outside it (TensorFlow's tutorial)."""
    import numpy as np

    import loom.tf as ltf
    from tests.tf.harness import real_tf
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    res = []
    for tf in (real_tf, ltf):
        class Lin(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = tf.Variable(np.arange(4, dtype=np.float32).reshape(4, 1))
                self.b = tf.Variable([0.5])

            @tf.function
            def __call__(self, x):
                return tf.matmul(x, self.w) + self.b
        lin, grads = Lin(), []
        for _ in range(4):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(lin(x) ** 2)
            g = tape.gradient(loss, [lin.w, lin.b])
            grads.append([v.numpy() for v in g])
            lin.w.assign_sub(0.1 * g[0])
        res.append(grads)
    for a, b in zip(*res):
        for u, v in zip(a, b):
            np.testing.assert_allclose(v, u, rtol=1e-5, atol=1e-6)


def test_tf_function_returns_python_numbers_as_tensors():
    import loom
    import loom.tf as ltf
    mul = ltf.function(lambda a, b: a * b)
    for _ in range(3):
        out = mul(2.0, 3.0)
        assert isinstance(out, loom.Tensor) and out.dtype.name == "float32" and float(out) == 6.0
    pair = ltf.function(lambda x: (x * 2, 1))
    for _ in range(3):
        a, b = pair(ltf.constant(1.0))
        assert isinstance(b, loom.Tensor) and b.dtype.name == "int32"
