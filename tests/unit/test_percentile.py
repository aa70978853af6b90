"""The one percentile definition of the benchmarks and the load reports agrees with numpy's default
(linear between closest ranks) and with the median, the reference implementations outside this repo."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from harness.load import LoadResult, percentile


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
def test_percentile_matches_numpy(n: int) -> None:
    values = [random.Random(n).lognormvariate(0, 1) for _ in range(n)]
    for q in (0, 1, 25, 50, 90, 99, 99.9, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_p50_is_the_median_and_p99_the_same_percentile() -> None:
    latencies = tuple(float(x) for x in (5, 1, 9, 3, 7, 2))
    result = LoadResult(concurrency=1, attempted=6, errors=0, seconds=1.0, latencies_ms=latencies)
    assert result.p50 == statistics.median(latencies) == 4.0
    assert result.p99 == pytest.approx(float(np.percentile(latencies, 99)))
    assert math.isnan(percentile([], 50))
