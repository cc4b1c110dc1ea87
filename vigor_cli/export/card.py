"""What an exported model folder carries about the run besides its weights.

Details: docs/modules.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

JOIN_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if not loop.first %}{{ '\\n\\n' }}{%- endif %}"
    "{{- message['content'] }}"
    "{%- endfor %}"
)
"""A chat template that renders messages as the run did without one: their contents joined by
blank lines, nothing added for the generation prompt (vigor_cli/tasks/custom.py)."""
RUN_FILE = "vigor_run.json"
"""The exported folder's record of the run."""
FORMAT = "vigor-export/1"


def rendering(cfg: Any, tokenizer: Any) -> str:
    """How the run rendered message prompts: 'join' (contents joined by blank lines), 'base'
    (the base's chat template) or 'task' (a bundled task's own format: no chat messages)."""
    from vigor_cli.tasks.prompts import has_chat_template

    if cfg.task.name != "custom":
        return "base" if has_chat_template(tokenizer) else "task"
    if cfg.task.chat_template is False or not has_chat_template(tokenizer):
        return "join"
    return "base"


def set_run_template(cfg: Any, tokenizer: Any, tools: list[dict] | None = None) -> str:
    """Give ``tokenizer`` the chat template that reproduces the run's rendering (module
    docstring); returns :func:`rendering`'s word for what the run did. ``tools``: the JSON
    schemas of the run's environment's tools: the template renders them when a caller passes
    no ``tools`` (as every prompt of the run showed them), and a plain-text run's template is
    the one that writes tool lists, calls and results as the run did
    (vigor_cli/tasks/plain_template.py)."""
    from vigor_cli.tasks.plain_template import PLAIN_CHAT_TEMPLATE

    how = rendering(cfg, tokenizer)
    if how == "join":
        tokenizer.chat_template = PLAIN_CHAT_TEMPLATE if tools else JOIN_TEMPLATE
    elif how == "base" and cfg.model.enable_thinking is not None:  # the run passed it to every render
        value = "true" if cfg.model.enable_thinking else "false"
        tokenizer.chat_template = (f"{{%- if enable_thinking is not defined %}}{{%- set enable_thinking = {value} %}}"
                                   f"{{%- endif %}}{tokenizer.chat_template}")
    if tools and getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = with_default_tools(tokenizer.chat_template, tools)
    return how


def with_default_tools(template: str, tools: list[dict]) -> str:
    """``template`` rendering ``tools`` when the caller passes none (a plain-text template's
    first line, its mark, stays first)."""
    from vigor_cli.tasks.plain_template import PLAIN_MARK, is_plain

    head = PLAIN_MARK if is_plain(template) else ""
    setting = f"{{%- if tools is not defined or tools is none %}}{{%- set tools = {json.dumps(tools)} %}}{{%- endif %}}"
    return head + setting + template[len(head):]


def run_tools(cfg: Any, launch_dir: Path | None, warn: Callable[[str], Any]) -> list[dict]:
    """The JSON schemas of the tools of the run's environment (task.env=FILE.py:Class, imported
    from the run's launch folder); none for a built-in environment or none at all, and a
    warning when the class cannot be had here."""
    from vigor_cli.episodes.registry import is_file_spec

    spec = cfg.task.env
    if not spec or not is_file_spec(spec):
        return []
    head, _, name = spec.rpartition(":")
    path = Path(head).expanduser()
    if not path.is_absolute() and launch_dir is not None:
        path = launch_dir / path
    try:
        from vigor_cli.episodes.tools import ToolEnvironment
        from vigor_cli.user.rewards import import_function

        env = ToolEnvironment(import_function(f"{path}:{name}", flag="--env"), spec, None, cfg.task.env_timeout_s)
        return list(env.schemas)
    except Exception as e:  # the run's environment file is not here, or no longer loads
        warn(f"task.env={spec}: its tools cannot be read here ({str(e).splitlines()[0][:200]}); the exported "
             "chat template renders only the tools a caller passes")
        return []


