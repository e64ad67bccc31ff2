"""A small ConvLSTM-CA forecaster (seed 003 App. C.1): 3x3 encoder, 3x3 ConvLSTM cell,
1x1 decoder, no spatial bottleneck, trained with BCE on the train split.

Inputs per frame: tree layout, burnt mask, newly burnt cells, and a constant plane
``p_ignite`` (the S-level of the config is public). The decoder gives the probability
that an unburnt tree burns in the next frame, so forecasts are monotone in time,
zero on bare ground and one where the fire already was: ``b_{t+1} = b_t + (1 - b_t)
* tree * sigmoid(logit)``. Training is teacher-forced one-step-ahead BCE on the true
frames of train-split realizations; forecasting feeds the true frames through the
observation window and then the model's own probabilities (autoregressive mean-field
rollout). Weights are
initialised from an explicit ``torch.Generator`` seeded from SHA-256 of the config
key; minibatches are drawn from ``rng_for(key)``.

>>> cfg = ConvLSTMConfig(hidden=4)
>>> net = ConvLSTMCA(cfg.hidden, seed=1)
>>> tree = torch.ones(2, 8, 8); obs = torch.zeros(2, 3, 8, 8); obs[:, :, 4, 4] = 1
>>> out = net(tree, obs, torch.tensor([1.0, 0.5]), horizon=4)
>>> tuple(out.shape), bool((out[:, 1:] >= out[:, :-1]).all())
((2, 4, 8, 8), True)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from aegisbench import isa
from aegisbench.firespread.ensemble import burnt_masks
from aegisbench.hashing import key_digest, rng_for
from aegisbench.kernels import GEMMS, check_gemm, portable
from aegisbench.schema import Declared, param

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConvLSTMConfig(Declared):
    """CPU-sized defaults: hidden 8, 300 Adam steps of 8 sequences of 30 frames cropped to 32x32
    (the model is fully convolutional; inference runs on the whole grid)."""

    hidden: int = param(8, lo=1, unit="channels", doc="hidden state channels")
    steps: int = param(300, lo=1, unit="Adam steps", doc="training steps")
    batch: int = param(8, lo=1, unit="sequences", doc="sequences per training step")
    lr: float = param(1e-2, lo=0.0, lo_open=True, doc="Adam learning rate")
    train_horizon: int = param(20, lo=1, unit="frames", doc="frames forecast after the observed ones in training")
    crop: int = param(32, lo=0, unit="cells", doc="training crop side (0 = train on whole frames)")
    realizations_per_ensemble: int = param(16, lo=1, doc="training realizations read per ensemble")
    device: str | None = param(None, doc="torch device (None: the GPU if any, else the CPU)")
    gemm: str = param("mkl", choices=GEMMS, doc="CPU convolutions' matrix products: torch's MKL path, or NumPy's "
                      "OpenBLAS (aegisbench.conv_gemm: 1.4-1.7x faster here, the same on every x86-64-v3 CPU, "
                      "other weights and maps)")
    key: str = param("convlstm-ca-v1", type=object, doc="seeds the weights and the training batches")


class ConvLSTMCA(nn.Module):
    """``gemm``: the BLAS of its CPU convolutions (:func:`train_convlstm` and
    :func:`predict_convlstm` run them there; part of what its weights and maps are)."""

    def __init__(self, hidden: int, seed: int = 0, gemm: str = "mkl"):
        super().__init__()
        self.hidden, self.gemm = hidden, check_gemm(gemm, "gemm")
        self.enc = nn.Conv2d(4, hidden, 3, padding=1)
        self.cell = nn.Conv2d(2 * hidden, 4 * hidden, 3, padding=1)
        self.dec = nn.Conv2d(hidden, 1, 1)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                fan_in = p[0].numel() if p.dim() > 1 else max(1, p.numel())
                bound = 1.0 / math.sqrt(fan_in)
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            self.dec.bias.fill_(-2.0)

    def _step(self, x, h, c):
        e = torch.relu(self.enc(x))
        i, f, o, g = torch.chunk(self.cell(torch.cat([e, h], 1)), 4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return self.dec(h)[:, 0], h, c

    def one_step(self, tree: torch.Tensor, frames: torch.Tensor, p_ignite: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: from the true frames ``(B, T, H, W)`` predict frames ``2..T`` one step ahead."""
        B, T, H, W = frames.shape
        h = torch.zeros(B, self.hidden, H, W, device=frames.device)
        c = torch.zeros_like(h)
        plane = p_ignite.view(B, 1, 1).expand(B, H, W)
        prev = torch.zeros_like(tree)
        outs = []
        for j in range(T - 1):
            b = frames[:, j]
            logit, h, c = self._step(torch.stack([tree, b, b - prev, plane], 1), h, c)
            outs.append(b + (1 - b) * tree * torch.sigmoid(logit))
            prev = b
        return torch.stack(outs, 1)

    def forward(self, tree: torch.Tensor, observed: torch.Tensor, p_ignite: torch.Tensor, horizon: int):
        """``tree`` (B, H, W), ``observed`` (B, k, H, W) in [0, 1] -> (B, horizon, H, W) probabilities."""
        B, k, H, W = observed.shape
        h = torch.zeros(B, self.hidden, H, W, device=observed.device)
        c = torch.zeros_like(h)
        plane = p_ignite.view(B, 1, 1).expand(B, H, W)
        prev = torch.zeros_like(tree)
        logit = None
        for j in range(k):
            b = observed[:, j]
            logit, h, c = self._step(torch.stack([tree, b, b - prev, plane], 1), h, c)
            prev = b
        outs = []
        for _ in range(horizon):
            nb = prev + (1 - prev) * tree * torch.sigmoid(logit)
            outs.append(nb)
            logit, h, c = self._step(torch.stack([tree, nb, nb - prev, plane], 1), h, c)
            prev = nb
        return torch.stack(outs, 1)


