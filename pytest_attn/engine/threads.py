"""How many threads torch's CPU kernels use in a run without a GPU.

torch starts one OpenMP thread per core. When another process holds one of those cores, every parallel
region waits at its barrier for the thread that cannot run: measured on a 2-core machine, the CPU fuzz
suite took 7.5 s with one thread and 14.1 s with two while one core was busy (8.3 s and 8.5 s idle).
So a CPU run uses half the CPUs this process may run on (at least one), leaving room for whatever else
the machine does; ``--attn-cpu-threads=N`` sets it.
"""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's share), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def auto_threads(cpus: int) -> int:
    """Half of ``cpus``, at least one."""
    return max(1, cpus // 2)


def set_torch_threads(threads: int) -> int:
    """Set torch's intra-op thread count; returns the count torch reports afterwards."""
    import torch

    torch.set_num_threads(threads)
    return torch.get_num_threads()
