"""The voice check's speaker embedding: Resemblyzer's voice encoder (a GE2E d-vector, Apache-2.0), its weights
read from the `resemblyzer` wheel, the network run here in torch.

Why this model: it is the one small speaker encoder whose weights install from PyPI (17 MB inside the
`resemblyzer` wheel) and run on a CPU; the ONNX encoders on PyPI (speakeronnx, redimnet2-onnx, wespeaker and
the packages built on it) download their weights from Hugging Face at run time, which a studio offline (and
this project's CI) cannot. Resemblyzer's own Python front end is not imported: its `webrtcvad` 2.0.10 imports
`pkg_resources`, which setuptools 81 removed, so `import resemblyzer` fails in an up-to-date environment. The
network is three LSTM layers over 40 mel bands and a linear layer (the layout of `pretrained.pt`); its front end
(1.6 s windows at 1.3 per second, averaged and normalised) follows Resemblyzer's `embed_utterance`, and
tests/test_take_checks.py checks the embeddings against Resemblyzer's own.

Torch is imported here: this module runs only in the checker's own process (`checks.process`), never in the
window's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
import torchaudio
from torch import nn

from s2studio.errors import UserError

RATE = 16000
WINDOW = 400
"""25 ms."""
HOP = 160
"""10 ms."""
MELS = 40
PARTIAL_FRAMES = 160
"""A partial utterance: 1.6 s of mel frames."""
PARTIALS_PER_S = 1.3
MIN_COVERAGE = 0.75
INSTALL_HINT = "the voice check needs the optional package resemblyzer: pip install 's2studio[checks]'"


def weights_path() -> Path:
    """`pretrained.pt` inside the installed resemblyzer package (found without importing it)."""
    spec = importlib.util.find_spec("resemblyzer")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / "pretrained.pt"
        if path.is_file():
            return path
    raise UserError(INSTALL_HINT)


class VoiceEncoder(nn.Module):
    def __init__(self, weights: Path | None = None) -> None:
        super().__init__()
        self.lstm = nn.LSTM(MELS, 256, 3, batch_first=True)
        self.linear = nn.Linear(256, 256)
        state = torch.load(weights or weights_path(), map_location="cpu", weights_only=True)["model_state"]
        self.load_state_dict({k: v for k, v in state.items() if not k.startswith("similarity_")})
        self.eval()
        self.register_buffer("window", torch.hann_window(WINDOW), persistent=False)
        fbank = torchaudio.functional.melscale_fbanks(WINDOW // 2 + 1, 0.0, RATE / 2, MELS, RATE, norm="slaney",
                                                      mel_scale="slaney")
        self.register_buffer("fbank", fbank, persistent=False)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """(batch, frames, 40) mel power -> (batch, 256) unit-length embeddings."""
        _, (hidden, _) = self.lstm(mels)
        raw = torch.relu(self.linear(hidden[-1]))
        return raw / torch.linalg.vector_norm(raw, dim=1, keepdim=True).clamp_min(1e-12)

    def mel(self, wav: torch.Tensor) -> torch.Tensor:
        """Mel power spectrogram (frames, 40) of 16 kHz samples (librosa's `melspectrogram` defaults)."""
        spec = torch.stft(wav, WINDOW, HOP, WINDOW, self.window, center=True, pad_mode="constant",
                          return_complex=True).abs() ** 2
        return (spec.T @ self.fbank).float()

    @torch.inference_mode()
    def embed(self, samples: np.ndarray) -> np.ndarray:
        """The embedding of one utterance (16 kHz mono float): the normalised mean of its partials' embeddings."""
        wav = np.asarray(samples, np.float32).reshape(-1)
        frames = int(np.ceil((len(wav) + 1) / HOP))
        step = int(round(RATE / PARTIALS_PER_S / HOP))
        starts = list(range(0, max(1, frames - PARTIAL_FRAMES + step + 1), step))
        last = starts[-1] * HOP
        if len(starts) > 1 and (len(wav) - last) / (PARTIAL_FRAMES * HOP) < MIN_COVERAGE:
            starts = starts[:-1]
        need = (starts[-1] + PARTIAL_FRAMES) * HOP
        if need >= len(wav):
            wav = np.pad(wav, (0, need - len(wav)))
        mel = self.mel(torch.from_numpy(wav))
        batch = torch.stack([mel[s:s + PARTIAL_FRAMES] for s in starts])
        mean = self(batch).mean(dim=0)
        return (mean / torch.linalg.vector_norm(mean)).numpy()
