"""Quick-and-dirty training script: no arguments, everything hard-coded.

The kind of thing people copy from a tutorial: a synthetic signal dataset whose
__getitem__ computes spectral features with numpy, a small MLP, three epochs (or as many as its one bare argument says).
"""
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

N_SAMPLES = 2000
SIGNAL_LEN = 2048
N_CLASSES = 5
EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 3


class SignalDataset(Dataset):
    def __init__(self, n, length, seed=0):
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, N_CLASSES, size=n)
        t = np.arange(length, dtype=np.float32) / length
        freqs = 20 + 40 * self.labels[:, None]
        self.signals = (np.sin(2 * np.pi * freqs * t) + rng.standard_normal((n, length))).astype(np.float32)
        self.mix = rng.standard_normal((64, 64)).astype(np.float32) / 8

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.signals[idx]
        # windowed FFT -> log power spectrum, pooled to 64 bins, then a few mixing steps
        spec = np.abs(np.fft.rfft(x * np.hanning(len(x)))) ** 2
        feats = np.log1p(spec[:-1].reshape(64, -1).mean(axis=1))
        for _ in range(20):
            feats = np.tanh(self.mix @ feats) + feats
        feats = (feats - feats.mean()) / (feats.std() + 1e-6)
        return torch.from_numpy(feats.astype(np.float32)), int(self.labels[idx])


ds = SignalDataset(N_SAMPLES, SIGNAL_LEN)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, N_CLASSES))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()

if __name__ == "__main__":
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=4)
    for epoch in range(EPOCHS):
        total, correct, running = 0, 0, 0.0
        for x, y in loader:
            out = model(x)
            loss = loss_fn(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item() * x.size(0)
            correct += (out.argmax(1) == y).sum().item()
            total += x.size(0)
        print(f"epoch {epoch + 1}: loss {running / total:.4f}, acc {correct / total:.3f}", flush=True)
    print("done")
