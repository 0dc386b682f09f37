"""Docstrings for public functions written without one, kept apart from their code.

The functions live in files that change often (`loom/tensor.py`, `loom/functional/math.py`);
their reference text lives here and is attached when `loom` is imported. A docstring written
in the source wins: `attach` only fills empty ones. `tests/docs/test_docstrings.py` runs every example.
"""

DOCS: dict[str, str] = {}

DOCS["abs"] = r"""Absolute value, elementwise (alias `absolute`).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.abs(loom.tensor([-1.5, 0.0, 2.0])).tolist()
    [1.5, 0.0, 2.0]
    """

DOCS["acos"] = r"""Inverse cosine, elementwise, in radians.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.acos(loom.tensor([1.0, -1.0])).numpy().round(4)
    array([0.    , 3.1416], dtype=float32)
    """

DOCS["asin"] = r"""Inverse sine, elementwise, in radians.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.asin(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([0.    , 1.5708], dtype=float32)
    """

DOCS["atan"] = r"""Inverse tangent, elementwise, in radians.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.atan(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([0.    , 0.7854], dtype=float32)
    """

DOCS["atanh"] = r"""Inverse hyperbolic tangent, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.atanh(loom.tensor([0.0, 0.5])).numpy().round(4)
    array([0.    , 0.5493], dtype=float32)
    """

DOCS["cos"] = r"""Cosine, elementwise (radians).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.cos(loom.tensor([0.0, 3.14159265])).numpy().round(4)
    array([ 1., -1.], dtype=float32)
    """

DOCS["cosh"] = r"""Hyperbolic cosine, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.cosh(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([1.    , 1.5431], dtype=float32)
    """

DOCS["sin"] = r"""Sine, elementwise (radians).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.sin(loom.tensor([0.0, 1.5707964])).numpy().round(4)
    array([0., 1.], dtype=float32)
    """

DOCS["sinh"] = r"""Hyperbolic sine, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.sinh(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([0.    , 1.1752], dtype=float32)
    """

DOCS["tan"] = r"""Tangent, elementwise (radians).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.tan(loom.tensor([0.0, 0.7853982])).numpy().round(4)
    array([0., 1.], dtype=float32)
    """

DOCS["tanh"] = r"""Hyperbolic tangent, elementwise (also the `Tanh` activation).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.tanh(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([0.    , 0.7616], dtype=float32)
    """

DOCS["sinc"] = r"""Normalised sinc, sin(pi x) / (pi x), with sinc(0) = 1.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.sinc(loom.tensor([0.0, 0.5])).numpy().round(4)
    array([1.    , 0.6366], dtype=float32)
    """

DOCS["deg2rad"] = r"""Degrees to radians, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.deg2rad(loom.tensor([180.0, 90.0])).numpy().round(4)
    array([3.1416, 1.5708], dtype=float32)
    """

DOCS["rad2deg"] = r"""Radians to degrees, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.rad2deg(loom.tensor([3.1415927])).numpy().round(3)
    array([180.], dtype=float32)
    """

DOCS["exp"] = r"""e to the power `x`, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.exp(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([1.    , 2.7183], dtype=float32)
    """

DOCS["exp2"] = r"""2 to the power `x`, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.exp2(loom.tensor([0.0, 3.0])).tolist()
    [1.0, 8.0]
    """

DOCS["expm1"] = r"""exp(x) - 1, accurate for small `x`.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.expm1(loom.tensor([0.0, 1e-8], dtype=loom.float64)).tolist()
    [0.0, 1.0000000050000001e-08]
    """

DOCS["log"] = r"""Natural logarithm, elementwise (NaN below 0, -inf at 0).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.log(loom.tensor([1.0, 2.718281828])).numpy().round(4)
    array([0., 1.], dtype=float32)
    """

DOCS["log2"] = r"""Base-2 logarithm, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.log2(loom.tensor([1.0, 8.0])).tolist()
    [0.0, 3.0]
    """

DOCS["log10"] = r"""Base-10 logarithm, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.log10(loom.tensor([1.0, 100.0])).tolist()
    [0.0, 2.0]
    """

DOCS["log1p"] = r"""log(1 + x), accurate for small `x`.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.log1p(loom.tensor([0.0, 1e-8], dtype=loom.float64)).tolist()
    [0.0, 9.999999950000001e-09]
    """

DOCS["sqrt"] = r"""Square root, elementwise (NaN below 0).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.sqrt(loom.tensor([4.0, 9.0])).tolist()
    [2.0, 3.0]
    """

DOCS["rsqrt"] = r"""Reciprocal square root, 1 / sqrt(x).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.rsqrt(loom.tensor([4.0, 16.0])).tolist()
    [0.5, 0.25]
    """

