#!/usr/bin/env python3
"""Per-step times and scaling efficiency of bench/atlas_run.sh over several GPU counts (issue 8).

Usage: bench/atlas_scaling.py OUT/atlas_2gpu.json OUT/atlas_4gpu.json OUT/atlas_8gpu.json

Reads the JSON that `scurry bench --json` writes (one per GPU count, the same recipe) and prints a
Markdown table: each preprocessing step's median wall time, each graph step's time, the pipeline
total (process start to the end of Leiden: context, simulation and preprocessing as the process
measured them, plus the graph steps), and the scaling efficiency of each step against the fewest
GPUs: t(n0) * n0 / (t(n) * n). Only the standard library is used.
"""
import json
import sys


def load(path):
    with open(path) as f:
        j = json.load(f)
    steps = {s["step"]: s["median_wall_s"] for s in j["steps"] if s["step"] not in ("device_copy", "upload")}
    graph = {}
    for key, value in j.get("graph", {}).items():
        if not isinstance(value, (int, float)) or key.endswith("_bytes") or key.endswith("modularity"):
            continue
        # "knn_ivf_flat (2 GPUs)" and "knn_ivf_flat" are one step whatever the count; "leiden (N GPUs)"
        # is Leiden spread over the GPUs, timed beside the one-GPU Leiden the pipeline uses
        if key.startswith("leiden ("):
            name = "leiden spread over the GPUs (not in the pipeline)"
        elif key.startswith("knn_"):
            name = key.split(" (")[0]
        else:
            name = key
        graph[name] = float(value)
    order = ["knn", "conn", "umap", "leiden"]
    graph = dict(sorted(graph.items(), key=lambda kv: ([i for i, o in enumerate(order) if kv[0].startswith(o)] or [9])[0]))
    total = float(j["process_to_here_s"]) + sum(v for k, v in graph.items() if "spread" not in k)
    return int(j["gpus"]), steps, graph, total, float(j.get("gpu_peak_bytes", 0))


def main(paths):
    if not paths:
        sys.exit(__doc__)
    runs = sorted((load(p) for p in paths), key=lambda r: r[0])
    counts = [r[0] for r in runs]
    n0 = counts[0]

    def row(name, times):
        cells = [f"{t:.3f}" if t is not None else "-" for t in times]
        t0 = times[0]
        effs = []
        for n, t in zip(counts[1:], times[1:]):
            effs.append(f"{t0 * n0 / (t * n):.2f}" if t0 and t else "-")
        return f"| {name} | " + " | ".join(cells) + (" | " + " | ".join(effs) if effs else "") + " |"

    head = "| step (s) | " + " | ".join(f"{n} GPUs" for n in counts)
    head += "".join(f" | efficiency {n0} -> {n}" for n in counts[1:]) + " |"
    print(head)
    print("|---" * (1 + 2 * len(counts) - 1) + "|")
    names = list(runs[0][1].keys())
    for name in names:
        print(row(name, [r[1].get(name) for r in runs]))
    print(row("**QC -> PCA**", [sum(r[1].values()) for r in runs]))
    for name in runs[0][2].keys():
        print(row(name, [r[2].get(name) for r in runs]))
    print(row("**pipeline (process start to Leiden)**", [r[3] for r in runs]))
    print()
    print("peak GPU memory per GPU (GiB): " + ", ".join(f"{n} GPUs {r[4] / 2**30:.1f}" for n, r in zip(counts, runs)))


if __name__ == "__main__":
    main(sys.argv[1:])
