"""Every op loom.tf exposes against TensorFlow: outputs and GradientTape gradients, in every parity mode."""
import numpy as np
import pytest

from tests.tf.harness import Case, run_case


def f32(*shape, lo=None, hi=None):
    if lo is not None:
        return lambda rng: rng.uniform(lo, hi, shape).astype(np.float32)
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


def i32(*shape, hi=5):
    return lambda rng: rng.integers(0, hi, shape).astype(np.int32)


def b(*shape):
    return lambda rng: rng.random(shape) > 0.5


def _spd(tf, a):
    return tf.matmul(a, a, transpose_b=True) + 3.0 * tf.eye(3)


def _linalg_solves(tf, a, r):
    s = _spd(tf, a)
    low = tf.linalg.cholesky(s)
    return [tf.linalg.inv(a), tf.linalg.inv(a, adjoint=True), tf.linalg.det(a), tf.linalg.slogdet(a)[1],
            tf.linalg.logdet(s), low, tf.linalg.cholesky_solve(low, r), tf.linalg.solve(a, r),
            tf.linalg.solve(a, r, adjoint=True), tf.linalg.triangular_solve(low, r),
            tf.linalg.triangular_solve(low, r, adjoint=True),
            tf.linalg.triangular_solve(tf.transpose(low), r, lower=False), tf.linalg.lstsq(a, r),
            tf.linalg.lstsq(a, r, l2_regularizer=0.1), tf.linalg.matvec(a, r[:, 0]), tf.linalg.adjoint(a),
            tf.linalg.set_diag(a, r[:, 0]), tf.linalg.set_diag(a, r[:2, 1], k=1),
            tf.linalg.global_norm([a, r]), tf.linalg.normalize(a, axis=1)[0], tf.linalg.expm(0.1 * a),
            tf.linalg.cross(a, a[::-1]), tf.linalg.pinv(a), tf.linalg.einsum("ij->j", a)]


def _linalg_decomps(tf, a):
    s = _spd(tf, a)
    sv, u, v = tf.linalg.svd(a)
    return [tf.abs(tf.linalg.qr(a)[1]), sv, tf.matmul(u * sv, v, transpose_b=True), tf.linalg.svd(a, compute_uv=False),
            tf.linalg.eigh(s)[0], tf.linalg.eigvalsh(s), tf.linalg.matrix_rank(a)]


