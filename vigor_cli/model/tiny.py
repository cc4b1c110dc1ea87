"""The bundled tiny model: a ~0.8M-parameter Qwen2 with a byte-level character tokenizer.

Details: docs/modules.md.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

TINY_DIR = Path(__file__).resolve().parents[1] / "assets" / "tiny"
"""Where the committed asset lives (``model.name_or_path: tiny``)."""

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
"""<unk> is never produced (every byte has a token); naming it stops Qwen2Tokenizer adding its own."""
PIECE_TOKENS = ["\\boxed{", "```python\n", "\n```"]
"""Multi-character pieces kept whole, so tiny completions stay short."""

ARCH = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
"""Qwen2 shape of the tiny model (about 0.8M parameters)."""

MAX_STEPS = 2000
"""Upper bound on warm-up steps."""
TARGET = 0.38
"""Warm-up stops once sampled accuracy on the training probe reaches this: held-out
accuracy then sits low in the 20-60 % band, leaving room for RL."""


def build_tokenizer():
    """Byte-level fast tokenizer (one token per byte, no merges) with bos/eos/pad.

    Byte-level like Qwen's, on purpose: ``AutoTokenizer`` loads a checkpoint whose
    config says ``qwen2`` with Qwen's normalizer (NFC) and byte-level
    pre-tokenizer whatever ``tokenizer.json`` says, so the vocabulary must be made
    of byte-level symbols (space is ``Ġ``, newline ``Ċ``) for text to survive.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_symbols = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + byte_symbols)}
    # BPE with no merges = one token per byte.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, normalized=False) for t in PIECE_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=ARCH["max_position_embeddings"],
    )
    speak_tools(tokenizer)
    return tokenizer


def speak_tools(tokenizer: Any) -> None:
    """Give the tiny tokenizer its plain-text chat template and its parser: tool-calling
    conversations render (TRL's environment_factory accepts it) while vigor's prompts stay
    plain text (vigor_cli/tasks/plain_template.py)."""
    from vigor_cli.tasks.plain_template import PLAIN_CHAT_TEMPLATE, RESPONSE_TEMPLATE

    tokenizer.chat_template = PLAIN_CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE


def build_config(tokenizer):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_theta=10000.0,
        **ARCH,
    )


def warmup_pairs(split_seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """(prompt, completion) pairs of each tiny task's training split, as a plain tokenizer sees them."""
    from vigor_cli.tasks import tiny_code, tiny_math

    math_train, _ = tiny_math.split(split_seed)
    code_train, _ = tiny_code.split(split_seed)
    return {
        "tiny-math": [
            (tiny_math.plain_prompt(e.question), tiny_math.target_completion(e.answer)) for e in math_train
        ],
        "tiny-code": [
            (tiny_code.plain_prompt(e.question), tiny_code.target_completion(e.meta["solution"]))
            for e in code_train
        ],
    }


def _encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], int]]:
    """Token ids of prompt+completion+EOS, and where the completion starts."""
    out = []
    for prompt, completion in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append((p + c, len(p)))
    return out


