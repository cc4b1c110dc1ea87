"""The episode loop: the model's turn, then the environment's answer, a batch of episodes at once.

:class:`EpisodeRunner` runs every requested episode turn by turn: one engine call per turn
for every episode still going (so a step is never one episode at a time, and the vLLM
engine's prefix cache serves each episode's earlier turns), then one environment call for
the batch. An episode ends when the environment ends it, after ``task.max_turns`` model
turns, when its tokens reach ``task.max_episode_tokens`` (a turn is cut there, and an
answer that would not leave room for a model token is dropped, as TRL drops a tool result
past its completion length), when a turn reaches ``sampling.max_new_tokens`` unfinished, or
when the environment fails on it (raised, timed out: the episode is left unscored). When
more than :data:`SYSTEMIC_FAILURE_SHARE` of a batch's episodes fail, the environment is
broken rather than the episodes, and the run stops with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from vigor_cli.episodes.base import (
    ENV_ERROR, FAILED, MAX_TURNS, TOKEN_BUDGET, TRUNCATED, Environment, Episode,
)
from vigor_cli.episodes.messages import MessageFormat
from vigor_cli.errors import UserError
from vigor_cli.rollout.base import Rollout, SamplingParams
from vigor_cli.run.seeding import derive_seed

SYSTEMIC_FAILURE_SHARE = 0.5
"""More than this share of a batch's episodes failed in the environment: stop the run."""


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int
    """Model turns per episode (task.max_turns)."""
    max_tokens: int
    """Tokens after the prompt, the model's and the environment's (task.max_episode_tokens)."""
    max_prompt_tokens: int | None = None
    """Tokens of a prompt ``reset``'s observation extends (task.max_prompt_tokens; the
    observation is cut to fit)."""