DOCS["reciprocal"] = r"""1 / x, elementwise (integers are promoted to the default float dtype).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.reciprocal(loom.tensor([2.0, 4.0])).tolist()
    [0.5, 0.25]
    """

DOCS["square"] = r"""x * x, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.square(loom.tensor([-3, 2])).tolist()
    [9, 4]
    """

DOCS["erf"] = r"""The error function, elementwise.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.erf(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([0.    , 0.8427], dtype=float32)
    """

DOCS["erfc"] = r"""The complementary error function, 1 - erf(x).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.erfc(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([1.    , 0.1573], dtype=float32)
    """

DOCS["floor"] = r"""Largest integer not above `x`, elementwise (integer tensors pass through).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.floor(loom.tensor([-1.5, 1.5])).tolist()
    [-2.0, 1.0]
    """

DOCS["ceil"] = r"""Smallest integer not below `x`, elementwise (integer tensors pass through).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.ceil(loom.tensor([-1.5, 1.5])).tolist()
    [-1.0, 2.0]
    """

DOCS["trunc"] = r"""`x` rounded toward zero, elementwise (integer tensors pass through).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.trunc(loom.tensor([-1.5, 1.5])).tolist()
    [-1.0, 1.0]
    """

DOCS["frac"] = r"""The fractional part, x - trunc(x).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.frac(loom.tensor([-1.25, 2.5])).tolist()
    [-0.25, 0.5]
    """

DOCS["round"] = r"""Round half to even, elementwise, to `decimals` decimal places.

    Parameters
    ----------
    x : Tensor or number
    decimals : int
        Digits after the point (negative: to tens, hundreds, ...).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.round(loom.tensor([0.5, 1.5, 2.5])).tolist()
    [0.0, 2.0, 2.0]
    >>> loom.round(loom.tensor([1.25, 7.0], dtype=loom.float64), decimals=-1).tolist()
    [0.0, 10.0]
    """

DOCS["sign"] = r"""-1, 0 or 1 by the sign of `x`, elementwise, in `x`'s dtype.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.sign(loom.tensor([-2.0, 0.0, 3.0])).tolist()
    [-1.0, 0.0, 1.0]
    """

DOCS["neg"] = r"""-x, elementwise (alias `negative`).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.neg(loom.tensor([1, -2])).tolist()
    [-1, 2]
    """

DOCS["positive"] = r"""`x` itself (PyTorch's `torch.positive`); an error for bool tensors.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.positive(loom.tensor([1, -2])).tolist()
    [1, -2]
    """

DOCS["bitwise_not"] = r"""Bitwise NOT of an integer or bool tensor (logical NOT for bool).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.bitwise_not(loom.tensor([0, 5])).tolist()
    [-1, -6]
    """

DOCS["logical_not"] = r"""True where `x` is zero (or False).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.logical_not(loom.tensor([0.0, 2.0])).tolist()
    [True, False]
    """

DOCS["isnan"] = r"""True where `x` is NaN.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.isnan(loom.tensor([1.0, float('nan')])).tolist()
    [False, True]
    """

DOCS["isinf"] = r"""True where `x` is +inf or -inf.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.isinf(loom.tensor([1.0, float('inf'), -float('inf')])).tolist()
    [False, True, True]
    """

DOCS["isposinf"] = r"""True where `x` is +inf.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.isposinf(loom.tensor([float('inf'), -float('inf')])).tolist()
    [True, False]
    """

DOCS["isneginf"] = r"""True where `x` is -inf.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.isneginf(loom.tensor([float('inf'), -float('inf')])).tolist()
    [False, True]
    """

DOCS["isfinite"] = r"""True where `x` is neither infinite nor NaN.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.isfinite(loom.tensor([1.0, float('inf'), float('nan')])).tolist()
    [True, False, False]
    """

DOCS["relu"] = r"""max(x, 0), elementwise.

    Parameters
    ----------
    x : Tensor or number
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.relu(loom.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """

DOCS["relu6"] = r"""min(max(x, 0), 6), elementwise.

    Parameters
    ----------
    x : Tensor or number
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.relu6(loom.tensor([-1.0, 3.0, 8.0])).tolist()
    [0.0, 3.0, 6.0]
    """

DOCS["leaky_relu"] = r"""`x` where positive, `negative_slope * x` elsewhere.

    Parameters
    ----------
    x : Tensor or number
    negative_slope : float
        Slope below zero.
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.leaky_relu(loom.tensor([-2.0, 2.0]), 0.1).numpy().round(4)
    array([-0.2,  2. ], dtype=float32)
    """

DOCS["elu"] = r"""`x` where positive, alpha * (exp(x) - 1) elsewhere.

    Parameters
    ----------
    x : Tensor or number
    alpha : float
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.elu(loom.tensor([-1.0, 2.0])).numpy().round(4)
    array([-0.6321,  2.    ], dtype=float32)
    """

