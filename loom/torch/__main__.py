"""`python -m loom.torch script.py [args]`: run an unchanged PyTorch script on loom.

`torch` (and `torchvision`) resolve to `loom.torch` for this process; the
script runs as `__main__` with `sys.argv` set as if run directly.
"""
from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m loom.torch script.py [args...]   |   python -m loom.torch -m module [args...]"


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if argv else 2)
    from loom.torch._hook import install
    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            raise SystemExit(2)
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    if not os.path.exists(script):
        print(f"loom.torch: can't open file {script!r}: no such file", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
