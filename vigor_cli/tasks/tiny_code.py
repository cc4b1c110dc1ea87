"""tiny-code: one-line stdin programs, as LiveCodeBench-format records.

Each problem is a family (add k, multiply by k, repeat a word k times, ...)
with a parameter; its statement is short and its reference solution one line
of Python. Records carry every LiveCodeBench field (tests as JSON lists of
``{"input", "output", "testtype": "stdin"}``), so the real code verifier
grades them in the real sandbox exactly as it grades LiveCodeBench.

Training and held-out problems are disjoint (the split is deterministic in ``split_seed``,
like tiny-math's). A training problem is rewarded on all its tests, public and private (a
program that prints the public tests' outputs earns nothing); a held-out problem is graded
on its private tests.
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable

from vigor_cli.task_base import Example
from vigor_cli.tasks.code_task import CodeTaskBase

HELD_OUT_SIZE = 40

# (statement with {k}, solution with {k}, input maker, reference function(stdin text, k) -> stdout)
_WORDS = ["cat", "tree", "vigor", "a", "sky", "python", "zz", "moon"]
FAMILIES: list[tuple[str, str, Callable[[random.Random], str], Callable[[str, int], str], range]] = [
    ("Read an integer n. Print n+{k}.", "print(int(input())+{k})",
     lambda r: f"{r.randint(-50, 99)}\n", lambda s, k: f"{int(s) + k}\n", range(1, 40)),
    ("Read an integer n. Print n-{k}.", "print(int(input())-{k})",
     lambda r: f"{r.randint(-50, 99)}\n", lambda s, k: f"{int(s) - k}\n", range(1, 40)),
    ("Read an integer n. Print n*{k}.", "print(int(input())*{k})",
     lambda r: f"{r.randint(-20, 50)}\n", lambda s, k: f"{int(s) * k}\n", range(2, 30)),
    ("Read an integer n. Print n%{k}.", "print(int(input())%{k})",
     lambda r: f"{r.randint(0, 500)}\n", lambda s, k: f"{int(s) % k}\n", range(2, 30)),
    ("Read an integer n. Print n//{k}.", "print(int(input())//{k})",
     lambda r: f"{r.randint(0, 500)}\n", lambda s, k: f"{int(s) // k}\n", range(2, 30)),
    ("Read a word. Print it {k} times.", "print(input()*{k})",
     lambda r: f"{r.choice(_WORDS)}\n", lambda s, k: f"{s.strip() * k}\n", range(2, 10)),
    ("Read two integers. Print their sum plus {k}.", "print(sum(map(int,input().split()))+{k})",
     lambda r: f"{r.randint(0, 99)} {r.randint(0, 99)}\n",
     lambda s, k: f"{sum(map(int, s.split())) + k}\n", range(0, 20)),
]
PUBLIC_TESTS = 2
PRIVATE_TESTS = 4


def _record(index: int, family: int, k: int) -> dict:
    statement, solution, make_input, reference, _ = FAMILIES[family]
    rng = random.Random(f"tiny-code/{family}/{k}")
    tests = []
    for _ in range(PUBLIC_TESTS + PRIVATE_TESTS):
        stdin = make_input(rng)
        tests.append({"input": stdin, "output": reference(stdin, k), "testtype": "stdin"})
    return {
        "question_title": f"tiny-{family}-{k}",
        "question_content": statement.format(k=k),
        "platform": "atcoder",
        "question_id": f"tiny{index}",
        "contest_id": "tiny-code",
        "contest_date": "2026-01-01T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(tests[:PUBLIC_TESTS]),
        "private_test_cases": json.dumps(tests[PUBLIC_TESTS:]),
        "metadata": json.dumps({"reference_solution": solution.format(k=k)}),
    }


def all_records() -> list[dict]:
    """Every problem of every family, as LiveCodeBench records, in a fixed order."""
    records = []
    for family, (*_, ks) in enumerate(FAMILIES):
        for k in ks:
            records.append(_record(len(records), family, k))
    return records


def split(split_seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held_out): training problems rewarded on all their tests, held-out problems
    graded on their private tests."""
    records = all_records()
    random.Random(split_seed).shuffle(records)

    def make(part: str, rows: list[dict], tests: str) -> list[Example]:
        return [
            Example(
                uid=f"tiny-code/{part}/{i}",
                question=r["question_content"],
                answer=r,
                meta={"tests": tests, "solution": json.loads(r["metadata"])["reference_solution"]},
            )
            for i, r in enumerate(rows)
        ]

    return make("train", records[HELD_OUT_SIZE:], "all"), make("test", records[:HELD_OUT_SIZE], "private")


def plain_prompt(question: str) -> str:
    return f"{question}\n"


def target_completion(solution: str) -> str:
    return f"```python\n{solution}\n```"


class TinyCodeTask(CodeTaskBase):
    name = "tiny-code"
    disjoint_split = True
    """Training and held-out problems are different problems (the split above)."""

    def __init__(self, split_seed: int = 0, reward: str = "full", workers: int = 0,
                 allow_weak_sandbox: bool = False):
        super().__init__(reward=reward, workers=workers, allow_weak_sandbox=allow_weak_sandbox)
        self.train, self.held_out = split(split_seed)

    def train_examples(self) -> list[Example]:
        return list(self.train)

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "tiny-code", "test"):
            from vigor_cli.errors import UserError

            raise UserError(f"tiny-code has one evaluation set, 'tiny-code'; got {name!r}")
        return list(self.held_out)

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        return self.render_code_prompt(example, tokenizer, plain_prompt(example.question))