DOCS["selu"] = r"""Scaled ELU with the fixed constants of Klambauer et al. (2017).

    Parameters
    ----------
    x : Tensor or number
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.selu(loom.tensor([-1.0, 1.0])).numpy().round(4)
    array([-1.1113,  1.0507], dtype=float32)
    """

DOCS["celu"] = r"""max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).

    Parameters
    ----------
    x : Tensor or number
    alpha : float
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.celu(loom.tensor([-1.0, 2.0]), alpha=2.0).numpy().round(4)
    array([-0.7869,  2.    ], dtype=float32)
    """

DOCS["gelu"] = r"""Gaussian error linear unit, x * Phi(x), exact or with the tanh approximation.

    Parameters
    ----------
    x : Tensor or number
    approximate : str
        `'none'` (exact, with erf) or `'tanh'`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.gelu(loom.tensor([-1.0, 0.0, 1.0])).numpy().round(4)
    array([-0.1587,  0.    ,  0.8413], dtype=float32)
    """

DOCS["silu"] = r"""x * sigmoid(x) (also called swish).

    Parameters
    ----------
    x : Tensor or number
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.silu(loom.tensor([-1.0, 1.0])).numpy().round(4)
    array([-0.2689,  0.7311], dtype=float32)
    """

DOCS["mish"] = r"""x * tanh(softplus(x)).

    Parameters
    ----------
    x : Tensor or number
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.mish(loom.tensor([-1.0, 1.0])).numpy().round(4)
    array([-0.3034,  0.8651], dtype=float32)
    """

DOCS["softplus"] = r"""log(1 + exp(beta * x)) / beta, linear where beta * x exceeds `threshold`.

    Parameters
    ----------
    x : Tensor or number
    beta : float
    threshold : float
        Above it the result is `x`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.softplus(loom.tensor([0.0, 30.0])).numpy().round(4)
    array([ 0.6931, 30.    ], dtype=float32)
    """

DOCS["softsign"] = r"""x / (1 + abs(x)).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.softsign(loom.tensor([-1.0, 3.0])).tolist()
    [-0.5, 0.75]
    """

DOCS["logsigmoid"] = r"""log(sigmoid(x)), computed without overflow.

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.logsigmoid(loom.tensor([0.0, -100.0])).numpy().round(4)
    array([  -0.6931, -100.    ], dtype=float32)
    """

DOCS["hardtanh"] = r"""`x` clipped to [min_val, max_val].

    Parameters
    ----------
    x : Tensor or number
    min_val, max_val : float
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.hardtanh(loom.tensor([-2.0, 0.5, 2.0])).tolist()
    [-1.0, 0.5, 1.0]
    """

DOCS["hardsigmoid"] = r"""Piecewise-linear sigmoid: clip(x / 6 + 1/2, 0, 1).

    Parameters
    ----------
    x : Tensor or number
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.hardsigmoid(loom.tensor([-4.0, 0.0, 4.0])).tolist()
    [0.0, 0.5, 1.0]
    """

DOCS["hardswish"] = r"""x * hardsigmoid(x).

    Parameters
    ----------
    x : Tensor or number
    inplace : bool
        Write the result into `x` (as PyTorch's `inplace=True`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.hardswish(loom.tensor([-4.0, 0.0, 4.0])).tolist()
    [-0.0, 0.0, 4.0]
    """

DOCS["tanhshrink"] = r"""x - tanh(x).

    Parameters
    ----------
    x : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.tanhshrink(loom.tensor([0.0, 1.0])).numpy().round(4)
    array([0.    , 0.2384], dtype=float32)
    """

DOCS["add"] = r"""a + alpha * b, elementwise with broadcasting.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.
    alpha : number
        Multiplies `b`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.add(loom.tensor([1.0, 2.0]), loom.tensor([10.0, 20.0]), alpha=2).tolist()
    [21.0, 42.0]
    """

DOCS["sub"] = r"""a - alpha * b, elementwise with broadcasting (alias `subtract`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.
    alpha : number
        Multiplies `b`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.sub(loom.tensor([5, 7]), 2).tolist()
    [3, 5]
    """

DOCS["mul"] = r"""a * b, elementwise with broadcasting (alias `multiply`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.mul(loom.tensor([[1], [2]]), loom.tensor([1, 10])).tolist()
    [[1, 10], [2, 20]]
    """

DOCS["div"] = r"""a / b, elementwise with broadcasting (aliases `divide`, `true_divide`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.
    rounding_mode : str, optional
        None: true division (integers give floats); `'trunc'` or `'floor'`: rounded, in the promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.div(loom.tensor([7, -7]), 2).tolist(), loom.div(loom.tensor([7, -7]), 2, rounding_mode='floor').tolist()
    ([3.5, -3.5], [3, -4])
    """

