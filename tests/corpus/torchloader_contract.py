"""Pre-training script in the style of torchloader's (ATC'22) pretrain.py.

Takes -a/--arch, --depth, -b/--batch, -j/--workers, --epochs, --port and --data,
and records per-iteration timings (data wait, compute, total) to a CSV file.
"""
import argparse
import csv
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
from PIL import Image


class ImageFolder(torch.utils.data.Dataset):
    def __init__(self, root, size=64):
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.samples = []
        for label, cls in enumerate(self.classes):
            for entry in sorted(os.scandir(os.path.join(root, cls)), key=lambda e: e.name):
                if entry.name.lower().endswith((".jpg", ".jpeg", ".png")):
                    self.samples.append((entry.path, label))
        self.size = size

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        img = Image.open(path).convert("RGB")
        w, h = img.size
        s = random.uniform(0.6, 1.0)
        cw, ch = int(w * s), int(h * s)
        left, top = random.randint(0, w - cw), random.randint(0, h - ch)
        img = img.crop((left, top, left + cw, top + ch)).resize((self.size, self.size), Image.BICUBIC)
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.array(img, dtype=np.float32)).permute(2, 0, 1) / 255.0
        x = (x - torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)) / torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        return x, label


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.short = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + self.short(x))


def resnet(depth, num_classes):
    blocks = max(1, (depth - 2) // 6)
    layers, cin = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True)], 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(blocks):
            layers.append(BasicBlock(cin, cout, stride if b == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


def mobilenet(depth, num_classes):
    def dw(cin, cout, stride):
        return [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU6(inplace=True),
                nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6(inplace=True)]
    layers = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(inplace=True)]
    layers += dw(16, 32, 2) + dw(32, 64, 2)
    for _ in range(max(0, depth - 3)):
        layers += dw(64, 64, 1)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


ARCHS = {"resnet": (resnet, 8), "mobilenet": (mobilenet, 3)}


def main():
    parser = argparse.ArgumentParser(description="torchloader-style pretraining")
    parser.add_argument("-a", "--arch", default="resnet", choices=sorted(ARCHS))
    parser.add_argument("--depth", type=int, default=None, help="network depth (arch default if unset)")
    parser.add_argument("-b", "--batch", type=int, default=64)
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--port", type=int, default=29500)
    parser.add_argument("--data", required=True, help="ImageFolder-style directory")
    parser.add_argument("--output_folder", default=".", help="where the timing CSV goes")
    args = parser.parse_args()

    os.environ["MASTER_PORT"] = str(args.port)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    build, default_depth = ARCHS[args.arch]
    depth = args.depth if args.depth is not None else default_depth

    dataset = ImageFolder(args.data)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, pin_memory=device.type == "cuda")
    model = build(depth, len(dataset.classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    criterion = nn.CrossEntropyLoss()

    os.makedirs(args.output_folder, exist_ok=True)
    csv_path = os.path.join(args.output_folder, f"{args.arch}{depth}_b{args.batch}_j{args.workers}_timing.csv")
    with open(csv_path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["epoch", "iteration", "data_time", "compute_time", "total_time"])
        for epoch in range(args.epochs):
            model.train()
            t0 = time.perf_counter()
            for it, (x, y) in enumerate(loader):
                t1 = time.perf_counter()
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t2 = time.perf_counter()
                writer.writerow([epoch, it, f"{t1 - t0:.6f}", f"{t2 - t1:.6f}", f"{t2 - t0:.6f}"])
                if it % 5 == 0:
                    print(f"epoch {epoch} iter {it}/{len(loader)} loss {loss.item():.4f} "
                          f"data {t1 - t0:.3f}s compute {t2 - t1:.3f}s", flush=True)
                t0 = time.perf_counter()
    print(f"timings written to {csv_path}", flush=True)


if __name__ == "__main__":
    main()