def portable_base(cfg: Any, folder: Path) -> dict[str, Any]:
    """The base as an exported adapter names it: ``name_or_path`` (a hub id, ``tiny``, or a
    local base's path relative to ``folder``), ``where`` (hub, bundled, local), ``revision``."""
    name = cfg.model.name_or_path
    if name == "tiny":
        return {"name_or_path": "tiny", "where": "bundled", "revision": None}
    local = Path(name).expanduser()
    if local.exists():
        relative = os.path.relpath(local.resolve(), folder.resolve())
        return {"name_or_path": relative, "where": "local", "revision": None, "folder_name": local.resolve().name}
    return {"name_or_path": name, "where": "hub", "revision": cfg.model.revision}


def set_adapter_base(folder: Path, base: dict[str, Any]) -> None:
    """adapter_config.json names the portable base (:func:`portable_base`)."""
    path = folder / "adapter_config.json"
    data = json.loads(path.read_text())
    data["base_model_name_or_path"] = base["name_or_path"]
    if base.get("revision"):
        data["revision"] = base["revision"]
    else:
        data.pop("revision", None)
    path.write_text(json.dumps(data, indent=2) + "\n")


def last_evaluation(run: Any, step: int) -> dict[str, Any] | None:
    """The run's evaluation at ``step`` (or its last before it): step, mean reward, pass rate
    and each set's metrics."""
    from vigor_cli.errors import UserError
    from vigor_cli.report.metrics import pass_rate_of
    from vigor_cli.run.directory import read_eval_line

    steps = sorted(s for s in run.eval_steps() if s <= step)
    if not steps:
        return None
    try:
        held = read_eval_line(run.eval_steps()[steps[-1]])
    except UserError:
        return None
    return {"step": held["step"], "accuracy": held["accuracy"], "pass_rate": pass_rate_of(held),
            "sets": {name: s["metrics"] for name, s in held["sets"].items()}}


PATH_KEYS = (("task", "data"), ("task", "eval_data"), ("task", "train_path"), ("task", "data_dir"),
             ("train", "output_dir"))
"""The config keys that hold a path (besides the model and the reward functions' files)."""


def map_paths(tree: dict, change: Callable[[str], str]) -> dict:
    """A copy of a config tree with ``change`` applied to every path in it: PATH_KEYS (``PATH:SPLIT``
    keeps its split) and each ``FILE.py`` of task.rewards."""
    import copy

    from vigor_cli.user.rewards import is_file_spec

    out = copy.deepcopy(tree)
    for section, key in PATH_KEYS:
        value = (out.get(section) or {}).get(key)
        if isinstance(value, str) and value:
            path, sep, split = value, "", ""
            if not Path(value).expanduser().exists() and ":" in value:
                path, sep, split = value.rpartition(":")
            out[section][key] = change(path) + sep + split
    rewards = (out.get("task") or {}).get("rewards") or []
    out.setdefault("task", {})["rewards"] = [f"{change(r.rpartition(':')[0])}:{r.rpartition(':')[2]}"
                                             if is_file_spec(r) else r for r in rewards]
    env = out["task"].get("env")
    if isinstance(env, str) and is_file_spec(env):  # an environment class: FILE.py:Class
        out["task"]["env"] = f"{change(env.rpartition(':')[0])}:{env.rpartition(':')[2]}"
    return out


def relative_to(folder: Path, start: Path | None) -> Callable[[str], str]:
    """A path (relative ones read from ``start``, the run's launch folder) as seen from
    ``folder``, when it is there; anything else (a hub id, a path not here) as it was."""
    def change(text: str) -> str:
        path = Path(text).expanduser()
        if not path.is_absolute() and start is not None:
            path = start / path
        return os.path.relpath(path.resolve(), folder.resolve()) if path.exists() else text

    return change


def absolute_from(folder: Path) -> Callable[[str], str]:
    """A relative path of vigor_run.json (relative to its folder) made absolute, when it is there."""
    def change(text: str) -> str:
        path = Path(text).expanduser()
        if not path.is_absolute() and (folder / path).exists():
            return os.path.abspath(folder / path)
        return text

    return change


