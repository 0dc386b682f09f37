"""PyTorch's remaining `torch.*` functions: recurrent-layer functions, special functions, samplers, reductions.

The functional forms `nn.RNN`/`nn.LSTM`/`nn.GRU` use internally (`torch.lstm`,
`torch.gru_cell`, ...) with PyTorch's argument conventions, over loom.nn's
recurrence; the regularised incomplete gamma functions; `nextafter`;
`gradient`; `histogramdd`; `index_reduce` and `segment_reduce`; binomial and
Poisson sampling; the pieces of synchronised batch norm (`batch_norm_stats`,
...); and thin wrappers under the names PyTorch's dispatcher gives existing ops
(`convolution`, `grid_sampler`, `affine_grid_generator`).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from loom import dtypes as dt
from loom.autograd.function import Function
from loom.autograd.grad_mode import no_grad
from loom.errors import AutogradError, DTypeError, LoomError, LoomTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional import math as _math
from loom.tensor import Tensor, _rand_node, arange, full, normalize_dim, tensor, zeros


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


# ---------------------------------------------------------------- recurrent layers, functional forms

def _rnn_runner(mode: str, params, has_biases: bool, num_layers: int, dropout: float, train: bool,
                bidirectional: bool, hidden_size: int, proj: bool):
    """An nn.RNNBase whose `_run` reads its weights from PyTorch's flat `params` list."""
    from loom.nn.modules.rnn import RNNBase
    from loom.nn.module import Module

    dirs = 2 if bidirectional else 1
    per = (4 if has_biases else 2) + (1 if proj else 0)
    if len(params) != per * num_layers * dirs:
        raise LoomValueError(f"loom.{mode.lower()}: expected {per * num_layers * dirs} weights for {num_layers} "
                             f"layer(s), {dirs} direction(s) and has_biases={has_biases}, got {len(params)}")

    class _Flat(RNNBase):
        def __init__(self) -> None:
            Module.__init__(self)
            self.mode, self.num_layers, self.bidirectional = mode, num_layers, bidirectional
            self.dropout, self.hidden_size = float(dropout), hidden_size
            self.training = bool(train)

        def _weights(self, layer: int, direction: int):
            w = list(params[(layer * dirs + direction) * per:(layer * dirs + direction + 1) * per])
            w_ih, w_hh = w[0], w[1]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            return w_ih, w_hh, b_ih, b_hh, (w[-1] if proj else None)
    return _Flat()


def _run_rnn(mode: str, input, hx: list, params, has_biases, num_layers, dropout, train, bidirectional,
             batch_first):
    from loom.functional.shape import stack
    op = f"loom.{mode.lower()}"
    if isinstance(hx, Tensor) and not isinstance(params, (list, tuple)):
        raise LoomValueError(f"{op}: the packed-sequence form (data, batch_sizes, ...) is not supported; run "
                             "the module (loom.nn.{mode}) on a PackedSequence instead")
    x = _t(input)
    if x.ndim != 3:
        raise ShapeError(f"{op}: expected a 3-d input (seq, batch, feature), got {fmt_shape(x.shape)}")
    if batch_first:
        x = x.transpose(0, 1)
    h0 = hx[0]
    dirs = 2 if bidirectional else 1
    if h0.ndim != 3 or h0.shape[0] != num_layers * dirs or h0.shape[1] != x.shape[1]:
        raise ShapeError(f"{op}: expected hidden state of shape ({num_layers * dirs}, {x.shape[1]}, H), got "
                         f"{fmt_shape(h0.shape)}")
    proj = mode == "LSTM" and hx[1].shape[-1] != h0.shape[-1]
    runner = _rnn_runner(mode, params, has_biases, num_layers, dropout, train, bidirectional,
                         hx[-1].shape[-1], proj)
    states = [tuple(h[i] for h in hx) if len(hx) > 1 else hx[0][i] for i in range(h0.shape[0])]
    out, finals = runner._run(x, states)
    if batch_first:
        out = out.transpose(0, 1)
    if mode == "LSTM":
        return out, stack([f[0] for f in finals]), stack([f[1] for f in finals])
    return out, stack(finals)


def rnn_tanh(input, hx, params, has_biases: bool, num_layers: int, dropout: float, train: bool,
             bidirectional: bool, batch_first: bool):
    """Multi-layer Elman RNN with tanh over a sequence, as `torch.rnn_tanh` (what `nn.RNN` runs).

    `params` is the flat list `[w_ih_l0, w_hh_l0, b_ih_l0, b_hh_l0, (reverse direction), w_ih_l1, ...]`
    (no biases when `has_biases` is False); returns `(output, h_n)`.

    Examples
    --------
    >>> rnn = loom.nn.RNN(3, 4)
    >>> out, h = loom.rnn_tanh(loom.ones(5, 2, 3), loom.zeros(1, 2, 4), list(rnn.parameters()), True, 1, 0.0,
    ...                        False, False, False)
    >>> out.shape, h.shape
    (loom.Size([5, 2, 4]), loom.Size([1, 2, 4]))
    """
    return _run_rnn("RNN_TANH", input, [hx], params, has_biases, num_layers, dropout, train, bidirectional,
                    batch_first)


def rnn_relu(input, hx, params, has_biases: bool, num_layers: int, dropout: float, train: bool,
             bidirectional: bool, batch_first: bool):
    """Multi-layer Elman RNN with ReLU over a sequence, as `torch.rnn_relu`; returns `(output, h_n)`.

    Examples
    --------
    >>> rnn = loom.nn.RNN(3, 4, nonlinearity="relu")
    >>> out, h = loom.rnn_relu(loom.ones(2, 5, 3), loom.zeros(1, 2, 4), list(rnn.parameters()), True, 1, 0.0,
    ...                        False, False, True)
    >>> out.shape
    loom.Size([2, 5, 4])
    """
    return _run_rnn("RNN_RELU", input, [hx], params, has_biases, num_layers, dropout, train, bidirectional,
                    batch_first)


def lstm(input, hx, params, has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool,
         batch_first: bool):
    """Multi-layer LSTM over a sequence, as `torch.lstm`; `hx` is `(h_0, c_0)`, returns `(output, h_n, c_n)`.

    Per layer and direction `params` holds `w_ih, w_hh[, b_ih, b_hh][, w_hr]` (`w_hr` with projections).

    Examples
    --------
    >>> m = loom.nn.LSTM(3, 4, num_layers=2)
    >>> out, h, c = loom.lstm(loom.ones(5, 2, 3), (loom.zeros(2, 2, 4), loom.zeros(2, 2, 4)),
    ...                       list(m.parameters()), True, 2, 0.0, False, False, False)
    >>> out.shape, c.shape
    (loom.Size([5, 2, 4]), loom.Size([2, 2, 4]))
    """
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise LoomValueError("loom.lstm: hx must be a pair (h_0, c_0)")
    return _run_rnn("LSTM", input, list(hx), params, has_biases, num_layers, dropout, train, bidirectional,
                    batch_first)


def gru(input, hx, params, has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool,
        batch_first: bool):
    """Multi-layer GRU over a sequence, as `torch.gru`; returns `(output, h_n)`.

    Examples
    --------
    >>> m = loom.nn.GRU(3, 4, bidirectional=True)
    >>> out, h = loom.gru(loom.ones(5, 2, 3), loom.zeros(2, 2, 4), list(m.parameters()), True, 1, 0.0,
    ...                   False, True, False)
    >>> out.shape, h.shape
    (loom.Size([5, 2, 8]), loom.Size([2, 2, 4]))
    """
    return _run_rnn("GRU", input, [hx], params, has_biases, num_layers, dropout, train, bidirectional,
                    batch_first)


