"""Image classification training script following Synergy's (OSDI'22) job contract.

Synergy launches jobs with --data, --batch, --workers and --max_iterations and
expects the job to log its throughput periodically; this is a small stand-in
for the ResNet/ImageNet jobs from its traces.
"""
import argparse
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image


class FolderDataset(torch.utils.data.Dataset):
    """ImageFolder replacement: <root>/<class>/<img>, random crop + flip."""

    def __init__(self, root, crop=64):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.items = [(os.path.join(root, c, f), i) for i, c in enumerate(classes)
                      for f in sorted(os.listdir(os.path.join(root, c)))
                      if f.lower().endswith((".jpg", ".jpeg", ".png"))]
        self.num_classes, self.crop = len(classes), crop

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        path, label = self.items[idx]
        img = Image.open(path).convert("RGB")
        w, h = img.size
        side = int(min(w, h) * random.uniform(0.5, 1.0))
        x, y = random.randint(0, w - side), random.randint(0, h - side)
        img = img.resize((self.crop, self.crop), Image.BILINEAR, box=(x, y, x + side, y + side))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        arr = np.asarray(img, dtype=np.float32) / 255.0
        arr = (arr - 0.5) / 0.25
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))), label


class Net(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 16 * 16, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    parser = argparse.ArgumentParser(description="Synergy-style image classification job")
    parser.add_argument("--data", required=True, help="ImageFolder-style directory")
    parser.add_argument("-b", "--batch", type=int, default=32, help="batch size")
    parser.add_argument("-j", "--workers", type=int, default=2, help="data loader workers")
    parser.add_argument("--max_iterations", type=int, default=0, help="stop after N iterations (0: no limit)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--log_interval", type=int, default=10)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = FolderDataset(args.data)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, pin_memory=torch.cuda.is_available(),
                                         drop_last=True)
    model = Net(dataset.num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    print(f"dataset: {len(dataset)} images, {dataset.num_classes} classes; batch {args.batch}, "
          f"workers {args.workers}", flush=True)
    iteration, samples, done = 0, 0, False
    start = window_start = time.time()
    for epoch in range(args.epochs):
        model.train()
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            iteration += 1
            samples += images.size(0)
            if iteration % args.log_interval == 0:
                now = time.time()
                rate = args.log_interval * args.batch / (now - window_start)
                print(f"iter {iteration}: {rate:.1f} samples/s (epoch {epoch}, loss {loss.item():.4f})",
                      flush=True)
                window_start = now
            if args.max_iterations > 0 and iteration >= args.max_iterations:
                done = True
                break
        if done:
            break
    elapsed = time.time() - start
    print(f"finished {iteration} iterations in {elapsed:.1f}s: {samples / elapsed:.1f} samples/s", flush=True)


if __name__ == "__main__":
    main()