def run_record(cfg: Any, run: Any, checkpoint: Path, kind: str, how: str, base: dict[str, Any],
               folder: Path) -> dict[str, Any]:
    """What vigor_run.json holds (module docstring); its paths are relative to ``folder``, the
    export (never an absolute path of the machine that trained it)."""
    step = int(checkpoint.name.removeprefix("step-"))
    t = cfg.task
    task = {"name": t.name, "pass_threshold": t.pass_threshold}
    if t.name == "custom":
        paths = map_paths({"task": {"data": t.data, "eval_data": t.eval_data, "rewards": list(t.rewards)}},
                          relative_to(folder, run.launch_dir()))["task"]
        task.update(prompt_template=t.prompt_template, system_prompt=t.system_prompt, chat_template=t.chat_template,
                    fields=dict(t.fields), reward_weights=list(t.reward_weights), **paths)
    if t.env is not None:  # the environment the run's episodes played (its file relative to the export)
        env = map_paths({"task": {"env": t.env}}, relative_to(folder, run.launch_dir()))["task"]["env"]
        task.update(env=env, max_turns=t.max_turns, max_episode_tokens=t.episode_tokens(cfg.sampling.max_new_tokens))
    return {
        "format": FORMAT,
        "run": run.path.name,
        "checkpoint": checkpoint.name,
        "step": step,
        "kind": kind,
        "base": base,
        "task": task,
        "rendering": how,
        "sampling": {"temperature": cfg.sampling.temperature, "top_p": cfg.sampling.top_p,
                     "max_new_tokens": cfg.sampling.max_new_tokens},
        "evaluation": {"samples": cfg.train.eval_samples, "temperature": cfg.train.eval_temperature,
                       "seed": cfg.train.seed, "last": last_evaluation(run, step)},
        "config": _portable_config(cfg, run, base, folder),
    }


def _portable_config(cfg: Any, run: Any, base: dict[str, Any], folder: Path) -> dict:
    tree = map_paths(cfg.model_dump(mode="json"), relative_to(folder, run.launch_dir()))
    tree["model"]["name_or_path"] = base["name_or_path"]
    return tree


def read_run_record(folder: Path) -> dict[str, Any] | None:
    """An exported folder's vigor_run.json (None when it has none); a damaged one is refused."""
    from vigor_cli.errors import UserError
    from vigor_cli.user.files import read_json

    path = Path(folder) / RUN_FILE
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("config"), dict):
        raise UserError(f"{path}: not a vigor export record (format {FORMAT})")
    return data


_RENDERING = {
    "join": "The run's prompts were chat messages rendered without a chat template: their contents joined by "
            "blank lines. The tokenizer's chat template does exactly that, so "
            "`apply_chat_template(messages, add_generation_prompt=True)` gives the text the model was trained on.",
    "base": "The run rendered prompts with the base model's chat template (kept in the tokenizer), generation "
            "prompt added.",
    "task": "The run's prompts came from a bundled task, rendered in that task's own plain format (no chat "
            "template).",
}


