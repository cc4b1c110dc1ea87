"""A vigor task as TRL's reward functions and train dataset: the task's verifiers graded as
`vigor train` grades them (each distinct completion of a step once), one TRL function per
reward of a task that combines several, and the task's prompts rendered and fitted as
`vigor train` renders and fits them."""

from __future__ import annotations

from typing import Any, Callable

from vigor_cli.user.reward_log import forward_logs
from vigor_cli.user.rewards import _completion_text
from vigor_cli.train.rollout_core import sandbox_metrics
from vigor_cli.tasks.base import score_once

HARD_CODING_SIGNS = ("hard_coded", "quotes_outputs")
"""A code verdict's signs of a hard-coded program (vigor_cli/train/health.py's ``hard_coding``)."""


def _graded_scores(task: Any, uid_column: str, env: Any = None) -> Callable[..., list[Any]]:
    """The task's Scores for a TRL reward call's completions: each distinct (uid, completion)
    of a training step graded once (a reward is a function of the two alone; repeats are
    common, a sandbox run each for code), for every function of the task together. Under an
    environment an episode's final turn is graded against the example it names
    (code-feedback: all of a training problem's tests)."""
    examples = {ex.uid: ex if env is None else env.scoring_example(ex) for ex in task.train_examples()}
    graded: dict[tuple[str, str], Any] = {}
    seen_step: list[Any] = [None]
    sandbox: dict[str, Any] = {}  # this step's isolation level, read by the TRL path's step line
    signs: dict[tuple[str, str], dict] = {}  # (uid, text) -> a graded program's hard-coding signs, this call

    def scores(prompts: list, completions: list, _forward: bool = True, **kwargs: Any) -> list[Any]:
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        if step is None or step != seen_step[0]:
            graded.clear()
            sandbox.clear()
            seen_step[0] = step
        if kwargs.get("trainer_state") is not None:  # TRL's, for the task's reward functions
            task.trainer_state = kwargs["trainer_state"]
        texts = [_completion_text(c) for c in completions]
        out = score_once(task, examples, list(zip(kwargs[uid_column], texts)), graded, kwargs.get("completion_ids"))
        sandbox.update(sandbox_metrics(out))  # a code task's: the level its programs ran under
        signs.clear()
        for uid, text, score in zip(kwargs[uid_column], texts, out):
            if "hard_coded" in (score.details or {}):  # the health check's hard_coding (trl_checks.hard_coding_signs)
                signs[(str(uid), text)] = {k: bool(score.details[k]) for k in HARD_CODING_SIGNS}
        if step is None:  # no step to key the memo by: nothing is kept across calls
            graded.clear()
        if _forward:  # what the functions logged, to TRL's log_metric and log_extra (once per call)
            forward_logs(out, task.logged_metrics(), kwargs)
        return out

    scores.vigor_sandbox = sandbox  # type: ignore[attr-defined]
    scores.vigor_signs = signs  # type: ignore[attr-defined]
    return scores


def task_reward(task: Any, uid_column: str = "uid", env: Any = None) -> Any:
    """A TRL reward function scoring with a vigor task's verifier (math, code: the real
    verifiers and sandbox): rows carry the example's uid in ``uid_column``; graded as `vigor
    train` grades (:func:`_graded_scores`). A completion the task cannot score gets None
    (TRL's convention)."""
    scores = _graded_scores(task, uid_column, env)

    def reward(prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        return [None if s.reward is None else float(s.reward) for s in scores(prompts, completions, **kwargs)]

    reward.__name__ = f"{task.name}_verifier"
    reward.vigor_sandbox = scores.vigor_sandbox  # type: ignore[attr-defined]
    reward.vigor_signs = scores.vigor_signs  # type: ignore[attr-defined]
    return reward


def task_reward_funcs(task: Any, uid_column: str = "uid", env: Any = None) -> tuple[list[Callable], list[float] | None]:
    """The TRL reward functions of a task and their weights: one per reward function of a
    task that combines several (the custom task's ``--reward``s, each logged by TRL under its
    own name, weighted as ``--reward-weights``: TRL's weighted sum over the ones that scored
    is vigor's), else the task's verifier alone (:func:`task_reward`, weights None: TRL's)."""
    parts = [r.name for r in getattr(task, "rewards", [])]
    if len(parts) < 2:
        return [task_reward(task, uid_column, env)], None
    whole = task_reward_components(task, uid_column, env)
    funcs = []
    for name in parts:
        def part(prompts: list, completions: list, _name: str = name, **kwargs: Any) -> list[float | None]:
            return [c.get(_name) for c in whole(prompts, completions, _forward=_name == parts[0], **kwargs)]

        part.__name__ = name
        part.vigor_sandbox = whole.vigor_sandbox  # type: ignore[attr-defined]
        part.vigor_signs = whole.vigor_signs  # type: ignore[attr-defined]
        funcs.append(part)
    return funcs, list(task.weights)


def task_reward_components(task: Any, uid_column: str = "uid", env: Any = None) -> Callable[..., list[dict]]:
    """Each completion's per-function values (``Score.components``), every distinct (uid,
    completion) of a step graded once for all the functions together."""
    scores = _graded_scores(task, uid_column, env)

    def components(prompts: list, completions: list, _forward: bool = True, **kwargs: Any) -> list[dict]:
        return [s.components for s in scores(prompts, completions, _forward, **kwargs)]

    components.vigor_sandbox = scores.vigor_sandbox  # type: ignore[attr-defined]
    components.vigor_signs = scores.vigor_signs  # type: ignore[attr-defined]
    return components


def task_dataset(task: Any, tokenizer: Any, max_prompt_tokens: int | None = None, env: Any = None) -> Any:
    """The task's training examples as a ``datasets.Dataset`` of (prompt, uid) rows, the
    prompt rendered as ``vigor train`` renders it (under an environment, with its tools); the
    prompts it leaves out left out as it does (vigor_cli/train_data.fit_prompts: longer than
    ``max_prompt_tokens``, or no token)."""
    from datasets import Dataset

    from vigor_cli.evaluate.sets import fit_prompts

    examples = task.train_examples()
    if env is None:
        kept, _, _ = fit_prompts(max_prompt_tokens or 2**62, task, tokenizer, examples)
        return Dataset.from_list([{"prompt": task.render_prompt(ex, tokenizer), "uid": ex.uid}
                                  for ex in examples if ex.uid in kept])
    from vigor_cli.episodes.messages import render_prompt
    from vigor_cli.tasks.prompts import encode_prompt

    rows = []
    for ex in examples:
        text = render_prompt(task, ex, tokenizer, env)
        ids = encode_prompt(tokenizer, text)
        if ids and (max_prompt_tokens is None or len(ids) <= max_prompt_tokens):
            rows.append({"prompt": text, "uid": ex.uid})
    return Dataset.from_list(rows)