def _cell_proj(op: str, input, w_ih, b_ih):
    from loom.nn import functional as F
    x = _t(input)
    if x.ndim not in (1, 2) or x.shape[-1] != w_ih.shape[1]:
        raise ShapeError(f"loom.{op}: expected input of shape (batch, {w_ih.shape[1]}) or ({w_ih.shape[1]},), "
                         f"got {fmt_shape(x.shape)}")
    return F.linear(x, w_ih, b_ih)


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None) -> Tensor:
    """One tanh RNN step, `tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`, as `torch.rnn_tanh_cell`.

    Examples
    --------
    >>> loom.rnn_tanh_cell(loom.ones(2, 3), loom.zeros(2, 4), loom.zeros(4, 3), loom.zeros(4, 4)).shape
    loom.Size([2, 4])
    """
    from loom.nn.modules.rnn import _rnn_step
    return _rnn_step(_cell_proj("rnn_tanh_cell", input, w_ih, b_ih), hx, w_hh, b_hh, False)[0]


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None) -> Tensor:
    """One ReLU RNN step, as `torch.rnn_relu_cell`.

    Examples
    --------
    >>> loom.rnn_relu_cell(loom.ones(3), loom.zeros(4), loom.ones(4, 3), loom.zeros(4, 4)).tolist()
    [3.0, 3.0, 3.0, 3.0]
    """
    from loom.nn.modules.rnn import _rnn_step
    return _rnn_step(_cell_proj("rnn_relu_cell", input, w_ih, b_ih), hx, w_hh, b_hh, True)[0]


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step (gates i, f, g, o), as `torch.lstm_cell`; `hx` is `(h, c)`, returns `(h', c')`.

    Examples
    --------
    >>> h, c = loom.lstm_cell(loom.ones(2, 3), (loom.zeros(2, 4), loom.zeros(2, 4)), loom.zeros(16, 3),
    ...                       loom.zeros(16, 4))
    >>> h.shape, c.shape
    (loom.Size([2, 4]), loom.Size([2, 4]))
    """
    from loom.nn.modules.rnn import _lstm_step
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise LoomValueError("loom.lstm_cell: hx must be a pair (h, c)")
    return _lstm_step(_cell_proj("lstm_cell", input, w_ih, b_ih), tuple(hx), w_hh, b_hh, None)[1]


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None) -> Tensor:
    """One GRU step (gates r, z, n), as `torch.gru_cell`.

    Examples
    --------
    >>> loom.gru_cell(loom.ones(2, 3), loom.zeros(2, 4), loom.zeros(12, 3), loom.zeros(12, 4)).shape
    loom.Size([2, 4])
    """
    from loom.nn.modules.rnn import _gru_step
    return _gru_step(_cell_proj("gru_cell", input, w_ih, b_ih), hx, w_hh, b_hh)[0]


# ---------------------------------------------------------------- incomplete gamma

_SERIES_TERMS = 160
_CF_DEPTH = 40


def _igamma_pq(a: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """P(a, x) and Q(a, x) in float64 from loom ops, where no C compiler builds the op: the power series where
    x < a + 1, Legendre's continued fraction elsewhere.

    The series' terms are summed at once along an extra dim; the continued fraction runs a fixed
    depth from the bottom up. Both are a small graph of plain ops, accurate to float64 rounding for
    `a` up to about 300 and every x (larger `a` with x close to `a` loses digits).
    """
    from loom.functional.compat import lgamma
    ok = (a > 0) & (x > 0) & _math.isfinite(x)
    sa = _math.where(ok, a, 1.0)
    sx = _math.where(ok, x, 1.0)
    series = sx < sa + 1
    logpre = sa * sx.log() - sx - lgamma(sa)
    # Series: P = x^a e^-x / Gamma(a) * sum_n x^n / (a (a+1) ... (a+n)), each term taken in logs.
    xs = _math.where(series, sx, sa + 1).unsqueeze(-1)
    n = arange(1, _SERIES_TERMS, dtype=dt.float64)
    terms = (n * xs.log() - (sa.unsqueeze(-1) + n).log().cumsum(-1)).exp()
    p_series = (logpre.exp() * (1.0 + terms.sum(-1)) / sa).clamp(max=1.0)
    # Continued fraction for Q, evaluated from the bottom up.
    xc = _math.where(series, sa + 1, sx)
    base = xc + 1 - sa
    t = zeros(tuple(xc.shape), dtype=dt.float64)
    for k in range(_CF_DEPTH, 0, -1):
        t = (k * (k - sa)) / (base + 2 * k - t)
    q_cf = (logpre.exp() / (base - t)).clamp(min=0.0, max=1.0)
    p = _math.where(series, p_series, 1.0 - q_cf)
    q = _math.where(series, 1.0 - p_series, q_cf)
    # Edges, as PyTorch: x = 0 -> P = 0; a = 0 (x > 0) or x = inf -> P = 1; negative or (0, 0) -> nan.
    nan = (a < 0) | (x < 0) | ((a == 0) & (x == 0)) | _math.isnan(a) | _math.isnan(x)
    one = ((a == 0) & (x > 0)) | (_math.isinf(x) & (x > 0) & (a > 0))
    zero = (x == 0) & (a > 0)
    p = _math.where(one, 1.0, _math.where(zero, 0.0, p))
    q = _math.where(one, 0.0, _math.where(zero, 1.0, q))
    return _math.where(nan, math.nan, p), _math.where(nan, math.nan, q)


def _gamma_density(a: Tensor, x: Tensor) -> Tensor:
    """d/dx P(a, x) = x^(a-1) e^-x / Gamma(a)."""
    from loom.functional.compat import lgamma
    return ((a - 1) * x.log() - x - lgamma(a)).exp()


_IGAMMA_C = r"""
static double loom_igamma_p_series(double a, double x, double logpre) {
    double ap = a, term = 1.0 / a, sum = term;
    for (int n = 0; n < 100000; n++) {
        ap += 1.0;
        term *= x / ap;
        sum += term;
        if (fabs(term) < fabs(sum) * 1e-17) break;
    }
    double p = exp(logpre) * sum;
    return p > 1.0 ? 1.0 : p;
}

static double loom_igamma_q_cf(double a, double x, double logpre) {
    const double tiny = 1e-300;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-16) break;
    }
    double q = exp(logpre) * h;
    return q < 0.0 ? 0.0 : (q > 1.0 ? 1.0 : q);
}

/* P(a, x) (upper = 0) or Q(a, x) (upper = 1), with PyTorch's values at the edges. */
static double loom_igamma_one(double a, double x, int upper) {
    if (isnan(a) || isnan(x) || a < 0 || x < 0 || (a == 0 && x == 0)) return NAN;
    if (a == 0 || isinf(x)) return upper ? 0.0 : 1.0;
    if (x == 0 || isinf(a)) return upper ? 1.0 : 0.0;
    double logpre = a * log(x) - x - lgamma(a);
    if (x < a + 1.0) {
        double p = loom_igamma_p_series(a, x, logpre);
        return upper ? 1.0 - p : p;
    }
    double q = loom_igamma_q_cf(a, x, logpre);
    return upper ? q : 1.0 - q;
}

