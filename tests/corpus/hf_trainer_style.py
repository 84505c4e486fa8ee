"""A causal language model trained with Hugging Face's Trainer from a config, offline: a
word-level tokenizer made on the spot from generated text, a small GPT-2 built from
GPT2Config (no download), the Trainer's own DataLoader and collator, on the CPU.

Arguments: steps to train (max_steps), the loader's workers, and the most seconds to
train (a callback that stops the Trainer, as users write one).
"""
import random
import sys
import tempfile
import time

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch.utils.data import Dataset
from transformers import (DataCollatorForLanguageModeling, GPT2Config, GPT2LMHeadModel,
                          PreTrainedTokenizerFast, Trainer, TrainerCallback, TrainingArguments)

WORDS = ("the cluster runs jobs that train models on nodes with cores memory and gpus "
         "while users wait in queues for backfill to start them").split()


def text(n_lines, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) for _ in range(n_lines)]


def tokenizer_for(lines):
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


class Lines(Dataset):
    def __init__(self, lines, tokenizer):
        self.lines, self.tokenizer = lines, tokenizer

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, i):
        return self.tokenizer(self.lines[i], truncation=True, max_length=48)


class StopAfter(TrainerCallback):
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = time.monotonic() >= self.end


def main(steps, workers, seconds):
    torch.manual_seed(0)
    lines = text(4000, 0)
    tokenizer = tokenizer_for(lines)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=64, n_layer=2,
                        n_head=2, pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.pad_token_id)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=16,
                                 dataloader_num_workers=workers, use_cpu=True, report_to=[],
                                 save_strategy="no", logging_steps=100, disable_tqdm=True)
        trainer = Trainer(model=GPT2LMHeadModel(config), args=args,
                          train_dataset=Lines(lines, tokenizer),
                          data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                          callbacks=[StopAfter(seconds)])
        trainer.train()
    print("done")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300,
         int(sys.argv[2]) if len(sys.argv) > 2 else 2,
         float(sys.argv[3]) if len(sys.argv) > 3 else 3600.0)
