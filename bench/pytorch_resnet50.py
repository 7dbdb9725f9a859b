#!/usr/bin/env python3
"""bench/pytorch_resnet50.py: the PyTorch side of the CPU benchmark, the same
work as bench/cpu-bench.toml: torchvision resnet50(num_classes=10),
channels_last (or contiguous), AdamW lr 1e-3 (PyTorch's fused CPU kernel
where the build has one, else its default), fp32, batch 32 of 32x32 images,
5 warmup and 30 measured steps. --precision bf16 runs forward and loss
under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's CPU mixed
precision: bf16 convolutions and matmuls, fp32 weights and optimizer).
Throughput = images / wall time over the measured steps. Prints one JSON
line.

  python3 bench/pytorch_resnet50.py --threads 2 [--batch 32] [--size 32] [--precision bf16]
"""
import contextlib
import argparse
import json
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--memory-format", default="channels_last",
                    choices=["channels_last", "contiguous"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    fmt = torch.channels_last if a.memory_format == "channels_last" else torch.contiguous_format
    model = torchvision.models.resnet50(num_classes=10).to(memory_format=fmt)
    try:  # the fastest AdamW the build has: fused on the CPU from PyTorch 2.4
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        adamw = "fused"
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        adamw = "default"
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, a.size, a.size).to(memory_format=fmt)
    y = torch.randint(0, 10, (a.batch,))
    model.train()
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with (torch.autocast("cpu", dtype=torch.bfloat16) if a.precision == "bf16"
              else contextlib.nullcontext()):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    measured = times[a.warmup:]
    times_ms = sorted(t * 1000 for t in measured)
    print(json.dumps({
        "torch": torch.__version__,
        "threads": a.threads,
        "batch": a.batch,
        "memory_format": a.memory_format,
        "precision": a.precision,
        "adamw": adamw,
        "images_per_second": a.batch * len(measured) / sum(measured),
        "median_step_ms": times_ms[len(times_ms) // 2],
    }))


if __name__ == "__main__":
    main()