int loom_igamma(const loom_tensor *in, int64_t n_in, loom_tensor *out, const double *attrs, int64_t n_attrs,
                int64_t nthreads) {
    const double *a = in[0].data, *x = in[1].data;
    double *y = out->data;
    int upper = attrs[0] != 0.0;
    int64_t n = loom_numel(out);
    #pragma omp parallel for num_threads(nthreads) if (n > 4096)
    for (int64_t i = 0; i < n; i++) y[i] = loom_igamma_one(a[i], x[i], upper);
    return 0;
}
"""
_igamma_op: list = []


def _igamma_kernel():
    """The compiled incomplete-gamma op (built on first use, cached on disk), or None without a C compiler."""
    if not _igamma_op:
        from loom import ops
        try:
            _igamma_op.append(ops.get("loom_igamma"))
        except LoomError:
            try:
                _igamma_op.append(ops.custom_op("loom_igamma", attrs=("upper",), cpu_source=_IGAMMA_C))
            except LoomError:
                _igamma_op.append(None)
    return _igamma_op[0]


class _IGamma(Function):
    @staticmethod
    def forward(ctx, a, x, upper):
        from loom.tensor import broadcast_shapes
        ctx.save_for_backward(a, x)
        ctx.upper = upper
        d = dt.promote_pair(a.dtype, x.dtype)
        shape = broadcast_shapes(tuple(a.shape), tuple(x.shape))
        a64, x64 = (v.to(dt.float64).expand(*shape).contiguous() for v in (a, x))
        kernel = _igamma_kernel()
        if kernel is not None:
            return kernel(a64, x64, upper=float(upper)).to(d)
        p, q = _igamma_pq(a64, x64)  # No C compiler: the same values from loom's own ops.
        return (q if upper else p).to(d)

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            raise AutogradError(f"loom.{'igammac' if ctx.upper else 'igamma'}: the derivative with respect to "
                                "input (a) is not implemented, as in PyTorch; differentiate with respect to other")
        dx = _gamma_density(a.to(g.dtype), x.to(g.dtype)) * g
        return None, (-dx if ctx.upper else dx), None


def _igamma_args(op: str, input, other) -> tuple[Tensor, Tensor]:
    a, x = _t(input), _t(other)
    for v, name in ((a, "input"), (x, "other")):
        if not v.dtype.is_floating_point:
            raise DTypeError(f"loom.{op}: expected floating point tensors, got {name} of dtype {v.dtype.name}")
    return a, x


def igamma(input, other) -> Tensor:
    """The regularised lower incomplete gamma function P(input, other), as `torch.igamma`.

    P(a, x) = 1/Gamma(a) * integral_0^x t^(a-1) e^-t dt; differentiable in `other` (x).

    Examples
    --------
    >>> [round(v, 6) for v in loom.igamma(loom.tensor([1.0, 2.0]), loom.tensor([1.0, 3.0])).tolist()]
    [0.632121, 0.800852]
    """
    a, x = _igamma_args("igamma", input, other)
    return _IGamma.apply(a, x, False)


def igammac(input, other) -> Tensor:
    """The regularised upper incomplete gamma function Q(input, other) = 1 - P, as `torch.igammac`.

    Examples
    --------
    >>> [round(v, 6) for v in loom.igammac(loom.tensor([1.0, 2.0]), loom.tensor([1.0, 3.0])).tolist()]
    [0.367879, 0.199148]
    """
    a, x = _igamma_args("igammac", input, other)
    return _IGamma.apply(a, x, True)


# ---------------------------------------------------------------- nextafter

# (significand bits, smallest subnormal, largest finite) per float dtype.
_FLOAT_BITS = {"float16": (11, 2.0 ** -24, 65504.0), "bfloat16": (8, 2.0 ** -133, 3.3895313892515355e38),
               "float32": (24, 2.0 ** -149, 3.4028234663852886e38), "float64": (53, 5e-324, 1.7976931348623157e308)}


def nextafter(input, other) -> Tensor:
    """The next representable value after `input` towards `other`, elementwise, as `torch.nextafter`.

    Examples
    --------
    >>> x = loom.nextafter(loom.tensor([1.0], dtype=loom.float64), loom.tensor([2.0], dtype=loom.float64))
    >>> x.item() - 1.0 == 2.0 ** -52
    True
    """
    from loom.functional.compat import frexp
    x, y = _t(input), _t(other)
    if x.dtype is not y.dtype or not x.dtype.is_floating_point:
        raise DTypeError(f"loom.nextafter: expected two floating point tensors of the same dtype, got "
                         f"{x.dtype.name} and {y.dtype.name}")
    p, tiny, big = _FLOAT_BITS[x.dtype.name]
    xf, yf = x.detach().to(dt.float64), y.detach().to(dt.float64)
    m, e = frexp(xf)
    e = e.to(dt.float64)
    toward = (yf - xf).sign()
    away = toward * xf.sign() > 0
    step = _math.pow(2.0, e - p)
    step = _math.where(away | (m.abs() != 0.5), step, step * 0.5).clamp(min=tiny)
    out = xf + toward * step
    out = _math.where(xf == 0, toward * tiny, out)
    out = _math.where(_math.isinf(xf) & (toward != 0), xf.sign() * big, out)
    out = _math.where(xf == yf, yf, out)
    out = _math.where(_math.isnan(xf) | _math.isnan(yf), math.nan, out)
    return out.to(x.dtype)


# ---------------------------------------------------------------- gradient, histogramdd

def _edge_slices(f: Tensor, d: int):
    return lambda a, b: f.narrow(d, a, b - a)


def _gradient_1d(f: Tensor, d: int, h, edge_order: int) -> Tensor:
    from loom.functional.shape import cat
    n = f.shape[d]
    s = _edge_slices(f, d)
    if not isinstance(h, Tensor):
        inner = (s(2, n) - s(0, n - 2)) / (2.0 * h)
        if edge_order == 1:
            first, last = (s(1, 2) - s(0, 1)) / h, (s(n - 1, n) - s(n - 2, n - 1)) / h
        else:
            first = (s(0, 1) * -1.5 + s(1, 2) * 2.0 - s(2, 3) * 0.5) / h
            last = (s(n - 3, n - 2) * 0.5 - s(n - 2, n - 1) * 2.0 + s(n - 1, n) * 1.5) / h
        return cat([first, inner, last], d)
    shape = [1] * f.ndim

    def along(v: Tensor) -> Tensor:
        shape[d] = v.shape[0]
        return v.reshape(shape)
    dx = h[1:] - h[:-1]
    hd, hs = dx[:-1], dx[1:]
    a = along(-hs / (hd * (hd + hs)))
    b = along((hs - hd) / (hd * hs))
    c = along(hd / (hs * (hd + hs)))
    inner = a * s(0, n - 2) + b * s(1, n - 1) + c * s(2, n)
    if edge_order == 1:
        first = (s(1, 2) - s(0, 1)) / along(dx[:1])
        last = (s(n - 1, n) - s(n - 2, n - 1)) / along(dx[-1:])
    else:
        d1, d2 = dx[:1], dx[1:2]
        first = (along(-(2 * d1 + d2) / (d1 * (d1 + d2))) * s(0, 1) + along((d1 + d2) / (d1 * d2)) * s(1, 2)
                 + along(-d1 / (d2 * (d1 + d2))) * s(2, 3))
        d1, d2 = dx[-2:-1], dx[-1:]
        last = (along(d2 / (d1 * (d1 + d2))) * s(n - 3, n - 2) + along(-(d2 + d1) / (d1 * d2)) * s(n - 2, n - 1)
                + along((2 * d2 + d1) / (d2 * (d1 + d2))) * s(n - 1, n))
    return cat([first, inner, last], d)


def gradient(input, *, spacing=1, dim=None, edge_order: int = 1) -> tuple[Tensor, ...]:
    """Derivative estimates of `input` along each of `dim` by central differences, as `torch.gradient`.

    Parameters
    ----------
    input : Tensor
    spacing : number, sequence of numbers or sequence of 1-d tensors
        The sample distance (one for all dims, or one per dim), or each dim's sample coordinates.
    dim : int or sequence of ints, optional
        The dims to differentiate along (default all).
    edge_order : {1, 2}
        The accuracy order of the one-sided differences at the boundaries.

    Examples
    --------
    >>> [g.tolist() for g in loom.gradient(loom.tensor([1.0, 4.0, 9.0, 16.0]))]
    [[3.0, 4.0, 6.0, 7.0]]
    >>> [g.tolist() for g in loom.gradient(loom.tensor([1.0, 4.0, 9.0]), spacing=(loom.tensor([0.0, 1.0, 3.0]),))]
    [[3.0, 2.8333332538604736, 2.5]]
    """
    x = _t(input)
    if edge_order not in (1, 2):
        raise LoomValueError(f"loom.gradient: edge_order must be 1 or 2, got {edge_order!r}")
    if dim is None:
        dims = list(range(x.ndim))
    else:
        dims = [normalize_dim(d, x.ndim, "gradient") for d in ((dim,) if isinstance(dim, int) else dim)]
    if isinstance(spacing, (list, tuple)):
        if len(spacing) != len(dims):
            raise LoomValueError(f"loom.gradient: expected spacing to be unspecified, a scalar or a list of "
                                 f"length {len(dims)} (one per dim), got a list of length {len(spacing)}")
        hs = list(spacing)
    elif isinstance(spacing, Tensor):
        raise LoomTypeError("loom.gradient: give coordinates as a tuple of 1-d tensors (one per dim), not one tensor")
    else:
        hs = [spacing] * len(dims)
    if not x.dtype.is_floating_point:
        x = x.to(dt.get_default_dtype())
    out = []
    for d, h in zip(dims, hs):
        n = x.shape[d]
        if n < edge_order + 1:
            raise LoomValueError(f"loom.gradient: each dim differentiated needs at least edge_order + 1 = "
                                 f"{edge_order + 1} samples; dim {d} of {fmt_shape(x.shape)} has {n}")
        if isinstance(h, Tensor):
            if h.ndim != 1 or h.shape[0] != n:
                raise ShapeError(f"loom.gradient: the coordinates of dim {d} must be a 1-d tensor of {n} values, "
                                 f"got {fmt_shape(h.shape)}")
            h = h.to(x.dtype)
        elif isinstance(h, numbers.Number):
            h = float(h)
        else:
            raise LoomTypeError(f"loom.gradient: spacing entries must be numbers or 1-d tensors, got "
                                f"{type(h).__name__}")
        out.append(_gradient_1d(x, d, h, edge_order))
    return tuple(out)


def histogramdd(input, bins=10, *, range=None, weight=None, density: bool = False):  # noqa: A002
    """A D-dimensional histogram of the points in the last dim of `input`, as `torch.histogramdd`.

    Returns `(hist, bin_edges)`: `hist` has one dim per coordinate; `bin_edges` is a tuple of 1-d
    tensors. `bins` is an int (for every dim), a sequence of ints, or a sequence of 1-d edge
    tensors; `range` is `[min_0, max_0, min_1, max_1, ...]` (default: each coordinate's extent).

    Examples
    --------
    >>> h, edges = loom.histogramdd(loom.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]]), bins=2)
    >>> h.tolist(), [e.tolist() for e in edges]
    ([[1.0, 0.0], [1.0, 1.0]], [[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]])
    """
    from loom.functional.sort import searchsorted
    x = _t(input)
    if not x.dtype.is_floating_point or x.ndim < 1:
        raise DTypeError(f"loom.histogramdd: expected a floating point input of shape (..., D), got "
                         f"{x.dtype.name}{fmt_shape(x.shape)}")
    D = x.shape[-1]
    pts = x.detach().reshape(-1, D)
    if isinstance(bins, int):
        bins = [bins] * D
    bins = list(bins)
    if len(bins) != D:
        raise LoomValueError(f"loom.histogramdd: expected {D} bin specifications (one per coordinate), got "
                             f"{len(bins)}")
    if range is not None and len(range) != 2 * D:
        raise LoomValueError(f"loom.histogramdd: range must hold {2 * D} values (min and max per coordinate), "
                             f"got {len(range)}")
    edges, idx, ok = [], [], None
    for k, b in enumerate(bins):
        col = pts[:, k]
        if isinstance(b, Tensor):
            e = b.to(x.dtype)
        else:
            if not isinstance(b, int) or b < 1:
                raise LoomValueError(f"loom.histogramdd: bin counts must be positive ints, got {b!r}")
            if range is not None:
                lo, hi = float(range[2 * k]), float(range[2 * k + 1])
            else:
                lo, hi = (float(col.min()), float(col.max())) if col.numel() else (0.0, 0.0)
            if lo > hi:
                raise LoomValueError(f"loom.histogramdd: range of coordinate {k} has min {lo} > max {hi}")
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            e = (arange(b + 1, dtype=dt.float64) * ((hi - lo) / b) + lo).to(x.dtype)
        edges.append(e)
        n = e.shape[0] - 1
        i = searchsorted(e, col.contiguous(), right=True) - 1
        i = _math.where(col == e[-1], n - 1, i)  # The last bin is closed on the right.
        inside = (i >= 0) & (i < n)
        ok = inside if ok is None else ok & inside
        idx.append(i.clamp(0, max(n - 1, 0)))
    sizes = [e.shape[0] - 1 for e in edges]
    flat = zeros(pts.shape[0], dtype=dt.int64)
    for i, n in zip(idx, sizes):
        flat = flat * n + i
    w = weight.detach().reshape(-1).to(x.dtype) if weight is not None else full((pts.shape[0],), 1.0,
                                                                                dtype=x.dtype)
    w = _math.where(ok, w, 0.0)
    total = int(np.prod(sizes))
    hist = zeros(total, dtype=x.dtype).scatter_add(0, flat, w).reshape(sizes)
    if density:
        vol = None
        for k, e in enumerate(edges):
            shape = [1] * D
            shape[k] = sizes[k]
            width = (e[1:] - e[:-1]).reshape(shape)
            vol = width if vol is None else vol * width
        hist = hist / (hist.sum() * vol)
    return hist, tuple(edges)


# ---------------------------------------------------------------- index_reduce, segment_reduce

def index_reduce(input, dim: int, index, source, reduce: str, *, include_self: bool = True) -> Tensor:
    """Reduce the slices of `source` into `input` at `index` along `dim` ("prod", "mean", "amax", "amin").

    As `torch.index_reduce`: slice `k` of `source` along `dim` goes to slice `index[k]` of `input`.

    Examples
    --------
    >>> x = loom.ones(3, 2)
    >>> x.index_reduce(0, loom.tensor([0, 2, 0]), loom.tensor([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]), "prod").tolist()
    [[12.0, 21.0], [1.0, 1.0], [4.0, 5.0]]
    """
    from loom.functional.indexing import scatter_reduce
    x, idx, src = _t(input), _t(index), _t(source)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise LoomValueError(f"loom.index_reduce: reduce must be 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
    d = normalize_dim(dim, max(x.ndim, 1), "index_reduce")
    if idx.ndim > 1 or idx.dtype.category != 1:
        raise DTypeError(f"loom.index_reduce: index must be a 1-d integer tensor, got {idx.dtype.name}"
                         f"{fmt_shape(idx.shape)}")
    want = list(x.shape)
    if x.ndim:
        want[d] = idx.numel()
    if list(src.shape) != want:
        raise ShapeError(f"loom.index_reduce: source must have shape {want} (input's with dim {d} of "
                         f"len(index)), got {fmt_shape(src.shape)}")
    if x.ndim == 0:
        return scatter_reduce(x, 0, idx.reshape(()), src, reduce, include_self=include_self)
    shape = [1] * x.ndim
    shape[d] = idx.numel()
    full_idx = idx.reshape(shape).expand(*src.shape)
    return scatter_reduce(x, d, full_idx, src.to(x.dtype), reduce, include_self=include_self)


_SEGMENT_IDENTITY = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf, "mean": math.nan}


def segment_reduce(data, reduce: str, *, lengths=None, indices=None, offsets=None, axis: int = 0,
                   unsafe: bool = False, initial=None) -> Tensor:
    """Reduce consecutive segments of `data` along `axis`, as `torch.segment_reduce`.

    `lengths` (or `offsets`, the segment boundaries) gives the segments; `reduce` is "sum", "mean",
    "max", "min" or "prod". An empty segment gives `initial` if given, else the reduction's identity
    (nan for mean); a non-empty one includes `initial` in its reduction.

    Examples
    --------
    >>> loom.segment_reduce(loom.tensor([1.0, 2.0, 3.0, 4.0]), "sum", lengths=loom.tensor([1, 0, 3])).tolist()
    [1.0, 0.0, 9.0]
    """
    from loom.functional.indexing import scatter_reduce
    from loom.functional.reduce import cumsum
    from loom.functional.sort import searchsorted
    x = _t(data)
    if reduce not in _SEGMENT_IDENTITY:
        raise LoomValueError(f"loom.segment_reduce: reduce must be 'sum', 'mean', 'max', 'min' or 'prod', got "
                             f"{reduce!r}")
    if indices is not None:
        raise LoomValueError("loom.segment_reduce: indices are not supported (as in PyTorch); pass lengths or offsets")
    if (lengths is None) == (offsets is None):
        raise LoomValueError("loom.segment_reduce: pass exactly one of lengths and offsets")
    if offsets is not None:
        off = _t(offsets)
        lengths = off[..., 1:] - off[..., :-1]
    lens = _t(lengths)
    d = normalize_dim(axis, x.ndim, "segment_reduce")
    if lens.dtype.category != 1 or lens.ndim != d + 1 or tuple(lens.shape[:-1]) != tuple(x.shape[:d]):
        raise ShapeError(f"loom.segment_reduce: lengths (or offsets) must be an integer tensor of shape "
                         f"data.shape[:axis] + (segments,) = {list(x.shape[:d])} + [S] (axis must be its last dim), "
                         f"got {lens.dtype.name}{fmt_shape(lens.shape)} for axis {d}")
    n, s = x.shape[d], lens.shape[-1]
    ends = cumsum(lens.to(dt.int64), -1)
    if not unsafe and s and (bool((ends[..., -1] != n).any()) or bool((lens < 0).any())):
        raise LoomValueError(f"loom.segment_reduce: lengths must be non-negative and sum to the size of axis "
                             f"{d} ({n}) for every row")
    positions = arange(n, dtype=dt.int64).expand(*x.shape[:d], n).contiguous()
    seg = searchsorted(ends.contiguous(), positions, right=True)
    idx = seg.reshape(list(seg.shape) + [1] * (x.ndim - d - 1)).expand(*x.shape)
    out_shape = list(x.shape)
    out_shape[d] = s
    op = {"max": "amax", "min": "amin"}.get(reduce, reduce)
    fill = _SEGMENT_IDENTITY[reduce] if initial is None else float(initial)
    base = full(tuple(out_shape), fill, dtype=x.dtype)
    out = scatter_reduce(base, d, idx, x, op, include_self=initial is not None and reduce != "mean")
    if initial is not None and reduce == "mean":
        count = lens.to(x.dtype).reshape(list(lens.shape) + [1] * (x.ndim - d - 1))
        out = _math.where(count > 0, out + float(initial) / count.clamp(min=1), float(initial))  # As PyTorch.
    return out


# ---------------------------------------------------------------- sampling

def _rate_input(op: str, x) -> Tensor:
    t = _t(x)
    if not t.dtype.is_floating_point:
        raise DTypeError(f"loom.{op}: expected a floating point tensor, got {t.dtype.name}{fmt_shape(t.shape)}")
    return t.detach()


def _inverse_cdf(log_pmf: Tensor, u: Tensor) -> Tensor:
    """The smallest k whose cumulative probability exceeds u (k along the last dim of `log_pmf`)."""
    cdf = log_pmf.exp().cumsum(-1)
    return (cdf <= u.unsqueeze(-1)).to(dt.int64).sum(-1)


def poisson(input, generator=None) -> Tensor:
    """Samples from Poisson distributions with the rates in `input`, as `torch.poisson`.

    Exact inversion of each rate's CDF by one uniform draw (loom's counter-based random numbers),
    so `loom.manual_seed` reproduces it; the number of terms follows the largest rate, which is
    read from the data.

    Examples
    --------
    >>> _ = loom.manual_seed(0)
    >>> s = loom.poisson(loom.full((20000,), 3.0))
    >>> abs(s.mean().item() - 3.0) < 0.1, s.dtype
    (True, loom.float32)
    """
    from loom.functional.compat import lgamma
    lam = _rate_input("poisson", input)
    if lam.numel() == 0:
        return lam.clone()
    lam64 = lam.to(dt.float64)
    top = float(lam64.max())
    if not math.isfinite(top) or float(lam64.min()) < 0:
        raise LoomValueError(f"loom.poisson: rates must be finite and non-negative, got values in "
                             f"[{float(lam64.min())}, {top}]")
    kmax = int(math.ceil(top + 12 * math.sqrt(top) + 16))
    k = arange(kmax, dtype=dt.float64)
    safe = lam64.clamp(min=1e-300).unsqueeze(-1)
    log_pmf = k * safe.log() - safe - lgamma(k + 1)
    log_pmf = _math.where(lam64.unsqueeze(-1) > 0, log_pmf, _math.where(k == 0, 0.0, -math.inf))
    u = _rand_node(tuple(lam.shape), dt.float64, generator)
    return _inverse_cdf(log_pmf, u).to(lam.dtype)


def binomial(count, prob, generator=None) -> Tensor:
    """Samples from binomial distributions with `count` trials of success probability `prob`, as `torch.binomial`.

    Exact inversion of each CDF by one uniform draw; the number of terms follows the largest count,
    which is read from the data.

    Examples
    --------
    >>> _ = loom.manual_seed(0)
    >>> s = loom.binomial(loom.full((20000,), 10.0), loom.full((20000,), 0.3))
    >>> abs(s.mean().item() - 3.0) < 0.1
    True
    """
    from loom.functional.compat import lgamma
    from loom.tensor import broadcast_shapes
    n, p = _rate_input("binomial", count), _rate_input("binomial", prob)
    if n.dtype is not p.dtype:
        raise DTypeError(f"loom.binomial: count and prob must have the same dtype, got {n.dtype.name} and "
                         f"{p.dtype.name}")
    shape = broadcast_shapes(tuple(n.shape), tuple(p.shape))
    if int(np.prod(shape)) == 0:
        return zeros(shape, dtype=n.dtype)
    n64, p64 = n.to(dt.float64).expand(*shape), p.to(dt.float64).expand(*shape)
    if float(n64.min()) < 0 or float(p64.min()) < 0 or float(p64.max()) > 1:
        raise LoomValueError("loom.binomial: expected count >= 0 and 0 <= prob <= 1")
    kmax = int(float(n64.max())) + 1
    k = arange(kmax, dtype=dt.float64)
    nn, pp = n64.floor().unsqueeze(-1), p64.unsqueeze(-1)
    sp, sq = pp.clamp(min=1e-300), (1 - pp).clamp(min=1e-300)
    log_pmf = lgamma(nn + 1) - lgamma(k + 1) - lgamma((nn - k).clamp(min=0) + 1) \
        + _math.where(k == 0, 0.0, k * sp.log()) + _math.where(k == nn, 0.0, (nn - k) * sq.log())
    log_pmf = _math.where(k > nn, -math.inf, log_pmf)
    log_pmf = _math.where(pp == 0, _math.where(k == 0, 0.0, -math.inf), log_pmf)
    log_pmf = _math.where(pp == 1, _math.where(k == nn, 0.0, -math.inf), log_pmf)
    u = _rand_node(tuple(shape), dt.float64, generator)
    return _inverse_cdf(log_pmf, u).to(n.dtype)


# ---------------------------------------------------------------- thin wrappers under dispatcher names

def convolution(input, weight, bias, stride, padding, dilation, transposed: bool, output_padding,
                groups: int) -> Tensor:
    """N-d convolution or transposed convolution by the rank of `weight`, as `torch.convolution`.

    Examples
    --------
    >>> loom.convolution(loom.ones(1, 1, 4), loom.ones(1, 1, 2), None, [1], [0], [1], False, [0], 1).tolist()
    [[[2.0, 2.0, 2.0]]]
    """
    from loom.functional import conv
    nsp = weight.ndim - 2
    if nsp not in (1, 2, 3):
        raise ShapeError(f"loom.convolution: expected a 3-d, 4-d or 5-d weight, got {fmt_shape(weight.shape)}")
    if transposed:
        fn = getattr(conv, f"conv_transpose{nsp}d")
        return fn(input, weight, bias, tuple(stride), tuple(padding), tuple(output_padding), groups,
                  tuple(dilation))
    return getattr(conv, f"conv{nsp}d")(input, weight, bias, tuple(stride), tuple(padding), tuple(dilation),
                                        groups)


_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


def grid_sampler(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool) -> Tensor:
    """`grid_sample` with PyTorch's integer mode codes (0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros,
    1 border, 2 reflection), as `torch.grid_sampler`.

    Examples
    --------
    >>> x = loom.arange(4, dtype=loom.float32).reshape(1, 1, 2, 2)
    >>> loom.grid_sampler(x, loom.zeros(1, 1, 1, 2), 0, 0, True).tolist()
    [[[[1.5]]]]
    """
    from loom.functional.sampling import grid_sample
    if interpolation_mode not in _GRID_MODES or padding_mode not in _GRID_PADDINGS:
        raise LoomValueError(f"loom.grid_sampler: interpolation_mode must be 0, 1 or 2 and padding_mode 0, 1 or 2; "
                             f"got {interpolation_mode!r} and {padding_mode!r}")
    return grid_sample(input, grid, _GRID_MODES[interpolation_mode], _GRID_PADDINGS[padding_mode], align_corners)


def grid_sampler_2d(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool) -> Tensor:
    """`grid_sampler` for 4-d (N, C, H, W) inputs, as `torch.grid_sampler_2d`.

    Examples
    --------
    >>> loom.grid_sampler_2d(loom.ones(1, 2, 3, 3), loom.zeros(1, 2, 2, 2), 1, 1, False).shape
    loom.Size([1, 2, 2, 2])
    """
    if _t(input).ndim != 4:
        raise ShapeError(f"loom.grid_sampler_2d: expected a 4-d input, got {fmt_shape(input.shape)}")
    return grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)


def grid_sampler_3d(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool) -> Tensor:
    """`grid_sampler` for 5-d (N, C, D, H, W) inputs, as `torch.grid_sampler_3d`.

    Examples
    --------
    >>> loom.grid_sampler_3d(loom.ones(1, 1, 2, 2, 2), loom.zeros(1, 1, 1, 1, 3), 0, 0, False).tolist()
    [[[[[1.0]]]]]
    """
    if _t(input).ndim != 5:
        raise ShapeError(f"loom.grid_sampler_3d: expected a 5-d input, got {fmt_shape(input.shape)}")
    return grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)


def affine_grid_generator(theta, size, align_corners: bool) -> Tensor:
    """The sampling grid of affine maps `theta`, as `torch.affine_grid_generator` (`affine_grid`).

    Examples
    --------
    >>> loom.affine_grid_generator(loom.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]), [1, 1, 2, 3], False).shape
    loom.Size([1, 2, 3, 2])
    """
    from loom.functional.sampling import affine_grid
    return affine_grid(theta, size, align_corners)


def feature_dropout(input, p: float, train: bool) -> Tensor:
    """Zero whole feature maps (dim 1 slices) of each sample with probability `p`, as `torch.feature_dropout`.

    Examples
    --------
    >>> loom.feature_dropout(loom.ones(2, 3, 4), 0.5, False).shape
    loom.Size([2, 3, 4])
    """
    from loom.functional.nn import _dropout_impl, _feature_mask
    return _dropout_impl("feature_dropout", input, p, train, False, _feature_mask("feature_dropout", -1, False),
                         False)


def feature_dropout_(input, p: float, train: bool) -> Tensor:
    """In-place `feature_dropout`, as `torch.feature_dropout_`.

    Examples
    --------
    >>> x = loom.ones(2, 3)
    >>> loom.feature_dropout_(x, 0.0, True) is x
    True
    """
    from loom.functional.nn import _dropout_impl, _feature_mask
    x = _dropout_impl("feature_dropout_", input, p, train, True, _feature_mask("feature_dropout_", -1, False),
                      False)
    return input if isinstance(input, Tensor) else x


def embedding_renorm_(input, indices, max_norm: float, norm_type: float) -> Tensor:
    """Rescale in place the rows of `input` named by `indices` whose `norm_type`-norm exceeds `max_norm`.

    As `torch.embedding_renorm_` (what `embedding(max_norm=...)` does first): such a row is
    multiplied by `max_norm / (norm + 1e-7)`; no gradient is recorded.

    Examples
    --------
    >>> w = loom.tensor([[3.0, 4.0], [0.3, 0.4]])
    >>> loom.embedding_renorm_(w, loom.tensor([0, 1]), 1.0, 2.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    w, idx = _t(input), _t(indices)
    if w.ndim != 2:
        raise ShapeError(f"loom.embedding_renorm_: expected a 2-d weight, got {fmt_shape(w.shape)}")
    if idx.dtype.category != 1:
        raise DTypeError(f"loom.embedding_renorm_: indices must be integers, got {idx.dtype.name}")
    with no_grad():
        hit = zeros(w.shape[0], dtype=dt.bool_).index_fill(0, idx.reshape(-1), True)
        norm = w.norm(p=norm_type, dim=1)
        scale = _math.where(hit & (norm > max_norm), max_norm / (norm + 1e-7), 1.0).to(w.dtype)
        w.mul_(scale.unsqueeze(1))
    return w


def norm_except_dim(v, pow: float = 2, dim: int = 0) -> Tensor:  # noqa: A002 - PyTorch's name
    """The `pow`-norm of `v` over every dim but `dim`, kept as size-1 dims (`dim=-1`: the whole tensor).

    What weight normalisation divides by, as `torch.norm_except_dim`.

    Examples
    --------
    >>> loom.norm_except_dim(loom.tensor([[3.0, 0.0], [4.0, 1.0]]), 2, 1).tolist()
    [[5.0, 1.0]]
    """
    x = _t(v)
    if dim == -1:
        return x.norm(p=pow)
    d = normalize_dim(dim, x.ndim, "norm_except_dim")
    others = tuple(k for k in range(x.ndim) if k != d)
    return x.norm(p=pow, dim=others, keepdim=True) if others else x.abs() if pow != 0 else (x != 0).to(x.dtype)


# ---------------------------------------------------------------- synchronised batch norm pieces

def _channel_dims(x: Tensor, op: str) -> tuple[int, ...]:
    if x.ndim < 2:
        raise ShapeError(f"loom.{op}: expected an input of shape (N, C, ...), got {fmt_shape(x.shape)}")
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(v: Tensor, x: Tensor) -> Tensor:
    return v.reshape([1, -1] + [1] * (x.ndim - 2))


def batch_norm_stats(input, eps: float) -> tuple[Tensor, Tensor]:
    """Per-channel mean and inverse standard deviation `1 / sqrt(var + eps)` (biased variance).

    The local step of synchronised batch norm, as `torch.batch_norm_stats`.

    Examples
    --------
    >>> m, invstd = loom.batch_norm_stats(loom.tensor([[1.0], [3.0]]), 0.0)
    >>> m.tolist(), invstd.tolist()
    ([2.0], [1.0])
    """
    x = _t(input)
    dims = _channel_dims(x, "batch_norm_stats")
    mean = x.mean(dims)
    var = ((x - _per_channel(mean, x)) ** 2).mean(dims)
    return mean, (var + eps).rsqrt()


def batch_norm_elemt(input, weight, bias, mean, invstd, eps: float) -> Tensor:
    """`(input - mean) * invstd * weight + bias` per channel, as `torch.batch_norm_elemt`.

    Examples
    --------
    >>> loom.batch_norm_elemt(loom.tensor([[1.0], [3.0]]), None, None, loom.tensor([2.0]), loom.tensor([1.0]),
    ...                       1e-5).tolist()
    [[-1.0], [1.0]]
    """
    x = _t(input)
    _channel_dims(x, "batch_norm_elemt")
    y = (x - _per_channel(mean, x)) * _per_channel(invstd, x)
    if weight is not None:
        y = y * _per_channel(weight, x)
    if bias is not None:
        y = y + _per_channel(bias, x)
    return y


def _update_running(running_mean, running_var, mean: Tensor, var_unbiased: Tensor, momentum: float) -> None:
    with no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype) * momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(var_unbiased.to(running_var.dtype) * momentum)


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum: float,
                                        eps: float, counts) -> tuple[Tensor, Tensor]:
    """Combine per-process `(mean, invstd)` rows (one per process, `counts` samples each) into global ones.

    Updates the running statistics in place (unbiased variance), as
    `torch.batch_norm_gather_stats_with_counts`; returns the global `(mean, invstd)`.

    Examples
    --------
    >>> m, s = loom.batch_norm_gather_stats_with_counts(loom.ones(2, 1), loom.tensor([[0.0], [2.0]]),
    ...                                               loom.tensor([[1.0], [1.0]]), None, None, 0.1, 0.0,
    ...                                               loom.tensor([1.0, 1.0]))
    >>> m.tolist(), s.tolist()
    ([1.0], [0.7071067690849304])
    """
    means, inv, c = _t(mean), _t(invstd), _t(counts).to(_t(mean).dtype).reshape(-1, 1)
    n = c.sum()
    g_mean = (means * c).sum(0) / n
    var_local = 1.0 / (inv * inv) - eps
    g_var = ((var_local + (means - g_mean) ** 2) * c).sum(0) / n
    _update_running(running_mean, running_var, g_mean, g_var * n / (n - 1), momentum)
    return g_mean, (g_var + eps).rsqrt()


