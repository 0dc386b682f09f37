"""Short-time Fourier transforms: `stft` frames a signal and transforms each frame, `istft` overlap-adds it back.

Both are compositions of `loom.fft` transforms and movement ops, so they are
differentiable (in the signal and in the window) like any other composite.
"""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom import fft as _fft
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, ones, tensor, zeros


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _window(op: str, window, n_fft: int, win_length: int | None, like: dt.DType) -> tuple[Tensor, int]:
    """The window zero-padded on both sides to `n_fft` (a rectangle of `win_length` when None), and win_length."""
    win_length = n_fft if win_length is None else int(win_length)
    if not 0 < win_length <= n_fft:
        raise LoomValueError(f"loom.{op}: expected 0 < win_length <= n_fft, but got win_length={win_length}, "
                             f"n_fft={n_fft}")
    if window is None:
        w = ones(win_length, dtype=dt.to_real(like))
    else:
        w = _t(window)
        if w.ndim != 1 or w.shape[0] != win_length:
            raise ShapeError(f"loom.{op}: expected a 1-d window of size win_length={win_length}, got "
                             f"{fmt_shape(w.shape)}")
    left = (n_fft - win_length) // 2
    if left or n_fft - win_length - left:
        w = apply("pad", (w,), {"pads": [(left, n_fft - win_length - left)], "value": 0})
    return w, win_length


def _hop(op: str, hop_length, n_fft: int) -> int:
    hop = n_fft // 4 if hop_length is None else int(hop_length)
    if hop <= 0:
        raise LoomValueError(f"loom.{op}: expected hop_length > 0, but got hop_length={hop}")
    return hop


def stft(input, n_fft: int, hop_length: int | None = None, win_length: int | None = None, window=None,
         center: bool = True, pad_mode: str = "reflect", normalized: bool = False, onesided: bool | None = None,
         return_complex: bool | None = None) -> Tensor:
    """The short-time Fourier transform of a 1-d signal or a (batch, time) signal, as `torch.stft`.

    Parameters
    ----------
    input : Tensor
        (L,) or (B, L), real or complex.
    n_fft : int
        Frame length (and transform size).
    hop_length : int, optional
        Distance between frames (n_fft // 4 by default).
    win_length : int, optional
        The window's length, at most n_fft; the window is zero-padded to n_fft, centred.
    window : Tensor, optional
        1-d of size win_length (a rectangular window by default).
    center : bool
        Pad the signal by n_fft // 2 on both sides (with `pad_mode`) so frame t is centred on t * hop_length.
    normalized : bool
        Scale by n_fft ** -0.5.
    onesided : bool, optional
        Keep the n_fft // 2 + 1 non-negative frequencies (default for a real signal and window).
    return_complex : bool
        Required for real inputs, as in PyTorch: True gives a complex (B, freq, frames) result, False the
        same as a real tensor with a last dim of 2.

    Examples
    --------
    >>> x = loom.arange(8, dtype=loom.float32)
    >>> loom.stft(x, 4, hop_length=2, return_complex=True).shape
    loom.Size([3, 5])
    """
    from loom.functional.shape import pad
    x = _t(input)
    if x.ndim not in (1, 2):
        raise ShapeError(f"loom.stft: expected a 1-d or 2-d input, got {fmt_shape(x.shape)}")
    complex_in = x.dtype.is_complex or (isinstance(window, Tensor) and window.dtype.is_complex)
    if return_complex is None:
        if not complex_in:
            raise LoomValueError("loom.stft: stft requires the return_complex parameter be given for real inputs "
                                 "(return_complex=True, as PyTorch will require)")
        return_complex = True
    n_fft = int(n_fft)
    hop = _hop("stft", hop_length, n_fft)
    if x.dtype.category < 2:
        x = x.to(dt.get_default_dtype())
    if center:
        p = n_fft // 2
        x = pad(x.reshape((1,) * (3 - x.ndim) + tuple(x.shape)), (p, p), mode=pad_mode).reshape(
            x.shape[:-1] + (x.shape[-1] + 2 * p,))
    length = x.shape[-1]
    if not 0 < n_fft <= length:
        raise LoomValueError(f"loom.stft: expected 0 < n_fft <= {length} (the padded signal length), but got "
                             f"n_fft={n_fft}")
    w, _ = _window("stft", window, n_fft, win_length, x.dtype)
    frames = x.unfold(-1, n_fft, hop) * w  # (..., n_frames, n_fft)
    onesided = not complex_in if onesided is None else bool(onesided)
    if onesided and complex_in:
        raise LoomValueError("loom.stft: onesided=True needs a real input and window (a complex signal's "
                             "spectrum has no redundant half)")
    norm = "ortho" if normalized else "backward"
    spec = _fft.rfft(frames, norm=norm) if onesided else _fft.fft(frames, norm=norm)
    spec = spec.transpose(-1, -2)
    if not return_complex:
        from loom.functional.complex import view_as_real
        return view_as_real(spec)
    return spec