def pad_batch(tokenizer, rows: Sequence[tuple[list[int], int | Sequence[int]]]):
    """Right-padded ids, attention mask and labels (-100 where no loss): each row's loss is on
    its tokens from ``start`` on (an int: the completion), or where its 0/1 list says (the
    model's turns of a conversation)."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(input_ids, -100)
    mask = torch.zeros_like(input_ids)
    for row, (ids, where) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        if isinstance(where, int):
            labels[row, where : len(ids)] = torch.tensor(ids[where:])
        else:
            labels[row, : len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, where)])
        mask[row, : len(ids)] = 1
    return input_ids, mask, labels


def supervised_warmup(
    model,
    tokenizer,
    pairs: dict[str, list[tuple[str, str]]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    code_share: float,
    seed: int,
    on_step: Callable[[int, float], bool] | None = None,
) -> int:
    """Teacher-forced cross-entropy on completion tokens; a batch draws ``code_share`` from tiny-code.

    ``on_step(step, loss)`` runs after each optimizer step; returning True stops early.
    Returns the number of steps taken.
    """
    import torch

    rng = random.Random(seed)
    encoded = {name: _encode_pairs(tokenizer, rows) for name, rows in pairs.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, min(50, steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    model.train()
    n_code = round(batch_size * code_share)
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        # Math and code rows differ in length several-fold: two passes avoid padding math to code.
        parts = [rng.sample(encoded["tiny-math"], batch_size - n_code), rng.sample(encoded["tiny-code"], n_code)]
        total = 0.0
        for rows in parts:
            if not rows:
                continue
            input_ids, mask, labels = pad_batch(tokenizer, rows)
            loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            (loss * len(rows) / batch_size).backward()
            total += loss.item() * len(rows) / batch_size
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if on_step is not None and on_step(step + 1, total):
            break
    model.eval()
    return step + 1


def sample_completions(
    model, tokenizer, prompts: Sequence[str], n: int, *, temperature: float, max_new_tokens: int, seed: int
) -> list[list[str]]:
    """``n`` sampled completions per prompt (plain transformers ``generate``, left padding)."""
    import torch

    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    out: list[list[str]] = []
    chunk = max(1, 512 // n)
    for k in range(0, len(prompts), chunk):
        part = prompts[k : k + chunk]
        enc = tokenizer(list(part), return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(
                **enc,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        texts = tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        out.extend(texts[i * n : (i + 1) * n] for i in range(len(part)))
    return out


def pass_rates(task, model, tokenizer, examples, n: int, *, seed: int, temperature: float = 1.0, max_new_tokens: int = 16) -> list[float]:
    """Per-example share of ``n`` sampled completions that ``task`` scores as correct."""
    prompts = [task.render_prompt(e, tokenizer) for e in examples]
    samples = sample_completions(model, tokenizer, prompts, n, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    flat_ex = [e for e, group in zip(examples, samples) for _ in group]
    flat_text = [t for group in samples for t in group]
    scores = task.score(flat_ex, flat_text)
    return [sum(s.reward for s in scores[i * n : (i + 1) * n]) / n for i in range(len(examples))]


def probe_accuracy(model, tokenizer, pairs: Sequence[tuple[str, str]], n: int, seed: int) -> float:
    """Share of ``n`` samples per (prompt, completion) pair that reproduce the completion exactly.

    Used only as the warm-up's stopping rule, on training problems; reported
    accuracies come from the task, graded by the real verifier.
    """
    samples = sample_completions(
        model, tokenizer, [p for p, _ in pairs], n, temperature=1.0, max_new_tokens=12, seed=seed
    )
    hits = sum(text == target for (_, target), group in zip(pairs, samples) for text in group)
    return hits / (n * len(pairs))


def make_tiny(
    out: str | Path,
    *,
    seed: int = 0,
    split_seed: int = 0,
    max_steps: int = MAX_STEPS,
    target: float = TARGET,
    probe_every: int = 25,
    batch_size: int = 64,
    lr: float = 3e-3,
    code_share: float = 0.25,
    log: Callable[[str], None] = print,
) -> dict:
    """Build, warm and save the tiny model in ``out``; returns the recipe with its numbers.

    Warm-up stops at the first probe (every ``probe_every`` steps) whose sampled
    exact-match accuracy on 64 fixed tiny-math training problems x 8 samples
    reaches ``target``, or at ``max_steps``.
    """
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    model = Qwen2ForCausalLM(build_config(tokenizer))
    pairs = warmup_pairs(split_seed)
    probe = random.Random(seed).sample(pairs["tiny-math"], 64)
    history: list[dict] = []
    started = time.time()

    def on_step(step: int, loss: float) -> bool:
        if step % probe_every:
            return False
        acc = probe_accuracy(model, tokenizer, probe, 8, seed=seed + step)
        model.train()
        history.append({"step": step, "loss": round(loss, 4), "probe_accuracy": acc})
        log(f"step {step}: loss {loss:.3f}, probe accuracy {acc:.3f} ({time.time() - started:.0f} s)")
        return acc >= target

    steps = supervised_warmup(
        model, tokenizer, pairs, steps=max_steps, batch_size=batch_size, lr=lr,
        code_share=code_share, seed=seed, on_step=on_step,
    )  # fmt: skip
    seconds = time.time() - started
    save(model, tokenizer, out)
    recipe = {
        "seed": seed, "split_seed": split_seed, "arch": ARCH, "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch_size": batch_size, "lr": lr, "code_share": code_share, "max_steps": max_steps,
        "target": target, "probe_every": probe_every, "steps": steps,
        "warmup_seconds": round(seconds, 1), "torch_threads": torch.get_num_threads(), "history": history,
    }  # fmt: skip
    (Path(out) / "recipe.json").write_text(json.dumps(recipe, indent=1) + "\n")
    return recipe


def save(model, tokenizer, out: str | Path) -> None:
    """Save in Hugging Face format, with a generic tokenizer class older transformers can load."""
    from transformers import GenerationConfig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
    )  # fmt: skip
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    config_path = out / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tok_config, indent=1) + "\n")


HISTOGRAM_BINS = [(0, 0, "0"), (1, 3, "1-3"), (4, 7, "4-7"), (8, 11, "8-11"), (12, 15, "12-15"), (16, 16, "16")]
"""Per-prompt pass counts out of 16, grouped: never, rarely, ..., always."""


def pass_count_histogram(rates: Sequence[float], n: int = 16) -> dict[str, int]:
    """How many prompts fall in each :data:`HISTOGRAM_BINS` bin of correct-out-of-``n``."""
    counts = [round(r * n) for r in rates]
    return {label: sum(lo <= c <= hi for c in counts) for lo, hi, label in HISTOGRAM_BINS}


def load(path: str | Path = TINY_DIR):
    """(model, tokenizer) through the Auto classes, exactly as a Qwen checkpoint loads."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype="float32")
    model.eval()
    return model, tokenizer


