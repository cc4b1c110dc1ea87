"""`vigor eval`: accuracy of a model, an adapter or a run's checkpoint on benchmarks.

Generation and grading go through :func:`vigor_cli.evaluate.evaluation.evaluate_examples`,
the same core the trainer's periodic evaluation uses; this module picks the
model, the benchmarks and the sampling, shows progress, computes avg@n,
pass@k and the averages (:mod:`vigor_cli.report.metrics`) and writes every
per-sample verdict (:mod:`vigor_cli.report.eval_results`), so that
``--rescore`` can grade the same completions again without generating.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, List, Optional, Sequence

import typer

from vigor_cli.commands import options as opt
from vigor_cli.commands.flags import EPISODE_FLAGS, TASK_FLAGS, command
from vigor_cli.settings import set_key
from vigor_cli.console import console, err_console, shown
from vigor_cli.errors import UserError
from vigor_cli.tasks import EVAL_SETS, eval_task_config

BENCHMARKS = tuple(EVAL_SETS)  # the task registry's evaluation sets

SAMPLES_PER_CHUNK = 256
"""Samples generated per engine call: the progress bar advances once per chunk."""


DEFAULT_BENCHMARK = "tiny-math"
"""What `vigor eval` scores when --benchmarks is not given."""


def benchmark_kind(name: str) -> str:
    return EVAL_SETS[name].kind


def parse_benchmarks(text: str) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()]
    if not names:
        raise UserError("--benchmarks: give at least one name")
    for name in names:
        if name not in BENCHMARKS:
            raise UserError(f"--benchmarks: unknown benchmark '{name}' (known: {', '.join(BENCHMARKS)})")
    if len(set(names)) != len(names):
        raise UserError("--benchmarks: a benchmark is named twice")
    return names


def task_config_for(benchmark: str, data_dir: Optional[Path], date_start: Optional[str],
                    date_end: Optional[str]) -> Any:
    """The TaskConfig of the task that owns ``benchmark`` and the set name to ask it for."""
    return eval_task_config(benchmark, data_dir, date_start, date_end)


class RecordingTask:
    """A task that keeps the Score of each completion it grades (in order), so a code
    benchmark's per-sample test pass fraction reaches the results file."""

    def __init__(self, task: Any):
        self.task = task
        self.scores: list[Any] = []

    def render_prompt(self, example: Any, tokenizer: Any) -> str:
        return self.task.render_prompt(example, tokenizer)

    def score(self, examples: Sequence[Any], completions: Sequence[str]) -> list[Any]:
        scores = self.task.score(examples, completions)
        self.scores.extend(scores)
        return scores


def test_fraction(score: Any) -> float:
    """Share of tests a code completion passed: the verifier's ``fraction`` detail; without
    one (no code block, nothing ran) the reward itself (0, or 1 for a full pass)."""
    frac = (getattr(score, "details", None) or {}).get("fraction")
    return float(frac) if isinstance(frac, (int, float)) else float(score.reward)


def load_examples(benchmark: str, task: Any, set_name: Optional[str], limit: Optional[int]) -> list:
    examples = task.eval_examples(set_name)
    if not examples:
        raise UserError(f"--benchmarks {benchmark}: no problems loaded")
    return examples[:limit] if limit else examples


