"""A full disk (issue 39, 15): `--out` on a 3 MB tmpfs ended in `error:
safetensors._safetensors_rust.SafetensorError: ... No space left on device (os error 28) (an
internal error ...)`. Now one line names the file that could not be written and the space it
needed, and nothing half-written is left. Simulated (a writer that raises ENOSPC) everywhere;
on a real small tmpfs where this process may mount one (root), skipped elsewhere."""

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

from attnlab import create_model
from attnlab.cli.main import main
from attnlab.files import DiskFull, atomic_write, atomic_write_bytes, tensors_size


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.name.startswith("."))


def _raise_full(*args, **kwargs):
    """What safetensors raises on a full disk (its SafetensorError's text)."""
    raise RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                       'message: "No space left on device" })')


def test_atomic_write_names_the_file_and_the_space_it_needed(tmp_path, monkeypatch):
    def half_then_full(path):
        Path(path).write_bytes(b"x" * 1500)
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "new" / "page.html"
    with pytest.raises(DiskFull) as caught:
        atomic_write(target, half_then_full)
    assert caught.value.filename == str(target)
    assert "no space left on the device" in str(caught.value) and "more than the 1.5 kB written" in str(caught.value)
    assert "free in" in str(caught.value)
    assert not (tmp_path / "new").exists()  # neither the file, its temporary, nor the directory made for it
    monkeypatch.setattr(Path, "write_bytes", _raise_full)
    with pytest.raises(DiskFull, match=r"it needs 4.0 kB"):
        atomic_write_bytes(tmp_path / "data.bin", b"y" * 4000)
    assert list(tmp_path.iterdir()) == []


def test_a_model_and_a_checkpoint_name_the_weights_file_and_its_size(tmp_path, monkeypatch):
    import safetensors.torch

    from attnlab.models import base
    from attnlab.training import checkpoint

    model = create_model("lm_tiny", vocab_size=40, max_positions=16)
    needed = tensors_size(model.state_dict())
    monkeypatch.setattr(base, "save_model", _raise_full)
    with pytest.raises(DiskFull) as caught:
        model.save_pretrained(tmp_path / "model")
    assert caught.value.filename == str(tmp_path / "model" / "model.safetensors")
    assert f"it needs {needed / 1e3:,.1f} kB" in str(caught.value)
    assert list((tmp_path / "model").iterdir()) == []
    monkeypatch.setattr(safetensors.torch, "save_model", _raise_full)
    with pytest.raises(DiskFull) as caught:
        checkpoint.save_checkpoint(tmp_path / "run", 3, model, {"step": 3})
    final = checkpoint.checkpoint_dir(tmp_path / "run", 3)
    assert caught.value.filename == str(final / "model.safetensors"), caught.value.filename
    assert f"it needs {needed / 1e3:,.1f} kB" in str(caught.value)
    assert not final.exists() and _leftovers(tmp_path / "run") == []


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_command_on_a_full_tmpfs_says_which_file_and_leaves_nothing(small_tmpfs, capsys):
    filler = small_tmpfs / "filler"
    with open(filler, "wb", buffering=0) as f:  # fill it, then leave 16 kB: too little for the demo's weights
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
    os.truncate(filler, filler.stat().st_size - 16 * 1024)
    out = small_tmpfs / "demo"
    assert main(["demo", "--steps", "2", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err and "Traceback" not in err, err
    assert err.startswith(f"attnlab demo: error: {out / 'model.safetensors'}: could not be written: no space "
                          "left on the device (it needs "), err
    assert f"kB free in {small_tmpfs});" in err
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler"]


def test_a_raw_full_disk_error_is_one_line():
    # A writer outside attnlab.files: still one line, not "an internal error".
    from attnlab.cli import errors

    message, code = errors.describe_error(RuntimeError("IoError(Os { code: 28, kind: StorageFull })"))
    assert code == 2 and message.startswith("no space left on the device")