CASES = [
    # Creation and dtypes.
    Case("constant_float", lambda tf: tf.constant([[1.0, 2.0], [3.0, 4.0]]) * 2),
    Case("constant_int_is_int32", lambda tf: tf.constant([1, 2, 3]) + 1),
    Case("constant_shape_fill", lambda tf: tf.constant(1.5, shape=[2, 3])),
    Case("constant_from_float64_array", lambda tf: tf.constant(np.arange(3.0)) * 1),
    Case("convert_to_tensor", lambda tf: tf.convert_to_tensor([[1, 2]], dtype=tf.float32)),
    Case("zeros_ones", lambda tf: [tf.zeros([2, 3]), tf.ones((3,), dtype=tf.int32), tf.zeros_like(tf.ones([2]))]),
    Case("ones_like_dtype", lambda tf, x: tf.ones_like(x, dtype=tf.int32), (f32(2, 3),)),
    Case("fill", lambda tf: tf.fill([2, 2], 7)),
    Case("range", lambda tf: [tf.range(5), tf.range(1, 10, 3), tf.range(0.0, 1.0, 0.25),
                              tf.range(3, dtype=tf.float32)]),
    Case("linspace", lambda tf: tf.linspace(0.0, 1.0, 5)),
    Case("eye", lambda tf: [tf.eye(3), tf.eye(2, 3, dtype=tf.int32), tf.eye(2, batch_shape=[2])]),
    Case("one_hot", lambda tf, i: [tf.one_hot(i, 4), tf.one_hot(i, 4, on_value=5, off_value=-1),
                                   tf.one_hot(i, 3, axis=0)], (i32(5, hi=5),)),
    Case("cast", lambda tf, x: [tf.cast(x, tf.int32), tf.cast(x > 0, tf.float32), tf.cast(x, tf.float64)],
         (f32(6),)),
    Case("identity_stop_gradient", lambda tf, x: [tf.identity(x), x * tf.stop_gradient(x)], (f32(4),)),
    # Shapes.
    Case("shape_size_rank", lambda tf, x: [tf.shape(x), tf.size(x), tf.rank(x)], (f32(2, 3, 4),), grad=False),
    Case("reshape", lambda tf, x: [tf.reshape(x, [3, -1]), tf.reshape(x, (2, 2, 3))], (f32(4, 3),)),
    Case("reshape_by_shape_tensor", lambda tf, x, y: tf.reshape(x, tf.shape(y)), (f32(6), f32(2, 3))),
    Case("transpose", lambda tf, x: [tf.transpose(x), tf.transpose(x, perm=[1, 0, 2])], (f32(2, 3, 4),)),
    Case("concat_stack", lambda tf, x, y: [tf.concat([x, y], 0), tf.concat([x, y], axis=-1), tf.stack([x, y]),
                                           tf.stack([x, y], axis=1)], (f32(2, 3), f32(2, 3))),
    Case("unstack", lambda tf, x: tf.unstack(x, axis=1), (f32(2, 3),)),
    Case("squeeze_expand", lambda tf, x: [tf.squeeze(x), tf.squeeze(x, axis=[0]), tf.expand_dims(x, -1),
                                          tf.expand_dims(x, 1)], (f32(1, 3, 1),)),
    Case("split", lambda tf, x: [tf.split(x, 2, axis=1), tf.split(x, [1, -1, 2], axis=1)], (f32(3, 4),)),
    Case("tile", lambda tf, x: tf.tile(x, [2, 3]), (f32(2, 3),)),
    Case("pad", lambda tf, x: [tf.pad(x, [[1, 0], [2, 1]]), tf.pad(x, [[1, 1], [0, 2]], constant_values=3.0),
                               tf.pad(x, [[1, 1], [2, 2]], mode="REFLECT"),
                               tf.pad(x, [[1, 1], [2, 2]], mode="SYMMETRIC")], (f32(3, 4),)),
    Case("reverse_broadcast", lambda tf, x: [tf.reverse(x, [0]), tf.broadcast_to(x[0], [3, 4])], (f32(2, 4),)),
    # Indexing.
    Case("gather", lambda tf, x, i: [tf.gather(x, i), tf.gather(x, i, axis=1)], (f32(5, 5), i32(2, 3))),
    Case("gather_nd", lambda tf, x, i: tf.gather_nd(x, i), (f32(4, 5, 2), i32(3, 2, hi=4))),
    Case("embedding_lookup", lambda tf, w, i: tf.nn.embedding_lookup(w, i), (f32(6, 3), i32(2, 4, hi=6))),
    Case("where3", lambda tf, c, x, y: tf.where(c, x, y), (b(3, 4), f32(3, 4), f32(3, 4))),
    Case("where1", lambda tf, c: tf.where(c), (b(3, 4),), traceable=False),
    Case("boolean_mask", lambda tf, x, m: tf.boolean_mask(x, m), (f32(5, 2), b(5)), traceable=False),
    Case("slicing", lambda tf, x: [x[1:, ::2], x[..., 0], x[-1]], (f32(3, 4),)),
    Case("repeat_roll", lambda tf, x: [tf.repeat(x, 2, axis=1), tf.repeat(x, 3), tf.roll(x, 1, 0),
                                       tf.roll(x, [1, -2], [0, 1])], (f32(3, 4),)),
    Case("meshgrid", lambda tf, a, c: tf.meshgrid(a, c) + tf.meshgrid(a, c, indexing="ij"), (f32(3), f32(2))),
    Case("sequence_mask", lambda tf: [tf.sequence_mask([1, 3, 0], 4), tf.sequence_mask(tf.constant([2, 1]),
                                                                                         dtype=tf.float32)]),
    Case("scatter_nd", lambda tf, u: tf.scatter_nd(tf.constant([[1], [3], [1]]), u, [5, 2]), (f32(3, 2),)),
    Case("tensor_scatter_nd", lambda tf, x, u: [tf.tensor_scatter_nd_update(x, tf.constant([[0, 1], [2, 3]]), u),
                                                tf.tensor_scatter_nd_add(x, tf.constant([[1, 1], [1, 1]]), u)],
         (f32(3, 4), f32(2))),
    Case("segment_sums", lambda tf, x: [tf.math.segment_sum(x, tf.constant([0, 0, 1, 3])),
                                        tf.math.unsorted_segment_sum(x, tf.constant([2, 0, 2, 1]), 4)], (f32(4, 3),)),
    Case("functional_control_flow", lambda tf, x: [
        tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0), tf.map_fn(lambda r: r * r, x),
        tf.map_fn(lambda ab: ab[0] * ab[1], (x, x + 1.0), fn_output_signature=tf.float32),
        tf.scan(lambda a, e: a * 0.5 + e, x), tf.scan(lambda a, e: a + e, x[:, 0], reverse=True),
        tf.foldl(lambda a, e: a + e * e, x), tf.foldr(lambda a, e: a - e, x[:, 1], initializer=tf.constant(0.0))],
        (f32(3, 2),)),
    Case("while_loop_captures", lambda tf, x: [
        tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + tf.reduce_sum(x * 2.0)),
                      (tf.constant(0), tf.constant(0.0)))[1],
        tf.while_loop(lambda i: i < 100, lambda i: [i + 2], [tf.constant(0)], maximum_iterations=4)[0]],
        (f32(3, 2),), grad=False),
    Case("segment_reductions", lambda tf, x, i: [
        tf.math.segment_mean(x, [0, 0, 1, 3]), tf.math.segment_max(x, [0, 0, 1, 3]),
        tf.math.segment_min(x, [0, 1, 1, 1]), tf.math.unsorted_segment_mean(x, i, 5),
        tf.math.unsorted_segment_max(x, i, 4), tf.math.unsorted_segment_min(x, i, 4),
        tf.math.reduce_euclidean_norm(x, axis=1)], (f32(4, 3), np.array([2, 0, 2, 1], np.int32))),
    Case("math_extra", lambda tf, x, p: [
        tf.acos(p * 0.9), tf.asin(p * 0.9), tf.atan(x), tf.asinh(x), tf.acosh(1.5 + p), tf.atanh(p * 0.9),
        tf.math.lgamma(1.0 + p), tf.math.digamma(1.0 + p), tf.math.erfc(x), tf.math.erfinv(p * 0.9),
        tf.math.softsign(x), tf.math.multiply_no_nan(x, tf.where(p > 0.5, p, 0.0)),
        tf.math.reciprocal_no_nan(tf.where(p > 0.5, p, 0.0)), tf.scalar_mul(3.0, x), tf.realdiv(x, 2.0)],
        (f32(2, 3), f32(2, 3, lo=0.1, hi=1.0)), rtol=1e-4, atol=1e-4),
    Case("truncated_division", lambda tf: [tf.truncatediv(tf.constant([-7, 7, -8]), 2),
                                           tf.truncatemod(tf.constant([-7, 7, -8]), 3)]),
    Case("linalg_inverses_solves", lambda tf, a, r: _linalg_solves(tf, a, r), (f32(3, 3), f32(3, 2)), rtol=1e-4,
         atol=1e-4),
    Case("linalg_decompositions", lambda tf, a: _linalg_decomps(tf, a), (f32(3, 3),), grad=False, rtol=1e-4,
         atol=1e-4),
    Case("linalg", lambda tf, x, d: [tf.linalg.matmul(x, x, transpose_b=True), tf.linalg.matrix_transpose(x),
                                     tf.linalg.diag(d), tf.linalg.diag_part(x[:, :3]), tf.linalg.trace(x[:, :3]),
                                     tf.linalg.band_part(x, 1, 0), tf.linalg.norm(x)], (f32(3, 4), f32(3))),
    Case("math_softmax", lambda tf, x: [tf.math.softmax(x), tf.math.log_softmax(x, axis=0)], (f32(3, 4),)),
    # Reductions.
    Case("reduce_sum", lambda tf, x: [tf.reduce_sum(x), tf.reduce_sum(x, 0), tf.reduce_sum(x, [0, 2]),
                                      tf.reduce_sum(x, axis=-1, keepdims=True)], (f32(2, 3, 4),)),
    Case("reduce_mean", lambda tf, x: [tf.reduce_mean(x), tf.reduce_mean(x, axis=1, keepdims=True)], (f32(3, 4),)),
    Case("reduce_mean_int_truncates", lambda tf, x: tf.reduce_mean(x, 0), (i32(4, 3, hi=7),)),
    Case("reduce_max_min", lambda tf, x: [tf.reduce_max(x), tf.reduce_max(x, 1), tf.reduce_min(x, [0, 1])],
         (f32(3, 4),)),
    Case("reduce_prod", lambda tf, x: [tf.reduce_prod(x), tf.reduce_prod(x, 0)], (f32(3, 4, lo=0.5, hi=1.5),)),
    Case("reduce_any_all", lambda tf, c: [tf.reduce_any(c), tf.reduce_all(c, 1), tf.reduce_any(c, 0, keepdims=True)],
         (b(3, 4),)),
    Case("reduce_logsumexp_std_var", lambda tf, x: [tf.reduce_logsumexp(x, 1), tf.math.reduce_std(x),
                                                    tf.math.reduce_variance(x, 0)], (f32(3, 4),)),
    Case("argmax_argmin", lambda tf, x: [tf.argmax(x), tf.argmax(x, 1), tf.argmin(x, axis=1),
                                         tf.argmax(x, 1, output_type=tf.int32)], (f32(3, 4),)),
    Case("cumsum_cumprod", lambda tf, x: [tf.cumsum(x, 1), tf.cumsum(x, 1, exclusive=True),
                                          tf.cumsum(x, 0, reverse=True), tf.math.cumprod(x, 1)],
         (f32(3, 4, lo=0.5, hi=1.5),)),
    Case("norm_add_n", lambda tf, x, y: [tf.norm(x), tf.norm(x, axis=1), tf.add_n([x, y, x])], (f32(3, 4), f32(3, 4))),
    Case("top_k", lambda tf, x: list(tf.math.top_k(x, k=2)), (f32(3, 5),)),
    Case("sort_argsort", lambda tf, x: [tf.sort(x), tf.sort(x, direction="DESCENDING"), tf.argsort(x)], (f32(3, 5),)),
    # Linear algebra.
    Case("matmul", lambda tf, a, c: [tf.matmul(a, c), a @ c], (f32(3, 4), f32(4, 2))),
    Case("matmul_transposes", lambda tf, a, c: [tf.matmul(a, c, transpose_a=True), tf.matmul(c, a, transpose_b=True)],
         (f32(4, 3), f32(4, 3))),
    Case("matmul_batched", lambda tf, a, c: tf.matmul(a, c), (f32(2, 3, 4), f32(2, 4, 5))),
    Case("einsum", lambda tf, a, c: [tf.einsum("ij,jk->ik", a, c), tf.einsum("ij->j", a)], (f32(3, 4), f32(4, 2))),
    Case("tensordot", lambda tf, a, c: tf.tensordot(a, c, axes=1), (f32(3, 4), f32(4, 2))),
    # Clipping.
    Case("clip_by_value", lambda tf, x: tf.clip_by_value(x, -0.5, 0.5), (f32(20),)),
    Case("clip_by_norm", lambda tf, x: [tf.clip_by_norm(x, 1.0), tf.clip_by_norm(x, 1.0, axes=[1])], (f32(3, 4),)),
    Case("clip_by_global_norm", lambda tf, x, y: list(tf.clip_by_global_norm([x, y], 1.5)[0]) +
         [tf.clip_by_global_norm([x, y], 1.5)[1]], (f32(3, 4), f32(5),)),
    # Elementwise math.
    Case("arith_operators", lambda tf, x, y: [x + y, x - y, x * y, x / y, -x, x ** 2, 2.0 * x, abs(x)],
         (f32(3, 4), f32(3, 4, lo=0.5, hi=2.0))),
    Case("comparisons", lambda tf, x, y: [x < y, x >= y, tf.equal(x, y), tf.not_equal(x, x), tf.greater(x, 0.0),
                                          tf.less_equal(x, y)], (f32(3, 4), f32(3, 4))),
    Case("logical", lambda tf, p, q: [tf.logical_and(p, q), tf.logical_or(p, q), tf.logical_not(p),
                                      tf.math.logical_xor(p, q)], (b(5), b(5))),
    Case("math_unary", lambda tf, x: [tf.exp(x), tf.math.log1p(x), tf.sqrt(x), tf.math.rsqrt(x), tf.square(x),
                                      tf.math.log(x), tf.sin(x), tf.cos(x), tf.tanh(x), tf.sigmoid(x),
                                      tf.math.softplus(x), tf.math.erf(x), tf.math.reciprocal(x),
                                      tf.math.expm1(x), tf.math.log_sigmoid(x)], (f32(3, 4, lo=0.2, hi=2.0),)),
    Case("math_rounding", lambda tf, x: [tf.floor(x), tf.math.ceil(x), tf.round(x), tf.sign(x)],
         (np.array([-1.5, -0.5, 0.5, 1.5, 2.5, 0.2, -2.7], np.float32),), grad=False),
    Case("math_binary", lambda tf, x, y: [tf.maximum(x, y), tf.minimum(x, y), tf.math.squared_difference(x, y),
                                          tf.pow(y, 2.0), tf.math.floordiv(x, y), tf.math.floormod(x, y),
                                          tf.math.divide_no_nan(x, y * 0.0), tf.atan2(x, y)],
         (f32(3, 4), f32(3, 4, lo=0.5, hi=2.0))),
    Case("math_predicates", lambda tf, x: [tf.math.is_nan(x), tf.math.is_finite(x), tf.math.count_nonzero(x)],
         (np.array([1.0, np.nan, np.inf, 0.0], np.float32),), grad=False),
    Case("l2_normalize", lambda tf, x: [tf.math.l2_normalize(x, axis=1), tf.nn.l2_normalize(x)], (f32(3, 4),)),
    # tf.nn.
    Case("activations", lambda tf, x: [tf.nn.relu(x), tf.nn.relu6(x * 4), tf.nn.elu(x), tf.nn.selu(x),
                                       tf.nn.gelu(x), tf.nn.gelu(x, approximate=True), tf.nn.leaky_relu(x),
                                       tf.nn.sigmoid(x), tf.nn.tanh(x), tf.nn.silu(x), tf.nn.softplus(x),
                                       tf.nn.softsign(x)], (f32(4, 5),)),
    Case("softmax", lambda tf, x: [tf.nn.softmax(x), tf.nn.softmax(x, axis=0), tf.nn.log_softmax(x)], (f32(3, 5),)),
    Case("conv2d_valid", lambda tf, x, w: tf.nn.conv2d(x, w, strides=1, padding="VALID"), (f32(2, 7, 6, 3),
                                                                                           f32(3, 3, 3, 4))),
    Case("conv2d_same_strided", lambda tf, x, w: tf.nn.conv2d(x, w, strides=[1, 2, 2, 1], padding="SAME"),
         (f32(2, 7, 6, 3), f32(3, 2, 3, 4))),
    Case("conv2d_dilated", lambda tf, x, w: tf.nn.conv2d(x, w, 1, "SAME", dilations=2), (f32(1, 8, 8, 2),
                                                                                         f32(3, 3, 2, 2))),
    Case("conv1d", lambda tf, x, w: tf.nn.conv1d(x, w, stride=2, padding="SAME"), (f32(2, 9, 3), f32(3, 3, 4))),
    Case("depthwise_conv2d", lambda tf, x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "VALID"),
         (f32(1, 5, 5, 3), f32(3, 3, 3, 2))),
    Case("max_pool2d", lambda tf, x: [tf.nn.max_pool2d(x, 2, 2, "VALID"), tf.nn.max_pool2d(x, 3, 2, "SAME")],
         (f32(2, 7, 6, 3),)),
    Case("avg_pool2d", lambda tf, x: [tf.nn.avg_pool2d(x, 2, 2, "VALID"), tf.nn.avg_pool2d(x, 3, 2, "SAME")],
         (f32(2, 7, 6, 3),)),
    Case("sparse_softmax_xent", lambda tf, lg, lb: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=lb, logits=lg),
         (f32(6, 5), i32(6, hi=5))),
    Case("softmax_xent",
         lambda tf, lg, lb: tf.nn.softmax_cross_entropy_with_logits(labels=tf.nn.softmax(lb), logits=lg),
         (f32(6, 5), f32(6, 5))),
    Case("sigmoid_xent", lambda tf, lg, lb: tf.nn.sigmoid_cross_entropy_with_logits(labels=lb, logits=lg),
         (f32(6, 3), f32(6, 3, lo=0.0, hi=1.0))),
    Case("moments", lambda tf, x: list(tf.nn.moments(x, axes=[0, 1])) + list(tf.nn.moments(x, [1], keepdims=True)),
         (f32(4, 3, 2),)),
    Case("bias_add", lambda tf, x, bb: tf.nn.bias_add(x, bb), (f32(2, 3, 4), f32(4))),
    Case("batch_normalization", lambda tf, x, m, v, o, s: tf.nn.batch_normalization(x, m, v, o, s, 1e-3),
         (f32(4, 3), f32(3), f32(3, lo=0.5, hi=1.5), f32(3), f32(3))),
    Case("l2_loss", lambda tf, x: tf.nn.l2_loss(x), (f32(3, 4),)),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op_parity(case, mode):
    run_case(case, mode)


