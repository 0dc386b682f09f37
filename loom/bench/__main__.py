"""Run the benchmark harness: ``python -m loom.bench --help``."""
import sys

from loom.bench.cli import main

sys.exit(main())
