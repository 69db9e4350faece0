"""Opt-in clock locking (``--attn-lock-clocks``), always restored.

``off`` (default), ``base`` (the default applications clock), ``max`` (the maximum SM clock) or a
number of MHz, with ``:require`` (stop at start-up when it cannot be done) or ``:try`` (the default:
warn once and record "not locked"). Locking goes through NVML's ``nvmlDeviceSetGpuLockedClocks``
on every device the session uses, is read back, and is undone (``nvmlDeviceResetGpuLockedClocks``)
at the end of the session whatever ends it: normal exit, failures, Ctrl-C (pytest still
unconfigures), SIGTERM, SIGHUP (a closed ssh session) and SIGQUIT (a handler restores, then hands over
to the previous one) and, last, ``atexit``. It needs root; nothing here changes power limits,
persistence or compute mode.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .nvml import PynvmlDevice, visible_devices

TARGETS = ("off", "base", "max")
MODES = ("try", "require")
#: Signals that end a run without pytest unconfiguring (SIGINT is pytest's KeyboardInterrupt: it does).
GUARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))
READBACK_TOLERANCE_MHZ = 30  # NVML clocks move in ~15 MHz bins
HOW_TO_GRANT = (
    "locking GPU clocks needs root: run pytest as root (e.g. sudo -E env PATH=$PATH pytest ...), or have an"
    " administrator lock them with `sudo nvidia-smi --lock-gpu-clocks=MHZ,MHZ` and run with --attn-lock-clocks=off"
)


class ClockLockError(Exception):
    pass


class NoPermission(Exception):
    pass


class ClockControl(Protocol):
    """The NVML calls clock locking needs, for one device."""

    name: str

    def set_locked_clocks(self, min_mhz: int, max_mhz: int) -> None: ...  # raises NoPermission

    def reset_locked_clocks(self) -> None: ...

    def base_clock_mhz(self) -> int | None: ...

    def max_sm_clock_mhz(self) -> int | None: ...

    def sm_clock_mhz(self) -> int | None: ...


@dataclass(frozen=True)
class LockRequest:
    target: str | int  # "off", "base", "max" or MHz
    mode: str = "try"

    @property
    def off(self) -> bool:
        return self.target == "off"


def parse_lock(text: str) -> LockRequest:
    """``off``, ``base``, ``max`` or MHz, optionally ``:require`` / ``:try``."""
    target, _, mode = text.strip().partition(":")
    mode = mode or "try"
    if mode not in MODES:
        raise ValueError(f"--attn-lock-clocks mode {mode!r} is not one of {', '.join(MODES)} (e.g. max:require)")
    if target in TARGETS:
        return LockRequest(target, mode)
    if target.isdigit() and int(target) > 0:
        return LockRequest(int(target), mode)
    raise ValueError(f"--attn-lock-clocks={text!r}: give off, base, max or a clock in MHz, optionally with"
                     " :require or :try (e.g. 1755:require)")


class ClockLocker:
    """Locks the requested clock on each device and restores every one it locked, once."""

    def __init__(self, controls: list[ClockControl], request: LockRequest, warn: Callable[[str], None]) -> None:
        self.controls, self.request, self.warn = controls, request, warn
        self.locked: list[ClockControl] = []
        self.state = "not locked"
        self._previous: dict[int, Any] = {}  # signal -> the handler it had before ours

    def _target(self, control: ClockControl) -> int | None:
        if isinstance(self.request.target, int):
            return self.request.target
        return control.base_clock_mhz() if self.request.target == "base" else control.max_sm_clock_mhz()

    def acquire(self) -> str:
        """Lock every device; returns the achieved state. Raises :class:`ClockLockError` in
        ``require`` mode when it cannot; in ``try`` mode warns once and returns "not locked (...)"."""
        if self.request.off:
            return self.state
        states = []
        controls = self.controls or [_NoDevice()]
        self._guard()  # before the first lock: a signal from here on restores what was locked
        for control in controls:
            target = self._target(control)
            try:
                if target is None:
                    raise ClockLockError(f"{control.name}: NVML does not say its {self.request.target} clock")
                try:
                    control.set_locked_clocks(target, target)
                except NoPermission:
                    raise ClockLockError(f"{control.name}: no permission to lock clocks. {HOW_TO_GRANT}") from None
                self.locked.append(control)
                seen = control.sm_clock_mhz()
                if seen is None or abs(seen - target) > READBACK_TOLERANCE_MHZ:
                    raise ClockLockError(f"{control.name}: asked for {target} MHz, NVML reads {seen} MHz back")
                states.append(f"locked at {target} MHz")
            except ClockLockError as exc:
                self.release()
                if self.request.mode == "require":
                    raise
                self.warn(f"pytest-attn: clocks not locked: {exc}")
                self.state = f"not locked ({exc})"
                return self.state
        self.state = "; ".join(dict.fromkeys(states))
        return self.state

    def release(self) -> None:
        """Undo every lock this session set (idempotent; errors are warned, not raised)."""
        self._unguard()
        while self.locked:
            control = self.locked.pop()
            try:
                control.reset_locked_clocks()
            except Exception as exc:
                self.warn(f"pytest-attn: could not restore the clocks of {control.name}: {exc}; restore them with"
                          " `sudo nvidia-smi --reset-gpu-clocks`")

    def _guard(self) -> None:
        atexit.register(self.release)
        for signum in GUARDED_SIGNALS:
            if signal.getsignal(signum) == signal.SIG_IGN:  # e.g. SIGHUP under nohup: the run goes on
                continue
            try:
                self._previous[signum] = signal.signal(signum, self.on_signal)
            except ValueError:  # not the main thread: atexit and pytest_unconfigure still restore
                return

    def _unguard(self) -> None:
        """Give each guarded signal back the handler it had (nothing is locked any more)."""
        while self._previous:
            signum, previous = self._previous.popitem()
            with contextlib.suppress(ValueError, TypeError):  # not the main thread; a handler from C
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)

    def on_signal(self, signum: int, frame: Any) -> None:
        """Restore the clocks, then do what the signal did before: the previous handler, or the default
        action (the process ends by that signal)."""
        previous = self._previous.get(signum)
        self.release()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)


class _NoDevice:
    """Stands for "no GPU seen through NVML": locking it fails with that reason."""

    name = "no GPU"

    def set_locked_clocks(self, min_mhz: int, max_mhz: int) -> None:
        raise ClockLockError("no GPU is visible through NVML (nvidia-ml-py missing, or no driver)")

    def reset_locked_clocks(self) -> None:
        return None

    def base_clock_mhz(self) -> int | None:
        return 1

    def max_sm_clock_mhz(self) -> int | None:
        return 1

    def sm_clock_mhz(self) -> int | None:
        return None


class NvmlClockControl:
    """:class:`ClockControl` through NVML for one device."""

    def __init__(self, device: PynvmlDevice, name: str) -> None:
        self._dev, self.name = device, name

    def set_locked_clocks(self, min_mhz: int, max_mhz: int) -> None:
        nv = self._dev.nv
        try:
            nv.nvmlDeviceSetGpuLockedClocks(self._dev.handle, min_mhz, max_mhz)
        except nv.NVMLError_NoPermission:
            raise NoPermission() from None

    def reset_locked_clocks(self) -> None:
        self._dev.nv.nvmlDeviceResetGpuLockedClocks(self._dev.handle)

    def base_clock_mhz(self) -> int | None:
        return self._dev.base_clock_mhz()

    def max_sm_clock_mhz(self) -> int | None:
        return self._dev.max_sm_clock_mhz()

    def sm_clock_mhz(self) -> int | None:
        return self._dev.sm_clock_mhz()


def nvml_controls() -> list[ClockControl]:
    """A control for the first GPU this process may use (the one the session measures on), or []."""
    found = visible_devices()
    return [NvmlClockControl(found[0].device, found[0].name)] if found else []


#: How the plugin finds the devices to lock (tests replace it with fakes).
CONTROL_FACTORY: Callable[[], list[ClockControl]] = nvml_controls
