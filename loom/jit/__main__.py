"""``python -m loom.jit``: build libloomrt and its example program, or rebuild a dump's kernels."""
import sys

from loom.jit.builder import main

sys.exit(main())