def resolve_model(model: Optional[str], adapter: Optional[Path], run: Optional[Path],
                  checkpoint: Optional[str], base: Optional[str] = None) -> tuple[Any, Optional[str], dict]:
    """(RunConfig for the policy, directory to load on top of it, description for the file)."""
    from vigor_cli.config import RunConfig
    from vigor_cli.settings import checks

    if run is not None:
        if model is not None or adapter is not None:
            raise UserError("--run evaluates a run's checkpoint: drop MODEL and --adapter")
        from vigor_cli.run.directory import RunDir, check_run_path, read_config

        check_run_path(run, "--run")
        try:
            cfg = RunConfig.model_validate(read_config(run), context=checks())
        except Exception as e:  # pydantic's message names the key
            raise UserError(f"--run {run}: config.yaml does not validate ({str(e).splitlines()[0]})") from None
        warn = lambda m: err_console.print(f"[yellow]warning:[/] {shown(m)}", highlight=False)  # noqa: E731
        if cfg.task.env is not None:  # never a silent change of what is measured
            warn(f"the run trained with an environment (task.env={cfg.task.env}); vigor eval scores one "
                 "completion per sample (a first attempt); the run's eval/step-N.json has both, after the "
                 "environment's answers and at the first attempt (docs/episodes.md)")
        ckpt = RunDir(run).store.pick(checkpoint, _warn)
        return cfg, str(ckpt), {"run": str(run), "checkpoint": ckpt.name,
                                "name_or_path": cfg.model.name_or_path}
    if checkpoint is not None:
        raise UserError("--checkpoint needs --run")
    if model is None:
        raise UserError("give a MODEL (hub id, directory or 'tiny') or --run RUN_DIR")
    folder = Path(model).expanduser()
    if adapter is None and folder.is_dir() and (folder / "adapter_config.json").is_file():
        from vigor_cli.evaluate.task_eval import adapter_base

        adapter, model = folder, adapter_base(folder, base)  # an adapter folder: it names its base
    elif base is not None:
        raise UserError("--base names the base of an adapter folder given as MODEL; with --adapter, MODEL is the base")
    cfg = RunConfig()
    cfg.model.name_or_path = model
    cfg.model.lora.enabled = adapter is not None
    if adapter is not None and not (adapter / "adapter_config.json").is_file():
        raise UserError(f"--adapter {adapter}: not a PEFT adapter directory (no adapter_config.json)")
    return cfg, str(adapter) if adapter else None, {
        "name_or_path": model, "adapter": str(adapter) if adapter else None}


def _warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/] {shown(message)}", highlight=False, soft_wrap=True)


def own_task_note(run: Path, cfg: Any) -> None:
    """--benchmarks on a run of the user's own task: a note that they are not its data (without
    --benchmarks, `vigor eval --run` evaluates the run's own sets: commands/eval_task.py)."""
    if cfg.task.name != "custom":
        return
    where = f"its own sets: vigor eval --run {run} without --benchmarks"
    err_console.print(f"[yellow]note:[/] --run {shown(run)} trained on your own task; --benchmarks scores "
                      f"bundled benchmarks, not its data ({shown(where)})", highlight=False)


