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
            direction = "fwd+bwd" if str(bench.get("name", "")).endswith("fwdbwd]") else "fwd"
            out.append({**info, "direction": direction})
    return out


PANELS = ("prefill (seqlen_q = seqlen_k)", "decode and chunked prefill (seqlen_q < seqlen_k)")


def throughput_series(points: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """(panel, back end, direction) -> sorted (max seqlen_k, TFLOP/s): prefill-like cases apart from
    decode steps, whose TFLOP/s are two orders of magnitude lower at the same key length. Pure."""
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for p in points:
        sq, sk = p.get("max_seqlen_q"), p.get("max_seqlen_k")
        if not isinstance(sk, int):
            continue
        panel = PANELS[1] if isinstance(sq, int) and sq < sk else PANELS[0]
        series.setdefault((panel, p["backend"], p["direction"]), []).append((sk, p["tflops"]))
    return {key: sorted(xy) for key, xy in sorted(series.items())}


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
    series = throughput_series(points)
    if not series:
        written.append("TFLOP/s plot skipped: the results carry no max_seqlen_k")
    else:
        written.append(_throughput(plt, folder, series))
    written += _roofline(plt, folder, points)
    return written


def _throughput(plt: Any, folder: Path, series: dict[tuple[str, str, str], list[tuple[int, float]]]) -> str:
    """One panel for prefill-like cases, one for decode steps; a colour per back end, a marker per
    direction, points only (cases of one key length differ in heads and batch: no line joins them)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    backends = sorted({b for _, b, _ in series})
    colours = {b: plt.cm.tab20.colors[i % 20] for i, b in enumerate(backends)}
    for ax, panel in zip(axes, PANELS, strict=True):
        mine = {k: xy for k, xy in series.items() if k[0] == panel}
        for (_, backend, direction), xy in mine.items():
            ax.scatter([x for x, _ in xy], [y for _, y in xy], color=colours[backend],
                       marker="^" if direction == "fwd+bwd" else "o", label=f"{backend} {direction}", s=22)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("keys per sequence (max seqlen_k)")
        ax.set_ylabel("TFLOP/s (exact-mask FLOPs)")
        ax.set_title(panel if mine else f"{panel}: none in this run", fontsize=9)
        ax.grid(True, alpha=0.3)
        if mine:
            ax.legend(fontsize=7)
    fig.suptitle("Attention throughput by back end")
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
