"""Train a small character-level GPT on tinyshakespeare with loom, then sample from it.

A decoder-only transformer (pre-norm blocks of causal self-attention and a GELU
MLP, learned position embeddings, output layer tied to the token embedding)
reads 64 characters and predicts the next one at every position. The first 90%
of the text trains it, the rest validates it. AdamW with linear warmup and
cosine decay; training stops when the validation loss (on fixed batches)
reaches --target, after --max-steps, after --max-minutes or on Ctrl-C. The model is saved with loom.save and
then writes a few hundred characters of its own Shakespeare.

    python examples/char_gpt.py                      # 4 layers, 4 heads, d_model 128
    python examples/char_gpt.py --max-steps 500 --eval-every 100
    python examples/char_gpt.py --smoke              # a few steps of a tiny model, for tests
"""
from __future__ import annotations

import math

# _common comes before NumPy: it sets the number of BLAS threads.
from _common import Timer, example_parser, fmt_seconds, locate_data, out_dir, plot_curves, progress

import numpy as np

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.data.datasets import TinyShakespeare


class CharVocab:
    """The sorted set of characters of a text, with encode/decode to int64 ids."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.codes = np.array([ord(c) for c in self.chars], dtype=np.uint32)

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        ids = np.searchsorted(self.codes, codes)
        if len(codes) and (ids.max() >= len(self.codes) or (self.codes[ids] != codes).any()):
            bad = sorted({c for c in text if c not in set(self.chars)})
            raise ValueError(f"char_gpt: characters outside the vocabulary: {''.join(bad)!r}")
        return ids.astype(np.int64)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions <= t."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"char_gpt: d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x, batch: int):
        """`x` holds the (batch * time, d_model) tokens, sequence after sequence."""
        bt, c = x.shape
        t = bt // batch
        q, k, v = self.qkv(x).reshape(batch, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(bt, c)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))

    def forward(self, x, batch: int):
        x = x + self.attn(self.ln1(x), batch)
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    """Token + position embeddings, `n_layers` blocks, a final norm and a tied output layer."""

    def __init__(self, vocab: int, context: int, d_model: int, n_layers: int, n_heads: int,
                 dropout: float) -> None:
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # Weight tying.
        for name, p in self.named_parameters():
            if p.ndim == 2:
                nn.init.normal_(p, std=0.02)
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layers))  # Scaled residual init.
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        """Logits (batch, time, vocab) for token ids (batch, time)."""
        b, t = idx.shape
        x = self.drop(self.tok(idx) + self.pos(loom.arange(t)))
        # Tokens as rows of one (b * t, d_model) matrix: every Linear is then a
        # single 2-d GEMM (forward and backward) instead of b batched ones.
        x = x.reshape(b * t, -1)
        for block in self.blocks:
            x = block(x, b)
        return self.head(self.ln_f(x)).reshape(b, t, -1)


def batch(data: np.ndarray, starts: np.ndarray, context: int) -> tuple[loom.Tensor, loom.Tensor]:
    """Inputs data[s:s+T] and next-character targets data[s+1:s+T+1] for each start s."""
    rows = starts[:, None] + np.arange(context + 1)
    chunk = data[rows]
    return loom.from_numpy(chunk[:, :-1].copy()), loom.from_numpy(chunk[:, 1:].copy())


def lm_loss(model: CharGPT, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def evaluate(model: CharGPT, data: np.ndarray, starts: list[np.ndarray], context: int) -> float:
    """Mean loss over fixed batches, in eval mode without gradients."""
    model.eval()
    with loom.no_grad():
        losses = [lm_loss(model, *batch(data, s, context)).item() for s in starts]
    model.train()
    return float(np.mean(losses))


def sample(model: CharGPT, vocab: CharVocab, prompt: str, n_chars: int, temperature: float) -> str:
    """Extend `prompt` by `n_chars` characters drawn one at a time from the model."""
    model.eval()
    ids = list(vocab.encode(prompt))
    with loom.no_grad():
        for _ in range(n_chars):
            ctx = loom.tensor([ids[-model.context:]])
            logits = model(ctx)[0, -1] / temperature
            ids.append(int(loom.multinomial(F.softmax(logits, -1), 1).item()))
    return vocab.decode(ids)


def lr_schedule(warmup: int, total: int, floor: float = 0.1):
    """Linear warmup to 1, then cosine decay to `floor` at `total` steps."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress_ = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress_))
    return factor


