"""loom.data: datasets, samplers, the DataLoader, sharded record files and a streaming pipeline.

The names, defaults and semantics of the first half follow `torch.utils.data`
(also importable as `loom.utils.data`); the record format is described in
`docs/record-format.md`.

Examples
--------
>>> from loom.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(loom.arange(6.0)), batch_size=4, shuffle=True, seed=0)
>>> [len(b[0]) for b in loader]
[4, 2]
"""
from loom.data.collate import default_collate, default_convert
from loom.data.dataloader import DataLoader
from loom.data.dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset, Subset,
                               TensorDataset, random_split)
from loom.data.pipeline import RecordPipeline
from loom.data.records import (RecordDataset, RecordReader, RecordWriter, decode_example, encode_example,
                               list_shards, read_records)
from loom.data.sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                               WeightedRandomSampler)
from loom.data.distributed import DistributedSampler, rank_shards
from loom.data.worker import WorkerInfo, get_worker_info
from loom.data import datasets, text, transforms  # noqa: E402  (submodules, as loom.data.transforms etc.)

__all__ = [
    "BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset", "DistributedSampler",
    "IterableDataset", "RandomSampler",
    "RecordDataset", "RecordPipeline", "RecordReader", "RecordWriter", "Sampler", "SequentialSampler",
    "StackDataset", "Subset", "SubsetRandomSampler", "TensorDataset", "WeightedRandomSampler", "WorkerInfo",
    "datasets", "decode_example", "default_collate", "default_convert", "encode_example", "get_worker_info",
    "list_shards", "random_split", "rank_shards", "read_records", "text", "transforms",
]
