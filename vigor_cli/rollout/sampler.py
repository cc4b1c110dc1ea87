"""vigor's own seeded token sampler: how the transformers engine picks each next token.

Rollouts and evaluation draw through :class:`Sampler`, one per ``generate`` call, seeded from
``SamplingParams.seed``. A step's next token is drawn from softmax(logits / temperature),
cut to the top-p nucleus, by the exponential race: token = argmax_i p_i / E_i, where
E_i = -log(1 - U_i) and U_i are uniform doubles in [0, 1) from the call's
``torch.Generator``, drawn row-major over the batch and the vocabulary. Temperature 0 is
greedy (argmax), and draws nothing.

Details: docs/modules.md.
"""

from __future__ import annotations

import torch


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set logits outside the smallest set with cumulative probability >= top_p to -inf."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(-1) - probs >= top_p  # keep the token that crosses top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def exponential_race(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row of ``probs`` (rows sum to 1), drawn with probability ``probs``:
    argmax p / E with E = -log1p(-U), U uniform doubles from ``generator`` (one per entry)."""
    uniform = torch.rand(probs.shape, generator=generator, dtype=torch.float64, device=probs.device)
    exponential = (-torch.log1p(-uniform)).to(probs.dtype)
    return (probs / exponential).argmax(dim=-1)


class Sampler:
    """The next-token rule of one ``generate`` call: temperature, top-p and a generator
    seeded once (``seed`` None: 0), whose stream the call's draws consume in order."""

    def __init__(self, temperature: float, top_p: float, seed: int | None, device: torch.device | str = "cpu"):
        self.temperature = temperature
        self.top_p = top_p
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(int(seed) if seed is not None else 0)

    def scale(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits of the distribution tokens are drawn from (and log-probs computed under):
        divided by the temperature (greedy: as they are)."""
        return logits.float() / (self.temperature if self.temperature > 0 else 1.0)

    def draw(self, scaled: torch.Tensor) -> torch.Tensor:
        """The next token of each row, from :meth:`scale`'s logits."""
        if self.temperature <= 0:
            return scaled.argmax(-1)
        probs = torch.softmax(top_p_filter(scaled, self.top_p), dim=-1)
        return exponential_race(probs, self.generator)