def batch_norm_gather_stats(input, mean, invstd, running_mean, running_var, momentum: float, eps: float,
                            count: int) -> tuple[Tensor, Tensor]:
    """`batch_norm_gather_stats_with_counts` with `count` samples on every process.

    Examples
    --------
    >>> m, s = loom.batch_norm_gather_stats(loom.ones(2, 1), loom.tensor([[0.0], [2.0]]),
    ...                                     loom.tensor([[1.0], [1.0]]), None, None, 0.1, 0.0, 4)
    >>> m.tolist(), s.tolist()
    ([1.0], [0.7071067690849304])
    """
    means = _t(mean)
    return batch_norm_gather_stats_with_counts(input, means, invstd, running_mean, running_var, momentum, eps,
                                               full((means.shape[0],), float(count), dtype=means.dtype))


def batch_norm_update_stats(input, running_mean, running_var, momentum: float) -> tuple[Tensor, Tensor]:
    """Per-channel batch mean and biased variance, updating the running statistics in place.

    As `torch.batch_norm_update_stats` (the running variance gets the unbiased estimate).

    Examples
    --------
    >>> rm, rv = loom.zeros(1), loom.ones(1)
    >>> m, v = loom.batch_norm_update_stats(loom.tensor([[1.0], [3.0]]), rm, rv, 0.5)
    >>> m.tolist(), v.tolist(), rm.tolist(), rv.tolist()
    ([2.0], [1.0], [1.0], [1.5])
    """
    x = _t(input)
    dims = _channel_dims(x, "batch_norm_update_stats")
    mean = x.mean(dims)
    var = ((x - _per_channel(mean, x)) ** 2).mean(dims)
    n = x.numel() // x.shape[1]
    _update_running(running_mean, running_var, mean, var * (n / max(n - 1, 1)), momentum)
    return mean, var


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g: bool, weight_g: bool,
                               bias_g: bool):
    """Per-channel sums for the batch-norm backward: `(sum_dy, sum_dy_xmu, grad_weight, grad_bias)`.

    As `torch.batch_norm_backward_reduce`; an output whose flag is False is an empty tensor.

    Examples
    --------
    >>> dy, x = loom.tensor([[1.0], [1.0]]), loom.tensor([[1.0], [3.0]])
    >>> [t.tolist() for t in loom.batch_norm_backward_reduce(dy, x, loom.tensor([2.0]), loom.tensor([1.0]),
    ...                                                     None, True, True, True)]
    [[2.0], [0.0], [0.0], [2.0]]
    """
    dy, x = _t(grad_out), _t(input)
    dims = _channel_dims(x, "batch_norm_backward_reduce")
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (x - _per_channel(mean, x))).sum(dims)
    empty = zeros(0, dtype=x.dtype)
    return (sum_dy if input_g else empty, sum_dy_xmu if input_g else empty,
            sum_dy_xmu * invstd if weight_g else empty, sum_dy if bias_g else empty)


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count) -> Tensor:
    """The input gradient of batch norm from the global sums, as `torch.batch_norm_backward_elemt`.

    `count` holds each process's sample count; the gradient is
    `(dy - sum_dy / N - (x - mean) * invstd^2 * sum_dy_xmu / N) * invstd * weight` with N their total.

    Examples
    --------
    >>> loom.batch_norm_backward_elemt(loom.tensor([[1.0], [1.0]]), loom.tensor([[1.0], [3.0]]),
    ...                                loom.tensor([2.0]), loom.tensor([1.0]), None, loom.tensor([2.0]),
    ...                                loom.tensor([0.0]), loom.tensor([2])).tolist()
    [[0.0], [0.0]]
    """
    dy, x = _t(grad_out), _t(input)
    _channel_dims(x, "batch_norm_backward_elemt")
    n = _t(count).to(x.dtype).sum()
    inv = _per_channel(invstd, x)
    g = dy - _per_channel(sum_dy, x) / n - (x - _per_channel(mean, x)) * inv * inv * _per_channel(sum_dy_xmu, x) / n
    g = g * inv
    return g * _per_channel(weight, x) if weight is not None else g


