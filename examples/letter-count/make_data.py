"""Writes train.jsonl and eval.jsonl: random lower-case words of 2 to 7 letters, no word in both.

python examples/letter-count/make_data.py   (seeded: the committed files are what it writes)
"""

import json
import random
from pathlib import Path

rng = random.Random(0)
words: dict[str, None] = {}
while len(words) < 1128:
    words["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))] = None
ordered = list(words)
here = Path(__file__).parent
for name, part in (("train.jsonl", ordered[:1000]), ("eval.jsonl", ordered[1000:])):
    (here / name).write_text("".join(json.dumps({"word": w}) + "\n" for w in part))
