"""Launcher that runs the actual training in a separate Python process.

The parent never iterates a DataLoader itself; the child (started in isolated
mode, -I) trains for a few seconds and the parent exits with the child's status.
"""
import subprocess
import sys

CODE = r"""
import time
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(4096, 32), torch.randint(0, 4, (4096,)))
loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=0)
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = time.time()
steps = 0
while time.time() - start < 3.0:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if time.time() - start >= 3.0:
            break
print(f"child: {steps} steps, last loss {loss.item():.4f}", flush=True)
"""


def main():
    print("parent: starting training subprocess", flush=True)
    subprocess.run([sys.executable, "-I", "-c", CODE], check=True)
    print("parent: child finished", flush=True)


if __name__ == "__main__":
    main()
