"""The TRL path's rounds: how a step's rollouts are laid out over the ranks (each round dealt
by estimated tokens, :class:`StepLayout`), the check that every rank's allocator asked for the
same rollouts, and :class:`TRLRounds`, the round runner of vigor_cli/train/rollout_core.py that
generates and scores through the trainer (vigor_cli/integrations/trl_trainer.py)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from vigor_cli.allocation.base import Request
from vigor_cli.user.rewards import _completion_text
from vigor_cli.train.rollout_core import Generated, RolloutBatch
from vigor_cli.tasks.base import Score

ROLLOUT_INDEX = "rollout_index"
"""Column added to every row handed to reward functions: the rollout's index among its
prompt's rollouts of the step (generation order across rounds)."""


def split_requests(n: int, spent: Sequence[int]) -> list[int]:
    """Per-rank sizes of a round of ``n`` rollouts: n // ranks each, the remainder one more
    each to the ranks with the fewest rollouts so far in the step (``spent``; ties to the
    lower rank). Sizes differ by at most one, and so do the step's running totals."""
    ranks = len(spent)
    sizes = [n // ranks] * ranks
    for r in sorted(range(ranks), key=lambda r: (spent[r], r))[: n % ranks]:
        sizes[r] += 1
    return sizes


Key = tuple[str, int]
"""(uid, rollout index): one rollout of a step."""


@dataclass
class StepLayout:
    """Which rank generates which rollout of a step: decided on every rank from the same
    inputs (the allocator's requests and the gathered token counts), so identically.

    Each round's rollouts are dealt to the ranks by estimated tokens (prompt plus expected
    completion), the costliest first, each to the rank with the fewest tokens so far in the
    step among those with room; a rank's room is its share of the round's count
    (:func:`split_requests`). So a prompt's rollouts spread over the ranks, and the ranks'
    tokens stay close as well as their rollout counts."""

    ranks: int
    rows: list[list[tuple[Key, bool]]] = field(default_factory=list)
    """Per rank: (key, real) per row, rounds appended; real=False marks a balancing copy."""
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    spent: list[int] = field(default_factory=list)
    """Real rollouts per rank this step."""
    tokens: list[int] = field(default_factory=list)
    """Measured tokens (prompt + completion) of the real rollouts per rank this step."""

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.ranks)]
        self.spent = [0] * self.ranks
        self.tokens = [0] * self.ranks

    def add_round(self, flat: Sequence[str], cost: Callable[[str], float] = lambda uid: 0.0
                  ) -> tuple[list[Key], list[list[tuple[Key, bool]]]]:
        """Lay out one round's requests (a uid per rollout, in request order): the round's keys
        in request order, and each rank's rows of the round (request order within a rank),
        padded to the longest with copies of its last row."""
        keys = []
        for uid in flat:
            keys.append((uid, self.counts[uid]))
            self.counts[uid] += 1
        sizes = split_requests(len(keys), self.spent)
        load = [float(t) for t in self.tokens]
        mine: list[list[int]] = [[] for _ in range(self.ranks)]
        costs = {uid: cost(uid) for uid in set(flat)}  # once per prompt of the round, not per rollout
        for i in sorted(range(len(keys)), key=lambda i: -costs[keys[i][0]]):  # stable: ties in request order
            r = min((r for r in range(self.ranks) if len(mine[r]) < sizes[r]), key=lambda r: (load[r], r))
            mine[r].append(i)
            load[r] += costs[keys[i][0]]
        width, out = max(sizes), []
        for r in range(self.ranks):
            chunk = [(keys[i], True) for i in sorted(mine[r])]
            filler = chunk[-1][0] if chunk else keys[0]
            chunk += [(filler, False)] * (width - len(chunk))
            out.append(chunk)
            self.rows[r].extend(chunk)
            self.spent[r] += len(mine[r])
        return keys, out


def round_digest(step: int, round_index: int, requests: Sequence[Request]) -> int:
    """A signed 64-bit hash of a round's requests, for the ranks to compare."""
    text = json.dumps([step, round_index, [[r.uid, r.n] for r in requests]])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little", signed=True)


class RankDisagreement(RuntimeError):
    """The ranks' allocators asked for different rollouts: their selection is no longer one."""


def check_agreement(digests: Sequence[int], step: int, round_index: int) -> None:
    """Raise :class:`RankDisagreement` (on every rank: each compares the gathered hashes)
    unless every rank's round hash is the same."""
    if len(set(digests)) > 1:
        first = digests[0]
        apart = [r for r, d in enumerate(digests) if d != first]
        raise RankDisagreement(
            f"step {step} round {round_index + 1}: rank(s) {apart} asked for other rollouts than rank 0 "
            f"(request hashes by rank: {list(digests)}); every rank must run the same allocation config, "
            "seed, train_dataset order and reward functions"
        )


def _concat_generated(parts: list[tuple], loss_rows: Sequence[bool]) -> tuple:
    """Per-round ``GRPOTrainer._generate`` outputs concatenated along the rows, with a zero
    loss mask (``tool_mask``) on the rows outside the update: TRL's token normaliser
    (``num_items_in_batch``) and its row means then count the update's rows only."""
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra = [], [], [], [], [], defaultdict(list)
    for p, c, tm, comp, lp, ex, _images, _tool_images in parts:
        prompt_ids += p
        completion_ids += c
        tool_mask += tm if tm is not None else [[1] * len(ids) for ids in c]
        completions += comp
        logprobs = None if lp is None else (logprobs or []) + list(lp)
        for key, values in ex.items():
            extra[key] += values if isinstance(values, list) else [values] * len(c)
    tool_mask = [mask if use else [0] * len(mask) for mask, use in zip(tool_mask, loss_rows, strict=True)]
    return prompt_ids, completion_ids, tool_mask, completions, logprobs, dict(extra), None, []