def test_dropout_statistics_and_scaling():
    import loom.tf as tf
    tf.random.set_seed(1)
    x = tf.ones([200, 50])
    y = tf.nn.dropout(x, rate=0.3).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)


def test_random_seeded_shapes_and_moments():
    import loom.tf as tf
    tf.random.set_seed(3)
    a = tf.random.normal([4000], mean=1.0, stddev=2.0).numpy()
    tf.random.set_seed(3)
    a2 = tf.random.normal([4000], mean=1.0, stddev=2.0).numpy()
    np.testing.assert_array_equal(a, a2)
    assert abs(a.mean() - 1.0) < 0.1 and abs(a.std() - 2.0) < 0.1
    u = tf.random.uniform([3000], minval=-1, maxval=3).numpy()
    assert u.dtype == np.float32 and u.min() >= -1 and u.max() < 3 and abs(u.mean() - 1) < 0.1
    k = tf.random.uniform([100], 0, 5, dtype=tf.int32).numpy()
    assert k.dtype == np.int32 and set(k.tolist()) <= set(range(5))
    t = tf.random.truncated_normal([2000]).numpy()
    assert np.abs(t).max() <= 2.0
    s1 = tf.random.uniform([5], seed=7).numpy()
    s2 = tf.random.uniform([5], seed=7).numpy()
    assert not np.array_equal(s1, s2)  # One op seed gives a sequence, as TensorFlow's do.


