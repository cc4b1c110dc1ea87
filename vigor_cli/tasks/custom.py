"""custom: the user's own data and reward functions (``vigor train --data PATH --reward ...``).

Details: docs/modules.md.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import vigor_cli.tasks.loading as loading
from vigor_cli.user import records
from vigor_cli.errors import UserError
from vigor_cli.user.reward_log import RewardLog, trainer_state
from vigor_cli.task_base import Example, Score, Task
from vigor_cli.tasks.prompts import has_chat_template, template_kwargs

ROLES = ("system", "user", "assistant")
"""Roles a chat-message prompt may use."""
TRAIN_SAMPLE = 64
"""Without task.eval_data, this many training rows (the first the run trains on) are evaluated instead."""

_SLOT = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


# --------------------------------------------------------------------------- config checks
def check_template(template: str) -> list[str]:
    """The ``{column}`` slots of a prompt template; ValueError for a lone brace or an empty slot."""
    slots = []
    for m in _SLOT.finditer(template):
        token = m.group(0)
        if token in ("{{", "}}"):
            continue
        if m.group(1) is None:
            raise ValueError(f"task.prompt_template {template!r}: a lone '{token}' (write {token * 2} for a "
                             "literal brace, {column} for a column)")
        if not m.group(1).strip():
            raise ValueError(f"task.prompt_template {template!r}: an empty slot {{}}; name a column, e.g. {{question}}")
        slots.append(m.group(1))
    return slots


def fill_template(template: str, row: dict, where: str) -> str:
    """``template`` with each ``{column}`` replaced by the row's value."""
    def slot(m: re.Match) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name = m.group(1)
        if name not in row:
            raise UserError(f"{where}: no column '{name}' for task.prompt_template's {{{name}}} "
                            f"(columns: {', '.join(row)})")
        value = row[name]
        if value is None:
            raise UserError(f"{where}: column '{name}' is null (task.prompt_template needs it)")
        return str(value)

    return _SLOT.sub(slot, template)


def check_fields(fields: dict) -> None:
    """``task.fields``: non-empty names on both sides."""
    for expected, column in fields.items():
        if not str(expected).strip() or not isinstance(column, str) or not column.strip():
            raise ValueError(f"task.fields: {expected!r}: {column!r} must map a name to a column name")