DOCS["floor_divide"] = r"""floor(a / b), elementwise, as Python's `//`.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.floor_divide(loom.tensor([7, -7]), 2).tolist()
    [3, -4]
    """

DOCS["pow"] = r"""x ** exponent, elementwise with broadcasting.

    Parameters
    ----------
    x : Tensor or number
    exponent : Tensor or number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.pow(loom.tensor([2.0, 3.0]), 2).tolist()
    [4.0, 9.0]
    """

DOCS["float_power"] = r"""x ** exponent computed in float64 (as `torch.float_power`).

    Parameters
    ----------
    x : Tensor or number
    exponent : Tensor or number

    Returns
    -------
    Tensor of float64

    Examples
    --------
    >>> loom.float_power(loom.tensor([2]), 0.5).dtype
    loom.float64
    """

DOCS["maximum"] = r"""The larger of `a` and `b`, elementwise (NaN if either is NaN).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.maximum(loom.tensor([1, 5]), loom.tensor([3, 2])).tolist()
    [3, 5]
    """

DOCS["minimum"] = r"""The smaller of `a` and `b`, elementwise (NaN if either is NaN).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.minimum(loom.tensor([1, 5]), loom.tensor([3, 2])).tolist()
    [1, 2]
    """

DOCS["atan2"] = r"""The angle of the point (b, a), atan(a / b) in the right quadrant (alias `arctan2`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.atan2(loom.tensor([1.0, -1.0]), loom.tensor([-1.0, -1.0])).numpy().round(4)
    array([ 2.3562, -2.3562], dtype=float32)
    """

DOCS["bitwise_and"] = r"""Bitwise AND of integer or bool tensors.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.bitwise_and(loom.tensor([12]), loom.tensor([10])).tolist()
    [8]
    """

DOCS["bitwise_or"] = r"""Bitwise OR of integer or bool tensors.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.bitwise_or(loom.tensor([12]), loom.tensor([10])).tolist()
    [14]
    """

DOCS["bitwise_xor"] = r"""Bitwise XOR of integer or bool tensors.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.bitwise_xor(loom.tensor([12]), loom.tensor([10])).tolist()
    [6]
    """

DOCS["logical_and"] = r"""True where both `a` and `b` are nonzero.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.logical_and(loom.tensor([1, 0, 2]), loom.tensor([1, 1, 0])).tolist()
    [True, False, False]
    """

DOCS["logical_or"] = r"""True where `a` or `b` is nonzero.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.logical_or(loom.tensor([1, 0, 0]), loom.tensor([0, 0, 3])).tolist()
    [True, False, True]
    """

DOCS["logical_xor"] = r"""True where exactly one of `a` and `b` is nonzero.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.logical_xor(loom.tensor([1, 0, 2]), loom.tensor([1, 1, 0])).tolist()
    [False, True, True]
    """

DOCS["eq"] = r"""a == b, elementwise with broadcasting.

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.eq(loom.tensor([1, 2, 3]), 2).tolist()
    [False, True, False]
    """

DOCS["ne"] = r"""a != b, elementwise with broadcasting (alias `not_equal`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.ne(loom.tensor([1, 2, 3]), 2).tolist()
    [True, False, True]
    """

DOCS["lt"] = r"""a < b, elementwise with broadcasting (alias `less`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.lt(loom.tensor([1, 2, 3]), 2).tolist()
    [True, False, False]
    """

DOCS["le"] = r"""a <= b, elementwise with broadcasting (alias `less_equal`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.le(loom.tensor([1, 2, 3]), 2).tolist()
    [True, True, False]
    """

DOCS["gt"] = r"""a > b, elementwise with broadcasting (alias `greater`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.gt(loom.tensor([1, 2, 3]), 2).tolist()
    [False, False, True]
    """

DOCS["ge"] = r"""a >= b, elementwise with broadcasting (alias `greater_equal`).

    Parameters
    ----------
    a, b : Tensor or number
        Broadcast against each other (PyTorch's rules); the result has their promoted dtype.

    Returns
    -------
    Tensor of bool

    Examples
    --------
    >>> loom.ge(loom.tensor([1, 2, 3]), 2).tolist()
    [False, True, True]
    """

DOCS["clamp_min"] = r"""max(x, min), elementwise.

    Parameters
    ----------
    x : Tensor or number
    min : Tensor or number
        The lower bound.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.clamp_min(loom.tensor([-1.0, 2.0]), 0.5).tolist()
    [0.5, 2.0]
    """

