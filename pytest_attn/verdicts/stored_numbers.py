"""The numbers of a stored run that feed a verdict, checked when the run is read (:func:`.baseline.check_run`):
a baseline whose numbers would blind the gate -- every precision negative made a 300 % slowdown AMBIGUOUS, a
``stats.median`` of 1e300 against repeats of milliseconds was used as it was, a precision of 1e300 overflowed the
noise at the session's end -- is refused at start-up, naming the case, the field and what it must be. Pure.

What a verdict reads of a stored case: :func:`~.runs.bench_of` (``stats.median`` as the case's median, the
record's ``timing.precision`` as its within-run noise, its repeats and their SM clocks, its SM clock and stop
reason) and :mod:`.rule` (the timer pin: timer, calls per sample, input sets; ``timing.host_gap``; the record's
device). Repeats are checked by :func:`.baseline.check_run` itself.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.stats import OUTLIER_FACTOR, median, times_off


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


#: The largest within-run precision (half-width of the median's 95 % CI over the median) a stored case may hold:
#: 10,000 %, a sample 200x the median among five. A figure past it is a broken file, not a measurement, and one
#: like 1e300 overflowed the gate's noise (an OverflowError at the session's end).
MAX_PRECISION = 100.0
#: A precision of "inf" is what the record's codec writes for a median of fewer samples than this.
MIN_CI_SAMPLES = 5


def _number(value: Any) -> float | None:
    """A JSON number, or one of the strings the record's codec writes for a non-finite float; else None (a
    bool, a string, a list: not a number here, though Python would take ``true`` as 1)."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def record_numbers(info: dict[str, Any], stored_median: float) -> str:
    """What is wrong with the numbers of a stored record that feed a verdict (:func:`~.runs.bench_of` and
    :mod:`.rule` read them), or "": the median and its precision, the stored ``stats.median`` against the
    record's own median (or its repeats'), the SM clock, the timer's calls per sample and input sets, the share
    of an events figure the host's launches took."""
    timing, clocks = info.get("timing") or {}, info.get("clocks") or {}
    median_s = _number(timing.get("median_s"))
    if median_s is None or not math.isfinite(median_s) or median_s <= 0:
        return f"timing.median_s {timing.get('median_s')!r}, not a finite positive number of seconds"
    samples = len(timing.get("samples_s") or ())
    precision = _number(timing.get("precision"))
    if precision is None or math.isnan(precision) or precision < 0:
        return f"timing.precision {timing.get('precision')!r}, not a number of 0 or more"
    if precision == math.inf and samples >= MIN_CI_SAMPLES:
        return (f"timing.precision inf with {samples} samples (it is inf only for a median of fewer than"
                f" {MIN_CI_SAMPLES})")
    if math.isfinite(precision) and precision >= MAX_PRECISION:
        return f"timing.precision {precision:g}, past {MAX_PRECISION:g} (a median's 95% CI of +-{MAX_PRECISION:.0%})"
    repeats = timing.get("repeats_s") or ()
    reference = median(list(repeats)) if repeats else median_s
    if times_off(stored_median, reference) > OUTLIER_FACTOR:
        of = "the median of its repeats" if repeats else "its record's timing.median_s"
        return (f"stats.median {stored_median:.6g} s, {times_off(stored_median, reference):.3g}x off {of}"
                f" ({reference:.6g} s; more than {OUTLIER_FACTOR:g}x: the two would gate two different cases)")
    clock = clocks.get("sm_clock_mhz")
    if clock is not None and not _positive(clock):
        return f"clocks.sm_clock_mhz {clock!r}, not a finite positive number of MHz"
    for key in ("calls_per_sample", "input_sets"):
        if key in timing and not _whole(timing[key]):
            return f"timing.{key} {timing[key]!r}, not a whole number of 1 or more"
    gap = timing.get("host_gap")
    if gap is not None and not (_number(gap) is not None and 0 <= _number(gap) <= 1):  # type: ignore[operator]
        return f"timing.host_gap {gap!r}, not a share between 0 and 1"
    kernels = timing.get("kernels_s")
    if kernels is not None and not _positive(kernels):
        return f"timing.kernels_s {kernels!r}, not a finite positive number of seconds"
    return ""


def legacy_numbers(info: dict[str, Any], stats: dict[str, Any]) -> str:
    """The same for a benchmark without a record (an older pytest-attn's flat ``extra_info``, or plain
    pytest-benchmark): its ``precision``, SM clock and the IQR its spread falls back to."""
    precision = info.get("precision")
    if precision is not None and ((p := _number(precision)) is None or math.isnan(p) or p < 0
                                  or MAX_PRECISION <= p < math.inf):
        return f"extra_info.precision {precision!r}, not a number from 0 to {MAX_PRECISION:g} (or inf)"
    clock = info.get("sm_clock_mhz")
    if clock is not None and not _positive(clock):
        return f"extra_info.sm_clock_mhz {clock!r}, not a finite positive number of MHz"
    iqr = stats.get("iqr")
    if iqr is not None and ((q := _number(iqr)) is None or not math.isfinite(q) or q < 0):
        return f"stats.iqr {iqr!r}, not a finite number of 0 or more"
    return ""
