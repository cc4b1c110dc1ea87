"""The reward of the letter-count example: how close the boxed number is to the word's length."""

import re


def letters(prompts, completions, word, **kwargs):
    """1 for the right count in \\boxed{}, a quarter less per letter off, 0 without a number."""
    rewards = []
    for completion, w in zip(completions, word):
        found = re.search(r"\\boxed\{(\d+)\}", completion)
        rewards.append(0.0 if found is None else max(0.0, 1 - abs(int(found.group(1)) - len(w)) / 4))
    return rewards