DOCS["clamp_max"] = r"""min(x, max), elementwise.

    Parameters
    ----------
    x : Tensor or number
    max : Tensor or number
        The upper bound.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.clamp_max(loom.tensor([-1.0, 2.0]), 0.5).tolist()
    [-1.0, 0.5]
    """

DOCS["addcmul"] = r"""x + value * t1 * t2, elementwise with broadcasting.

    Parameters
    ----------
    x, t1, t2 : Tensor
    value : number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.addcmul(loom.ones(2), loom.tensor([1.0, 2.0]), loom.tensor([3.0, 4.0]), value=0.5).tolist()
    [2.5, 5.0]
    """

DOCS["addcdiv"] = r"""x + value * t1 / t2, elementwise with broadcasting (floats only).

    Parameters
    ----------
    x, t1, t2 : Tensor
    value : number

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.addcdiv(loom.ones(2), loom.tensor([1.0, 2.0]), loom.tensor([4.0, 8.0]), value=2).tolist()
    [1.5, 1.5]
    """

DOCS["as_tensor"] = r"""`data` as a tensor, sharing memory where it can (a Tensor, or a NumPy array and no dtype).

    Parameters
    ----------
    data : Tensor, numpy.ndarray, number or nested sequence
    dtype : loom.dtype, optional
        Convert to this dtype (copies).
    device : str or loom.Device, optional
        Only `'cpu'`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> a = np.arange(3.0)
    >>> t = loom.as_tensor(a)
    >>> a[0] = 7.0
    >>> t.tolist()
    [7.0, 1.0, 2.0]
    """

DOCS["empty"] = r"""A tensor of the given shape whose values must be written before use (loom fills it with zeros).

    Parameters
    ----------
    \*size : int or sequence of int
        The shape, as separate ints or one sequence.
    dtype : loom.dtype, optional
        Default: the default float dtype (`loom.get_default_dtype()`).
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.empty(2, 3).shape
    loom.Size([2, 3])
    """

DOCS["zeros"] = r"""A tensor of zeros.

    Parameters
    ----------
    \*size : int or sequence of int
        The shape, as separate ints or one sequence.
    dtype : loom.dtype, optional
        Default: the default float dtype (`loom.get_default_dtype()`).
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.zeros(2, 3).shape, loom.zeros((2,), dtype=loom.int64).tolist()
    (loom.Size([2, 3]), [0, 0])
    """

DOCS["ones"] = r"""A tensor of ones.

    Parameters
    ----------
    \*size : int or sequence of int
        The shape, as separate ints or one sequence.
    dtype : loom.dtype, optional
        Default: the default float dtype (`loom.get_default_dtype()`).
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.ones(2, dtype=loom.int32).tolist()
    [1, 1]
    """

DOCS["full"] = r"""A tensor filled with `fill_value`.

    Parameters
    ----------
    size : sequence of int
    fill_value : number
    dtype : loom.dtype, optional
        Default: inferred from `fill_value` (bool, int64 or the default float).
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """

DOCS["empty_like"] = r"""An uninitialised tensor with the shape of `x` (see `empty`).

    Parameters
    ----------
    x : Tensor
    dtype : loom.dtype, optional
        Default: the dtype of `x`.
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.empty_like(loom.ones(2, 3)).shape
    loom.Size([2, 3])
    """

DOCS["zeros_like"] = r"""Zeros with the shape (and by default the dtype) of `x`.

    Parameters
    ----------
    x : Tensor
    dtype : loom.dtype, optional
        Default: the dtype of `x`.
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.zeros_like(loom.tensor([1, 2])).tolist()
    [0, 0]
    """

DOCS["ones_like"] = r"""Ones with the shape (and by default the dtype) of `x`.

    Parameters
    ----------
    x : Tensor
    dtype : loom.dtype, optional
        Default: the dtype of `x`.
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.ones_like(loom.tensor([1, 2])).tolist()
    [1, 1]
    """

DOCS["full_like"] = r"""`fill_value` with the shape (and by default the dtype) of `x`.

    Parameters
    ----------
    x : Tensor
    fill_value : number
    dtype : loom.dtype, optional
        Default: the dtype of `x`.
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.full_like(loom.zeros(2), 3.5).tolist()
    [3.5, 3.5]
    """

DOCS["eye"] = r"""The identity matrix, `n` x `m`.

    Parameters
    ----------
    n : int
        Rows.
    m : int, optional
        Columns (default `n`).
    dtype : loom.dtype, optional
        Default: the default float dtype (`loom.get_default_dtype()`).
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.eye(2, 3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """

DOCS["logspace"] = r"""`steps` values from base**start to base**end, evenly spaced in the exponent.

    Parameters
    ----------
    start, end : number
        Exponents.
    steps : int
    base : float
    dtype : loom.dtype, optional
        Default: the default float dtype (`loom.get_default_dtype()`).
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.logspace(0, 2, 3).tolist()
    [1.0, 10.0, 100.0]
    """

