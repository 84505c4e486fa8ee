"""Never-ending evaluation loop on random tensors (no DataLoader, no optimizer, no exit)."""
import torch
import torch.nn as nn


def main():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).eval()
    step = 0
    with torch.no_grad():
        while True:
            out = model(torch.randn(32, 16))
            if step % 1000 == 0:
                print(f"step {step} mean {out.mean().item():.4f}", flush=True)
            step += 1


if __name__ == "__main__":
    main()