def _evaluate(
    model: Annotated[Optional[str], typer.Argument(help="Hub id, local HF directory (an exported folder, or a LoRA adapter folder: its base is the one it names, or --base), or 'tiny'.")] = None,
    adapter: Annotated[Optional[Path], typer.Option(help="PEFT adapter directory to load on MODEL.")] = None,
    base: Annotated[Optional[str], typer.Option("--base", help="The base model of an adapter folder given as MODEL (a path or hub id), where the one its adapter_config.json names is not here.")] = None,
    run: Annotated[Optional[Path], typer.Option("--run", help="Evaluate this run directory's checkpoint on what the run evaluated (its task, rewards, template, held-out sets and evaluation settings); --benchmarks for bundled benchmarks instead.")] = None,
    checkpoint: Annotated[Optional[str], typer.Option(help="With --run: checkpoint name, e.g. step-20 (default the latest).")] = None,
    benchmarks: Annotated[Optional[str], typer.Option(help=f"Comma-separated: {', '.join(BENCHMARKS)}.", show_default="tiny-math for a MODEL given without your own set; with --run, an exported folder or --data/--eval-data: the task's own sets")] = None,
    data_dir: Annotated[Optional[Path], opt.input_path("--data-dir", help="Directory of benchmark files (<name>.jsonl; code.jsonl for lcb-v6). Default for math: the files shipped in vigor_cli/data/math-eval.")] = None,
    n: Annotated[Optional[int], opt.for_key("train.eval_samples", "--n", help="Samples per problem (default train.eval_samples: a run's or export's own).")] = None,
    temperature: Annotated[Optional[float], opt.for_key("train.eval_temperature", "--temperature", help="Sampling temperature (default train.eval_temperature).")] = None,
    top_p: Annotated[Optional[float], opt.for_key("sampling.top_p", "--top-p", help="Nucleus sampling (default sampling.top_p).")] = None,
    max_new_tokens: Annotated[Optional[int], opt.for_key("sampling.max_new_tokens", "--max-new-tokens", help="Longest completion (default sampling.max_new_tokens).")] = None,
    seed: Annotated[Optional[int], opt.seed(help="Sampling seed (default: a run's or export's train.seed, else 0).")] = None,
    limit: Annotated[Optional[int], opt.count("--limit", help="Evaluate the first N problems of each set (a run's own: default its train.eval_limit).")] = None,
    contest_date_start: Annotated[Optional[str], typer.Option(help="lcb-v6: keep problems from this ISO date (default: the code task's held-out problems, from task.contest_date_split).")] = None,
    contest_date_end: Annotated[Optional[str], typer.Option(help="lcb-v6: keep problems up to this ISO date.")] = None,
    engine: Annotated[Optional[str], opt.engine()] = None,
    device: Annotated[Optional[str], opt.device()] = None,
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="Your own task or a run's: override a key, e.g. --set task.chat_template=false (repeatable; YAML value).")] = None,
    output: Annotated[Optional[Path], opt.output_file("--output", help="Write every per-sample verdict and the metrics here (JSON).")] = None,
    rescore: Annotated[Optional[Path], typer.Option(help="Grade the completions of this results file again; no generation.")] = None,
    **own_task: Any,
) -> None:
    """Evaluate a model: your own task (--run, or --data/--eval-data with --reward), or math and code benchmarks: avg@n, pass@k, the pass rate and each reward's mean."""
    from vigor_cli.commands.flags import task_overrides

    if rescore is not None:
        return rescore_file(rescore, data_dir, output)
    keys = task_overrides(own_task, TASK_FLAGS + EPISODE_FLAGS)
    episodic = keys["task.env"] is not None or keys["task.max_turns"] is not None
    mine = any(v is not None for k, v in keys.items() if k not in ("task.env", "task.max_turns"))
    if episodic and (benchmarks is not None or not (mine or run is not None or _is_export(model))):
        raise UserError("--env and --max-turns play episodes on your own set (--data/--eval-data with --reward) "
                        "or a run's (--run); the benchmarks take one completion per sample")
    if benchmarks is not None and mine:
        raise UserError("--benchmarks evaluates bundled benchmarks, --data/--eval-data/--reward your own set: give one")
    if benchmarks is None and (mine or run is not None or _is_export(model)):
        from vigor_cli.commands.eval_task import evaluate_task

        return evaluate_task(model, adapter, base, run, checkpoint, keys, set_, n, temperature, top_p,
                             max_new_tokens, seed, limit, engine, device, output)
    if set_:
        raise UserError("--set changes a run's or your own task's settings; the benchmarks take none")
    evaluate_benchmarks(model, adapter, base, run, checkpoint, benchmarks or "tiny-math", data_dir, n, temperature,
                        top_p, max_new_tokens, seed if seed is not None else 0, limit, contest_date_start,
                        contest_date_end, engine, device, output)
    if benchmarks is None:  # said after the table (an error before it stays one line)
        err_console.print("note: evaluated tiny-math, the default benchmark (--benchmarks names others; "
                          "--data/--eval-data with --reward your own set)", highlight=False, soft_wrap=True)


evaluate = command(_evaluate, TASK_FLAGS + EPISODE_FLAGS)
"""`vigor eval`: its options, then the task flags and the episode flags of `vigor train`
(commands/flags.py)."""
evaluate.__name__ = "evaluate"


def _is_export(model: Optional[str]) -> bool:
    """MODEL is a folder `vigor export` wrote (its vigor_run.json holds the run's task)."""
    from vigor_cli.export.card import RUN_FILE

    return model is not None and (Path(model).expanduser() / RUN_FILE).is_file()