# ---------------------------------------------------------------- odds and ends

def as_strided_scatter(input, src, size, stride, storage_offset=None) -> Tensor:
    """A copy of `input` with `src` written into its `as_strided(size, stride, storage_offset)` view.

    As `torch.as_strided_scatter`; differentiable in both.

    Examples
    --------
    >>> loom.as_strided_scatter(loom.zeros(4), loom.ones(2), (2,), (2,)).tolist()
    [1.0, 0.0, 1.0, 0.0]
    """
    x, s = _t(input), _t(src)
    out = x.clone()
    view = out.as_strided(size, stride, storage_offset)
    if tuple(view.shape) != tuple(s.shape):
        raise ShapeError(f"loom.as_strided_scatter: src must have the view's shape {fmt_shape(view.shape)}, got "
                         f"{fmt_shape(s.shape)}")
    view.copy_(s)
    return out


def hash_tensor(input, dim=(), *, keepdim: bool = False, mode: int = 0) -> Tensor:
    """The xor of the 64-bit patterns of the elements (over `dim`, default all), as `torch.hash_tensor`.

    Floats are widened to float64 and integers to int64 before their bits are taken; the result is uint64.

    Examples
    --------
    >>> loom.hash_tensor(loom.tensor([1.0, 2.0, 3.0])).item()
    4609434218613702656
    >>> loom.hash_tensor(loom.arange(6).reshape(2, 3), 1).tolist()
    [3, 2]
    """
    x = _t(input)
    if mode != 0:
        raise LoomValueError(f"loom.hash_tensor: only mode=0 (xor reduction) is supported, got mode={mode!r}")
    a = x.detach().numpy(force=True)
    bits = (a.astype(np.float64) if x.dtype.is_floating_point else a.astype(np.int64)).view(np.uint64)
    dims = () if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    axes = tuple(range(x.ndim)) if not dims else tuple(normalize_dim(d, x.ndim, "hash_tensor") for d in dims)
    out = np.bitwise_xor.reduce(bits, axis=axes, keepdims=keepdim) if x.ndim else bits
    return tensor(np.asarray(out, dtype=np.uint64), dtype=dt.uint64)


