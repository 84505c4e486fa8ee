"""Two-process DistributedDataParallel training of a small LSTM language model.

Launch with torchrun, e.g.:
    torchrun --standalone --nproc-per-node 2 ddp_gloo.py --epochs 2
Uses the gloo backend on CPU (nccl when CUDA is available).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

VOCAB = 1000
SEQ_LEN = 33


class TokenWindows(Dataset):
    """Fixed pseudo-corpus; each item is a window with light random token masking."""

    def __init__(self, n_tokens=100_000, seed=0):
        g = torch.Generator().manual_seed(seed)
        # Zipf-like token distribution so the model has something to learn
        probs = 1.0 / torch.arange(1, VOCAB + 1, dtype=torch.float)
        self.corpus = torch.multinomial(probs / probs.sum(), n_tokens, replacement=True, generator=g)
        self.n = (n_tokens - 1) // SEQ_LEN

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        window = self.corpus[idx * SEQ_LEN:(idx + 1) * SEQ_LEN].clone()
        mask = torch.rand(SEQ_LEN - 1) < 0.1
        inputs = window[:-1].masked_fill(mask, 0)
        return inputs, window[1:]


class LSTMLM(nn.Module):
    def __init__(self, emb=64, hidden=128):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, VOCAB)

    def forward(self, x):
        h, _ = self.lstm(self.embed(x))
        return self.out(h)


def main():
    parser = argparse.ArgumentParser(description="DDP LSTM language model (launch with torchrun)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per-process batch size")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per process")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--print-freq", type=int, default=20)
    args = parser.parse_args()

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit("error: RANK/WORLD_SIZE not set; launch this script with "
                 "`torchrun --standalone --nproc-per-node 2 ddp_gloo.py`")

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    torch.manual_seed(42)

    dataset = TokenWindows()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, pin_memory=use_cuda, drop_last=True)
    model = DDP(LSTMLM().to(device), device_ids=[device.index] if use_cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    if rank == 0:
        print(f"world size {world}, {len(dataset)} sequences, {len(loader)} steps/epoch per rank", flush=True)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        start = time.time()
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = criterion(logits.reshape(-1, VOCAB), y.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == 0 and step % args.print_freq == 0:
                print(f"epoch {epoch} step {step}/{len(loader)} loss {loss.item():.4f} "
                      f"({(step + 1) / (time.time() - start):.1f} it/s)", flush=True)
        if rank == 0:
            print(f"epoch {epoch} finished in {time.time() - start:.1f}s", flush=True)

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
