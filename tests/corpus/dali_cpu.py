"""Train a tiny CNN from JPEGs decoded by an NVIDIA DALI CPU pipeline.

Follows the usual DALI + PyTorch recipe (pipeline_def, fn.readers.file,
DALIGenericIterator), with the pipeline running on CPU only (device_id=None).
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.base_iterator import LastBatchPolicy
from nvidia.dali.plugin.pytorch import DALIGenericIterator


@pipeline_def
def train_pipeline(data_dir, crop):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.random_resized_crop(images, size=(crop, crop), random_area=[0.25, 1.0])
    images = fn.crop_mirror_normalize(
        images, dtype=types.FLOAT, output_layout="CHW",
        mean=[0.485 * 255, 0.456 * 255, 0.406 * 255], std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        mirror=fn.random.coin_flip(probability=0.5))
    return images, labels


class TinyCNN(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 5, stride=2, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    parser = argparse.ArgumentParser(description="DALI (CPU) + PyTorch training")
    parser.add_argument("data", help="ImageFolder-style directory (one subfolder per class)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="DALI worker threads")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    pipe = train_pipeline(data_dir=args.data, crop=64, batch_size=args.batch_size,
                          num_threads=args.threads, device_id=None, seed=1234)
    pipe.build()
    loader = DALIGenericIterator(pipe, ["data", "label"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    num_classes = len([d for d in os.listdir(args.data)
                       if not d.startswith(".") and os.path.isdir(os.path.join(args.data, d))])
    model = TinyCNN(num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(args.epochs):
        start, seen, total_loss = time.time(), 0, 0.0
        for i, data in enumerate(loader):
            images = data[0]["data"]
            labels = data[0]["label"].squeeze(-1).long()
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += images.size(0)
            total_loss += loss.item() * images.size(0)
            if i % 5 == 0:
                print(f"epoch {epoch} step {i} loss {loss.item():.4f}", flush=True)
        elapsed = time.time() - start
        print(f"epoch {epoch} done: {seen} images in {elapsed:.1f}s ({seen / elapsed:.1f} img/s), "
              f"mean loss {total_loss / max(seen, 1):.4f}", flush=True)


if __name__ == "__main__":
    main()
