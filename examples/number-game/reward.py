"""A TRL reward function that reads the episodes' environments (TRL passes them as
``environments=``): 1 less a tenth per guess, for the games won."""


def few_guesses(completions, environments, **kwargs):
    return [max(0.0, 1.0 - 0.1 * env.guesses) if env.won else 0.0 for env in environments]
