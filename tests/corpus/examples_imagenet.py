"""Train a small CNN on an ImageFolder-style tree.

Modelled on pytorch/examples imagenet/main.py (argparse, AverageMeter /
ProgressMeter logging), trimmed down to tiny networks and no torchvision.
"""
import argparse
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class ImageFolderDataset(torch.utils.data.Dataset):
    def __init__(self, root, size=64, train=True):
        self.classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.samples = []
        for idx, c in enumerate(self.classes):
            for f in sorted(os.listdir(os.path.join(root, c))):
                if f.lower().endswith((".jpg", ".jpeg", ".png")):
                    self.samples.append((os.path.join(root, c, f), idx))
        self.size, self.train = size, train

    def __len__(self):
        return len(self.samples)

    def random_resized_crop(self, img, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        w, h = img.size
        for _ in range(10):
            area = w * h * random.uniform(*scale)
            ar = np.exp(random.uniform(np.log(ratio[0]), np.log(ratio[1])))
            cw, ch = int(round((area * ar) ** 0.5)), int(round((area / ar) ** 0.5))
            if 0 < cw <= w and 0 < ch <= h:
                x, y = random.randint(0, w - cw), random.randint(0, h - ch)
                return img.resize((self.size, self.size), Image.BILINEAR, box=(x, y, x + cw, y + ch))
        return img.resize((self.size, self.size), Image.BILINEAR)

    def __getitem__(self, i):
        path, target = self.samples[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        img = self.random_resized_crop(img)
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = (np.asarray(img, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(x.transpose(2, 0, 1).copy()), target


def tinynet(num_classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def smallvgg(num_classes):
    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
    return nn.Sequential(*block(3, 16), *block(16, 32), *block(32, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


MODELS = {"tinynet": tinynet, "smallvgg": smallvgg}


class AverageMeter:
    def __init__(self, name, fmt=":f"):
        self.name, self.fmt = name, fmt
        self.val = self.sum = self.count = self.avg = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(**self.__dict__)


class ProgressMeter:
    def __init__(self, num_batches, meters, prefix=""):
        fmt = "{:" + str(len(str(num_batches))) + "d}"
        self.batch_fmtstr = "[" + fmt + "/" + fmt.format(num_batches) + "]"
        self.meters, self.prefix = meters, prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr.format(batch)] + [str(m) for m in self.meters]
        print("\t".join(entries), flush=True)


def train(loader, model, criterion, optimizer, epoch, device, args):
    batch_time, data_time = AverageMeter("Time", ":6.3f"), AverageMeter("Data", ":6.3f")
    losses, top1 = AverageMeter("Loss", ":.4e"), AverageMeter("Acc@1", ":6.2f")
    progress = ProgressMeter(len(loader), [batch_time, data_time, losses, top1], prefix=f"Epoch: [{epoch}]")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(loader):
        data_time.update(time.time() - end)
        images, target = images.to(device, non_blocking=True), target.to(device, non_blocking=True)
        output = model(images)
        loss = criterion(output, target)
        acc = (output.argmax(1) == target).float().mean().item() * 100
        losses.update(loss.item(), images.size(0))
        top1.update(acc, images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch_time.update(time.time() - end)
        end = time.time()
        if i % args.print_freq == 0:
            progress.display(i + 1)


def main():
    parser = argparse.ArgumentParser(description="PyTorch ImageNet-style Training")
    parser.add_argument("data", metavar="DIR", help="path to dataset")
    parser.add_argument("-a", "--arch", default="tinynet", choices=sorted(MODELS))
    parser.add_argument("-j", "--workers", default=4, type=int, help="number of data loading workers")
    parser.add_argument("--epochs", default=2, type=int)
    parser.add_argument("-b", "--batch-size", default=32, type=int)
    parser.add_argument("--lr", "--learning-rate", default=0.1, type=float, dest="lr")
    parser.add_argument("-p", "--print-freq", default=10, type=int)
    parser.add_argument("--seed", default=None, type=int)
    args = parser.parse_args()

    if args.seed is not None:
        random.seed(args.seed)
        torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    train_dataset = ImageFolderDataset(os.path.join(args.data, "train"))
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True,
        num_workers=args.workers, pin_memory=device.type == "cuda")

    print(f"=> creating model '{args.arch}'")
    model = MODELS[args.arch](len(train_dataset.classes)).to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)

    for epoch in range(args.epochs):
        train(train_loader, model, criterion, optimizer, epoch, device, args)
        scheduler.step()


if __name__ == "__main__":
    main()
