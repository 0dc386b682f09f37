"""The one error loom.data adds to loom.errors: a missing data file that is also a FileNotFoundError."""
from loom.errors import LoomError


class LoomFileNotFoundError(LoomError, FileNotFoundError):
    """A data set, shard or tokenizer file that is not where it was looked for (the message says where)."""
