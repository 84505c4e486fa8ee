"""A small LSTM language model trained the way pytorch/examples' word_language_model
trains: batches sliced by hand from one tensor, weights updated by hand from their
gradients; no DataLoader, no optimizer. Its only step signal is autograd's backward."""
import sys
import time

import torch
import torch.nn as nn
import torch.utils.checkpoint


def main(steps: int, seconds: float, checkpoint: bool) -> None:
    """`steps` steps, fewer where `seconds` (when given) run out first; the LSTM's
    activations recomputed in the backward pass (reentrant checkpointing) where asked."""
    torch.manual_seed(0)
    vocab, hidden, bptt, batch = 200, 64, 16, 20
    corpus = torch.randint(0, vocab, (batch * bptt * 40,)).view(batch, -1).t().contiguous()
    embed, lstm, head = nn.Embedding(vocab, 32), nn.LSTM(32, hidden), nn.Linear(hidden, vocab)
    params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
    lr = 5.0
    end = time.monotonic() + seconds if seconds else None
    step = 0
    while step < steps and (end is None or time.monotonic() < end):
        i = (step * bptt) % (corpus.size(0) - bptt - 1)
        x, y = corpus[i:i + bptt], corpus[i + 1:i + 1 + bptt]
        if checkpoint:
            out, _ = torch.utils.checkpoint.checkpoint(lstm, embed(x), use_reentrant=True)
        else:
            out, _ = lstm(embed(x))
        loss = nn.functional.cross_entropy(head(out).view(-1, vocab), y.reshape(-1))
        for p in params:
            p.grad = None
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.25)
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-lr)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
        step += 1
    print("done")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30,
         float(sys.argv[2]) if len(sys.argv) > 2 else 0.0, "checkpoint" in sys.argv[3:])
