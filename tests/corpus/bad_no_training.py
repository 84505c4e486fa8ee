"""Runs a model forward on in-memory tensors, without a DataLoader or an optimizer: an
evaluation, with no training step to measure."""
import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()
    with torch.no_grad():
        for step in range(20):
            out = model(torch.randn(64, 32))
            if step % 5 == 0:
                print(f"step {step} mean {out.mean().item():.4f}", flush=True)
    print("done")


if __name__ == "__main__":
    main()