def evaluate_benchmarks(model: Optional[str], adapter: Optional[Path], base: Optional[str], run: Optional[Path],
                        checkpoint: Optional[str], benchmarks: str, data_dir: Optional[Path], n: Optional[int],
                        temperature: Optional[float], top_p: Optional[float], max_new_tokens: Optional[int],
                        seed: int, limit: Optional[int], contest_date_start: Optional[str],
                        contest_date_end: Optional[str], engine: Optional[str], device: Optional[str],
                        output: Optional[Path]) -> None:
    """The benchmarks (--benchmarks) on a model, an adapter or a run's checkpoint."""
    from vigor_cli.report.eval_results import recompute, write_results
    from vigor_cli.report.eval_table import results_table

    names = parse_benchmarks(benchmarks)
    cfg, load_dir, model_desc = resolve_model(model, adapter, run, checkpoint, base)
    if run is not None:
        own_task_note(run, cfg)
    if engine is not None:
        set_key(cfg, "engine.kind", engine, "--engine")  # validated like the key, naming the flag
    cfg.model.device = device or cfg.model.device
    sampling = sampling_settings(cfg, n, temperature, top_p, max_new_tokens, seed)
    tasks = load_tasks(names, data_dir, contest_date_start, contest_date_end, limit)
    results = new_results(model_desc, sampling, data_dir, limit)
    try:
        generate_all(cfg, load_dir, tasks, results, **sampling)
    finally:
        for task, _ in tasks.values():
            task.close()
    recompute(results)
    if output is not None:
        write_results(results, output)
    console.print(results_table(results, f"{model_desc.get('run') or model_desc['name_or_path']}: "
                                         f"n={sampling['n']}, temperature={sampling['temperature']}"))
    if output is not None:
        console.print(f"results: {shown(output)}", highlight=False)


def rescore_file(rescore: Path, data_dir: Optional[Path], output: Optional[Path]) -> None:
    """`--rescore`: grade a results file's completions again and write them beside it."""
    from vigor_cli.report.eval_results import read_results, recompute, write_results
    from vigor_cli.report.eval_table import results_table

    results = read_results(rescore)
    if isinstance(results.get("task"), dict):  # your own task's sets (vigor eval --run / --data)
        from vigor_cli.report.eval_table import task_results_table
        from vigor_cli.evaluate.task_eval import rescore_task

        rescore_task(results)
        table = task_results_table
    else:
        rescore_results(results, data_dir)
        table = results_table
    recompute(results)
    target = output or rescore.with_name(rescore.stem + ".rescored.json")
    write_results(results, target)
    console.print(table(results, f"re-scored {rescore}"))
    console.print(f"results: {shown(target)}", highlight=False)


def sampling_settings(cfg: Any, n: Optional[int], temperature: Optional[float], top_p: Optional[float],
                      max_new_tokens: Optional[int], seed: int) -> dict:
    """The flags, or the config's evaluation defaults where a flag is not given."""
    settings = {
        "n": n if n is not None else cfg.train.eval_samples,
        "temperature": temperature if temperature is not None else cfg.train.eval_temperature,
        "top_p": top_p if top_p is not None else cfg.sampling.top_p,
        "max_new_tokens": max_new_tokens if max_new_tokens is not None else cfg.sampling.max_new_tokens,
        "seed": seed,
    }
    if settings["n"] > 1 and settings["temperature"] == 0:
        err_console.print("[yellow]note:[/] --n > 1 with --temperature 0 gives n identical greedy samples")
    return settings


def load_tasks(names: list[str], data_dir: Optional[Path], date_start: Optional[str],
               date_end: Optional[str], limit: Optional[int]) -> dict:
    """{benchmark: (task, examples)}; loaded before the model, so a bad benchmark name or
    file fails first."""
    from vigor_cli.tasks import get_task

    from vigor_cli.train.preflight import check_task_sources

    tasks = {}  # each benchmark's sources checked first: e.g. a --data-dir it would never read
    for name in names:
        task_cfg, set_name = task_config_for(name, data_dir, date_start, date_end)
        try:
            check_task_sources(task_cfg.model_copy(update={"eval_sets": [set_name]}) if set_name else task_cfg)
        except UserError as e:
            raise UserError(f"--benchmarks {name}: {e}".replace("task.data_dir=", "--data-dir ", 1)) from None
        task = get_task(task_cfg)
        tasks[name] = (task, load_examples(name, task, set_name, limit))
    return tasks


def new_results(model_desc: dict, sampling: dict, data_dir: Optional[Path], limit: Optional[int]) -> dict:
    from vigor_cli.report.eval_results import SCHEMA

    return {
        "schema": SCHEMA,
        "model": model_desc,
        "sampling": dict(sampling),
        "data_dir": str(data_dir) if data_dir else None,
        "limit": limit,
        "sets": {},
    }


