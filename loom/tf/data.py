"""`tf.data`: `Dataset` pipelines (slices, map, filter, shuffle, batch, repeat, ...) yielding loom tensors.

A Dataset is a recipe: each iteration rebuilds the chain of Python iterators
from the source, so a dataset can be iterated many times (an epoch each), and
`shuffle` draws a new order every time unless `reshuffle_each_iteration=False`.
Elements are tensors or tuples/dicts of tensors, as in TensorFlow.
"""
from __future__ import annotations

import collections
import itertools
from typing import Any, Callable, Iterator

import numpy as np

import loom
from loom.errors import LoomValueError
from loom.tensor import Tensor as _Tensor
from loom.tf._core import as_dtype, convert_to_tensor

AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


class experimental:  # noqa: N801  (TensorFlow's namespace spelling)
    """`tf.data.experimental`: AUTOTUNE and the cardinality constants."""

    AUTOTUNE = AUTOTUNE
    INFINITE_CARDINALITY = INFINITE_CARDINALITY
    UNKNOWN_CARDINALITY = UNKNOWN_CARDINALITY

    @staticmethod
    def cardinality(dataset) -> _Tensor:
        """The number of elements of `dataset` (-1 infinite, -2 unknown)."""
        return dataset.cardinality()


def _map_struct(fn, el):
    if isinstance(el, dict):
        return {k: _map_struct(fn, v) for k, v in el.items()}
    if isinstance(el, tuple):
        return tuple(_map_struct(fn, v) for v in el)
    if isinstance(el, list):
        return tuple(_map_struct(fn, v) for v in el)
    return fn(el)


def _leaves(el) -> list:
    if isinstance(el, dict):
        return [x for v in el.values() for x in _leaves(v)]
    if isinstance(el, (tuple, list)):
        return [x for v in el for x in _leaves(v)]
    return [el]


def _rebuild(template, leaves: Iterator):
    if isinstance(template, dict):
        return {k: _rebuild(v, leaves) for k, v in template.items()}
    if isinstance(template, (tuple, list)):
        return tuple(_rebuild(v, leaves) for v in template)
    return next(leaves)


