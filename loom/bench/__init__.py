"""loom.bench: the framework performance evaluation (``python -m loom.bench``).

loom is judged side by side with its peers: the same machine, software,
models, initial weights and data; throughput (samples/s, tokens/s) with the
median, min and max of several repeats; compile/first-call time apart from
step time; peak memory per framework; everything recorded with the machine
and versions so a run can be reproduced.

Layout:

- `workloads`: one module per model (mlp, mlp-infer, cnn, gpt, resnet, gcn),
  each defining every framework's variant;
- `variants`: builds a framework's runnable step from a workload;
- `worker`: the process that runs one variant on command;
- `harness`: the protocol (warm-up, interleaved timed repeats, one process
  per framework);
- `stats`: medians, throughput, ratios to the best peer, run order;
- `report`: the stdout table, JSON, Markdown and the bar chart;
- `machine`: CPU, load and versions;
- `compile_probe`: cold/warm compile time of a traced step and kernel-build counts;
- `compare`: the head-to-head figures and targets of the ``benchmarks/`` scripts;
- `cli`: the command line.

Examples
--------
>>> from loom.bench import stats
>>> stats.ratios_to_best_peer({"loom-function": 120.0, "torch": 100.0})
{'loom-function': 1.2, 'torch': 1.0}
"""
