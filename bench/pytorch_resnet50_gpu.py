#!/usr/bin/env python3
"""bench/pytorch_resnet50_gpu.py: the PyTorch side of the GPU benchmark, the
same work as experiments/gpu-bench.toml: torchvision resnet50 (1000 classes),
channels_last, AMP (fp16 with GradScaler, or bf16), cudnn.benchmark on,
AdamW lr 1e-3, batch 256 of synthetic 224x224 images already on the GPU, 10
warmup and 50 measured steps. Throughput = images / wall time over the
measured steps (one synchronisation before and after). Prints one JSON line.

  python3 bench/pytorch_resnet50_gpu.py --precision fp16 [--batch 256]
"""
import argparse
import json
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["fp32", "tf32", "fp16", "bf16"], default="fp16")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    dev = torch.device("cuda:0")
    model = torchvision.models.resnet50(num_classes=1000).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    scaler = torch.cuda.amp.GradScaler(enabled=a.precision == "fp16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    model.train()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    print(json.dumps({
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "precision": a.precision,
        "batch": a.batch,
        "images_per_second": a.batch * a.steps / seconds,
        "step_ms": 1000 * seconds / a.steps,
    }))


if __name__ == "__main__":
    main()
