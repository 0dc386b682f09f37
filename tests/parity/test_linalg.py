"""Parity of contractions (matmul family, tensordot, einsum) and loom.linalg norms."""
import numpy as np
import pytest

import loom
from loom.errors import DTypeError, LoomError, ShapeError
from tests.parity.harness import Case, bools, ints, randn, run_case

EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ba", [(3, 4)]),
    ("bij,bjk->bik", [(1, 3, 4), (3, 4, 5)]),
    ("ij,kj->ik", [(3, 1), (4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("iij->j", [(3, 3, 4)]),
    ("ijk,ikl->", [(2, 3, 4), (2, 4, 5)]),
    ("i,i,i->i", [(4,), (4,), (4,)]),
    ("ab,ab->a", [(3, 4), (3, 4)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("i...->...", [(3, 2, 4)]),
    ("...,...->...", [(2, 3), (3,)]),
    ("ij , jk -> ik", [(2, 3), (3, 2)]),
    ("bij,bkj->", [(2, 3, 4), (2, 5, 4)]),
    ("ii,i->i", [(3, 3), (3,)]),
]

CASES = [
    Case(f"einsum[{eq.replace(' ', '')}]{k}", lambda m, *xs, eq=eq: m.einsum(eq, *xs),
         tuple(randn(*s) for s in shapes), second_order=k % 4 == 0)
    for k, (eq, shapes) in enumerate(EINSUM)
]
CASES += [
    Case("einsum_list_operands", lambda m, a, b: m.einsum("ij,jk->ik", [a, b]), (randn(2, 3), randn(3, 2))),
    Case("einsum_int", lambda m, a, b: (m.einsum("i,i->", a, b), m.einsum("ij->", a.reshape(2, 2))),
         (ints(4, dtype=np.int32), ints(4, dtype=np.int32))),
    Case("einsum_noncontig", lambda m, a, b: m.einsum("ij,jk->ik", a.t(), b[:, ::2]), (randn(4, 3), randn(4, 6))),
    Case("einsum_zero_size", lambda m, a, b: m.einsum("ij,jk->ik", a, b), (randn(3, 0), randn(0, 2))),
    # matmul and PyTorch's broadcasting rules.
    Case("matmul_2d", lambda m, a, b: a @ b, (randn(3, 4), randn(4, 5)), second_order=True),
    Case("matmul_1d_1d", lambda m, a, b: m.matmul(a, b), (randn(4), randn(4)), second_order=True),
    Case("matmul_1d_2d", lambda m, a, b: m.matmul(a, b), (randn(4), randn(4, 3))),
    Case("matmul_2d_1d", lambda m, a, b: m.matmul(a, b), (randn(3, 4), randn(4))),
    Case("matmul_1d_batched", lambda m, a, b: m.matmul(a, b), (randn(4), randn(2, 4, 3))),
    Case("matmul_batched_1d", lambda m, a, b: m.matmul(a, b), (randn(2, 3, 4), randn(4))),
    Case("matmul_batch_broadcast", lambda m, a, b: m.matmul(a, b), (randn(2, 1, 3, 4), randn(5, 4, 2)),
         second_order=True),
    Case("matmul_batched_2d", lambda m, a, b: a @ b, (randn(2, 3, 4), randn(4, 5))),
    Case("matmul_noncontig", lambda m, a, b: a.mT @ b.permute(1, 0), (randn(2, 4, 3), randn(5, 4))),
    Case("matmul_int64", lambda m, a, b: a @ b, (ints(3, 4, low=-5), ints(4, 2, low=-5))),
    Case("matmul_int32_1d", lambda m, a, b: a @ b, (ints(4, dtype=np.int32), ints(4, 2, dtype=np.int32))),
    Case("matmul_zero_k", lambda m, a, b: a @ b, (randn(3, 0), randn(0, 2))),
    Case("matmul_zero_batch", lambda m, a, b: a @ b, (randn(0, 3, 4), randn(4, 2))),
    Case("matmul_float64", lambda m, a, b: a @ b, (randn(3, 4, dtype=np.float64), randn(4, 2, dtype=np.float64))),
    Case("matmul_method_chain", lambda m, a, b: a.matmul(b).matmul(a), (randn(3, 3), randn(3, 3)), second_order=True),
    Case("mm", lambda m, a, b: m.mm(a, b), (randn(2, 3), randn(3, 4))),
    Case("bmm", lambda m, a, b: a.bmm(b), (randn(2, 3, 4), randn(2, 4, 5)), second_order=True),
    Case("mv", lambda m, a, b: a.mv(b), (randn(3, 4), randn(4))),
    Case("dot_vdot", lambda m, a, b: (m.dot(a, b), m.vdot(a, b)), (randn(5), randn(5))),
    Case("dot_int32", lambda m, a, b: a.dot(b), (ints(5, dtype=np.int32), ints(5, dtype=np.int32))),
    Case("inner", lambda m, a, b, c: (m.inner(a, b), m.inner(a, c), m.inner(b, b)),
         (randn(2, 3, 4), randn(6, 5, 4), randn(4)), second_order=True),
    Case("inner_0d", lambda m, a, b: m.inner(a, b), (randn(), randn(2, 3))),
    Case("outer", lambda m, a, b: (m.outer(a, b), m.ger(a, b)), (randn(3), randn(4)), second_order=True),
    Case("outer_promote", lambda m, a, b: m.outer(a, b), (ints(3), randn(2))),
    Case("addmm", lambda m, c, a, b: (m.addmm(c, a, b), m.addmm(c, a, b, beta=0.5, alpha=-2.0)),
         (randn(3), randn(2, 4), randn(4, 3)), second_order=True),
    Case("addmm_beta0_ignores_nan", lambda m, c, a, b: m.addmm(c / 0.0, a, b, beta=0),
         (randn(2, 3), randn(2, 4), randn(4, 3))),
    Case("addmm_int", lambda m, c, a, b: m.addmm(c, a, b, beta=2, alpha=3), (ints(2, 2), ints(2, 3), ints(3, 2))),
    Case("addmv", lambda m, c, a, b: m.addmv(c, a, b, beta=0.5, alpha=2.0), (randn(3), randn(3, 4), randn(4))),
    Case("baddbmm", lambda m, c, a, b: m.baddbmm(c, a, b, alpha=0.5), (randn(1, 3), randn(2, 3, 4), randn(2, 4, 3))),
    Case("addbmm", lambda m, c, a, b: m.addbmm(c, a, b, beta=2.0), (randn(3, 3), randn(2, 3, 4), randn(2, 4, 3))),
    Case("addr", lambda m, c, a, b: m.addr(c, a, b, alpha=2.0), (randn(3, 4), randn(3), randn(4))),
    Case("kron", lambda m, a, b: (m.kron(a, b), m.kron(b, a)), (randn(2, 3), randn(4)), second_order=True),
    Case("kron_int", lambda m, a, b: m.kron(a, b), (ints(2, 2), ints(3, 1))),
    Case("tensordot_int_dims", lambda m, a, b: (m.tensordot(a, b, 1), m.tensordot(a, b.reshape(3, 4, 5), 2)),
         (randn(2, 3, 4), randn(4, 3, 5)), second_order=True),
    Case("tensordot_lists", lambda m, a, b: m.tensordot(a, b, dims=([1, 2], [1, 0])), (randn(2, 3, 4), randn(4, 3, 5))),
    Case("tensordot_neg_and_zero", lambda m, a, b: (m.tensordot(a, b, ([-1], [0])), m.tensordot(a, b, 0)),
         (randn(2, 3), randn(3, 2))),
    Case("chain_matmul", lambda m, a, b, c: m.linalg.multi_dot([a, b, c]), (randn(2, 3), randn(3, 4), randn(4, 2))),
    Case("linalg_matmul_vecdot", lambda m, a, b: (m.linalg.matmul(a, b.mT), m.linalg.vecdot(a, b)),
         (randn(2, 3, 4), randn(3, 4))),
    Case("matrix_power", lambda m, a: tuple(m.linalg.matrix_power(a, k) for k in (0, 1, 2, 5)), (randn(2, 3, 3),),
         second_order=True),
    Case("matrix_power_int", lambda m, a: m.linalg.matrix_power(a, 3), (ints(3, 3, low=-2, high=3),)),
    Case("linalg_cross", lambda m, a, b: (m.linalg.cross(a, b), m.linalg.cross(a.mT, b.mT, dim=-2)),
         (randn(2, 4, 3), randn(1, 4, 3)), second_order=True),
    # loom.linalg norms.
    Case("vector_norm", lambda m, x: (m.linalg.vector_norm(x), m.linalg.vector_norm(x, 1, -1),
                                      m.linalg.vector_norm(x, float("inf"), (0, 1), keepdim=True),
                                      m.linalg.vector_norm(x, 3.0, 0), m.linalg.vector_norm(x, 0, 1)),
         (randn(3, 4),), second_order=True),
    Case("vector_norm_neg_inf_and_dtype", lambda m, x: (m.linalg.vector_norm(x, -float("inf"), 1),
                                                        m.linalg.vector_norm(x, dtype=m.float64)),
         (randn(3, 4),)),
    Case("vector_norm_zero_grad", lambda m, x: m.linalg.vector_norm(x * 0.0, dim=1), (randn(2, 3),)),
    Case("matrix_norm", lambda m, x: (m.linalg.matrix_norm(x), m.linalg.matrix_norm(x, 1),
                                      m.linalg.matrix_norm(x, -1), m.linalg.matrix_norm(x, float("inf")),
                                      m.linalg.matrix_norm(x, "fro", (0, -1), keepdim=True)),
         (randn(2, 3, 4),), second_order=True),
    Case("linalg_norm", lambda m, x, v: (m.linalg.norm(x), m.linalg.norm(x, "fro"), m.linalg.norm(v, 3),
                                         m.linalg.norm(x, dim=1), m.linalg.norm(x, 1, (0, 1))),
         (randn(3, 4), randn(5))),
    Case("linalg_norm_flattens", lambda m, x: m.linalg.norm(x), (randn(2, 3, 4),)),
    Case("linalg_diagonal", lambda m, x: m.linalg.diagonal(x, offset=1), (randn(2, 3, 4),)),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


# ---------------------------------------------------------------- errors

def test_matmul_shape_mismatch():
    with pytest.raises(ShapeError, match=r"loom\.matmul: shapes \[2, 3\] and \[4, 2\] cannot be multiplied "
                                         r"\(2x3 and 4x2\)"):
        loom.zeros(2, 3) @ loom.zeros(4, 2)
    with pytest.raises(ShapeError, match=r"loom\.matmul: .*\[3\] and \[4\]"):
        loom.matmul(loom.zeros(3), loom.zeros(4))
    with pytest.raises(ShapeError, match=r"loom\.matmul: .*cannot be broadcast"):
        loom.matmul(loom.zeros(2, 3, 4), loom.zeros(3, 4, 5))
    with pytest.raises(ShapeError, match=r"loom\.matmul: both arguments need at least 1 dimension"):
        loom.matmul(loom.zeros(()), loom.zeros(3))


def test_matmul_dtype_errors():
    with pytest.raises(DTypeError, match=r"loom\.matmul: expected both operands to have the same dtype, got "
                                         r"float32 and float64"):
        loom.zeros(2, 2) @ loom.zeros(2, 2, dtype=loom.float64)
    with pytest.raises(DTypeError, match=r"loom\.matmul: not implemented for bool"):
        loom.zeros(2, 2, dtype=loom.bool) @ loom.zeros(2, 2, dtype=loom.bool)
    with pytest.raises(DTypeError, match=r"loom\.dot: expected both vectors to have the same dtype"):
        loom.dot(loom.zeros(2), loom.zeros(2, dtype=loom.int64))


def test_family_shape_errors():
    with pytest.raises(ShapeError, match=r"loom\.mm: expected 2-d tensors, got \[3\] and \[3, 2\]"):
        loom.mm(loom.zeros(3), loom.zeros(3, 2))
    with pytest.raises(ShapeError, match=r"loom\.bmm: batch sizes differ"):
        loom.bmm(loom.zeros(2, 3, 4), loom.zeros(3, 4, 5))
    with pytest.raises(ShapeError, match=r"loom\.bmm: .*cannot be multiplied"):
        loom.bmm(loom.zeros(2, 3, 4), loom.zeros(2, 5, 5))
    with pytest.raises(ShapeError, match=r"loom\.mv: expected a 2-d matrix and a 1-d vector"):
        loom.mv(loom.zeros(3, 2), loom.zeros(2, 1))
    with pytest.raises(ShapeError, match=r"loom\.dot: expected two 1-d tensors of one size, got \[3\] and \[2\]"):
        loom.dot(loom.zeros(3), loom.zeros(2))
    with pytest.raises(ShapeError, match=r"loom\.inner: last dims must match, got \[2, 3\] and \[2\]"):
        loom.inner(loom.zeros(2, 3), loom.zeros(2))
    with pytest.raises(ShapeError, match=r"loom\.addmm: input \[3, 3\] cannot be broadcast to the product "
                                         r"shape \[2, 3\]"):
        loom.addmm(loom.zeros(3, 3), loom.zeros(2, 4), loom.zeros(4, 3))
    with pytest.raises(ShapeError, match=r"loom\.tensordot: contracted dims have sizes \[3\] and \[4\]"):
        loom.tensordot(loom.zeros(2, 3), loom.zeros(4, 2), dims=([1], [0]))


def test_einsum_errors():
    with pytest.raises(ShapeError, match=r"loom\.einsum: subscript 'j' has size 4 in one operand and 3 in another"):
        loom.einsum("ij,jk->ik", loom.zeros(2, 3), loom.zeros(4, 5))
    with pytest.raises(LoomError, match=r"loom\.einsum: equation 'ij,jk->ik' names 2 operands but 1 were given"):
        loom.einsum("ij,jk->ik", loom.zeros(2, 3))
    with pytest.raises(ShapeError, match=r"loom\.einsum: subscripts 'ijk' name 3 dims but the operand has shape "
                                         r"\[2, 3\]"):
        loom.einsum("ijk->i", loom.zeros(2, 3))
    with pytest.raises(LoomError, match=r"loom\.einsum: output subscript 'z' does not appear in the inputs"):
        loom.einsum("ij->z", loom.zeros(2, 3))
    with pytest.raises(LoomError, match=r"loom\.einsum: output subscript 'i' appears more than once"):
        loom.einsum("ij->ii", loom.zeros(2, 3))
    with pytest.raises(LoomError, match=r"loom\.einsum: invalid subscript '1'"):
        loom.einsum("i1->i", loom.zeros(2, 3))


def test_norm_errors():
    with pytest.raises(DTypeError, match=r"loom\.linalg\.vector_norm: expected a floating point"):
        loom.linalg.vector_norm(loom.zeros(3, dtype=loom.int64))
    with pytest.raises(ShapeError, match=r"loom\.linalg\.matrix_norm: expected a tensor with at least 2 dims"):
        loom.linalg.matrix_norm(loom.zeros(3))
    with pytest.raises(LoomError, match=r"loom\.linalg\.matrix_norm: unsupported ord 'max'"):
        loom.linalg.matrix_norm(loom.zeros(3, 3), "max")
    with pytest.raises(ShapeError, match=r"loom\.linalg\.cross: inputs must have the same number of dims"):
        loom.linalg.cross(loom.zeros(2, 3), loom.zeros(3))
    with pytest.raises(LoomError, match=r"loom\.inverse: the matrix is singular"):
        loom.linalg.matrix_power(loom.zeros(2, 2), -1).numpy()


def test_bool_int_matmul_message_names_dtypes():
    a = loom.tensor(bools(2, 2)(np.random.default_rng(0)))
    with pytest.raises(DTypeError, match="bool"):
        loom.mm(a, a)