def _seed(key: str) -> int:
    return int.from_bytes(key_digest("torch-init", key)[:8], "little") >> 1


def train_convlstm(train: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]], observe: int,
                   cfg: ConvLSTMConfig) -> ConvLSTMCA:
    """Train on ``{s_level: {ic: (ignition_times (n, H, W), tree (H, W))}}`` of the train split.

    Runs on one CPU thread with oneDNN off (:func:`aegisbench.kernels.portable`, the
    convolutions on ``cfg.gemm``): gradient sums then have one order on every machine, so the
    same config gives the same weights whatever the CPU, core count or load."""
    isa.require("the ConvLSTM's weights")
    with portable(1, gemm=cfg.gemm):
        return _train(train, observe, cfg)


def device_of(cfg: ConvLSTMConfig) -> torch.device:
    """Where the ConvLSTM of ``cfg`` trains: ``cfg.device``, else the GPU if any, else the CPU."""
    return torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def _train(train, observe: int, cfg: ConvLSTMConfig) -> ConvLSTMCA:
    dev = device_of(cfg)
    pool = [(s, ic, j) for s, by_ic in sorted(train.items()) for ic, (tau, _) in sorted(by_ic.items())
            for j in range(len(tau))]
    if not pool:
        raise ValueError("no training realizations")
    net = ConvLSTMCA(cfg.hidden, seed=_seed(cfg.key), gemm=cfg.gemm).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    rng = rng_for(cfg.key, "batches")
    frames = np.arange(1, observe + cfg.train_horizon + 1)
    for step in range(cfg.steps):
        pick = rng.integers(0, len(pool), cfg.batch)
        seq, trees, pig = [], [], []
        for i in pick:
            s, ic, j = pool[i]
            tau, tree = train[s][ic]
            h, w = tree.shape
            if 0 < cfg.crop < min(h, w):
                y0, x0 = (int(v) for v in rng.integers(0, (h - cfg.crop + 1, w - cfg.crop + 1)))
                tau, tree = tau[:, y0:y0 + cfg.crop, x0:x0 + cfg.crop], tree[y0:y0 + cfg.crop, x0:x0 + cfg.crop]
            seq.append(burnt_masks(tau[j], frames))
            trees.append(tree)
            pig.append((100 - s) / 100.0)
        x = torch.as_tensor(np.array(seq, np.float32), device=dev)
        tr = torch.as_tensor(np.array(trees, np.float32), device=dev)
        pred = net.one_step(tr, x, torch.tensor(pig, dtype=torch.float32, device=dev))
        loss = nn.functional.binary_cross_entropy(pred.clamp(1e-6, 1 - 1e-6), x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == cfg.steps - 1:
            log.info("convlstm step %d/%d: BCE %.4f", step + 1, cfg.steps, loss.item())
    return net.eval()


@torch.no_grad()
def predict_convlstm(net: ConvLSTMCA, tree: np.ndarray, observed: np.ndarray, p_ignite: float, horizon: int,
                     batch: int = 16) -> np.ndarray:
    """``(n, horizon, H, W)`` float32 forecasts for observed frames ``(n, k, H, W)`` (on the
    CPU in :func:`aegisbench.kernels.portable` with the convolutions on the BLAS the network
    was trained on, ``net.gemm``: the same maps on every machine)."""
    dev = next(net.parameters()).device
    if dev.type == "cpu":
        with portable(1, gemm=net.gemm):
            return _rollout(net, dev, tree, observed, p_ignite, horizon, batch)
    return _rollout(net, dev, tree, observed, p_ignite, horizon, batch)


def _rollout(net: ConvLSTMCA, dev, tree: np.ndarray, observed: np.ndarray, p_ignite: float, horizon: int,
             batch: int) -> np.ndarray:
    out = []
    for a in range(0, len(observed), batch):
        x = torch.as_tensor(np.asarray(observed[a:a + batch], np.float32), device=dev)
        tr = torch.as_tensor(np.asarray(tree[a:a + batch], np.float32), device=dev)
        pig = torch.full((len(x),), float(p_ignite), device=dev)
        out.append(net(tr, x, pig, horizon).clamp(0, 1).cpu().numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, horizon) + tree.shape[1:], np.float32)
