"""Small helpers shared by the example trainings: arguments, data paths, progress, plots, timing.

Examples import it as ``from _common import ...`` (Python puts the script's own
folder on the path), so each example stays one runnable file plus this one.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

# Run from a checkout without `pip install -e .`: make the repository's loom importable.
_REPO = Path(__file__).resolve().parent.parent
if (_REPO / "loom" / "__init__.py").exists() and str(_REPO) not in sys.path:
    try:
        import loom  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(_REPO))


def example_parser(name: str, doc: str | None, data_default: str | Path | None,
                   data_help: str | None = None) -> argparse.ArgumentParser:
    """An argument parser with the options every example shares.

    ``--data PATH`` (when `data_default` or `data_help` is given), ``--out DIR``
    (default ``./out/<name>``), ``--seed``, ``--smoke`` (a tiny fast run for
    tests) and ``--no-progress``. With `data_help`, ``--data`` defaults to
    `data_default` (None: the data set's own search, see `locate_data`) and
    ``--download`` / ``--no-download`` are added.

    Examples
    --------
    >>> args = example_parser("demo", "Demo.", "/tmp/x.txt").parse_args(["--smoke"])
    >>> args.smoke, args.out
    (True, 'out/demo')
    """
    first = (doc or name).strip().splitlines()[0]
    p = argparse.ArgumentParser(prog=f"{name}.py", description=first,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    if data_help is not None:
        p.add_argument("--data", default=data_default, help=data_help)
        g = p.add_mutually_exclusive_group()
        g.add_argument("--download", dest="download", action="store_true", default=None,
                       help="download the data set if it is missing, even into --data (default: only when --data is "
                            "not given, into ~/.cache/loom/data)")
        g.add_argument("--no-download", dest="download", action="store_false",
                       help="never download; use only files already on disk")
    elif data_default is not None:
        p.add_argument("--data", default=str(data_default), help="path of the data set")
    p.add_argument("--out", default=os.path.join("out", name),
                   help="folder for the loss curve, checkpoints and logs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="a tiny, fast run (few steps, small sizes) for tests")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    return p


def require_data(path: str | Path, what: str, hint: str = "") -> Path:
    """`path` as a Path if it exists, else exit with a message that names it.

    The exit status is 2 and the message goes to stderr, so a missing data set
    reads as a usage error rather than a traceback.

    Examples
    --------
    >>> require_data(__file__, "this file").name
    '_common.py'
    """
    p = Path(path).expanduser()
    if p.exists():
        return p
    msg = f"error: {what} not found at {str(p)!r}."
    if hint:
        msg += f" {hint}"
    msg += " Pass its location with --data PATH."
    print(msg, file=sys.stderr)
    raise SystemExit(2)


def download_allowed(data: str | Path | None, download: bool | None) -> bool:
    """Whether to download: as ``--download``/``--no-download`` say, else only when no ``--data`` path was given.

    Examples
    --------
    >>> download_allowed(None, None), download_allowed("mine.txt", None), download_allowed(None, False)
    (True, False, False)
    """
    return download if download is not None else data is None


def locate_data(find, data: str | Path | None, download: bool | None, what: str) -> Path:
    """`find(download_allowed)` (a data set's locate function), or exit 2 with its message when it fails.

    The message lists the paths looked at and the URL (loom.data's own error)
    and says how to pass the data or allow the download.

    Examples
    --------
    >>> locate_data(lambda dl: Path(__file__), None, None, "this file").name
    '_common.py'
    """
    allow = download_allowed(data, download)
    try:
        return Path(find(allow))
    except FileNotFoundError as e:
        how = "Pass its location with --data PATH" + ("" if allow else ", or --download to fetch it")
        print(f"error: {what} is not available.\n{e}\n{how}.", file=sys.stderr)
        raise SystemExit(2) from None


def progress(iterable: Iterable | None = None, total: int | None = None, desc: str = "",
             disable: bool = False):
    """A tqdm progress bar (on stderr) over `iterable` or `total` steps.

    Examples
    --------
    >>> sum(progress(range(3), disable=True))
    3
    """
    from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=desc, disable=disable, dynamic_ncols=True, leave=True)


def out_dir(path: str | Path) -> Path:
    """Create (if needed) and return the output folder."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    return p


def plot_curves(path: str | Path, curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                xlabel: str = "step", ylabel: str = "loss", title: str = "", logy: bool = False) -> Path:
    """Write a PNG with one line per named ``(xs, ys)`` curve (matplotlib, Agg backend).

    Examples
    --------
    >>> import tempfile, os
    >>> f = plot_curves(os.path.join(tempfile.mkdtemp(), "c.png"), {"train": ([0, 1], [2.0, 1.0])})
    >>> f.stat().st_size > 0
    True
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for label, (xs, ys) in curves.items():
        ax.plot(list(xs), list(ys), label=label, marker="." if len(xs) < 30 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


class Timer:
    """Wall-clock seconds since creation (or the last `reset`).

    Examples
    --------
    >>> t = Timer(); t.elapsed() >= 0
    True
    """

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def reset(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def __str__(self) -> str:
        return fmt_seconds(self.elapsed())


def fmt_seconds(s: float) -> str:
    """``'42.0 s'`` below two minutes, else ``'3 min 05 s'``.

    Examples
    --------
    >>> fmt_seconds(185)
    '3 min 05 s'
    """
    if s < 120:
        return f"{s:.1f} s"
    m, s = divmod(int(round(s)), 60)
    return f"{m} min {s:02d} s"