def test_variable_api():
    import loom.tf as tf
    v = tf.Variable([1.0, 2.0], name="w")
    assert v.name == "w:0" and v.trainable and v.shape.as_list() == [2] and v.dtype == tf.float32
    v.assign([3.0, 4.0])
    v.assign_add([1.0, 1.0])
    v.assign_sub(tf.constant([0.5, 0.5]))
    np.testing.assert_array_equal(v.numpy(), [3.5, 4.5])
    np.testing.assert_array_equal(v.read_value().numpy(), [3.5, 4.5])
    np.testing.assert_array_equal((v * 2).numpy(), [7.0, 9.0])
    frozen = tf.Variable(1.0, trainable=False)
    assert not frozen.trainable
    counter = tf.Variable(0)
    counter.assign_add(2)
    assert counter.dtype == tf.int32 and int(counter) == 2
    with pytest.raises(Exception, match="shape"):
        v.assign([1.0, 2.0, 3.0])


def test_dtype_questions_as_tensorflow_asks_them():
    import loom.tf as tf
    from tests.tf.harness import real_tf
    for name in ("float32", "float64", "int32", "int64", "bool", "uint8", "float16"):
        mine, theirs = getattr(tf, name), getattr(real_tf, name)
        assert (mine.name, mine.is_floating, mine.is_integer, mine.is_bool, mine.as_numpy_dtype) == \
            (theirs.name, theirs.is_floating, theirs.is_integer, theirs.is_bool, theirs.as_numpy_dtype), name
    assert tf.as_dtype("float32") is tf.float32 and tf.as_dtype(np.int64) is tf.int64