class EpisodeRunner:
    """Episodes over ``engine`` with ``env``; ``prompt_of(example, observation)`` gives an
    episode's prompt ids (the example's own, or with the observation its reset returned)."""

    def __init__(self, engine: Any, env: Environment, fmt: MessageFormat, limits: EpisodeLimits,
                 prompt_of: Callable[[Any, str | None], list[int]], keep_prompts: bool = False):
        self.engine, self.env, self.fmt, self.limits, self.prompt_of = engine, env, fmt, limits, prompt_of
        self.keep_prompts = keep_prompts
        """Every episode keeps its prompt ids (the TRL path hands them to TRL's loss)."""
        self.own_of: Callable[[Any], int] | None = None
        """Tokens of an example's own prompt, the task's part alone (None: not known here)."""

    def run(self, examples: Sequence[Any], counts: Sequence[int], sampling: SamplingParams,
            prompt_ids: Sequence[Sequence[int]] | None = None) -> list[list[Episode]]:
        """``counts[i]`` episodes of ``examples[i]``, grouped per example in request order."""
        owners = [i for i, c in enumerate(counts) for _ in range(c)]
        starts = self.env.start([examples[i] for i in owners])
        episodes: list[Episode] = []
        prompts: list[list[int]] = []
        for i, start in zip(owners, starts):
            ep = Episode(token_ids=[], logprobs=[], text="", truncated=False, session=start.session)
            if start.error is not None:  # never generated; its prompt stays the example's
                ep.ended, ep.error = start.ended or ENV_ERROR, start.error
            own = None
            if start.observation and start.error is None:  # reset changed the prompt: this episode's own
                own, error = self._observed_prompt(examples[i], start.observation)
                if error is not None:
                    ep.ended, ep.error = ENV_ERROR, error
            if own is not None:
                base = ep.prompt_ids = own
            else:
                base = list(prompt_ids[i]) if prompt_ids is not None else self.prompt_of(examples[i], None)
            if self.keep_prompts:
                ep.prompt_ids = base
            episodes.append(ep)
            prompts.append(base)
        turn = 0
        while active := [k for k, ep in enumerate(episodes) if not ep.ended]:
            turn += 1
            self._model_turn(episodes, prompts, active, sampling, turn)
            self._answer(episodes, [examples[owners[k]] for k in active], active, last=turn >= self.limits.max_turns)
        finish = getattr(self.engine, "finish_turns", None)
        if finish is not None:  # an engine whose processes generate in step (the TRL path's)
            finish()
        self._check_systemic(episodes)
        grouped: list[list[Episode]] = [[] for _ in counts]
        for i, ep in zip(owners, episodes):
            grouped[i].append(ep)
        return grouped

    def _observed_prompt(self, example: Any, observation: str) -> tuple[list[int] | None, str | None]:
        """(the prompt ids with ``reset``'s observation, None) or (None, the episode's error):
        an observation that cannot be rendered, or that a prompt cannot hold even cut."""
        try:
            ids = self.prompt_of(example, observation)
            asked = limit = self.limits.max_prompt_tokens
            if limit is None or len(ids) <= limit:
                return ids, None
            base = len(self.prompt_of(example, None))  # with the environment's own text (its tools)
            if self.own_of is not None:  # the key bounds the task's part; the observation takes what it leaves
                limit = base + max(0, limit - self.own_of(example))
            else:
                limit = max(limit, base)  # (a tool list may take more on its own)
            if len(ids) <= limit:
                return ids, None
            obs_ids = list(self.fmt.tokenizer(observation, add_special_tokens=False)["input_ids"])
            for _ in range(3):  # the observation's tokens cut by the excess (a re-tokenized cut may differ a little)
                keep = len(obs_ids) - (len(ids) - limit) - 2
                if keep <= 0:
                    break
                obs_ids = obs_ids[:keep]
                ids = self.prompt_of(example, self.fmt.tokenizer.decode(obs_ids, skip_special_tokens=True))
                if len(ids) <= limit:
                    return ids, None
        except Exception as e:  # an observation the tokenizer or template cannot take: this episode's
            return None, f"reset's observation cannot be rendered: {type(e).__name__}: {e}"[:300]
        return None, (f"reset's observation makes the prompt {len(ids)} tokens, over the {limit} that "
                      f"task.max_prompt_tokens={asked} leaves it, even cut")

    # ------------------------------------------------------------------ one turn
    def _model_turn(self, episodes: list[Episode], prompts: list[list[int]], active: list[int],
                    sampling: SamplingParams, turn: int) -> None:
        """One engine call for every active episode; each turn cut to its episode's budget."""
        room = {k: self.limits.max_tokens - len(episodes[k].token_ids) for k in active}
        params = replace(sampling, max_new_tokens=max(1, min(sampling.max_new_tokens, max(room.values()))),
                         seed=sampling.seed if turn == 1 or sampling.seed is None
                         else derive_seed(sampling.seed, "turn", turn))
        outs = self.engine.generate([prompts[k] + episodes[k].token_ids for k in active], [1] * len(active), params)
        for k, out in zip(active, outs):
            self._add_turn(episodes[k], out[0], room[k])

    def _add_turn(self, ep: Episode, turn: Rollout, room: int) -> None:
        ids, logprobs, text, cut = turn.token_ids, turn.logprobs, turn.text, turn.truncated
        if len(ids) > room:  # past the episode's budget: the turn ends there
            ids, logprobs, cut = ids[:room], logprobs[:room], True
            text = self.fmt.tokenizer.decode(ids, skip_special_tokens=True)
        ep.turn_start = len(ep.token_ids)
        ep.token_ids += list(ids)
        ep.logprobs += list(logprobs)
        ep.mask += [1] * len(ids)
        ep.messages.append({"role": "assistant", "content": text})
        ep.text = text
        if len(ep.messages) == 1:
            ep.first_text = text
        if cut:  # unfinished: at sampling.max_new_tokens, or where the episode's budget ran out
            ep.truncated = True
            ep.ended = TOKEN_BUDGET if len(ep.token_ids) >= self.limits.max_tokens else TRUNCATED

    def _answer(self, episodes: list[Episode], examples: list[Any], active: list[int], last: bool) -> None:
        """The environment's answer to each active episode's turn: an end, or messages appended."""
        asking = [k for k in active if not episodes[k].ended]
        if not asking:
            return
        example_of = dict(zip(active, examples))
        replies = self.env.answer([episodes[k] for k in asking], [example_of[k] for k in asking], last)
        if len(replies) != len(asking):
            raise AssertionError(f"environment {self.env.name}: {len(replies)} replies for {len(asking)} episodes")
        for k, reply in zip(asking, replies):
            ep = episodes[k]
            if reply.tool_calls:
                ep.messages[-1]["tool_calls"] = reply.tool_calls
            if reply.error is not None:
                ep.ended, ep.error = reply.ended or ENV_ERROR, reply.error
            elif reply.done or last:
                ep.ended = reply.ended or MAX_TURNS
            else:
                self._append(ep, reply.messages)

    def _append(self, ep: Episode, messages: list[dict]) -> None:
        try:
            ids = self.fmt.encode(messages)
        except Exception as e:  # a message the template cannot render: this episode's, not the run's
            ep.ended, ep.error = ENV_ERROR, f"its message cannot be rendered: {type(e).__name__}: {e}"[:300]
            return
        if len(ep.token_ids) + len(ids) >= self.limits.max_tokens:
            ep.ended = TOKEN_BUDGET  # no room left for a model token after the answer
            return
        ep.token_ids += ids
        ep.logprobs += [0.0] * len(ids)
        ep.mask += [0] * len(ids)
        ep.messages += messages

    def _check_systemic(self, episodes: list[Episode]) -> None:
        failed = [ep for ep in episodes if ep.ended in FAILED]
        if len(failed) > SYSTEMIC_FAILURE_SHARE * len(episodes):
            self.env.release(episodes)
            raise UserError(
                f"environment {self.env.name}: {len(failed)} of {len(episodes)} episodes failed (first: "
                f"{failed[0].ended}: {failed[0].error}); stopping: the environment is broken, not the episodes")


def make_runner(cfg: Any, task: Any, tokenizer: Any, engine: Any, env: Environment, stop_ids: Sequence[int]) -> EpisodeRunner:
    """The runner of a run's episodes: ``env`` over ``engine``, its messages in the tokenizer's
    format, the limits of ``cfg.task``, prompts rendered as the environment shows them."""
    from vigor_cli.episodes.messages import render_prompt
    from vigor_cli.tasks.prompts import encode_prompt

    def prompt_of(example: Any, observation: str | None) -> list[int]:
        return encode_prompt(tokenizer, render_prompt(task, example, tokenizer, env, observation))

    limits = EpisodeLimits(cfg.task.max_turns, cfg.completion_tokens(), cfg.task.max_prompt_tokens)
    runner = EpisodeRunner(engine, env, MessageFormat(tokenizer, stop_ids, task.follow_up), limits, prompt_of)
    runner.own_of = lambda example: len(encode_prompt(tokenizer, task.render_prompt(example, tokenizer)))
    return runner
