"""A run summary's digests and counts, made in numpy, against their plain
Python definitions (semantics.md §12)."""

import hashlib

import numpy as np
import pytest

from dtrforensics.engine.summary import decimal_list, distinct_count, victims_sha256


def _joined(values) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


@pytest.mark.parametrize("values", [
    [], [0], [7], [9, 10], [0, 9, 10, 99, 100, 101, 999, 1000], [5, 5, 5],
    [2**62, 1, 12345678901234], [-1, 3], list(range(1200)), [10**9 - i for i in range(1500)],
])
def test_victims_digest_is_the_reference_text(values):
    expected = hashlib.sha256(_joined(values).encode()).hexdigest()
    assert victims_sha256(values) == expected
    assert victims_sha256(np.array(values, dtype=np.int64)) == expected


def test_decimal_list_on_random_ids():
    rng = np.random.default_rng(7)
    for high, n in ((2, 5000), (10, 3000), (11, 1000), (700, 500), (700, 20000), (10**6, 4000)):
        ids = rng.integers(0, high, n)
        assert decimal_list(ids).decode() == _joined(ids.tolist())[1:-1]


def test_distinct_count():
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 1000):
        values = rng.integers(0, 50, n)
        assert distinct_count(values) == len(set(values.tolist()))