# --------------------------------------------------------------------------- the task
class CustomTask(Task):
    name = "custom"

    def __init__(self, cfg: Any, workers: int = 0):
        from vigor_cli.user import rewards

        self.cfg = cfg
        _check_settings_text(cfg)
        self.rewards = rewards.load_rewards(cfg.rewards, workers=workers, code_reward=cfg.code_reward,
                                            allow_weak_sandbox=cfg.allow_weak_sandbox, timeout=cfg.reward_timeout,
                                            environments=getattr(cfg, "env", None) is not None)
        self.weights = list(cfg.reward_weights) or [1.0] * len(self.rewards)
        self.fields = dict(cfg.fields)
        self.tables: dict[str, loading.Table] = {}
        self._train: list[Example] | None = None
        self.reward_log = RewardLog()
        """What the reward functions log through TRL's log_metric and log_extra."""
        self.trainer_state = trainer_state(0, 0)
        self._left_out: set[str] = set()

    # ---- data
    def train_examples(self) -> list[Example]:
        if self._train is None:
            table = loading.read_table(self.cfg.data, key="--data", purpose="train",
                                       hub_flag="--data PATH (a local file or folder)")
            self.tables["train"] = table
            self._train = self._examples(table, "train")
        return list(self._train)

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "custom", "eval"):
            raise UserError(f"custom has one evaluation set, task.eval_data (--eval-data); got {name!r}")
        if self.cfg.eval_data:
            table = loading.read_table(self.cfg.eval_data, key="--eval-data", purpose="eval",
                                       hub_flag="--eval-data PATH (a local file or folder)")
        else:  # the training source's own test (or validation) split, when it has one
            self.train_examples()
            if self.tables["train"].eval_split is None:
                return [ex for ex in self.train_examples() if ex.uid not in self._left_out][:TRAIN_SAMPLE]
            table = loading.read_table(self.cfg.data, key="--data", purpose="eval",
                                       hub_flag="--data PATH (a local file or folder)")
        self.tables["eval"] = table
        return self._examples(table, "eval")

    def _examples(self, table: loading.Table, part: str) -> list[Example]:
        prompt_column = None if self.cfg.prompt_template else self.fields.get("prompt", "prompt")
        self._check_columns(table, prompt_column)
        return [self._example(table, i, part, prompt_column) for i in range(len(table.rows))]

    def _check_columns(self, table: loading.Table, prompt_column: str | None) -> None:
        """Columns the prompt and every reward need, once per source (rows are checked too)."""
        have = set(table.columns)
        cols = ", ".join(table.columns)
        for expected, column in self.fields.items():
            if column not in have:
                flag = {"prompt": "--prompt-field", "answer": "--answer-field"}.get(expected, f"task.fields.{expected}")
                raise UserError(f"{flag} {column}: {table.source} has no column '{column}' (columns: {cols})")
        if prompt_column is not None and prompt_column not in have:
            raise UserError(f"{table.source}: no '{prompt_column}' column (columns: {cols}); name the prompt "
                            "column with --prompt-field COLUMN, or build the prompt with task.prompt_template")
        for reward in self.rewards:
            for col in reward.needs:
                source = self.fields.get(col, col)
                if source not in have:
                    mapped = f" (task.fields.{col} -> '{source}')" if source != col else ""
                    how = "--answer-field COLUMN" if col == "answer" else f"task.fields.{col}=COLUMN"
                    raise UserError(f"reward {reward.spec} needs column '{col}'{mapped}, which {table.source} "
                                    f"lacks (columns: {cols}); name it with {how}")

    def _example(self, table: loading.Table, i: int, part: str, prompt_column: str | None) -> Example:
        row, where = table.rows[i], table.where(i)
        columns = {k: v for k, v in row.items() if k != prompt_column}
        for expected, column in self.fields.items():
            if expected != "prompt":
                columns[expected] = row.get(column)
        if self.cfg.prompt_template:
            prompt: Any = fill_template(self.cfg.prompt_template, {**row, **columns}, where)
        else:
            prompt = _prompt_of(row.get(prompt_column), prompt_column, where)
        if self.cfg.system_prompt is not None:
            prompt = _with_system(prompt, self.cfg.system_prompt, where)
        _check_prompt_text(prompt, where, prompt_column)
        for reward in self.rewards:
            for col in reward.needs:
                source = self.fields.get(col, col)
                if source not in row:
                    raise UserError(f"{where}: missing field '{source}' (reward {reward.spec} needs it)")
                if columns.get(col) is None and reward.builtin:
                    raise UserError(f"{where}: field '{source}' is null (reward {reward.spec} grades against it)")
                if reward.builtin and col == "answer":  # a NaN or an object gold: graded as its repr
                    records.check_record({source: columns.get(col)}, f"{where} (reward {reward.spec})",
                                         answers=(source,))
        return Example(uid=f"custom/{part}/{i}", question=_text_of(prompt), answer=columns.get("answer"),
                       meta={"prompt": prompt, "columns": columns, "where": where})

    def leave_out_of_training(self, uids: set[str]) -> None:
        self._left_out = set(uids)  # the training sample evaluated without --eval-data skips them

    # ---- prompt
    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        prompt = example.meta["prompt"]
        use = self.cfg.chat_template
        if isinstance(prompt, str) and use is not True:
            return prompt
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if use is False or (use == "auto" and (tokenizer is None or not has_chat_template(tokenizer))):
            return "\n\n".join(str(m["content"]) for m in messages)
        if tokenizer is None or not has_chat_template(tokenizer):
            raise UserError("task.chat_template=true, but the model's tokenizer has no chat template; "
                            "set it to auto or false")
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **template_kwargs(tokenizer))

    # ---- reward
    takes_completion_ids = True

    def score(self, examples: Sequence[Example], completions: Sequence[Any],
              completion_ids: Sequence[Sequence[int]] | None = None,
              columns: dict[str, list] | None = None) -> list[Score]:
        """Every reward function on the completions (with TRL's arguments: the completions'
        token ids, ``trainer_state``, ``log_metric`` and ``log_extra``), combined by weight. A
        completion is text, or already a message list (an episode's exchange); ``columns`` are
        more keyword arguments for the functions, one value per completion (an episode's
        ``environments``)."""
        from vigor_cli.user.rewards import combine

        prompts = [ex.meta["prompt"] for ex in examples]
        shown = [c if isinstance(c, list) else [{"role": "assistant", "content": c}] if isinstance(p, list) else c
                 for p, c in zip(prompts, completions)]
        extra = dict(columns or {})
        keys = list(dict.fromkeys(k for ex in examples for k in ex.meta["columns"]))
        columns = {k: [ex.meta["columns"].get(k) for ex in examples] for k in keys}
        columns.update(extra)
        ids = None if completion_ids is None else [list(i) for i in completion_ids]
        per, extras = [], [{} for _ in completions]
        for reward in self.rewards:
            context, logged = self.reward_log.call(reward.spec, len(completions), self.trainer_state, ids)
            per.append(reward.scores(prompts, shown, columns, context))
            for mine, theirs in zip(extras, logged()):
                mine.update(theirs)
        totals = combine([[s.reward for s in scores] for scores in per], self.weights)
        out = []
        for i, total in enumerate(totals):
            parts = {r.name: per[j][i].reward for j, r in enumerate(self.rewards)}
            if len(self.rewards) == 1 and per[0][i].reason:  # a built-in verifier's verdict
                reason, details = per[0][i].reason, dict(per[0][i].details)
            else:
                reason = ", ".join(f"{n} {'none' if v is None else f'{v:.3g}'}" for n, v in parts.items())
                details = {}
            error = next((per[j][i].grading_error for j in range(len(per)) if per[j][i].grading_error), None)
            out.append(Score(total, reason, details, components=parts, grading_error=error, extra=extras[i]))
        return out

    def logged_metrics(self) -> dict[str, float]:
        return self.reward_log.drain()

    def describe_data(self) -> list[str]:
        """What the data read: source, kind, split, a folder's files, rows and columns (the
        training output prints them, as `--dry-run` does)."""
        return [f"{ {'train': 'data', 'eval': 'eval data'}[part]}: {table.describe()}"
                for part, table in self.tables.items()]

    def reward_seconds(self) -> dict[str, float]:
        """Seconds spent in each reward function so far (a slow one shows here and in the
        step's reward time)."""
        return {r.name: r.seconds for r in self.rewards}

    def close(self) -> None:
        for r in self.rewards:
            r.close()