def empty_quantized(size, qtensor, *, dtype=None, layout=None, device=None, pin_memory=None,
                    memory_format=None) -> Tensor:
    """PyTorch's constructor of an empty quantized tensor shaped like `qtensor`'s quantisation: loom has no
    quantized tensors, so this raises a LoomError saying so.

    Examples
    --------
    >>> loom.empty_quantized([2], loom.ones(2))
    Traceback (most recent call last):
    ...
    loom.errors.LoomError: loom.empty_quantized: loom has no quantized tensors ...
    """
    raise LoomError("loom.empty_quantized: loom has no quantized tensors (no qint8/quint8 dtypes or quantisation "
                    "schemes); quantize with your own scale and zero point into an integer tensor instead")


def _hardshrink(self, lambd: float = 0.5) -> Tensor:
    """`loom.nn.functional.hardshrink(self, lambd)`, as `Tensor.hardshrink`."""
    from loom.functional.activation import hardshrink
    return hardshrink(self, lambd)


def _prelu(self, weight) -> Tensor:
    """`loom.nn.functional.prelu(self, weight)`, as `Tensor.prelu`."""
    from loom.functional.activation import prelu
    return prelu(self, weight)


# ---------------------------------------------------------------- Tensor-only attributes

def _resized(self, shape: tuple, op: str) -> Tensor:
    """This tensor's elements in order, cut or zero-filled to `shape` (PyTorch leaves new elements unset)."""
    from loom.functional.shape import cat
    n = int(np.prod(shape))
    flat = self.detach().reshape(-1)
    if n <= flat.shape[0]:
        flat = flat[:n]
    else:
        flat = cat([flat, zeros(n - flat.shape[0], dtype=self.dtype)])
    return flat.reshape(shape)