def measure_asset(path: str | Path, *, split_seed: int = 0, seed: int = 0, samples: int = 16,
                  code_samples: int = 4, console: Any = None) -> dict:
    """Held-out tiny-math pass rates at ``samples`` samples (temperature 1), greedy accuracy,
    and tiny-code pass rate, graded by the real verifiers; written to ``<path>/measurements.json``."""
    from vigor_cli.tasks.tiny_code import TinyCodeTask
    from vigor_cli.tasks.tiny_math import TinyMathTask

    model, tokenizer = load(path)
    started = time.time()
    math_task = TinyMathTask(split_seed=split_seed)
    try:
        rates = pass_rates(math_task, model, tokenizer, math_task.eval_examples(), samples, seed=seed)
        greedy = pass_rates(math_task, model, tokenizer, math_task.eval_examples(), 1, seed=seed, temperature=0)
    finally:
        math_task.close()
    code_task = TinyCodeTask(split_seed=split_seed, workers=2)
    try:
        code_rates = pass_rates(code_task, model, tokenizer, code_task.eval_examples(), code_samples,
                                seed=seed, max_new_tokens=64)
    finally:
        code_task.close()
    result = {
        "tiny_math_heldout_problems": len(rates),
        "samples_per_problem": samples,
        "tiny_math_heldout_accuracy": round(sum(rates) / len(rates), 4),
        "pass_count_histogram": pass_count_histogram(rates, samples),
        "tiny_math_heldout_greedy_accuracy": round(sum(greedy) / len(greedy), 4),
        "tiny_code_heldout_problems": len(code_rates),
        "tiny_code_samples_per_problem": code_samples,
        "tiny_code_heldout_pass_rate": round(sum(code_rates) / len(code_rates), 4),
        "tiny_code_problems_ever_solved": sum(r > 0 for r in code_rates),
        "measure_seconds": round(time.time() - started, 1),
        "seed": seed,
    }
    (Path(path) / "measurements.json").write_text(json.dumps(result, indent=1) + "\n")
    if console is not None:
        from rich.table import Table

        from vigor_cli.console import literal

        table = Table(title=literal(f"tiny model, held-out, temperature 1 ({path})"))
        table.add_column("measure")
        table.add_column("value", justify="right")
        for key, value in result.items():
            table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
        console.print(table)
    return result


# =========================================================================== task warm-ups
# Starting models for the regimes of bench/efficiency.py: the bundled tiny model, warmed
# further by supervised training on one task (`vigor make-tiny --recipe facts|ladder`).
# Deterministic in the seed on one thread; a few CPU minutes; nothing touches rewards.

RECIPES = ("tiny", "facts", "ladder", "tools")
"""`vigor make-tiny --recipe`: the bundled model from scratch, or a warm-up on top of it (tools:
the tool-call format, vigor_cli/model/tiny_agent.py)."""

FACTS_RECIPE = dict(never=0.3, min_exposure=30, max_exposure=600, lr=3e-3, batch_size=64)
"""tiny-facts warm-up: 30 % of the facts are never shown; the rest are shown between 30 and
600 times (log-uniform over a seeded order), all rows shuffled and seen once. Measured on
seed 0: pass counts out of 16 are 0 for about a third of the facts, 16 or 12-15 for about
half, and in between for the rest (recipe.json holds the histogram)."""
LADDER_RECIPE = dict(steps=1000, lr=1e-3, batch_size=64)
"""tiny-ladder warm-up: batches drawn uniformly from the ladder's training split."""


