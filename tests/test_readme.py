"""Every `aiayn` command in the README runs, in the README's order, in a fresh directory, and
then every command of the job pages that the README's did not already run (in the order of
the site's navigation: a page may use what an earlier one made, as `runs/mine/avg5`).

The commands run verbatim except for documented substitutions that make them fast: the
demo corpus is a small one written where `make demo` leaves its own, and `aiayn train`
gets a tiny model and a few steps appended as overrides.
"""

import re
import subprocess
import sys
from pathlib import Path

from aiayn.data.demo_corpus import demo_splits, write_splits

ROOT = Path(__file__).resolve().parents[1]
TINY_TRAIN = (
    " model.d_model=32 model.n_heads=2 model.d_ff=64 model.n_layers=1 data.max_tokens=1000"
    " train.update_tokens=1000 train.max_steps=5 train.save_every_steps=1 train.keep_last=5"
    " train.max_time_minutes=0 train.valid_every_steps=5"
)


# The job pages whose commands run on the demo corpus, in the nav's order (reproduce.md's need
# the internet and GPUs; parse.md's treebank is the user's own).
PAGES = ("train", "translate", "serve", "export", "parse", "attention", "experiments")


def readme_commands(path: Path = ROOT / "README.md") -> list[str]:
    text = path.read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if ".venv/bin/aiayn" in line]


def all_commands() -> list[str]:
    """The README's commands, then each job page's that the README does not hold."""
    commands = readme_commands()
    for page in PAGES:
        commands += [c for c in readme_commands(ROOT / "docs" / f"{page}.md") if c not in commands]
    return commands


def test_the_pages_hold_the_commands_the_readme_shows_and_more():
    pages = all_commands()
    assert len(pages) > 2 * len(readme_commands())  # the pages were read
    assert readme_commands(ROOT / "docs" / "train.md")[:4] == readme_commands()[:4]


def test_readme_lists_the_two_setup_commands_and_the_four_step_workflow():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text
    verbs = [re.search(r"aiayn (\w+)", c).group(1) for c in readme_commands()]
    assert verbs[:4] == ["prepare", "train", "average", "evaluate"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.strip().splitlines()[-1] == "make test"  # CI runs the README's test command


def test_every_readme_command_runs(tmp_path):
    splits = demo_splits(n_train=3000, n_valid=50, n_test=50)
    write_splits(splits, tmp_path / "runs" / "demo" / "corpus")
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    for command in all_commands():
        command = command.replace(".venv/bin/aiayn", f"{sys.executable} -m aiayn")
        if " train " in command:
            command += TINY_TRAIN
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
    assert (tmp_path / "runs" / "mine" / "avg5" / "model.safetensors").is_file()