def _size_args(op: str, sizes) -> tuple:
    shape = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], int) else tuple(sizes)
    if any(not isinstance(k, (int, np.integer)) or k < 0 for k in shape):
        raise LoomValueError(f"loom.{op}: sizes must be non-negative ints, got {list(shape)}")
    return tuple(int(k) for k in shape)


def _resize_(self, *sizes, memory_format=None) -> Tensor:
    """Give this tensor shape `sizes` in place, keeping its leading elements in order (new ones are zeros).

    As `Tensor.resize_`, which tensors that require grad refuse.

    Examples
    --------
    >>> x = loom.tensor([1.0, 2.0, 3.0])
    >>> x.resize_(2, 2).tolist()
    [[1.0, 2.0], [3.0, 0.0]]
    """
    shape = _size_args("resize_", sizes)
    if self.requires_grad:
        raise AutogradError(f"loom.resize_: cannot resize a tensor that requires grad "
                            f"({self.dtype.name}{fmt_shape(self.shape)}); resize its .detach() or use reshape")
    if tuple(self.shape) != shape:
        self.data = _resized(self, shape, "resize_")
    return self


def _resize_as_(self, the_template, memory_format=None) -> Tensor:
    """`resize_` to the shape of `the_template`, as `Tensor.resize_as_`.

    Examples
    --------
    >>> loom.zeros(4).resize_as_(loom.ones(2, 2)).shape
    loom.Size([2, 2])
    """
    return _resize_(self, *the_template.shape)


