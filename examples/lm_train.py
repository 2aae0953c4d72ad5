#!/usr/bin/python3
"""lm_train.py - a tiny GPT-style language model trained on token batches
streamed by stoker (source = megatron).

Trains --steps steps (default 200) of a 2-layer causal transformer
(d_model 32) in plain PyTorch,
prints the loss, and exits non-zero unless the loss went down (mean of the
last 20 steps below 0.7x the mean of the first 20). The batches are
dicts (`Loader(as_dict=True)`): tokens, labels and, when the job has them,
loss_mask and position_ids.

    # a corpus: documents of pre-tokenized integers, one per line
    examples/lm_train.py --write-corpus corpus.txt
    stoker-dataset tokens --in corpus.txt --out data/lm --eod 0
    # daemons (or stoker-launch) with a job like examples/lm_job.txt, then:
    examples/lm_train.py --coordinator 127.0.0.1:7070
    examples/lm_train.py --local --data-root data      # no daemons: in-process batches

PyTorch/XLA (Trainium through torch-neuronx, or TPU): `--device xla` makes
the Loader feed torch_xla's MpDeviceLoader (owned tensors, static shapes)
and marks a step after each optimizer step. torch_xla is not installed on
the project's machines: that path is documented in docs/xla.md and has
not been run on XLA hardware.
"""
import argparse
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn


def import_stoker():
    try:
        import stoker
    except ImportError:  # run from a source tree
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "client", "python"))
        import stoker
    return stoker

VOCAB = 64
LOCAL_JOB = ("source = megatron\ndataset = lm\nseq_len = 32\nbatch_size = 8\n"
             "world_size = 1\nepochs = 4\nseed = 7\ntoken_dtype = int64\neod_token = 0\n"
             "loss_mask = true\neod_mask_loss = true\n")


def write_corpus(path, docs=3000, seed=1):
    """Documents with a rule a small model can learn: arithmetic sequences
    modulo VOCAB - 1 over the tokens 1..VOCAB-1 (0 is the end-of-document
    token), each with its own start and stride, so predicting the next
    token means inferring the stride from the context."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(docs):
            start, stride = rng.randrange(VOCAB - 1), rng.choice((1, 2, 3, 5))
            n = rng.randrange(20, 120)
            f.write(" ".join(str(1 + (start + i * stride) % (VOCAB - 1)) for i in range(n)))
            f.write("\n")


class TinyGPT(nn.Module):
    def __init__(self, vocab, seq_len, d=32, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("causal", torch.triu(
            torch.full((seq_len, seq_len), float("-inf")), diagonal=1))

    def forward(self, tokens, position_ids=None):
        t = tokens.shape[1]
        pos = position_ids if position_ids is not None else torch.arange(
            t, device=tokens.device).unsqueeze(0)
        x = self.tok(tokens) + self.pos(pos)
        return self.head(self.blocks(x, mask=self.causal[:t, :t]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--coordinator", help="host:port (default $STOKER_COORDINATOR)")
    ap.add_argument("--local", action="store_true",
                    help="build batches in-process from --data-root (no daemons)")
    ap.add_argument("--data-root", default=".", help="where lm.bin/lm.idx are (--local)")
    ap.add_argument("--write-corpus", metavar="FILE",
                    help="write a learnable corpus (one document a line) and exit")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--device", default="cpu", choices=("cpu", "xla"))
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads (0 = torch's default)")
    a = ap.parse_args()
    if a.write_corpus:
        write_corpus(a.write_corpus)
        print("wrote", a.write_corpus)
        return 0
    stoker = import_stoker()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    kw = dict(as_dict=True, device=a.device)
    if a.local:
        kw.update(job=LOCAL_JOB, data_root=a.data_root)
    elif a.coordinator:
        kw["coordinator"] = a.coordinator
    loader = stoker.Loader(**kw)
    job = loader.job
    seq_len = job["seq_len"]
    dev = "cpu"
    xm = None
    if a.device == "xla":
        import torch_xla.core.xla_model as xm  # Loader(device="xla") checked it exists
        dev = xm.xla_device()
    model = TinyGPT(VOCAB, seq_len).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss(reduction="none")
    print("job: %d steps/epoch, %d epochs, seq_len %d, batch %d; training %d steps"
          % (len(loader), job["epochs"], seq_len, job["batch_size"], a.steps), flush=True)
    losses, step, t0 = [], 0, time.monotonic()
    for epoch in range(loader.epochs):
        loader.set_epoch(epoch)
        for b in loader:
            tokens, labels = b["tokens"].to(dev), b["labels"].to(dev)
            mask = b["loss_mask"].to(dev) if "loss_mask" in b else torch.ones_like(
                tokens, dtype=torch.float32)
            pos = b["position_ids"].to(dev) if "position_ids" in b else None
            logits = model(tokens, pos)
            per_tok = lossf(logits.reshape(-1, VOCAB), labels.reshape(-1).clamp(0, VOCAB - 1))
            loss = (per_tok * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if xm is not None:
                xm.mark_step()  # once per step, after the optimizer (docs/xla.md)
            losses.append(float(loss))
            step += 1
            if step % 50 == 0 or step == 1:
                print("step %4d  epoch %d  loss %.3f" % (step, epoch, losses[-1]), flush=True)
            if step >= a.steps:
                break
        if step >= a.steps:
            break
    s = loader.stats() if not a.local else {}
    if not a.local:
        loader.finish()
    loader.close()
    if len(losses) < 40:
        print("FAIL: only %d steps ran (the job is too small for --steps)" % len(losses))
        return 1
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    print("loss: first 20 steps %.3f, last 20 steps %.3f (uniform guess %.3f); %.1f steps/s%s"
          % (first, last, math.log(VOCAB), len(losses) / (time.monotonic() - t0),
             ", input stall %.1f%%" % (100 * s["stall_fraction"]) if s else ""))
    if not last < 0.7 * first:
        print("FAIL: the loss did not go down")
        return 1
    print("ok: the loss went down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