def test_errors_name_the_op():
    import loom.tf as tf
    with pytest.raises(Exception, match=r"loom\.tf\.split"):
        tf.split(tf.ones([5]), 2)
    with pytest.raises(Exception, match=r"sparse_softmax_cross_entropy_with_logits"):
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant([1, 2]), logits=tf.ones([3, 4]))
    with pytest.raises(Exception, match=r"loom\.tf\.pad"):
        tf.pad(tf.ones([2, 2]), [[1, 1]])


def test_debugging_assertions_pass_and_fail_as_tensorflow():
    import loom.tf as ltf
    from tests.tf.harness import real_tf
    ok = [lambda tf: tf.debugging.assert_equal(tf.constant([1, 2]), tf.constant([1, 2])),
          lambda tf: tf.debugging.assert_less(tf.constant([1.0]), 2.0),
          lambda tf: tf.debugging.assert_near(tf.constant([1.0]), tf.constant([1.0 + 1e-7])),
          lambda tf: tf.debugging.assert_rank(tf.ones((2, 3)), 2),
          lambda tf: tf.debugging.assert_shapes([(tf.ones((2, 3)), ("N", 3)), (tf.ones((2,)), ("N",))]),
          lambda tf: tf.assert_equal(tf.constant(1), 1)]
    bad = [lambda tf: tf.debugging.assert_equal(tf.constant([1, 2]), tf.constant([1, 3])),
           lambda tf: tf.debugging.assert_greater(tf.constant([1.0]), 2.0),
           lambda tf: tf.debugging.assert_near(tf.constant([1.0]), tf.constant([1.1])),
           lambda tf: tf.debugging.assert_non_negative(tf.constant([-1.0])),
           lambda tf: tf.debugging.check_numerics(tf.constant([np.nan]), "nan here"),
           lambda tf: tf.debugging.assert_shapes([(tf.ones((2, 3)), ("N", 3)), (tf.ones((4,)), ("N",))])]
    for fn in ok:
        fn(real_tf)
        fn(ltf)
    for fn in bad:
        for tf in (real_tf, ltf):
            with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
                fn(tf)
        with pytest.raises(ltf.errors.InvalidArgumentError):
            fn(ltf)


