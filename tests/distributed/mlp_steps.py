"""The traced MLP training step the auto-parallel tests plan: one definition for the single-process tests
(test_autoparallel.py) and the multi-process scripts (scripts/autoparallel.py, scripts/sbp_mesh.py)."""
import numpy as np

import loom


def mlp_step(batch: int, d_in: int, hidden: int, d_out: int):
    """A two-layer MLP's SGD step (mean squared error), traced by `loom.function`; returns the step, its
    arguments (x, t) and the two weights. Every rank builds the same weights and data."""
    loom.manual_seed(0)
    fc1, fc2 = loom.nn.Linear(d_in, hidden, bias=False), loom.nn.Linear(hidden, d_out, bias=False)
    opt = loom.optim.SGD(list(fc1.parameters()) + list(fc2.parameters()), lr=0.1)

    @loom.function
    def step(x, t):
        opt.zero_grad()
        loss = ((fc2(fc1(x).relu()) - t) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    rng = np.random.default_rng(1)
    x = loom.tensor(rng.standard_normal((batch, d_in)).astype(np.float32))
    t = loom.tensor(rng.standard_normal((batch, d_out)).astype(np.float32))
    for _ in range(2):  # The first call runs eagerly, the second traces.
        step(x, t)
    return step, (x, t), (fc1.weight, fc2.weight)
