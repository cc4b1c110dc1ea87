"""Config validation in one place (vigor_cli/config/): bounds, strict kinds, the source of a
bad value (--set, flag or file), rules across keys naming the keys to change, the budgeted
strategies' own key, and the rules that need the training set's size."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml

from cli_runner import run_vigor
from vigor_cli.allocation import make_allocator, registry
from vigor_cli.config import ConfigError, RunConfig, describe, dump_config, field_bounds, field_info
from vigor_cli.settings import build_config, check_against_data
from vigor_cli.errors import UserError

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny-math.yaml"


def refused(*sets: str, path: Path | None = TINY, overrides: dict | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        build_config(path, overrides=overrides, sets=list(sets))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# --------------------------------------------------------------------------- bounds
@pytest.mark.parametrize("setting, needle", [
    ("train.seed=100000000000000000000000", "less than or equal to 4294967295"),
    ("train.seed=-1", "greater than or equal to 0"),
    ("allocation.gamma=1e308", "less than or equal to 64"),
    ("grpo.learning_rate=1e9", "less than or equal to 1"),
    ("grpo.learning_rate=0", "greater than 0"),
    ("grpo.learning_rate=.nan", "finite number"),
    ("allocation.alpha=.inf", "finite number"),
    ("sampling.temperature=1e6", "less than or equal to 10"),
    ("train.steps=0", "greater than or equal to 1"),
    ("train.steps=100000000000", "less than or equal to 10000000"),
    ("allocation.m0=100000", "less than or equal to 4096"),
    ("grpo.epsilon=1", "less than 1"),
    ("sampling.max_new_tokens=1000000000", "less than or equal to 16777216"),
    ("train.gpu_memory_gib=1e12", "less than or equal to 16384"),
])
def test_out_of_range_values_name_the_set(setting, needle):
    msg = refused(setting)
    key = setting.split("=")[0]
    assert msg.startswith(f"--set {setting}: ") and f"'{key}'" in msg and needle in msg


def test_every_number_has_both_bounds():
    """A new numeric key without a documented upper bound fails here."""
    unbounded = []
    for key, _, _ in describe():
        ann = field_info(key).annotation
        args = set(typing.get_args(ann)) or {ann}
        if args & {int, float} and not {"le", "lt"} & set(field_bounds(key)):
            unbounded.append(key)
        if args & {int, float} and not {"ge", "gt"} & set(field_bounds(key)):
            unbounded.append(key)
    assert unbounded == []


# --------------------------------------------------------------------------- strict kinds
@pytest.mark.parametrize("setting, needle", [
    ("train.steps=true", "expected a number, not true"),
    ("train.seed=false", "expected a number, not false"),
    ("grpo.learning_rate=true", "expected a number, not true"),
    ("model.lora.enabled=1", "expected true or false, not 1"),
    ("model.lora.enabled='yes'", "expected true or false, not 'yes'"),
    ("model.gradient_checkpointing=0", "expected true or false, not 0"),
    ("engine.sleep_level=true", "expected a number, not true"),
    ("train.steps=abc", "valid integer"),
    ("train.steps=2.5", "valid integer"),
])
def test_wrong_kinds_are_refused(setting, needle):
    msg = refused(setting)
    assert msg.startswith(f"--set {setting}: ") and needle in msg


def test_right_kinds_still_read():
    cfg = build_config(TINY, sets=["grpo.learning_rate=1e-5", "train.steps=3.0", "model.lora.enabled=true",
                                   "model.gradient_checkpointing=auto", "engine.gpu_memory_utilization=auto"])
    assert cfg.grpo.learning_rate == 1e-5 and cfg.train.steps == 3 and cfg.model.lora.enabled is True


# --------------------------------------------------------------------------- the source
def test_the_source_is_the_set_the_flag_or_the_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  steps: 0\n")
    assert refused(path=p).startswith(f"{p}: bad value for 'train.steps'")
    assert build_config(p, sets=["train.steps=2"]).train.steps == 2  # a --set over a bad file value
    assert refused("allocation.alpha=0.5", path=p).startswith(f"{p}: ")  # an unrelated --set
    assert refused(overrides={"train.steps": 0}).startswith("train.steps=0 (command-line flag): ")
    assert refused("train.steps=0", overrides={"train.steps": 5}).startswith("--set train.steps=0: ")
    assert refused("train.sets=0").startswith("--set train.sets=0: unknown config key 'train.sets'")
    assert refused("train.steps=[1").startswith("--set train.steps=[1: the value is not valid YAML")
    assert refused("train.steps.x=1") == "--set train.steps.x=1: 'steps' is not a section"
    assert refused("allocation=5").startswith("--set allocation=5: bad value for 'allocation'")
    # a rule across keys: the --set of a key its message names
    msg = refused("allocation.strategy=vigor", "allocation.m0=100")
    assert msg.startswith("--set allocation.m0=100: allocation.budget (512) is below the first round's")
    assert "allocation.m0" in msg and "allocation.rollouts_per_prompt" in msg


def test_a_binary_config_file_is_one_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"\xff\xfe\x00model: \x81\x82")
    assert refused(path=p) == f"{p}: not a UTF-8 text file (a YAML run config is expected)"


def test_cli_set_error_exit_2_one_line_nothing_written(tmp_path):
    out = run_vigor("train", "--set", "train.steps=true", "--output-dir", str(tmp_path / "runs"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--set train.steps=true" in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("setting, needle", [
    ("nosuch.key=1", "unknown config key 'nosuch'"),            # a whole section that is not there
    ("allocation.auto.x=1", "unknown config key 'allocation.auto.x'"),
])
def test_a_set_under_an_unknown_or_checked_section_names_the_set(setting, needle):
    """The error's place is above the key given (or only its section is in the message):
    the --set is still the source, not the bundled file."""
    msg = refused(setting, path=TINY)
    assert msg.startswith(f"--set {setting}: ") and needle in msg


# --------------------------------------------------------------------------- rules across keys
@pytest.mark.parametrize("sets, needle", [
    (["grpo.micro_batch_tokens=16", "sampling.max_new_tokens=17"],
     "grpo.micro_batch_tokens (16) must be at least sampling.max_new_tokens (17)"),
    (["engine.gen_batch_tokens=64"], "engine.gen_batch_tokens (64) must hold one row: task.max_prompt_tokens"),
    (["engine.max_model_len=16"], "engine.max_model_len (16) must hold task.max_prompt_tokens"),
    (["model.load_in_4bit=true", "model.lora.enabled=false"], "model.load_in_4bit needs model.lora.enabled=true"),
    (["allocation.strategy=pods", "allocation.pods.m=20"], "allocation.pods.m (20) must be <= allocation.pods.n (16)"),
    (["allocation.strategy=knapsack", "allocation.knapsack.max=1"], "allocation.knapsack.max (1) must be >= allocation.knapsack.min"),
    (["allocation.strategy=knapsack", "allocation.budget=100"], "allocation.budget (100) is below knapsack's first round: allocation.knapsack.min"),
    (["allocation.strategy=auto", "allocation.auto.max_rollouts=1"], "allocation.auto.max_rollouts (1) must be >= allocation.auto.census"),
    (["allocation.strategy=auto", "allocation.rollouts_per_prompt=1"], "allocation.budget (64) is below auto's census, the first round: allocation.auto.census"),
    (["allocation.strategy=random", "allocation.budget=64"], "allocation.budget (64) is below the first round's allocation.m0"),
    (["allocation.strategy=vigor", "allocation.options={x: 1}"], "allocation.options: strategy 'vigor' takes no options"),
    (["allocation.strategy=best"], "unknown strategy 'best'; known: vigor, random, difficulty, grpo"),
    (["engine.kind=sglang"], "unknown engine 'sglang'; known: auto, hf, vllm"),
    (["grpo.loss_agg=sum"], "unknown name 'sum'; known: dapo, grpo, dr_grpo, prompt_mean"),
    (["grpo.scale_rewards=max"], "unknown name 'max'; known: group, batch, none"),
])
def test_rules_across_keys_name_the_keys(sets, needle):
    assert needle in refused(*sets)


def test_rules_that_need_the_training_set():
    cfg = build_config(TINY)
    check_against_data(cfg, 10_000)
    with pytest.raises(UserError, match=r"train.prompts_per_step \(64\) exceeds the 50 training prompts of task 'tiny-math'; lower it \(--prompts-per-step 50 or less\)"):
        check_against_data(cfg, 50)
    auto = build_config(TINY, sets=["allocation.auto.width=4"])
    with pytest.raises(ConfigError, match=r"ceil\(allocation.auto.width x train.prompts_per_step\) = 256 prompts exceeds the 200"):
        check_against_data(auto, 200)
    dapo = build_config(TINY, sets=["allocation.strategy=dapo"])
    with pytest.raises(ConfigError, match=r"allocation.gen_batch_multiplier x train.prompts_per_step \(3.0 x 64\) exceeds the 100"):
        check_against_data(dapo, 100)
    check_against_data(build_config(TINY, sets=["allocation.strategy=grpo"]), 100)


# --------------------------------------------------------------------------- strategies' own sections
def test_each_strategy_owns_its_section():
    """Built-in strategies' keys live in allocation.<strategy>, like an outside strategy's."""
    cfg = build_config(sets=["allocation.strategy=knapsack", "allocation.knapsack={min: 3, max: 64}",
                             "allocation.reinforce-ada.keep=6"])
    assert (cfg.allocation.section("knapsack").min, cfg.allocation.section("knapsack").max) == (3, 64)
    assert cfg.allocation.section("reinforce-ada").keep == 6
    assert cfg.allocation.section("auto").width == 2.0  # a section not given: its defaults
    keys = [k for k, _, _ in describe()]
    for key in ("allocation.knapsack.min", "allocation.greso.p_step", "allocation.pods.n",
                "allocation.reinforce-ada.exit", "allocation.auto.margin"):
        assert key in keys
    assert not [k for k in keys if k.split(".")[1].startswith(("knapsack_", "greso_", "ada_", "auto_", "pods_"))]
    assert field_bounds("allocation.knapsack.min") == {"ge": 1, "le": 4096}
    # the run directory's config.yaml holds the sections and reads back the same
    again = RunConfig.model_validate(yaml.safe_load(dump_config(cfg)))
    assert again.allocation.section("knapsack") == cfg.allocation.section("knapsack")
    assert "knapsack:\n    min: 3\n" in dump_config(cfg)


def test_old_flat_keys_still_work_with_one_note(capfd):
    """For one release: allocation.knapsack_min and allocation.options set the sections."""
    cfg = build_config(sets=["allocation.strategy=knapsack", "allocation.knapsack_min=3", "allocation.ada_keep=6"])
    assert cfg.allocation.section("knapsack").min == 3 and cfg.allocation.section("reinforce-ada").keep == 6
    err = capfd.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("note: deprecated allocation keys")
    assert "allocation.knapsack_min -> allocation.knapsack.min" in err and "allocation.ada_keep" in err
    cfg = build_config(sets=["allocation.strategy=auto", "allocation.options={census: 4}"])
    assert cfg.allocation.section("auto").census == 4
    assert "allocation.options.census -> allocation.auto.census" in capfd.readouterr().err
    build_config(sets=["allocation.strategy=knapsack", "allocation.knapsack.min=3"])
    assert capfd.readouterr().err == ""  # the new spelling: no note


@pytest.mark.parametrize("sets, needle", [
    (["allocation.knapsack_min=2", "allocation.knapsack.min=3"],
     ": allocation.knapsack_min and allocation.knapsack.min set the same key; keep allocation.knapsack.min"),
    (["allocation.knapsack.min=0"], "bad value for 'allocation.knapsack.min': Input should be greater than or equal to 1"),
    (["allocation.knapsack.frob=1"], "unknown config key 'allocation.knapsack.frob'"),
    (["allocation.knapsack_frob=1"], "unknown config key 'allocation.knapsack_frob'"),
    (["allocation.knapsack=3"], "bad value for 'allocation.knapsack'"),
])
def test_bad_strategy_keys_name_the_key(sets, needle):
    msg = refused(*sets)
    assert needle in msg and msg.startswith("--set ")


# --------------------------------------------------------------------------- the budget's own key
def test_budgeted_strategies_have_their_own_key(tmp_path):
    assert RunConfig().allocation.rollouts_per_prompt == 8
    vigor = build_config(sets=["allocation.strategy=vigor", "allocation.rollouts_per_prompt=4",
                               "train.prompts_per_step=8"])
    assert make_allocator(vigor.allocation, 8, 0).budget == 32
    assert vigor.allocation.group_size == 8  # GRPO's G is a different key now
    grpo = build_config(sets=["allocation.strategy=grpo", "allocation.rollouts_per_prompt=4"])
    assert make_allocator(grpo.allocation, 8, 0).group_size == 8
    old = tmp_path / "old.yaml"  # written before the key existed: group_size set the budget
    old.write_text("allocation:\n  strategy: vigor\n  group_size: 4\ntrain:\n  prompts_per_step: 8\n")
    cfg = build_config(old)
    assert cfg.allocation.rollouts_per_prompt == 4 and make_allocator(cfg.allocation, 8, 0).budget == 32
    both = build_config(old, sets=["allocation.rollouts_per_prompt=16"])
    assert make_allocator(both.allocation, 8, 0).budget == 128
    assert registry.default_budget(build_config(old, sets=["allocation.budget=40"]).allocation, 8) == 40


def test_saved_configs_read_back_identically(tmp_path):
    from vigor_cli.config import dump_config

    cfg = build_config(TINY, sets=["allocation.strategy=vigor", "allocation.rollouts_per_prompt=6"])
    saved = tmp_path / "config.yaml"
    saved.write_text(dump_config(cfg))
    assert build_config(saved) == cfg


# --------------------------------------------------------------------------- vigor simulate
@pytest.mark.parametrize("args, needle", [
    (["--budget", "1"], "--strategy vigor: allocation.budget (1) is below the first round's allocation.m0 x --prompts (2 x 64 = 128)"),
    (["--strategy", "auto", "--budget", "100", "--prompts", "64"], "--strategy auto: allocation.budget (100) is below auto's census"),
    (["--learn", "--lr", "-1"], "'--lr': -1 is out of range: must be > 0"),
    (["--learn", "--lr", "nan"], "'--lr': nan is not a finite number"),
    (["--learn", "--transfer", "2"], "--transfer must be between 0 and 1 (got 2.0)"),
    (["--learn", "--target", "1.5"], "'--target': 1.5 is out of range: must be > 0 and <= 1"),
    (["--steps", "100000000"], "--steps must be between 1 and 1e+06"),
    (["--strategy", "pods", "--pods-n", "4", "--pods-m", "8"], "allocation.pods.m (8) must be <= allocation.pods.n (4)"),
    (["--set", "allocation.gamma=1e308"], "--set allocation.gamma=1e308: bad value for 'allocation.gamma'"),
])
def test_simulate_applies_the_same_rules_as_train(vigor, args, needle):
    code, out, err = vigor("simulate", "--steps", "2", *args)
    assert code == 2 and needle in err and err.strip().count("\n") == 0


def test_simulate_checks_only_the_strategies_it_runs(vigor):
    """The config's own strategy (auto by default) is not simulated: its rules do not apply."""
    code, out, err = vigor("simulate", "--strategy", "vigor", "--budget", "16", "--prompts", "8", "--steps", "2", "--json")
    assert code == 0, err
    code, _, err = vigor("simulate", "--strategy", "grpo", "--budget", "1", "--steps", "2", "--json")
    assert code == 0, err  # grpo has no budget


