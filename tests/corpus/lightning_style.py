"""A LightningModule as users write one: a dataset whose items cost CPU to make, a
DataLoader with workers, validation every epoch, the Trainer on the CPU. Lightning
fetches each batch one step ahead and runs its sanity check and validation loops
between the training steps.

Arguments: steps to train (the Trainer's max_steps), the loader's workers, and the most
seconds to train (its max_time).
"""
import sys

import lightning as L
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Spectra(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 512, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        for _ in range(12):         # features that take the loader's CPU
            x = torch.fft.irfft(torch.fft.rfft(x).abs().log1p(), n=512).tanh()
        return x[:64], self.y[i]


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 3600.0
    L.seed_everything(0, verbose=False)
    train = DataLoader(Spectra(2048, 0), batch_size=32, shuffle=True, num_workers=workers,
                       persistent_workers=workers > 0)
    val = DataLoader(Spectra(256, 1), batch_size=64, num_workers=workers,
                     persistent_workers=workers > 0)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1000, max_steps=steps,
                        max_time={"seconds": seconds},
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Classifier(), train, val)
    print("done")