def _lists_as_tensors(x):
    """Python lists of data inside a structure become tensors, as TensorFlow converts them."""
    if isinstance(x, dict):
        return {k: _lists_as_tensors(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_lists_as_tensors(v) for v in x)
    if isinstance(x, list):
        if any(isinstance(v, (tuple, dict)) for v in x):
            return tuple(_lists_as_tensors(v) for v in x)
        return convert_to_tensor(x)
    return x


def _as_array(x) -> np.ndarray:
    """A component as NumPy, with TensorFlow's default dtypes for Python data."""
    if isinstance(x, _Tensor):
        return x.numpy()
    return convert_to_tensor(x).numpy() if not isinstance(x, np.ndarray) else x


def _apply(fn, el):
    """Call a map/filter function as TensorFlow does: a tuple element is unpacked into arguments."""
    return fn(*el) if isinstance(el, tuple) else fn(el)


def _normalize(out):
    """A map function's result: lists become tuples, Python values become tensors."""
    if isinstance(out, (list, tuple)):
        return tuple(_normalize(v) for v in out)
    if isinstance(out, dict):
        return {k: _normalize(v) for k, v in out.items()}
    return out if isinstance(out, _Tensor) else convert_to_tensor(out)



def _batches(elements, size: int, drop_remainder: bool, combine):
    """`combine` applied to each run of `size` elements in order, and to a shorter last run unless dropped."""
    buf: list = []
    for el in elements:
        buf.append(el)
        if len(buf) == size:
            yield combine(buf)
            buf = []
    if buf and not drop_remainder:
        yield combine(buf)

class Dataset:
    """A re-iterable pipeline of elements, as `tf.data.Dataset`.

    Examples
    --------
    >>> import loom.tf as tf
    >>> ds = tf.data.Dataset.range(5).map(lambda x: x * 2).batch(2)
    >>> [b.tolist() for b in ds.as_numpy_iterator()]
    [[0, 2], [4, 6], [8]]
    """

    def __init__(self, make: Callable[[], Iterator], cardinality: int) -> None:
        self._make = make
        self._card = cardinality

    # ------------------------------------------------------------ sources

    @staticmethod
    def from_tensor_slices(tensors) -> Dataset:
        """One element per row of `tensors` (a tensor, array, list, or tuple/dict of them)."""
        tensors = _lists_as_tensors(tensors)
        leaves = [_as_array(x) for x in _leaves(tensors)]
        if not leaves:
            raise LoomValueError("loom.tf.data.Dataset.from_tensor_slices: nothing to slice")
        n = leaves[0].shape[0] if leaves[0].ndim else None
        for a in leaves:
            if a.ndim == 0 or a.shape[0] != n:
                raise LoomValueError("loom.tf.data.Dataset.from_tensor_slices: every component needs the same "
                                     f"first dimension; got shapes {[list(x.shape) for x in leaves]}")

        def make():
            for i in range(n):
                yield _rebuild(tensors, iter([loom.tensor(a[i]) for a in leaves]))
        return Dataset(make, n)

    @staticmethod
    def from_tensors(tensors) -> Dataset:
        """A dataset of one element: `tensors` itself."""
        tensors = _lists_as_tensors(tensors)
        leaves = [_as_array(x) for x in _leaves(tensors)]

        def make():
            yield _rebuild(tensors, iter([loom.tensor(a) for a in leaves]))
        return Dataset(make, 1)

    @staticmethod
    def range(*args, dtype=loom.int64, name=None) -> Dataset:
        """int64 scalars from `range(*args)`."""
        r = range(*[int(a) for a in args])
        d = dtype

        def make():
            for i in r:
                yield loom.tensor(np.array(i, dtype=d.np))
        return Dataset(make, len(r))

    @staticmethod
    def from_generator(generator, output_types=None, output_shapes=None, args=None, output_signature=None):
        """Elements produced by calling `generator(*args)` afresh for every iteration."""
        sig = output_signature if output_signature is not None else output_types

        def make():
            for el in generator(*(args or ())):
                yield _normalize(el) if sig is None else _conform(el, sig)
        return Dataset(make, UNKNOWN_CARDINALITY)

    @staticmethod
    def counter(start=0, step=1, dtype=loom.int64, name=None) -> Dataset:
        """start, start + step, ... forever."""
        def make():
            for i in itertools.count(int(start), int(step)):
                yield loom.tensor(np.array(i, dtype=as_dtype(dtype).np))
        return Dataset(make, INFINITE_CARDINALITY)

    @staticmethod
    def sample_from_datasets(datasets, weights=None, seed=None, stop_on_empty_dataset=False,
                             rerandomize_each_iteration=None) -> Dataset:
        """Elements drawn from `datasets` at random (by `weights`) until they are all (or one is) exhausted."""
        datasets = list(datasets)
        w = np.full(len(datasets), 1.0 / len(datasets)) if weights is None else np.asarray(
            weights.numpy() if isinstance(weights, _Tensor) else weights, np.float64)

        def make():
            rng = np.random.default_rng(seed)
            its = [iter(d._make()) for d in datasets]
            live = np.array(w / w.sum())
            while live.sum() > 0:
                k = int(rng.choice(len(its), p=live / live.sum()))
                el = next(its[k], _END)
                if el is _END:
                    if stop_on_empty_dataset:
                        return
                    live[k] = 0.0
                    continue
                yield el
        return Dataset(make, UNKNOWN_CARDINALITY)

    @staticmethod
    def choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset=True) -> Dataset:
        """The next element of `datasets[i]` for each index `i` that `choice_dataset` yields."""
        datasets = list(datasets)

        def make():
            its = [iter(d._make()) for d in datasets]
            for c in choice_dataset._make():
                el = next(its[int(c)], _END)
                if el is _END:
                    if stop_on_empty_dataset:
                        return
                    continue
                yield el
        return Dataset(make, UNKNOWN_CARDINALITY)

    @staticmethod
    def zip(*datasets, name=None) -> Dataset:
        """Tuples of the elements of `datasets` (a tuple of datasets also works); stops at the shortest."""
        if len(datasets) == 1 and isinstance(datasets[0], (tuple, list, dict)):
            datasets = datasets[0]
        if isinstance(datasets, dict):
            keys = list(datasets)

            def make_d():
                for els in zip(*[datasets[k] for k in keys]):
                    yield dict(zip(keys, els))
            return Dataset(make_d, _min_card([datasets[k]._card for k in keys]))

        def make():
            yield from zip(*datasets)
        return Dataset(make, _min_card([d._card for d in datasets]))

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator:
        return iter(self._make())

    def as_numpy_iterator(self) -> Iterator:
        """The elements with every tensor as a NumPy array."""
        for el in self:
            yield _map_struct(lambda t: t.numpy() if isinstance(t, _Tensor) else t, el)

    def cardinality(self) -> _Tensor:
        """The number of elements as an int64 scalar (-1 infinite, -2 unknown)."""
        return loom.tensor(np.array(self._card, dtype=np.int64))

    def __len__(self) -> int:
        if self._card < 0:
            raise TypeError("The dataset length is " + ("infinite." if self._card == INFINITE_CARDINALITY
                                                        else "unknown."))
        return self._card

    def take(self, count, name=None) -> Dataset:
        """The first `count` elements (all of them for -1)."""
        count = int(count)
        if count < 0:
            return self

        def make():
            return itertools.islice(self._make(), count)
        return Dataset(make, count if self._card < 0 and self._card == INFINITE_CARDINALITY
                       else (min(count, self._card) if self._card >= 0 else UNKNOWN_CARDINALITY))

    def skip(self, count, name=None) -> Dataset:
        """All but the first `count` elements."""
        count = int(count)

        def make():
            return itertools.islice(self._make(), count, None)
        card = self._card if self._card < 0 else max(self._card - count, 0)
        return Dataset(make, card)

    def repeat(self, count=None, name=None) -> Dataset:
        """The dataset `count` times over (forever if None or -1)."""
        n = -1 if count is None else int(count)

        def make():
            k = 0
            while n < 0 or k < n:
                empty = True
                for el in self._make():
                    empty = False
                    yield el
                k += 1
                if empty:
                    return
        card = INFINITE_CARDINALITY if n < 0 and self._card != 0 else (
            self._card * n if self._card >= 0 else self._card)
        return Dataset(make, card)

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None) -> Dataset:
        """`map_func` applied to every element (tuple elements are passed as separate arguments)."""
        def make():
            for el in self._make():
                yield _normalize(_apply(map_func, el))
        return Dataset(make, self._card)

    def filter(self, predicate, name=None) -> Dataset:
        """The elements for which `predicate` is true."""
        def make():
            for el in self._make():
                if bool(_apply(predicate, el)):
                    yield el
        return Dataset(make, UNKNOWN_CARDINALITY if self._card != INFINITE_CARDINALITY else self._card)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True, name=None) -> Dataset:
        """Elements drawn at random from a buffer of `buffer_size` (TensorFlow's streaming shuffle)."""
        buffer_size = int(buffer_size)
        if buffer_size <= 0:
            raise LoomValueError(f"loom.tf.data.Dataset.shuffle: buffer_size must be positive, got {buffer_size}")
        base = seed if seed is not None else int(loom.randint(0, 2 ** 31 - 1, (1,)).item())
        epoch = [0]

        def make():
            rng = np.random.default_rng([int(base), epoch[0]])
            if reshuffle_each_iteration:
                epoch[0] += 1
            buf: list = []
            for el in self._make():
                if len(buf) < buffer_size:
                    buf.append(el)
                    continue
                k = int(rng.integers(len(buf)))
                yield buf[k]
                buf[k] = el
            while buf:
                k = int(rng.integers(len(buf)))
                yield buf.pop(k)
        return Dataset(make, self._card)

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None,
              name=None) -> Dataset:
        """Consecutive elements stacked into batches of `batch_size` (the last may be smaller)."""
        batch_size = int(batch_size)

        def stack(els):
            leaves = [_leaves(e) for e in els]
            cols = [loom.tensor(np.stack([np.asarray(row[j].numpy()) for row in leaves]))
                    for j in range(len(leaves[0]))]
            return _rebuild(els[0], iter(cols))

        def make():
            return _batches(self._make(), batch_size, drop_remainder, stack)
        if self._card < 0:
            card = self._card
        else:
            card = self._card // batch_size if drop_remainder else -(-self._card // batch_size)
        return Dataset(make, card)

    def unbatch(self, name=None) -> Dataset:
        """Split every batch back into its rows."""
        def make():
            for el in self._make():
                leaves = _leaves(el)
                for i in range(leaves[0].shape[0]):
                    yield _rebuild(el, iter([x[i] for x in leaves]))
        return Dataset(make, UNKNOWN_CARDINALITY)

    def prefetch(self, buffer_size, name=None) -> Dataset:
        """The same elements (loom's pipeline is synchronous; the buffer size is accepted)."""
        return self

    def cache(self, filename="", name=None) -> Dataset:
        """The elements, computed on the first full iteration and replayed from memory afterwards."""
        store: list = []
        done = [False]

        def make():
            if done[0]:
                yield from store
                return
            store.clear()
            for el in self._make():
                store.append(el)
                yield el
            done[0] = True
        return Dataset(make, self._card)

    def enumerate(self, start=0, name=None) -> Dataset:
        """(index, element) pairs with int64 indices from `start`."""
        def make():
            for i, el in enumerate(self._make(), int(start)):
                yield (loom.tensor(np.array(i, dtype=np.int64)), el)
        return Dataset(make, self._card)

    def concatenate(self, dataset, name=None) -> Dataset:
        """This dataset's elements followed by `dataset`'s."""
        def make():
            yield from self._make()
            yield from dataset._make()
        card = self._card + dataset._card if self._card >= 0 and dataset._card >= 0 else \
            min(self._card, dataset._card)
        return Dataset(make, card)

    def take_while(self, predicate, name=None) -> Dataset:
        """The elements up to (not including) the first for which `predicate` is false."""
        def make():
            for el in self._make():
                if not bool(_apply(predicate, el)):
                    return
                yield el
        return Dataset(make, UNKNOWN_CARDINALITY if self._card != INFINITE_CARDINALITY else self._card)

    def flat_map(self, map_func, name=None) -> Dataset:
        """The elements of the datasets `map_func` returns for each element, one dataset after another."""
        def make():
            for el in self._make():
                yield from _as_dataset(_apply(map_func, el), "flat_map")._make()
        return Dataset(make, UNKNOWN_CARDINALITY)

    def scan(self, initial_state, scan_func, name=None) -> Dataset:
        """`scan_func(state, element) -> (new_state, output)` run along the dataset, yielding the outputs."""
        def make():
            state = _normalize(initial_state)
            for el in self._make():
                state, out = scan_func(state, el)
                state = _normalize(state)
                yield _normalize(out)
        return Dataset(make, self._card)

    def unique(self, name=None) -> Dataset:
        """The elements (scalars) without repeats, in order of first appearance."""
        def make():
            seen = set()
            for el in self._make():
                key = _as_array(el).item()
                if key not in seen:
                    seen.add(key)
                    yield el
        return Dataset(make, UNKNOWN_CARDINALITY)

    def get_single_element(self, name=None):
        """The dataset's only element (an error unless it has exactly one)."""
        els = list(itertools.islice(self._make(), 2))
        if len(els) != 1:
            raise LoomValueError(f"loom.tf.data.Dataset.get_single_element: the dataset has "
                                 f"{'no' if not els else 'more than one'} element; it must have exactly one")
        return els[0]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        from loom.tf._unsupported import UnsupportedFeatureError
        raise UnsupportedFeatureError(f"tf.data.Dataset.{name} is not supported by loom.tf")

    def window(self, size, shift=None, stride=1, drop_remainder=False, name=None) -> Dataset:
        """Windows of `size` elements (every `stride`-th one) starting every `shift` elements; each window
        is a structure like the element's with a Dataset in place of each component (batch it in a
        `flat_map`). Shorter windows at the end are kept unless `drop_remainder`."""
        size = int(size)
        shift = size if shift is None else int(shift)
        stride = int(stride)
        if size <= 0 or shift <= 0 or stride <= 0:
            raise LoomValueError(f"loom.tf.data.Dataset.window: size, shift and stride must be positive, got "
                                 f"size={size}, shift={shift}, stride={stride}")
        span = (size - 1) * stride + 1

        def make():
            buf: collections.deque = collections.deque()
            source = iter(self._make())
            skip = 0  # Elements between windows still to drop (when shift > the window's span).
            while True:
                while len(buf) < span:
                    el = next(source, _END)
                    if el is _END:
                        break
                    if skip:
                        skip -= 1
                    else:
                        buf.append(el)
                if not buf or (drop_remainder and len(buf) < span):
                    return
                items = list(itertools.islice(buf, 0, span, stride))
                cols = [_listed([_leaves(e)[j] for e in items]) for j in range(len(_leaves(items[0])))]
                yield _rebuild(items[0], iter(cols))
                dropped = min(shift, len(buf))
                for _ in range(dropped):
                    buf.popleft()
                skip = shift - dropped
        card = self._card
        if card >= 0:
            card = max(0, (card - span) // shift + 1) if drop_remainder else -(-card // shift)
        return Dataset(make, card)

    def interleave(self, map_func, cycle_length=None, block_length=None, num_parallel_calls=None,
                   deterministic=None, name=None) -> Dataset:
        """Elements of the datasets `map_func` returns, `block_length` at a time from `cycle_length` of them
        in turn (TensorFlow's order)."""
        cycle = 1 if cycle_length is None or int(cycle_length) < 0 else int(cycle_length)
        block = 1 if block_length is None else int(block_length)

        def make():
            # TensorFlow's order: slot `ci` yields up to `block` elements, then the next slot; an empty
            # slot is filled from the next input; an exhausted one is emptied and its turn passes on.
            source = self._make()
            slots: list = [None] * cycle
            ci = bi = 0
            end_of_input = False
            while not end_of_input or any(it is not None for it in slots):
                it = slots[ci]
                if it is not None:
                    try:
                        el = next(it)
                    except StopIteration:
                        slots[ci], bi, ci = None, 0, (ci + 1) % cycle
                        continue
                    bi += 1
                    if bi == block:
                        bi, ci = 0, (ci + 1) % cycle
                    yield el
                elif not end_of_input:
                    try:
                        slots[ci] = iter(_as_dataset(_apply(map_func, next(source)), "interleave")._make())
                    except StopIteration:
                        end_of_input = True
                else:
                    bi, ci = 0, (ci + 1) % cycle
        return Dataset(make, UNKNOWN_CARDINALITY)

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False,
                     name=None) -> Dataset:
        """Batches whose components are padded (at the end of each dimension) to the longest in the batch,
        or to `padded_shapes` where given."""
        batch_size = int(batch_size)

        def stack(els):
            rows = [_leaves(e) for e in els]
            shapes = _along(padded_shapes, els[0])
            pads = _along(padding_values, els[0])
            cols = []
            for j in range(len(rows[0])):
                arrs = [np.asarray(r[j].numpy()) for r in rows]
                want = [max(a.shape[d] for a in arrs) for d in range(arrs[0].ndim)]
                if shapes[j] is not None:
                    given = [int(v) if v is not None and int(v) >= 0 else None for v in shapes[j]]
                    for d, g in enumerate(given):
                        if g is not None:
                            if g < want[d]:
                                raise LoomValueError(f"loom.tf.data.Dataset.padded_batch: an element has size "
                                                     f"{want[d]} in dimension {d}, more than padded_shapes' {g}")
                            want[d] = g
                fill = 0 if pads[j] is None else np.asarray(_as_array(pads[j]))
                out = np.full([len(arrs)] + want, fill, dtype=arrs[0].dtype)
                for i, a in enumerate(arrs):
                    out[(i,) + tuple(slice(0, n) for n in a.shape)] = a
                cols.append(loom.tensor(out))
            return _rebuild(els[0], iter(cols))

        def make():
            return _batches(self._make(), batch_size, drop_remainder, stack)
        card = self._card if self._card < 0 else (
            self._card // batch_size if drop_remainder else -(-self._card // batch_size))
        return Dataset(make, card)

    def reduce(self, initial_state, reduce_func, name=None):
        """Fold the elements into a state: `state = reduce_func(state, element)` from `initial_state`."""
        state = _normalize(initial_state)
        for el in self._make():
            state = _normalize(reduce_func(state, el))
        return state

    def with_options(self, options, name=None) -> Dataset:
        """The same dataset (loom's pipeline has no threading or optimisation options to set)."""
        return self

    @property
    def options(self):
        return Options()

    def apply(self, transformation_func) -> Dataset:
        """`transformation_func(self)`."""
        return transformation_func(self)

    @property
    def element_spec(self) -> Any:
        """The shapes and dtypes of the first element, as TensorSpecs."""
        from loom.tf._core import TensorSpec
        first = next(iter(self._make()))
        return _map_struct(lambda t: TensorSpec(t.shape, t.dtype), first)


def _along(spec, template) -> list:
    """One entry of `spec` (a structure like the element's, or None) per component of `template`."""
    if spec is None:
        return [None] * len(_leaves(template))
    if isinstance(template, dict):
        return [x for k in template for x in _along(spec[k], template[k])]
    if isinstance(template, (tuple, list)):
        return [x for sp, t in zip(spec, template) for x in _along(sp, t)]
    return [spec]


_END = object()


def _conform(el, sig):
    """A generator's element as the structure and dtypes of `output_signature` (or `output_types`)."""
    if isinstance(sig, dict):
        return {k: _conform(el[k], sig[k]) for k in sig}
    if isinstance(sig, (tuple, list)):
        return tuple(_conform(e, s) for e, s in zip(el, sig))
    return convert_to_tensor(el, getattr(sig, "dtype", sig))


def _listed(items: list) -> Dataset:
    """A dataset of the given elements (one window component)."""
    return Dataset(lambda: iter(items), len(items))


def _as_dataset(ds, where: str) -> Dataset:
    if not isinstance(ds, Dataset):
        raise LoomValueError(f"loom.tf.data.Dataset.{where}: the function must return a Dataset, got "
                             f"{type(ds).__name__}")
    return ds


class Options:
    """`tf.data.Options`: accepted and ignored (loom's pipeline is synchronous and unoptimised)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {})

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._values.setdefault(name, Options())

    def __setattr__(self, name: str, value) -> None:
        self._values[name] = value


def _min_card(cards) -> int:
    finite = [c for c in cards if c >= 0]
    if finite:
        return min(finite)
    return UNKNOWN_CARDINALITY if UNKNOWN_CARDINALITY in cards else INFINITE_CARDINALITY


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.data", "tf.data")
