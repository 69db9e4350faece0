"""Throttle classification of NVML's clocks-event reasons (pytest_attn.core.throttle). Pure."""

from __future__ import annotations

from pytest_attn.core.throttle import assess, is_throttled, reason_names


def test_throttle_classification():
    assert reason_names(0x4 | 0x40) == ["power cap", "thermal (hardware)"]
    assert is_throttled(0x4) and not is_throttled(0x1) and not is_throttled(None)
    keep, report = assess([0x4, 0x0, 0x4 | 0x20, 0x1, None], [1650, 1980, 1400, 1980, None], 1980, drop=True)
    assert keep == [0, 1, 3, 4]  # 1400 < 75 % of 1980
    assert (report.samples, report.throttled, report.dropped) == (5, 2, 1)
    assert report.reasons == {"power cap": 2, "thermal (software)": 1}
    assert report.describe() == ("2/5 samples throttled (power cap 2, thermal (software) 1); 1 dropped under 75% of"
                                 " the nominal clock")
    assert not report.mostly_throttled
    _, mostly = assess([0x4, 0x4, 0x0], [1650, 1650, 1980], 1980)
    assert mostly.mostly_throttled and mostly.dropped == 0
    _, unknown = assess([None, None], [None, None], None)
    assert not unknown.known and "not known" in unknown.describe()
    keep_all, _ = assess([0x4], [100], 1980, drop=True)
    assert keep_all == [0]  # never drop every sample