def main(argv: list[str] | None = None) -> dict:
    p = example_parser("char_gpt", __doc__, None,
                       "tinyshakespeare's input.txt (default: $LOOM_DATA_DIR/tinyshakespeare, then the loom cache, "
                       "downloading it there if missing; docs/data.md)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1, help="on matrices only")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=2500)
    p.add_argument("--max-minutes", type=float, default=0, help="stop training after this wall time (0: none)")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--target", type=float, default=1.7, help="stop once validation loss is at most this")
    p.add_argument("--sample-chars", type=int, default=300)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--prompt", default="\n")
    p.add_argument("--eager", action="store_true",
                   help="run the training step eagerly instead of tracing it with loom.function")
    args = p.parse_args(argv)
    path = locate_data(lambda download: TinyShakespeare.locate(args.data, download), args.data, args.download,
                       "the tinyshakespeare text (input.txt of karpathy/char-rnn; docs/data.md)")
    if args.smoke:
        args.layers, args.heads, args.d_model, args.context, args.batch_size = 1, 2, 32, 16, 8
        args.max_steps, args.eval_every, args.eval_batches, args.warmup = 30, 10, 2, 5
        args.sample_chars = 20
        args.lr = 1e-2
    out = out_dir(args.out)

    text = path.read_text(encoding="utf-8")
    vocab = CharVocab(text)
    ids = vocab.encode(text)
    n_train = int(0.9 * len(ids))
    train, val = ids[:n_train], ids[n_train:]
    loom.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    val_starts = [rng.integers(0, len(val) - args.context - 1, args.batch_size)
                  for _ in range(args.eval_batches)]

    model = CharGPT(len(vocab), args.context, args.d_model, args.layers, args.heads, args.dropout)
    n_params = sum(q.numel() for q in model.parameters())
    decay = [q for q in model.parameters() if q.ndim >= 2]
    no_decay = [q for q in model.parameters() if q.ndim < 2]
    opt = loom.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.99))
    sched = loom.optim.lr_scheduler.LambdaLR(opt, lr_schedule(args.warmup, args.max_steps))
    print(f"tinyshakespeare: {len(train):,} train / {len(val):,} val characters, vocab {len(vocab)}; "
          f"GPT {args.layers} layers x {args.heads} heads, d_model {args.d_model}, context {args.context}, "
          f"{n_params:,} parameters")

    hist: dict[str, list] = {"step": [], "train": [], "eval_step": [], "val": []}
    timer = Timer()
    step, reached, stop = 0, None, ""

    def run_eval() -> float:
        v = evaluate(model, val, val_starts, args.context)
        hist["eval_step"].append(step)
        hist["val"].append(v)
        bar.write(f"step {step:5d}  train loss {np.mean(hist['train'][-args.eval_every:]):.4f}  "
                  f"val loss {v:.4f}  lr {sched.get_last_lr()[0]:.2e}  "
                  f"{step / timer.elapsed():.2f} steps/s  ({timer})")
        return v

    def train_step(x, y):
        loss = lm_loss(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    # The whole step (forward, backward, AdamW) as one compiled graph, replayed every step.
    step_fn = train_step if args.eager else loom.function(train_step)

    bar = progress(total=args.max_steps, desc="char-gpt", disable=args.no_progress)
    try:
        while step < args.max_steps:
            x, y = batch(train, rng.integers(0, len(train) - args.context - 1, args.batch_size), args.context)
            loss = step_fn(x, y)
            sched.step()
            step += 1
            hist["step"].append(step)
            hist["train"].append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{hist['train'][-1]:.3f}")
            if step % args.eval_every == 0 or step == 1:
                if run_eval() <= args.target:
                    reached, stop = step, f"reached {args.target}"
                    break
            if args.max_minutes and timer.elapsed() > 60 * args.max_minutes:
                stop = f"time limit of {args.max_minutes:g} min"
                break
    except KeyboardInterrupt:  # Ctrl-C ends training early; the model is still saved and sampled.
        stop = "interrupted"
    stop = stop or f"max steps {args.max_steps}"
    if step and hist["eval_step"][-1:] != [step]:
        run_eval()
    bar.close()
    seconds = timer.elapsed()

    ckpt = out / "char_gpt.safetensors"
    loom.save({"model": model.state_dict(), "chars": "".join(vocab.chars), "step": step,
               "val_loss": hist["val"][-1], "config": {k: getattr(args, k) for k in
                                                        ("layers", "heads", "d_model", "context", "dropout")}},
              ckpt)
    png = plot_curves(out / "loss.png", {"train": (hist["step"], hist["train"]),
                                         "val": (hist["eval_step"], hist["val"])},
                      xlabel="step", ylabel="cross-entropy (nats/char)", title="char GPT on tinyshakespeare")
    text_out = sample(model, vocab, args.prompt, args.sample_chars, args.temperature)
    status = f"reached {args.target} at step {reached}" if reached else f"target {args.target} not reached: {stop}"
    print(f"final: val loss {hist['val'][-1]:.4f} after {step} steps ({status}); "
          f"train loss {hist['train'][0]:.4f} -> {np.mean(hist['train'][-10:]):.4f}; "
          f"{fmt_seconds(seconds)}, {step / seconds:.2f} steps/s")
    print(f"checkpoint: {ckpt}\nloss curve: {png}")
    print(f"--- sample (temperature {args.temperature}) ---\n{text_out}\n---")
    return {"val_loss": hist["val"][-1], "steps": step, "reached": reached, "stop": stop, "seconds": seconds,
            "train_loss": hist["train"], "sample": text_out, "png": str(png), "checkpoint": str(ckpt)}


if __name__ == "__main__":
    main()