def _image_program(tf):
    rng = np.random.default_rng(0)
    img = rng.random((2, 5, 7, 3)).astype(np.float32)
    u8 = (rng.random((6, 4, 3)) * 255).astype(np.uint8)
    im = tf.image
    return [im.resize(img, (10, 14)), im.resize(img, (3, 4)), im.resize(img, (8, 9), method="nearest"),
            im.resize(img, (4, 3), method="nearest"), im.resize(u8, (8, 6)),
            im.resize(img, (10, 10), preserve_aspect_ratio=True), im.flip_left_right(img), im.flip_up_down(u8),
            im.central_crop(img, 0.5), im.convert_image_dtype(u8, tf.float32), im.convert_image_dtype(img, tf.uint8),
            im.rgb_to_grayscale(img), im.per_image_standardization(img), im.per_image_standardization(u8),
            im.adjust_brightness(img, 0.1)]


def test_image_ops_match_tensorflow():
    import loom.tf as ltf
    from loom.errors import LoomValueError
    from tests.tf.harness import real_tf
    for got, want in zip(_image_program(ltf), _image_program(real_tf)):
        assert got.dtype.name == want.dtype.name
        np.testing.assert_allclose(np.asarray(got.numpy(), np.float64), np.asarray(want.numpy(), np.float64),
                                   rtol=1e-4, atol=1e-4)
    with pytest.raises(LoomValueError, match="bicubic kernel"):
        ltf.image.resize(np.ones((1, 2, 2, 1), np.float32), (4, 4), method="bicubic")