def _sft(model, tokenizer, batches: Sequence[Sequence[tuple[str, str]]], lr: float) -> list[float]:
    """One AdamW step per batch of (prompt, completion) pairs; loss on completion tokens."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for rows in batches:
        input_ids, mask, labels = pad_batch(tokenizer, _encode_pairs(tokenizer, rows))
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def facts_exposures(seed: int = 0, split_seed: int = 0, never: float = 0.3, min_exposure: int = 30,
                    max_exposure: int = 600) -> list[int]:
    """How often the warm-up shows each tiny-facts fact (index = fact index)."""
    from vigor_cli.tasks import tiny_facts

    n = tiny_facts.FACTS
    order = list(range(n))
    random.Random(f"facts-exposure/{seed}/{split_seed}").shuffle(order)
    counts = [0] * n
    rest = order[int(never * n):]
    for j, i in enumerate(rest):
        counts[i] = max(1, round(min_exposure * (max_exposure / min_exposure) ** (j / max(1, len(rest) - 1))))
    return counts


def warm_task(recipe: str, out: str | Path, *, seed: int = 0, split_seed: int = 0, base: str | Path = TINY_DIR,
              log: Callable[[str], None] = print) -> dict:
    """Warm ``base`` (the bundled tiny model) on tiny-facts or tiny-ladder and save it in ``out``,
    with recipe.json: the settings, the loss curve and the starting pass-count histogram
    (16 samples per training prompt, temperature 1, graded by the task's real verifier)."""
    import torch

    from vigor_cli.tasks import tiny_facts, tiny_ladder, tiny_math

    torch.manual_seed(seed)
    model, tokenizer = load(base)
    rng = random.Random(seed)
    started = time.time()
    if recipe == "facts":
        settings = dict(FACTS_RECIPE)
        facts = tiny_facts.all_facts(split_seed)
        exposures = facts_exposures(seed, split_seed, settings["never"], settings["min_exposure"], settings["max_exposure"])
        rows = [(tiny_facts.plain_prompt(k), target_completion_boxed(c)) for (k, c), e in zip(facts, exposures) for _ in range(e)]
        rng.shuffle(rows)
        bs = settings["batch_size"]
        batches = [rows[i : i + bs] for i in range(0, len(rows), bs)]
        task = tiny_facts.TinyFactsTask(split_seed)
        settings["exposures"] = exposures
    elif recipe == "ladder":
        settings = dict(LADDER_RECIPE)
        task = tiny_ladder.TinyLadderTask(split_seed)
        pairs = [(tiny_math.plain_prompt(e.question), target_completion_boxed(e.answer)) for e in task.train_examples()]
        batches = [rng.sample(pairs, settings["batch_size"]) for _ in range(settings["steps"])]
    else:
        raise ValueError(f"unknown warm-up recipe {recipe!r}; choose from {RECIPES[1:3]}")
    log(f"{recipe}: {len(batches)} supervised steps on {sum(len(b) for b in batches)} rows from {base}")
    losses = _sft(model, tokenizer, batches, settings["lr"])
    seconds = time.time() - started
    save(model, tokenizer, out)
    try:
        examples = task.train_examples()
        if len(examples) > 256:
            examples = random.Random(0).sample(examples, 256)
        rates = pass_rates(task, model, tokenizer, examples, 16, seed=seed, max_new_tokens=12)
    finally:
        task.close()
    counts = [round(r * 16) for r in rates]
    result = {
        "recipe": recipe, "seed": seed, "split_seed": split_seed, "base": str(base) if Path(base) != TINY_DIR else "tiny",
        **settings, "steps": len(batches), "warmup_seconds": round(seconds, 1), "torch_threads": torch.get_num_threads(),
        "loss_every_50": [round(x, 4) for x in losses[::50]],
        "start_pass_counts_of_16": counts, "start_histogram": pass_count_histogram(rates, 16),
        "start_mean_pass_rate": round(sum(rates) / len(rates), 4),
    }  # fmt: skip
    (Path(out) / "recipe.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"{recipe}: saved {out} in {seconds:.0f} s; starting pass counts of 16 on {len(rates)} training prompts: "
        f"{result['start_histogram']} (mean {result['start_mean_pass_rate']})")
    return result


def target_completion_boxed(answer: str) -> str:
    return f"\\boxed{{{answer}}}"
