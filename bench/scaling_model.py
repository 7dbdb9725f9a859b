#!/usr/bin/env python3
"""bench/scaling_model.py: data-parallel scaling on paper, from measured parts.

Given one 1-rank run that xrun stored with profile.layers = true (each
layer's backward time per micro-batch) and its checkpoint (each layer's
gradient bytes), predicts the step time and scaling efficiency of N ranks
whose gradients are all-reduced at a bus bandwidth W, as xrun's ranks do:

  * the backward pass runs layer by layer, last layer first, as measured;
  * a layer's gradients are complete when its backward is done; once the
    complete gradients not yet sent reach the bucket size (distributed.
    bucket_mb), they go out as one all-reduce; what is left goes at the end;
  * all-reduces run one after another, each taking bytes x 2 (N - 1) / N / W
    (a ring, nccl-tests' bus bandwidth), alongside the backward pass;
  * the step of N ranks = the 1-rank step + what the last all-reduce ends
    after the backward pass (the exposed time); every rank computes as fast
    as the one measured (true for one GPU per rank; CPU ranks sharing a
    machine's cores and memory are slower, which the model leaves out).

Instead of measured layer times, --backward-ms T spreads T over the layers
in proportion to their backward FLOPs (the run's layer_costs), with
--step-ms the 1-rank step: the way to put a GPU nobody here has measured on
paper, with the assumption in plain sight.

  bench/scaling_model.py --db ranks.db --run 1 --checkpoint one.safetensors \\
      --link "gloo loopback=1.3" --ranks 2 --bucket-mb 0 25

Standard library only (sqlite3, json, struct).
"""
import argparse
import json
import sqlite3
import struct
import sys

# Bus bandwidths (GB/s) assumed for --link presets; replace them with
# `xrun doctor --allreduce` (CPU) or nccl-tests' all_reduce_perf busbw
# measured on the machine in question.
PRESETS = {
    # An RTX 4090 D pair: no NVLink, no peer access; NCCL stages through
    # pinned host memory over PCIe 4.0 x16 (31.5 GB/s a direction).
    "PCIe 4.0 x16 via host": 12.0,
    # An RTX 3090 pair on its NVLink bridge: 4 NVLink 3 links, 56.25 GB/s a
    # direction; about 80% of it as bus bandwidth.
    "NVLink 3 (RTX 3090 bridge)": 45.0,
    # H100/H200 SXM: 18 NVLink 4 links, 450 GB/s a direction; about 80%.
    "NVLink 4 (H100/H200 SXM)": 360.0,
}


def checkpoint_layer_bytes(path):
    """Gradient bytes per layer: the F32 weights and biases of a safetensors
    checkpoint, by layer ("layer1.0.conv1.weight" -> "layer1.0.conv1")."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    out = {}
    for name, entry in header.items():
        if name == "__metadata__" or not name.endswith((".weight", ".bias")):
            continue
        count = 1
        for d in entry["shape"]:
            count *= d
        layer = name.rsplit(".", 1)[0]
        out[layer] = out.get(layer, 0) + 4 * count  # fp32 gradients
    return out


def run_layers(db, run, backward_ms=None):
    """(layer, backward ms per micro-batch) in backward order, and the run's
    median step (ms)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rid, step_ms = con.execute(
        "SELECT id, step_ms_median FROM runs WHERE id = ? OR uuid LIKE ?", (run, f"{run}%")
    ).fetchone()
    order, flops = [], {}
    for layer, pass_, f in con.execute(
        "SELECT layer, pass, flops FROM layer_costs WHERE run = ? ORDER BY rowid", (rid,)
    ):
        if layer not in order:
            order.append(layer)
        if pass_ != "forward":
            flops[layer] = flops.get(layer, 0.0) + (f or 0.0)
    if not order:
        sys.exit(f"run {run}: no layer_costs (stored by xrun before schema 9?)")
    if backward_ms is not None:
        total = sum(flops.values())
        times = {l: backward_ms * flops.get(l, 0.0) / total for l in order}
    else:
        times = {
            name: ms / calls
            for name, calls, ms in con.execute(
                "SELECT name, calls, total_ms FROM kernels WHERE run = ? AND phase = 'backward'",
                (rid,),
            )
            if calls
        }
        if not times:
            sys.exit(f"run {run}: no layer times (train it with profile.layers = true)")
    return [(l, times.get(l, 0.0)) for l in reversed(order)], step_ms


def exposed_ms(layers, grad_bytes, ranks, bus_gbps, bucket_mb):
    """The all-reduce time left after the backward pass (ms), xrun's buckets."""
    per_byte_ms = 2.0 * (ranks - 1) / ranks / (bus_gbps * 1e9) * 1e3
    bucket = bucket_mb * 1024 * 1024
    t, pending, comm_free = 0.0, 0, 0.0
    for layer, ms in layers:
        t += ms
        pending += grad_bytes.get(layer, 0)
        if bucket > 0 and pending >= bucket:
            comm_free = max(comm_free, t) + pending * per_byte_ms
            pending = 0
    if pending:
        comm_free = max(comm_free, t) + pending * per_byte_ms
    return max(0.0, comm_free - t)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True)
    p.add_argument("--run", required=True, help="a 1-rank run's id or UUID prefix")
    p.add_argument("--checkpoint", required=True, help="its train.checkpoint (gradient sizes)")
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--bucket-mb", type=float, nargs="+", default=[25.0])
    p.add_argument("--link", action="append", default=[],
                   help='"NAME=GB/s" bus bandwidth; default: the presets')
    p.add_argument("--backward-ms", type=float,
                   help="spread this backward time over the layers by their FLOPs")
    p.add_argument("--step-ms", type=float, help="the 1-rank step (default: the run's median)")
    a = p.parse_args()

    layers, step_ms = run_layers(a.db, a.run, a.backward_ms)
    if a.step_ms:
        step_ms = a.step_ms
    grads = checkpoint_layer_bytes(a.checkpoint)
    links = dict(PRESETS)
    if a.link:
        links = {name: float(gbps) for name, gbps in (l.rsplit("=", 1) for l in a.link)}
    total = sum(grads.values())
    print(f"1-rank step {step_ms:.1f} ms; backward {sum(ms for _, ms in layers):.1f} ms over "
          f"{len(layers)} layers; {total / 2**20:.1f} MiB of gradients a step\n")
    print("| link (bus GB/s) | bucket | " + " | ".join(f"{n} ranks" for n in a.ranks) + " |")
    print("|---|---:|" + "---:|" * len(a.ranks))
    for name, gbps in links.items():
        for bucket in a.bucket_mb:
            cells = []
            for n in a.ranks:
                step = step_ms + exposed_ms(layers, grads, n, gbps, bucket)
                cells.append(f"{step:.1f} ms ({100 * step_ms / step:.0f}%)")
            label = f"{bucket:g} MiB" if bucket > 0 else "after backward"
            print(f"| {name} ({gbps:g}) | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