def _resize(self, *sizes) -> Tensor:
    """A differentiable reshape to `sizes` of the same element count (PyTorch's deprecated non-in-place resize).

    Examples
    --------
    >>> loom.arange(4.0).resize(2, 2).tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    shape = _size_args("resize", sizes)
    if int(np.prod(shape)) != self.numel():
        raise ShapeError(f"loom.resize: requested resize to {list(shape)} ({int(np.prod(shape))} elements in total) "
                         f"but the tensor has {self.numel()}; the non-in-place resize keeps the element count "
                         "(use resize_ to change it)")
    return self.reshape(shape)


def _resize_as(self, tensor) -> Tensor:
    """`resize` to the shape of `tensor` (same element count), as `Tensor.resize_as`.

    Examples
    --------
    >>> loom.arange(4.0).resize_as(loom.ones(2, 2)).shape
    loom.Size([2, 2])
    """
    return _resize(self, *tensor.shape)


def _as_strided_(self, size, stride, storage_offset=None) -> Tensor:
    """Make this tensor the `as_strided(size, stride, storage_offset)` view of its own storage, in place.

    Examples
    --------
    >>> x = loom.arange(6.0)
    >>> x.as_strided_((2, 2), (1, 2)).tolist()
    [[0.0, 2.0], [1.0, 3.0]]
    """
    if self.requires_grad:
        raise AutogradError(f"loom.as_strided_: not supported on a tensor that requires grad "
                            f"({self.dtype.name}{fmt_shape(self.shape)}); use the as_strided view instead")
    self.data = self.as_strided(size, stride, storage_offset)
    return self


def _map2_(self, x1, x2, callable) -> Tensor:  # noqa: A002
    """Replace each element by `callable(self_el, x1_el, x2_el)` in place (Python, no autograd), as PyTorch's.

    Examples
    --------
    >>> x = loom.tensor([1.0, 2.0])
    >>> x.map2_(loom.tensor([3.0, 4.0]), loom.tensor([5.0, 6.0]), lambda a, b, c: a + b * c).tolist()
    [16.0, 26.0]
    """
    if self.requires_grad:
        raise LoomError("loom.map2_: can't call map2_() on a tensor that requires grad")
    shape = tuple(self.shape)
    b = np.broadcast_to(_t(x1).numpy(force=True), shape)
    c = np.broadcast_to(_t(x2).numpy(force=True), shape)
    a = self.numpy()
    values = np.vectorize(callable, otypes=[a.dtype])(a, b, c) if self.numel() else a
    return self.copy_(tensor(values, dtype=self.dtype))


def _layout(self):
    """`loom.torch.strided`: loom stores every tensor strided."""
    from loom.torch import strided
    return strided


def _name(self) -> None:
    """None: loom tensors carry no name (PyTorch's `Tensor.name` of an unnamed tensor)."""
    return None


def _output_nr(self) -> int:
    """Which output of the op that made this tensor it is (0 for a leaf; loom records one node per output)."""
    ctx = self._ctx
    return int(getattr(getattr(ctx, "prim", None), "index", 0) or 0) if ctx is not None else 0


def _volatile(self) -> bool:
    """False, with PyTorch's warning: `volatile` was removed (use `loom.no_grad()`)."""
    import warnings
    warnings.warn("volatile was removed (Variable.volatile is always False)", UserWarning, stacklevel=2)
    return False


_UNSET = object()


def _get_grad_dtype(self):
    """The dtype `.grad` is cast to when a backward pass accumulates it (default the tensor's; None: any).

    Examples
    --------
    >>> x = loom.ones(2, requires_grad=True)
    >>> x.grad_dtype = loom.float64
    >>> (x * 2).sum().backward()
    >>> x.grad.dtype
    loom.float64
    """
    if not self.is_leaf:
        raise LoomError("loom.grad_dtype: only leaf tensors have a grad_dtype")
    value = self.__dict__.get("_grad_dtype", _UNSET)
    return self.dtype if value is _UNSET else value


def _set_grad_dtype(self, value) -> None:
    if not self.is_leaf:
        raise LoomError("loom.grad_dtype: only leaf tensors have a grad_dtype")
    self.__dict__["_grad_dtype"] = None if value is None else dt.as_dtype(value)


def _register_post_accumulate_grad_hook(self, hook):
    """Call `hook(tensor)` after a backward pass has accumulated this leaf's `.grad`; returns a removable handle.

    As `Tensor.register_post_accumulate_grad_hook` (optimizer steps fused into backward use it).

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> seen = []
    >>> h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    >>> (w * 3).sum().backward()
    >>> seen
    [[3.0, 3.0]]
    >>> h.remove()
    """
    from loom.nn.module import RemovableHandle
    if not self.requires_grad:
        raise AutogradError("loom.register_post_accumulate_grad_hook: cannot register a hook on a tensor that "
                            "does not require grad")
    if not self.is_leaf:
        raise AutogradError("loom.register_post_accumulate_grad_hook: post accumulate grad hooks cannot be "
                            "registered on non-leaf tensors (they have no .grad to accumulate)")
    hooks = self.__dict__.setdefault("_post_accumulate_grad_hooks", {})
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def _to_padded_tensor(self, padding: float, output_size=None) -> Tensor:
    """PyTorch's padding of a nested (jagged) tensor: loom has only strided tensors, so this raises, as PyTorch
    does for a strided one."""
    raise LoomError(f"loom.to_padded_tensor: expects a nested tensor; this is a strided "
                    f"{self.dtype.name}{fmt_shape(self.shape)} tensor (loom has no nested tensors), which needs no "
                    "padding")


def _reinforce(self, reward):
    """Removed from PyTorch (stochastic functions); raises with PyTorch's advice, as `Tensor.reinforce` does."""
    raise LoomError("loom.reinforce: reinforce() was removed; use loom.torch.distributions instead: "
                    "m = Categorical(probs); action = m.sample(); loss = -m.log_prob(action) * reward; "
                    "loss.backward()")


def _index(self, positions, dims):
    """PyTorch's binding of positional dims to first-class `Dim` objects (functorch.dim): loom has no
    first-class dimensions, so this raises."""
    raise LoomError("loom.Tensor.index: binds dims to first-class dimension objects (functorch.dim), which loom "
                    "does not have; index with [] or use einsum-style ops instead")


METHODS = ["igamma", "igammac", "nextafter", "index_reduce", "as_strided_scatter", "hash_tensor"]
# Methods with no top-level function of this module's.
TENSOR_METHODS = {"hardshrink": _hardshrink, "prelu": _prelu, "resize_": _resize_, "resize_as_": _resize_as_,
                  "resize": _resize, "resize_as": _resize_as, "as_strided_": _as_strided_, "map2_": _map2_,
                  "register_post_accumulate_grad_hook": _register_post_accumulate_grad_hook,
                  "to_padded_tensor": _to_padded_tensor, "reinforce": _reinforce, "index": _index,
                  "grad_dtype": property(_get_grad_dtype, _set_grad_dtype)}
PROPERTIES = {"layout": _layout, "name": _name, "output_nr": _output_nr, "volatile": _volatile}
INPLACE = ["igamma", "igammac", "nextafter", "index_reduce"]
NN_FUNCTIONAL: list[str] = []
