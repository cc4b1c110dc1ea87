"""A number game written for TRL's ``GRPOTrainer(environment_factory=NumberGame)``, as TRL's
documentation shows environments: ``reset`` per episode, public methods with type hints and a
Google-style docstring as tools, ``get_reward`` from the instance's state. vigor runs it as it
is: ``vigor train --data examples/number-game/games.jsonl --reward
examples/number-game/reward.py:few_guesses --env examples/number-game/env.py:NumberGame --max-turns 6
--set task.max_prompt_tokens=200 --prompts-per-step 16`` (a prompt with its tool list takes up to 182
tokens; 64 rows hold auto's census of twice 16 prompts)."""


class NumberGame:
    def __init__(self):
        self.secret = 0
        self.guesses = 0
        self.won = False

    def reset(self, **kwargs) -> str | None:
        self.secret = int(kwargs["answer"])
        self.guesses = 0
        self.won = False
        return " Find it with the guess tool."

    def guess(self, number: int) -> str:
        """Guess the hidden number.

        Args:
            number: The number to guess.

        Returns:
            Whether the hidden number is higher, lower, or correct.
        """
        self.guesses += 1
        if number < 0:
            raise ValueError("numbers are not negative")
        if number == self.secret:
            self.won = True
            return "correct"
        return "higher" if self.secret > number else "lower"

    def get_reward(self) -> float:
        return 1.0 if self.won else 0.0