def _prompt_of(value: Any, column: str | None, where: str) -> Any:
    """A row's prompt: non-empty text, or a list of chat messages."""
    if isinstance(value, str):
        if not value.strip():
            raise UserError(f"{where}: the prompt ('{column}') is empty")
        return value
    if value is None:
        raise UserError(f"{where}: no prompt (field '{column}' is missing or null)")
    if isinstance(value, list) and value:
        for m in value:
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
                raise UserError(f"{where}: the prompt ('{column}') is a list but not of chat messages "
                                "({\"role\": \"system\"|\"user\"|\"assistant\", \"content\": text}); got "
                                f"{str(m)[:80]}")
        if not any(m["content"].strip() for m in value):
            raise UserError(f"{where}: the prompt ('{column}') is empty: every message's content is empty")
        blank = next((i for i, m in enumerate(value) if m["role"] == "user" and not m["content"].strip()), None)
        if blank is not None:
            raise UserError(f"{where}: the prompt ('{column}') has an empty user message (message {blank + 1})")
        return [{"role": m["role"], "content": m["content"]} for m in value]
    raise UserError(f"{where}: the prompt ('{column}') is {type(value).__name__} {str(value)[:40]!r}; "
                    "expected text or a list of chat messages")


def _check_prompt_text(prompt: Any, where: str, column: str | None) -> None:
    """The prompt as built (column, template, system message) holds text a tokenizer can take:
    not empty, no lone surrogate."""
    what = f"the prompt ('{column}')" if column else "the prompt task.prompt_template builds"
    pieces = [prompt] if isinstance(prompt, str) else [m["content"] for m in prompt]
    if not any(p.strip() for p in pieces):
        raise UserError(f"{where}: {what} is empty")
    for piece in pieces:
        problem = records.unencodable(piece)
        if problem is not None:
            raise UserError(f"{where}: {what} is {problem}")


def _check_settings_text(cfg: Any) -> None:
    """The system message and the template go into every prompt: text a tokenizer cannot take
    there is named by its flag, not blamed on the data's first row."""
    for value, name in ((cfg.system_prompt, "--system-prompt (task.system_prompt)"),
                        (cfg.prompt_template, "--prompt-template (task.prompt_template)")):
        problem = records.unencodable(value) if value is not None else None
        if problem is not None:
            raise UserError(f"{name}: {problem}")


def _with_system(prompt: Any, system: str, where: str) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    if any(m["role"] == "system" for m in prompt):
        raise UserError(f"{where}: the prompt already has a system message; drop --system-prompt "
                        "(task.system_prompt) or the data's system message")
    return [{"role": "system", "content": system}, *prompt]


def _text_of(prompt: Any) -> str:
    """The prompt as one text for tables and logs: a message list's last user message."""
    from vigor_cli.user.rewards import _prompt_text

    return _prompt_text(prompt)
