"""Plots of a run (matplotlib, the ``plots`` extra): TFLOP/s against sequence length per back end,
and a roofline placing each case against the GPU's compute and bandwidth ceilings."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _points(run: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for bench in run.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if isinstance(info.get("tflops"), (int, float)) and info.get("backend"):
            out.append(info)
    return out


def write_plots(folder: Path, run: dict[str, Any]) -> list[str]:
    """``tflops_vs_seqlen.png`` and ``roofline.png`` in ``folder``; what was written, or why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["plots skipped: matplotlib is not installed (pip install -e \".[plots]\")"]
    points = _points(run)
    if not points:
        return ["plots skipped: no timed results in this run"]
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    by_backend: dict[str, list[tuple[int, float]]] = {}
    for p in points:
        if isinstance(p.get("max_seqlen_k"), int):
            by_backend.setdefault(p["backend"], []).append((p["max_seqlen_k"], p["tflops"]))
    if not by_backend:
        written.append("TFLOP/s plot skipped: the results carry no max_seqlen_k")
    else:
        written.append(_throughput(plt, folder, by_backend))
    written += _roofline(plt, folder, points)
    return written


def _throughput(plt: Any, folder: Path, by_backend: dict[str, list[tuple[int, float]]]) -> str:
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)
    for backend, xy in sorted(by_backend.items()):
        xy.sort()
        ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=backend)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("keys per sequence (max seqlen_k)")
    ax.set_ylabel("TFLOP/s (exact-mask FLOPs)")
    ax.set_title("Attention throughput by back end")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "tflops_vs_seqlen.png", dpi=120)
    plt.close(fig)
    return str(folder / "tflops_vs_seqlen.png")


def _roofline(plt: Any, folder: Path, points: list[dict[str, Any]]) -> list[str]:
    measured = [(p["ceiling_matmul_tflops"], p["ceiling_matmul_tflops"] / p["ceiling_copy_tbps"]) for p in points
                if isinstance(p.get("ceiling_matmul_tflops"), (int, float))
                and isinstance(p.get("ceiling_copy_tbps"), (int, float))]
    peaks = measured or [(p["peak_tflops"], p["ridge_intensity"]) for p in points
                         if isinstance(p.get("peak_tflops"), (int, float))
                         and isinstance(p.get("ridge_intensity"), (int, float))]
    if not peaks:
        return ["roofline skipped: the GPU's peak is not known (pass --attn-peak-tflops)"]
    peak, ridge = peaks[0]
    which = "measured ceilings" if measured else "datasheet ceilings"
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)
    xs = [p["arithmetic_intensity"] for p in points]
    lo, hi = min([*xs, ridge]) / 2, max([*xs, ridge]) * 2
    ax.plot([lo, ridge, hi], [peak * lo / ridge, peak, peak], color="black", label=f"ceilings ({peak:.0f} TFLOP/s,"
            f" {peak / ridge:.2f} TB/s)")
    for backend in sorted({p["backend"] for p in points}):
        mine = [p for p in points if p["backend"] == backend]
        ax.scatter([p["arithmetic_intensity"] for p in mine], [p["tflops"] for p in mine], label=backend, s=18)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOPs per minimal byte")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline ({which})")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "roofline.png", dpi=120)
    plt.close(fig)
    return [str(folder / "roofline.png")]