def model_card(record: dict[str, Any], folder: str = "DIR") -> str:
    """README.md of the exported folder: what the run trained on and how it sampled, in words,
    and the lines that load it (``folder``: the folder's name, as the lines name it)."""
    base, task, sampling, evaluation = record["base"], record["task"], record["sampling"], record["evaluation"]
    front = ["---", f"library_name: {'peft' if record['kind'] == 'adapter' else 'transformers'}"]
    if base["where"] == "hub":
        front.append(f"base_model: {base['name_or_path']}")
    front += ["tags:", "- vigor", "- grpo", "---", ""]
    what = {"full": "a full model", "merged": "LoRA merged into its base", "adapter": "a LoRA adapter"}[record["kind"]]
    lines = [f"# {record['run']} ({record['checkpoint']})", "",
             f"Trained with vigor (GRPO with rollout allocation); exported as {what}.",
             "", "## Base model", "", _base_words(base, record["kind"]), "", "## Task", ""]
    lines.append(f"- task: `{task['name']}`; a sample passes at reward >= {task['pass_threshold']:g}")
    if task["name"] == "custom":
        template = task["prompt_template"]
        lines.append(f"- prompt: template `{template}`" if template else "- prompt: the data's prompt column")
        lines.append(f"- system prompt: {json.dumps(task['system_prompt']) if task['system_prompt'] is not None else 'none'}")
        weights = task["reward_weights"] or [1.0] * len(task["rewards"])
        lines.append("- rewards: " + ", ".join(f"`{r}` x{w:g}" for r, w in zip(task["rewards"], weights)))
    lines += ["", "## Prompt rendering", "", _RENDERING[record["rendering"]], "", "## Sampling", "",
              f"- training rollouts: temperature {sampling['temperature']:g}, top_p {sampling['top_p']:g}, "
              f"at most {sampling['max_new_tokens']} new tokens",
              f"- evaluation: {evaluation['samples']} sample(s) per prompt at temperature {evaluation['temperature']:g}"]
    last = evaluation.get("last")
    if last:
        lines += ["", "## Last evaluation", "",
                  f"Step {last['step']}: mean reward {last['accuracy']:.4f}, pass rate {last['pass_rate']:.4f}."]
    lines += ["", "## Load it", "", "```python", *load_lines(record, folder), "```"]
    lines += ["", "## Evaluate it on your set", "",
              "`vigor eval DIR --eval-data SET --reward ...` (the task flags of `vigor train`) uses the sampling "
              f"above, read from `{RUN_FILE}`.", ""]
    return "\n".join(front + lines)


def load_lines(record: dict[str, Any], folder: str) -> list[str]:
    """Python that loads the exported folder with transformers (and peft for an adapter), run
    from the folder that holds it."""
    base, kind = record["base"], record["kind"]
    lines = [f"path = {json.dumps(folder)}  # this folder (or its hub repo id once uploaded)"]
    if kind != "adapter":
        return ["from transformers import AutoModelForCausalLM, AutoTokenizer", "", *lines,
                "tokenizer = AutoTokenizer.from_pretrained(path)",
                "model = AutoModelForCausalLM.from_pretrained(path)"]
    head = ["import os", ""] if base["where"] == "local" else []
    head += ["from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer"]
    if base["where"] == "bundled":
        head.append("from vigor_cli.model.loading import TINY_DIR as base_path  # vigor's bundled tiny model")
        where = []
    elif base["where"] == "local":
        where = [f"base_path = os.path.join(path, {json.dumps(base['name_or_path'])})  # the base, as trained"]
    else:
        where = [f"base_path = {json.dumps(base['name_or_path'])}"]
    revision = f", revision={json.dumps(base['revision'])}" if base.get("revision") else ""
    return [*head, "", *lines, *where,
            "tokenizer = AutoTokenizer.from_pretrained(path)",
            f"model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path{revision}), path)"]


def _base_words(base: dict[str, Any], kind: str) -> str:
    if kind != "adapter":
        return f"Trained from `{base['name_or_path']}` ({base['where']}); the weights here are complete."
    if base["where"] == "hub":
        rev = f" at revision `{base['revision']}`" if base.get("revision") else ""
        return (f"`{base['name_or_path']}`{rev} from the Hugging Face hub: "
                "`AutoModelForCausalLM.from_pretrained(DIR)` loads it with this adapter.")
    if base["where"] == "bundled":
        return ("vigor's bundled tiny model (`tiny`): load it with `vigor eval DIR`, or pass it yourself: "
                "`PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(vigor_cli.model.loading.TINY_DIR), DIR)`.")
    return (f"a local model, `{base['name_or_path']}` relative to this folder on the machine that trained it "
            f"(a folder named `{base.get('folder_name', '?')}`). Give it at load: `vigor eval DIR --base PATH`, or "
            "`PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(PATH), DIR)`.")