DOCS["normal"] = r"""Samples from a normal distribution with mean `mean` and standard deviation `std`.

    Parameters
    ----------
    mean, std : float or Tensor
        Broadcast against each other; their shape is the result's unless `size` is given.
    size : sequence of int, optional
        The shape when `mean` and `std` are numbers.
    generator : loom.Generator, optional
        Default: the global generator (`loom.manual_seed`).
    dtype : loom.dtype, optional
        Default: the default float dtype (`loom.get_default_dtype()`).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> _ = loom.manual_seed(0)
    >>> loom.normal(2.0, 0.5, size=(1000,)).mean().item() > 1.9
    True
    >>> loom.normal(loom.zeros(3), 1.0).shape
    loom.Size([3])
    """

DOCS["randint"] = r"""Integers drawn uniformly from [low, high).

    Parameters
    ----------
    low : int
        Lowest value; with `high` omitted this is `high` and `low` is 0.
    high : int, optional
        One above the highest value.
    size : sequence of int
    dtype : loom.dtype, optional
        Default int64.
    generator : loom.Generator, optional
    device : str or loom.Device, optional
        Only `'cpu'`.
    requires_grad : bool
        Record operations on the result for autograd.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> _ = loom.manual_seed(0)
    >>> x = loom.randint(0, 10, (100,))
    >>> bool((x >= 0).all() and (x < 10).all()), x.dtype
    (True, loom.int64)
    """

DOCS["randperm"] = r"""A random permutation of 0 .. n - 1.

    Parameters
    ----------
    n : int
    dtype : loom.dtype, optional
        Default int64.
    generator : loom.Generator, optional
    device : str or loom.Device, optional
        Only `'cpu'`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> sorted(loom.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """

DOCS["rand_like"] = r"""Uniform samples in [0, 1) with the shape (and float dtype) of `x`.

    Parameters
    ----------
    x : Tensor
    dtype : loom.dtype, optional
        Default: the dtype of `x`.
    \*\*kw
        `generator`, `device`, `requires_grad` as for `rand`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.rand_like(loom.zeros(2, 3)).shape
    loom.Size([2, 3])
    """

DOCS["randn_like"] = r"""Standard normal samples with the shape (and float dtype) of `x`.

    Parameters
    ----------
    x : Tensor
    dtype : loom.dtype, optional
        Default: the dtype of `x`.
    \*\*kw
        `generator`, `device`, `requires_grad` as for `randn`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.randn_like(loom.zeros(2, 3)).shape
    loom.Size([2, 3])
    """

DOCS["randint_like"] = r"""Integers from [low, high) with the shape (and dtype) of `x`.

    Parameters
    ----------
    x : Tensor
    low, high : int
        As for `randint`.
    dtype : loom.dtype, optional
        Default: the dtype of `x`.
    \*\*kw
        `generator`, `device`, `requires_grad`.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> loom.randint_like(loom.zeros(4, dtype=loom.int64), 3).shape
    loom.Size([4])
    """

DOCS["is_tensor"] = r"""True if `obj` is a `loom.Tensor`.

    Parameters
    ----------
    obj : object

    Returns
    -------
    bool

    Examples
    --------
    >>> loom.is_tensor(loom.zeros(1)), loom.is_tensor([1])
    (True, False)
    """

DOCS["numel"] = r"""The number of elements of `t`.

    Parameters
    ----------
    t : Tensor

    Returns
    -------
    int

    Examples
    --------
    >>> loom.numel(loom.zeros(2, 3))
    6
    """

DOCS["seed"] = r"""Seed the global generator from the operating system's entropy; returns the seed.

    Returns
    -------
    int

    Examples
    --------
    >>> s = loom.seed()
    >>> loom.initial_seed() == s
    True
    >>> _ = loom.manual_seed(0)  # Back to a fixed seed.
    """

DOCS["initial_seed"] = r"""The seed the global generator was last seeded with (`manual_seed` or `seed`).

    Returns
    -------
    int

    Examples
    --------
    >>> _ = loom.manual_seed(42)
    >>> loom.initial_seed()
    42
    """

DOCS["get_rng_state"] = r"""The global generator's state, to restore later with `set_rng_state`.

    Returns
    -------
    Tensor of uint8

    Examples
    --------
    >>> _ = loom.manual_seed(0)
    >>> state = loom.get_rng_state()
    >>> a = loom.rand(3)
    >>> loom.set_rng_state(state)
    >>> bool((loom.rand(3) == a).all())
    True
    """

