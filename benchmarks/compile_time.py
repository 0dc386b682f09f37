"""Cold and warm compile time of the char-GPT training step under loom.function, and a new batch size's cost.

Cold: a fresh process with an empty kernel cache (LOOM_CACHE_DIR in a new
temporary folder): tracing, the pass pipeline and every C kernel build.
Warm: a second process on the now-filled cache: the same work, but kernels
load from disk. In both, the step is then traced again at half the batch
size; since kernels are specialised by structure, not by size, that must
build no kernel (builds == 0, no new .so file). Each figure is the median
over --repeats process pairs (a cold run gets its own empty cache).

    python benchmarks/compile_time.py                   # gpt, 5 cold + 5 warm processes
    python benchmarks/compile_time.py --model mlp --repeats 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loom.bench.harness import THREAD_VARIABLES  # noqa: E402
from loom.bench.machine import load_average  # noqa: E402


def probe(model: str, cache: str, threads: int) -> dict:
    env = dict(os.environ, LOOM_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    env.update({v: str(threads) for v in THREAD_VARIABLES})
    proc = subprocess.run([sys.executable, "-m", "loom.bench.compile_probe", "--model", model], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"compile probe failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt", choices=("mlp", "cnn", "gpt", "resnet"))
    p.add_argument("--repeats", type=int, default=5, help="cold/warm process pairs (medians are reported)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="write every probe's result here")
    args = p.parse_args()
    print(f"{__doc__.splitlines()[0]}\nmodel {args.model}, {args.repeats} cold/warm pairs, load average "
          f"{load_average()}")
    runs = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="loom-cold-cache-") as cache:
            cold = probe(args.model, cache, args.threads)
            warm = probe(args.model, cache, args.threads)
        runs.append({"cold": cold, "warm": warm})
        c, w = cold["batch_sizes"], warm["batch_sizes"]
        print(f"  pair {i + 1}: cold {c[0]['compile_s']:.2f} s ({c[0]['builds']} builds), warm "
              f"{w[0]['compile_s']:.2f} s ({w[0]['builds']} builds, {w[0]['disk_hits']} from disk); "
              f"batch {c[1]['batch']}: {c[1]['builds'] + w[1]['builds']} builds, "
              f"{c[1]['new_so_files'] + w[1]['new_so_files']} new .so")

    def med(kind: str, k: int, key: str) -> float:
        return statistics.median(r[kind]["batch_sizes"][k][key] for r in runs)
    first = runs[0]["cold"]["batch_sizes"]
    print()
    print(f"{'':34} {'cold':>9} {'warm':>9}")
    print(f"{'trace + compile + kernels (s)':34} {med('cold', 0, 'compile_s'):9.2f} {med('warm', 0, 'compile_s'):9.2f}")
    print(f"{'  of which pass pipeline (s)':34} {med('cold', 0, 'pipeline_s'):9.2f} "
          f"{med('warm', 0, 'pipeline_s'):9.2f}")
    print(f"{'kernel builds (C compiler runs)':34} {med('cold', 0, 'builds'):9.0f} {med('warm', 0, 'builds'):9.0f}")
    print(f"{'kernels loaded from disk':34} {med('cold', 0, 'disk_hits'):9.0f} {med('warm', 0, 'disk_hits'):9.0f}")
    print(f"{'fused kernel calls in the step':34} {first[0]['kernels']:9d}")
    print(f"{'eager warm-up call (s)':34} {statistics.median(r['cold']['warmup_call_s'] for r in runs):9.2f} "
          f"{statistics.median(r['warm']['warmup_call_s'] for r in runs):9.2f}")
    label = f"new batch size {first[1]['batch']}: retrace (s)"
    print(f"{label:34} {med('cold', 1, 'compile_s'):9.2f} {med('warm', 1, 'compile_s'):9.2f}")
    print(f"{'  of which passes + executable (s)':34} {med('cold', 1, 'pipeline_s'):9.3f} "
          f"{med('warm', 1, 'pipeline_s'):9.3f}")
    print(f"{'  (a replay at that size (s))':34} {med('cold', 1, 'replay_s'):9.3f} {med('warm', 1, 'replay_s'):9.3f}")
    names = list(runs[0]["warm"]["batch_sizes"][1].get("passes_s", {}))
    if names:  # Each pass's wall time at the new batch size (median over the warm processes), in ms.
        per = {n: statistics.median(r["warm"]["batch_sizes"][1]["passes_s"].get(n, 0.0) for r in runs) for n in names}
        print("  passes (ms, warm): " + ", ".join(f"{n} {1000 * v:.1f}" for n, v in per.items()))
    builds = sum(r[k]["batch_sizes"][1]["builds"] for r in runs for k in ("cold", "warm"))
    new_so = sum(r[k]["batch_sizes"][1]["new_so_files"] for r in runs for k in ("cold", "warm"))
    print(f"new batch size: {builds} kernel builds and {new_so} new .so files over all {2 * len(runs)} processes "
          f"({'nothing new compiled' if builds == 0 and new_so == 0 else 'RECOMPILED'})")
    print(f"load average at end {load_average()}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