def generate_all(cfg: Any, load_dir: Optional[str], tasks: dict, results: dict, *, n: int,
                 temperature: float, top_p: float, max_new_tokens: int, seed: int) -> None:
    """Generate and grade every benchmark in chunks, with a progress bar; fills results['sets']."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from vigor_cli.evaluate.evaluation import evaluate_examples
    from vigor_cli.model.loading import load_policy
    from vigor_cli.rollout import SamplingParams, make_engine

    policy, tokenizer, _ = load_policy(cfg.model, load_dir)
    tasks = fit_problems(cfg, tasks, tokenizer)
    policy.eval()
    for p in policy.parameters():
        p.requires_grad_(False)
    eng = make_engine(cfg, policy, tokenizer, announce=lambda m: err_console.print(m, highlight=False))
    per_chunk = max(1, SAMPLES_PER_CHUNK // n)
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("problems"), TimeElapsedColumn(), console=err_console, transient=True,
        ) as progress:
            for name, (task, examples) in tasks.items():
                bar = progress.add_task(f"{name}: generate + grade", total=len(examples))
                recorder = RecordingTask(task)
                samples: list[dict] = []
                for c, start in enumerate(range(0, len(examples), per_chunk)):
                    chunk = examples[start:start + per_chunk]
                    sampling = SamplingParams(
                        temperature=temperature,
                        top_p=top_p if temperature > 0 else 1.0,
                        max_new_tokens=max_new_tokens,
                        seed=seed * 1_000_003 + c,  # one fixed stream per chunk
                    )
                    with torch.no_grad():
                        res = evaluate_examples(eng, recorder, tokenizer, chunk, n, sampling, name, progress=False)
                    samples.extend(res.to_json()["samples"])
                    progress.advance(bar, len(chunk))
                if benchmark_kind(name) == "code":
                    for sample, score in zip(samples, recorder.scores):
                        sample["test_fraction"] = test_fraction(score)
                results["sets"][name] = {"set": name, "n": n, "kind": benchmark_kind(name),
                                         "samples": samples}
    finally:
        eng.close()


def fit_problems(cfg: Any, tasks: dict, tokenizer: Any) -> dict:
    """Each benchmark without the problems the model cannot take, as training leaves them out
    (vigor_cli/train_data.fit_prompts: longer than task.max_prompt_tokens, or no token), each
    benchmark that loses some saying so in one warning line; one that loses all is refused."""
    from vigor_cli.evaluate.sets import keep_fitting

    limit = cfg.task.max_prompt_tokens
    fitted = {}
    for name, (task, examples) in tasks.items():
        kept, _ = keep_fitting(limit, task, tokenizer, examples, f"problems of {name}")
        if not kept:
            raise UserError(f"--benchmarks {name}: none of its {len(examples)} problems fit "
                            f"task.max_prompt_tokens={limit} (or they encode to no token)")
        fitted[name] = (task, kept)
    return fitted


def rescore_results(results: dict, data_dir: Optional[Path]) -> None:
    """Grade every stored completion again with the benchmark's task (no generation)."""
    from vigor_cli.tasks import get_task

    data_dir = data_dir or (Path(results["data_dir"]) if results.get("data_dir") else None)
    for name, entry in results["sets"].items():
        if name not in BENCHMARKS:
            raise UserError(f"--rescore: set '{name}' is not a benchmark `vigor eval` knows")
        task_cfg, set_name = task_config_for(name, data_dir, None, None)
        task = get_task(task_cfg)
        try:
            by_uid = {ex.uid: ex for ex in task.eval_examples(set_name)}
            samples = entry["samples"]
            missing = [s["uid"] for s in samples if s["uid"] not in by_uid]
            if missing:
                raise UserError(f"--rescore: set '{name}' has problem {missing[0]!r}, which the "
                                "benchmark no longer has (another --data-dir?)")
            recorder = RecordingTask(task)
            scores = recorder.score([by_uid[s["uid"]] for s in samples], [s["completion"] for s in samples])
            for sample, score in zip(samples, scores):
                sample["reward"] = float(score.reward)
                sample["reason"] = score.reason
                if benchmark_kind(name) == "code":
                    sample["test_fraction"] = test_fraction(score)
            entry["kind"] = benchmark_kind(name)
        finally:
            task.close()
