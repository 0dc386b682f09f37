"""loom.data.DistributedSampler against torch.utils.data.DistributedSampler's partition rules."""
import pytest
import torch.utils.data as tud

import loom


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
def test_partition_matches_pytorch_without_shuffle(replicas, drop_last):
    for n in range(0, 11):
        for r in range(replicas):
            ours = loom.data.DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last)
            theirs = tud.DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last)
            assert list(ours) == list(theirs) and len(ours) == len(theirs), (n, r)


@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffled_shards_are_disjoint_cover_and_follow_the_epoch(drop_last):
    n, replicas = 23, 4
    samplers = [loom.data.DistributedSampler(range(n), replicas, r, seed=7, drop_last=drop_last)
                for r in range(replicas)]
    shards = [list(s) for s in samplers]
    flat = [i for s in shards for i in s]
    assert all(len(s) == len(samplers[0]) for s in shards)
    if drop_last:
        assert len(set(flat)) == len(flat) == 20  # Disjoint, the tail of 3 dropped.
    else:
        assert set(flat) == set(range(n)) and len(flat) == 24  # Padded by one repeated index.
    assert list(samplers[0]) == shards[0]  # Same epoch, same order.
    for s in samplers:
        s.set_epoch(1)
    assert [list(s) for s in samplers] != shards


def test_bad_arguments_raise():
    with pytest.raises(loom.LoomValueError, match="invalid rank 2"):
        loom.data.DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(loom.LoomValueError, match="init_process_group"):
        loom.data.DistributedSampler(range(4))
    with pytest.raises(TypeError, match="shuffle"):
        loom.data.DistributedSampler(range(4), 2, 0, shuffle=1)


def test_record_shards_per_rank_are_disjoint_and_cover_the_set(tmp_path):
    prefix = tmp_path / "train"
    with loom.data.RecordWriter(prefix, num_shards=4) as w:
        for i in range(20):
            w.write({"i": i})
    seen = []
    for r in range(2):
        mine = loom.data.rank_shards(prefix, num_replicas=2, rank=r)
        assert [f.split("-")[-3] for f in mine] == [f"{r:05d}", f"{r + 2:05d}"]
        seen.append(sorted(ex["i"] for ex in loom.data.read_records(mine)))
        assert len(loom.data.RecordDataset(mine)) == 10
    assert not set(seen[0]) & set(seen[1]) and sorted(seen[0] + seen[1]) == list(range(20))
    with pytest.raises(loom.LoomError, match="4 shard\\(s\\) cannot give each of 8 ranks one"):
        loom.data.rank_shards(prefix, num_replicas=8, rank=0)
    with pytest.raises(loom.LoomError, match="init_process_group\\(\\) has not been called"):
        loom.data.rank_shards(prefix)
    with pytest.raises(loom.LoomError, match="invalid rank 2"):
        loom.data.rank_shards(prefix, num_replicas=2, rank=2)