DOCS["set_rng_state"] = r"""Restore the global generator to a state from `get_rng_state`: later draws repeat.

    Parameters
    ----------
    state : Tensor
        From `get_rng_state`.

    Returns
    -------
    None

    Examples
    --------
    >>> _ = loom.manual_seed(0)
    >>> state = loom.get_rng_state()
    >>> a = loom.randn(2)
    >>> loom.set_rng_state(state)
    >>> loom.randn(2).tolist() == a.tolist()
    True
    """


def attach(namespace: dict) -> None:
    """Give each function named in `DOCS` its text, where its source left the docstring empty."""
    for name, doc in DOCS.items():
        obj = namespace[name]
        if not (obj.__doc__ or "").strip():
            obj.__doc__ = doc


# Tensor members without a docstring in loom/tensor.py: name -> text.
TENSOR_DOCS: dict[str, str] = {}

TENSOR_DOCS["shape"] = r"""The size of each dimension, a `loom.Size` (a tuple).

    Examples
    --------
    >>> loom.zeros(2, 3).shape
    loom.Size([2, 3])
    """

TENSOR_DOCS["size"] = r"""The shape (a `loom.Size`), or the size of dimension `dim` (negative counts from the end).

    Examples
    --------
    >>> loom.zeros(2, 3).size(), loom.zeros(2, 3).size(-1)
    (loom.Size([2, 3]), 3)
    """

TENSOR_DOCS["dtype"] = r"""The element type (`loom.float32`, `loom.int64`, ...).

    Examples
    --------
    >>> loom.tensor([1, 2]).dtype
    loom.int64
    """

TENSOR_DOCS["device"] = r"""The device the tensor lives on (always the CPU in this build).

    Examples
    --------
    >>> loom.zeros(1).device
    device(type='cpu')
    """

TENSOR_DOCS["ndim"] = r"""The number of dimensions.

    Examples
    --------
    >>> loom.zeros(2, 3).ndim
    2
    """

TENSOR_DOCS["dim"] = r"""The number of dimensions (as `ndim`).

    Examples
    --------
    >>> loom.zeros(2, 3).dim()
    2
    """

TENSOR_DOCS["numel"] = r"""The number of elements (alias `nelement`).

    Examples
    --------
    >>> loom.zeros(2, 3).numel()
    6
    """

TENSOR_DOCS["element_size"] = r"""Bytes per element.

    Examples
    --------
    >>> loom.zeros(1, dtype=loom.float64).element_size()
    8
    """

TENSOR_DOCS["is_leaf"] = r"""True unless the tensor was computed from tensors that require grad (leaves get `.grad`).

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> w.is_leaf, (w * 2).is_leaf
    (True, False)
    """

TENSOR_DOCS["grad_fn"] = r"""The autograd record of the op that made this tensor, or None for a leaf.

    Examples
    --------
    >>> loom.ones(2, requires_grad=True).grad_fn is None
    True
    """

TENSOR_DOCS["is_floating_point"] = r"""Whether the dtype is a floating point type.

    Examples
    --------
    >>> loom.tensor([1.0]).is_floating_point(), loom.tensor([1]).is_floating_point()
    (True, False)
    """

TENSOR_DOCS["is_cuda"] = r"""False: this build of loom runs on the CPU only.

    Examples
    --------
    >>> loom.zeros(1).is_cuda
    False
    """

TENSOR_DOCS["item"] = r"""The value of a one-element tensor as a Python number (computes it).

    Examples
    --------
    >>> loom.tensor([2.5]).item()
    2.5
    """

TENSOR_DOCS["tolist"] = r"""The values as (nested) Python lists of numbers (computes them).

    Examples
    --------
    >>> loom.arange(4).reshape(2, 2).tolist()
    [[0, 1], [2, 3]]
    """

TENSOR_DOCS["requires_grad_"] = r"""Set `requires_grad` in place (floating point leaves only); returns the tensor.

    Examples
    --------
    >>> loom.zeros(2).requires_grad_().requires_grad
    True
    """

TENSOR_DOCS["detach_"] = r"""Make this tensor a leaf that does not require grad, in place.

    Examples
    --------
    >>> y = loom.ones(2, requires_grad=True) * 2
    >>> y.detach_().requires_grad
    False
    """

TENSOR_DOCS["retain_grad"] = r"""Keep `.grad` for this non-leaf tensor when `backward()` runs.

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> y = w * 3
    >>> y.retain_grad()
    >>> y.sum().backward()
    >>> y.grad.tolist()
    [1.0, 1.0]
    """

TENSOR_DOCS["type"] = r"""With no argument the dtype's name; with a dtype, the tensor converted to it.

    Examples
    --------
    >>> loom.zeros(1).type(), loom.zeros(1).type(loom.int64).dtype
    ('loom.float32', loom.int64)
    """