class TRLRounds:
    """The TRL path's rounds (vigor_cli/rollout_core.RoundRunner). Every rank runs the
    same allocator and sees every rank's rewards, so each round's requests are the same on
    every rank (a gathered hash checks it); the round is laid out over the ranks
    (:class:`StepLayout`), each rank generates its rows with TRL's generation and scores
    them with TRL's reward functions, which gather every rank's rewards."""

    def __init__(self, trainer: "VigorGRPOTrainer"):
        self.tr = trainer
        self.layout = StepLayout(trainer.accelerator.num_processes)
        self.rank = trainer.accelerator.process_index
        self.rows: list[dict] = []
        """This rank's rows (dataset row + rollout index), rounds concatenated."""
        self.outputs: list[tuple] = []
        """This rank's ``_generate`` outputs per round (TRL's tuple of 8)."""
        self.per_func: list[torch.Tensor] = []
        """Per round, every rank's per-function rewards [ranks, width, functions], NaN for copies."""
        self._round: tuple | None = None
        self._where: tuple[int, int] = (0, 0)
        self.failed = torch.zeros(0, dtype=torch.bool)
        """Per rank and row of the round: an episode the environment failed (left unscored)."""
        self.texts: dict[Key, str] = {}
        """This rank's completion texts by row key."""

    def generate(self, requests: Sequence[Request], step: int, round_index: int) -> list[Generated]:
        tr = self.tr
        tr.check_ranks_agree(step, round_index, requests)
        keys, chunks = self.layout.add_round([r.uid for r in requests for _ in range(r.n)], tr.rollout_cost)
        mine = [tr._row(key) for key, _ in chunks[self.rank]]
        out, measured = tr._generate_round(mine)
        width = len(chunks[0])
        measured = measured.view(self.layout.ranks, width, 4).tolist()
        self.failed = torch.tensor([[bool(row[3]) for row in rank_rows] for rank_rows in measured])
        sizes: dict[Key, tuple[int, int, bool]] = {}
        for r, chunk in enumerate(chunks):
            for (key, real), (prompt_len, completion_len, truncated, _) in zip(chunk, measured[r]):
                if real:
                    sizes[key] = (int(prompt_len), int(completion_len), bool(truncated))
                    self.layout.tokens[r] += int(prompt_len) + int(completion_len)
        tr.observe_sizes(sizes)
        self._round = (chunks, mine, out)
        self._where = (step, round_index)
        for (key, real), completion in zip(chunks[self.rank], out[3]):
            if real:  # this rank's completions, for the health checks that read text
                self.texts[key] = _completion_text(completion)
        episodes = tr.vigor_episodes.summaries(chunks, self.rank) if tr.vigor_episodes is not None else {}
        return [Generated(key[0], key, sizes[key][1], sizes[key][2], episodes.get(key)) for key in keys]

    def score(self, generated: Sequence[Generated]) -> list[Score]:
        tr = self.tr
        chunks, mine, out = self._round
        per_func, signs = tr._score_round(mine, out)  # [ranks * width, functions], [ranks * width, 3]: every rank's
        width = len(chunks[0])
        signs = signs.view(self.layout.ranks, width, 3).tolist()
        real = torch.tensor([[is_real for _, is_real in chunk] for chunk in chunks])
        kept = real & ~self.failed  # an episode the environment failed is not scored
        per_func = per_func.view(self.layout.ranks, width, -1).masked_fill(~kept[..., None], float("nan"))
        scores: dict[Key, Score] = {}
        names = tr.reward_func_names
        weights = tr.reward_weights.cpu()
        # the weighted sum over the functions that scored (nansum), and which rollouts none
        # scored, for the whole round at once; then plain floats per rollout
        rewards = (per_func * weights).nansum(-1).tolist()
        unscored = torch.isnan(per_func).all(-1).tolist()
        values = per_func.tolist()
        for r, chunk in enumerate(chunks):
            for j, (key, is_real) in enumerate(chunk):
                if not is_real:
                    continue
                parts = {n: (None if math.isnan(v) else v) for n, v in zip(names, values[r][j])}
                graded, hard_coded, quotes = signs[r][j]
                details = {"hard_coded": bool(hard_coded), "quotes_outputs": bool(quotes)} if graded else {}
                scores[key] = Score(None if unscored[r][j] else rewards[r][j], components=parts, details=details)
        self.rows += mine
        self.outputs.append(out)
        self.per_func.append(per_func)
        return [scores[g.rollout] for g in generated]

    def replay(self, batch: RolloutBatch) -> tuple[tuple, torch.Tensor, list[float]]:
        """This rank's whole step for TRL's scoring pass: its ``_generate`` outputs with the
        loss mask, every rank's per-function rewards (rank-major, as TRL gathers them) and
        this rank's advantages (0 outside the update)."""
        by_key = {(s.uid, s.index): s for s in batch.generated}
        mine = self.layout.rows[self.rank]
        use = [real and by_key[key].in_update for key, real in mine]
        advantages = [by_key[key].advantage if u else 0.0 for (key, _), u in zip(mine, use)]
        per_func = torch.cat(self.per_func, dim=1).flatten(0, 1)
        return _concat_generated(self.outputs, use), per_func, advantages
