"""Trains a small model on in-memory random tensors, without any DataLoader: its steps
are its optimizer's (pytorch/examples' word_language_model batches by hand the same way)."""
import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        x = torch.randn(64, 32)
        y = torch.randint(0, 4, (64,))
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    print("done")


if __name__ == "__main__":
    main()