TENSOR_DOCS["type_as"] = r"""This tensor converted to `other`'s dtype.

    Examples
    --------
    >>> loom.tensor([1.7]).type_as(loom.tensor([1])).tolist()
    [1]
    """

TENSOR_DOCS["float"] = r"""This tensor as float32.

    Examples
    --------
    >>> loom.tensor([1]).float().dtype
    loom.float32
    """

TENSOR_DOCS["double"] = r"""This tensor as float64.

    Examples
    --------
    >>> loom.tensor([1]).double().dtype
    loom.float64
    """

TENSOR_DOCS["half"] = r"""This tensor as float16.

    Examples
    --------
    >>> loom.tensor([1.5]).half().dtype
    loom.float16
    """

TENSOR_DOCS["bfloat16"] = r"""This tensor as bfloat16.

    Examples
    --------
    >>> loom.tensor([1.5]).bfloat16().dtype
    loom.bfloat16
    """

TENSOR_DOCS["int"] = r"""This tensor as int32 (floats are truncated toward zero).

    Examples
    --------
    >>> loom.tensor([-1.7, 1.7]).int().tolist()
    [-1, 1]
    """

TENSOR_DOCS["long"] = r"""This tensor as int64 (floats are truncated toward zero).

    Examples
    --------
    >>> loom.tensor([2.9]).long().tolist()
    [2]
    """

TENSOR_DOCS["short"] = r"""This tensor as int16.

    Examples
    --------
    >>> loom.tensor([3]).short().dtype
    loom.int16
    """

TENSOR_DOCS["char"] = r"""This tensor as int8.

    Examples
    --------
    >>> loom.tensor([3]).char().dtype
    loom.int8
    """

TENSOR_DOCS["byte"] = r"""This tensor as uint8.

    Examples
    --------
    >>> loom.tensor([3]).byte().dtype
    loom.uint8
    """

TENSOR_DOCS["bool"] = r"""This tensor as bool (nonzero is True).

    Examples
    --------
    >>> loom.tensor([0.0, 2.0]).bool().tolist()
    [False, True]
    """

TENSOR_DOCS["cpu"] = r"""This tensor (loom tensors are always on the CPU).

    Examples
    --------
    >>> t = loom.zeros(1)
    >>> t.cpu() is t
    True
    """

TENSOR_DOCS["is_contiguous"] = r"""Whether the elements are in row-major order in storage (a transposed view is not).

    Examples
    --------
    >>> x = loom.zeros(2, 3)
    >>> x.is_contiguous(), x.t().is_contiguous()
    (True, False)
    """

TENSOR_DOCS["storage_offset"] = r"""Elements between the start of the storage and this view's first element.

    Examples
    --------
    >>> loom.arange(6)[2:].storage_offset()
    2
    """

TENSOR_DOCS["copy_"] = r"""Write `src` (broadcast, converted to this dtype) into this tensor in place; views see it.

    Examples
    --------
    >>> x = loom.zeros(2, 2)
    >>> _ = x[0].copy_(loom.tensor([1, 2]))
    >>> x.tolist()
    [[1.0, 2.0], [0.0, 0.0]]
    """

TENSOR_DOCS["zero_"] = r"""Fill with zeros in place.

    Examples
    --------
    >>> loom.ones(2).zero_().tolist()
    [0.0, 0.0]
    """

TENSOR_DOCS["fill_"] = r"""Fill with `value` in place.

    Examples
    --------
    >>> loom.zeros(2).fill_(7).tolist()
    [7.0, 7.0]
    """

TENSOR_DOCS["T"] = r"""The dimensions reversed (`permute(n-1, ..., 0)`), a view.

    Examples
    --------
    >>> loom.zeros(2, 3).T.shape
    loom.Size([3, 2])
    """

TENSOR_DOCS["mT"] = r"""The last two dimensions swapped, a view.

    Examples
    --------
    >>> loom.zeros(4, 2, 3).mT.shape
    loom.Size([4, 3, 2])
    """

TENSOR_DOCS["H"] = r"""The conjugate transpose of a matrix (the transpose, for real tensors), a view.

    Examples
    --------
    >>> loom.zeros(2, 3).H.shape
    loom.Size([3, 2])
    """

TENSOR_DOCS["mH"] = r"""The last two dimensions swapped and conjugated (swapped, for real tensors), a view.

    Examples
    --------
    >>> loom.zeros(4, 2, 3).mH.shape
    loom.Size([4, 3, 2])
    """


def attach_tensor(cls: type) -> None:
    """Give `Tensor` members (methods and properties) in `TENSOR_DOCS` their text, where theirs is empty."""
    for name, doc in TENSOR_DOCS.items():
        member = cls.__dict__[name]
        if not (member.__doc__ or "").strip():
            member.__doc__ = doc