def _overlap_add(frames: Tensor, hop: int) -> Tensor:
    """(B, F, n) frames summed into a (B, n + hop * (F - 1)) signal, frame f starting at f * hop."""
    b, f, n = frames.shape
    out_len = n + hop * (f - 1)
    starts = (np.arange(f)[:, None] * hop + np.arange(n)[None, :]).reshape(1, f * n)
    index = tensor(np.ascontiguousarray(np.broadcast_to(starts, (b, f * n))))
    base = zeros(b, out_len, dtype=frames.dtype)
    return apply("scatter_add", (base, index, frames.reshape(b, f * n)), {"axis": 1})


def istft(input, n_fft: int, hop_length: int | None = None, win_length: int | None = None, window=None,
          center: bool = True, normalized: bool = False, onesided: bool | None = None, length: int | None = None,
          return_complex: bool = False) -> Tensor:
    """The inverse of `stft` by windowed overlap-add (least squares), as `torch.istft`.

    Parameters
    ----------
    input : Tensor
        Complex, (freq, frames) or (B, freq, frames), as `stft` returns it.
    n_fft, hop_length, win_length, window, center, normalized : as for `stft`
    onesided : bool, optional
        Whether `input` holds only the n_fft // 2 + 1 non-negative frequencies (by default: when its size
        is not n_fft).
    length : int, optional
        The output length (cut or zero-padded to it).
    return_complex : bool
        Return the complex signal (needs a two-sided input).

    Examples
    --------
    >>> x = loom.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    >>> window = loom.tensor([0.0, 0.5, 1.0, 0.5])
    >>> spec = loom.stft(x, 4, hop_length=1, window=window, return_complex=True)
    >>> loom.istft(spec, 4, hop_length=1, window=window, length=8)
    tensor([0., 1., 2., 3., 4., 5., 6., 7.])
    """
    z = _t(input)
    if not z.dtype.is_complex:
        raise DTypeError(f"loom.istft: requires a complex-valued input tensor, got {z.dtype.name}"
                         f"{fmt_shape(z.shape)}")
    if z.ndim not in (2, 3):
        raise ShapeError(f"loom.istft: expected a 2-d (freq, frames) or 3-d (batch, freq, frames) input, got "
                         f"{fmt_shape(z.shape)}")
    batched = z.ndim == 3
    if not batched:
        z = z.unsqueeze(0)
    n_fft = int(n_fft)
    hop = _hop("istft", hop_length, n_fft)
    n_freq, n_frames = z.shape[1], z.shape[2]
    onesided = n_freq != n_fft if onesided is None else bool(onesided)
    want = n_fft // 2 + 1 if onesided else n_fft
    if n_freq != want:
        raise ShapeError(f"loom.istft: a {'one' if onesided else 'two'}-sided input of n_fft={n_fft} has {want} "
                         f"frequencies, got {n_freq} (input {fmt_shape(input.shape)})")
    if n_frames < 1:
        raise ShapeError(f"loom.istft: the input has no frames ({fmt_shape(input.shape)})")
    w, _ = _window("istft", window, n_fft, win_length, z.dtype)
    norm = "ortho" if normalized else "backward"
    z = z.transpose(1, 2)  # (B, frames, freq)
    if return_complex:
        if onesided:
            raise LoomValueError("loom.istft: return_complex=True needs a two-sided input (onesided=False)")
        frames = _fft.ifft(z, n_fft, -1, norm)
    else:
        if w.dtype.is_complex:
            raise DTypeError("loom.istft: a complex window needs return_complex=True")
        if not onesided:
            z = z[..., :n_fft // 2 + 1]
        frames = _fft.irfft(z, n_fft, -1, norm)
    y = _overlap_add(frames * w, hop)
    envelope = _overlap_add((w * w).reshape(1, 1, n_fft).expand(1, n_frames, n_fft), hop)[0]
    full_len = n_fft + hop * (n_frames - 1)
    start = n_fft // 2 if center else 0
    end = full_len if length is None and not center else \
        full_len - n_fft // 2 if length is None else start + int(length)
    stop = min(end, full_len)
    y, envelope = y[:, start:stop], envelope[start:stop]
    from loom.function import tracing
    if not tracing():  # A traced step cannot read values: there the division shows inf instead.
        lowest = float(envelope.abs().min().detach()) if envelope.numel() else 1.0
        if lowest <= 1e-11:
            raise LoomValueError(f"loom.istft: window overlap add min: {lowest:.3g} (the window and hop_length "
                                 "leave samples no frame covers; the signal cannot be recovered there)")
    y = y / envelope
    if end > full_len:
        y = apply("pad", (y,), {"pads": [(0, 0), (0, end - full_len)], "value": 0})
    return y if batched else y[0]


METHODS = ["stft", "istft"]
