"""A loop written for Hugging Face accelerate: the model, optimizer and DataLoader handed
to `Accelerator.prepare` (which wraps the loader and reads one batch ahead of the
step), `accelerator.backward` in place of `loss.backward`, on the CPU.

Arguments: steps to train, the loader's workers, and the most seconds to train.
"""
import sys
import time

import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(256, generator=g)
        for _ in range(10):         # augmentation that takes the loader's CPU
            x = torch.fft.irfft(torch.fft.rfft(x) * 0.9, n=256).sin()
        return x[:96], int(i % 10)


def main(steps, workers, seconds):
    accelerator = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(96, 384), nn.GELU(), nn.Linear(384, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loader = DataLoader(Noisy(4096), batch_size=32, shuffle=True, num_workers=workers)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    end, step = time.monotonic() + seconds, 0
    while step < steps and time.monotonic() < end:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % 200 == 0:
                accelerator.print(f"step {step} loss {loss.item():.3f}")
            if step >= steps or time.monotonic() >= end:
                break
    accelerator.print("done")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6000,
         int(sys.argv[2]) if len(sys.argv) > 2 else 2,
         float(sys.argv[3]) if len(sys.argv) > 3 else 3600.0)