def test_eval_engine_names_come_from_the_registry(vigor):
    code, _, err = vigor("eval", "tiny", "--engine", "nosuch", "--benchmarks", "tiny-math", "--limit", "1")
    assert code == 2 and err.strip().startswith(
        "error: Invalid value for '--engine': 'nosuch' is not one of auto, hf, vllm")


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../escape", " "])
def test_run_name_is_a_plain_name(name):
    assert "a plain directory name is expected" in refused(f"train.run_name={name!r}")


def test_a_flag_error_names_the_flag(tmp_path):
    out = run_vigor("train", "--run-name", "..", "--output-dir", str(tmp_path / "runs"), "--dry-run")
    assert out.returncode == 2 and out.stderr.startswith("error: --run-name .. (train.run_name): ")
    assert out.stderr.strip().count("\n") == 0 and not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------- mode words
WEIGHT_CHECK_SPELLINGS = [
    ("off", "off"), ("Off", "off"), ("OFF", "off"), ("false", "off"), ("False", "off"), ("no", "off"),
    ("'off'", "off"), ('"false"', "off"), ("warn", "warn"), ("Warn", "warn"), ("'WARN'", "warn"),
    ("error", "error"), ("Error", "error"), ("' error '", "error"),
]


@pytest.mark.parametrize("text, want", WEIGHT_CHECK_SPELLINGS)
def test_weight_check_reads_every_yaml_spelling(tmp_path, text, want):
    """YAML 1.1 reads a bare off/no/false as the boolean false: it means 'off' (it used to be
    refused, exit 2, unless quoted). The same from --set and from a config file."""
    assert build_config(sets=[f"engine.weight_check={text}"]).engine.weight_check == want
    p = tmp_path / "c.yaml"
    p.write_text(f"engine:\n  weight_check: {text}\n")
    assert build_config(p).engine.weight_check == want
    saved = tmp_path / "saved.yaml"  # what a run directory stores reads back the same
    from vigor_cli.config import dump_config

    saved.write_text(dump_config(build_config(p)))
    assert build_config(saved).engine.weight_check == want


@pytest.mark.parametrize("text", ["on", "true", "yes", "bogus", "2"])
def test_weight_check_refuses_a_switch_without_a_mode(text):
    msg = refused(f"engine.weight_check={text}")
    assert msg.startswith(f"--set engine.weight_check={text}: bad value for 'engine.weight_check'")
    assert "error" in msg and "warn" in msg and "off" in msg


def test_weight_check_off_from_the_command_line(vigor, tmp_path):
    code, out, err = vigor("train", "--dry-run", "--set", "engine.weight_check=off", "--output-dir", str(tmp_path))
    assert code == 0, err
    assert list(tmp_path.iterdir()) == []
