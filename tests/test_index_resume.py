"""build_index resumes after a kill: a scheduler's time limit must not cost the training or the
shards already assigned (issue 19, item 2). A real SIGKILL, at a checkpoint, in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import faiss
import numpy as np
import pytest

import llm_utility.retrieval.index as index_mod
from llm_utility.retrieval.index import build_index, search

REPO = Path(__file__).resolve().parents[1]
FACTORY = "IVF16,SQ8"


def _write_shards(directory: Path, sizes: list[int], dim: int = 16, seed: int = 0) -> tuple[np.ndarray, list[Path]]:
    directory.mkdir(parents=True, exist_ok=True)
    vectors = np.random.default_rng(seed).standard_normal((sum(sizes), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    paths, start = [], 0
    for i, size in enumerate(sizes):
        paths.append(directory / f"{i}.npy")
        np.save(paths[-1], vectors[start : start + size])
        start += size
    return vectors, paths


def _killed_at(checkpoint: str, shards: list[Path], out: Path) -> None:
    """Run build_index in a child process that SIGKILLs itself right after writing ``checkpoint``."""
    code = textwrap.dedent(
        f"""
        import os, signal
        import llm_utility.retrieval.index as m
        save = m._Checkpoints.save
        def save_then_die(self, name, index):
            save(self, name, index)
            if name == {checkpoint!r}:
                os.kill(os.getpid(), signal.SIGKILL)
        m._Checkpoints.save = save_then_die
        m.ADD_CHUNK = 128
        m.build_index({[str(p) for p in shards]!r}, {str(out)!r}, index_factory={FACTORY!r},
            train_sample=800, use_gpu=False)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]


class _Counting:
    """Counts training runs and shard parts written by the resumed build."""

    def __init__(self, monkeypatch):
        self.trained, self.parts = 0, []
        train, save = index_mod._train, index_mod._Checkpoints.save

        def counting_train(*args, **kwargs):
            self.trained += 1
            return train(*args, **kwargs)

        def counting_save(checkpoints, name, index):
            self.parts += [name] if name.startswith("part-") else []
            return save(checkpoints, name, index)

        monkeypatch.setattr(index_mod, "_train", counting_train)
        monkeypatch.setattr(index_mod._Checkpoints, "save", counting_save)


@pytest.mark.parametrize(
    ("killed_after", "parts_redone"),
    [
        ("trained.faiss", ["part-0.faiss", "part-1.faiss", "part-2.faiss"]),
        ("part-0.faiss", ["part-1.faiss", "part-2.faiss"]),
    ],
)
def test_a_killed_ivf_build_resumes_where_it_stopped(tmp_path, monkeypatch, killed_after, parts_redone):
    monkeypatch.setattr(index_mod, "ADD_CHUNK", 128)
    vectors, shards = _write_shards(tmp_path / "emb", [300, 450, 250])
    fresh = tmp_path / "fresh" / "index.faiss"
    assert build_index(shards, fresh, index_factory=FACTORY, train_sample=800, use_gpu=False) == 1000

    out = tmp_path / "resumed" / "index.faiss"
    _killed_at(killed_after, shards, out)
    partial = out.with_name(".index.faiss.partial")
    assert not out.exists() and (partial / killed_after).is_file() and (partial / "trained.faiss").is_file()

    counts = _Counting(monkeypatch)
    assert build_index(shards, out, index_factory=FACTORY, train_sample=800, use_gpu=False) == 1000
    assert counts.trained == 0 and counts.parts == parts_redone  # training is never redone
    assert not partial.exists()  # the checkpoints go once the index is written
    # The resumed index is the one an uninterrupted build writes, byte for byte.
    assert out.read_bytes() == fresh.read_bytes()
    queries = vectors[[0, 299, 300, 999]] + 0.01
    _, rows = search(out, queries, 1, use_gpu=False, nprobe=16)
    assert rows[:, 0].tolist() == [0, 299, 300, 999]


def test_checkpoints_of_other_inputs_are_discarded(tmp_path, monkeypatch):
    _, shards = _write_shards(tmp_path / "emb", [300, 450, 250])
    out = tmp_path / "index.faiss"
    _killed_at("part-0.faiss", shards, out)
    # The shards are encoded again (other vectors) before the rerun: nothing of the old state may be used.
    vectors, shards = _write_shards(tmp_path / "emb", [300, 450, 250], seed=1)
    counts = _Counting(monkeypatch)
    build_index(shards, out, index_factory=FACTORY, train_sample=800, use_gpu=False)
    assert counts.trained == 1 and counts.parts == ["part-0.faiss", "part-1.faiss", "part-2.faiss"]
    fresh = tmp_path / "fresh.faiss"
    build_index(shards, fresh, index_factory=FACTORY, train_sample=800, use_gpu=False)
    assert out.read_bytes() == fresh.read_bytes()


def test_a_flat_build_writes_no_checkpoints(tmp_path, monkeypatch):
    _, shards = _write_shards(tmp_path / "emb", [30, 20])
    saved = []
    monkeypatch.setattr(index_mod._Checkpoints, "save", lambda self, name, index: saved.append(name))
    build_index(shards, tmp_path / "index.faiss", index_factory="Flat")
    assert saved == [] and faiss.read_index(str(tmp_path / "index.faiss")).ntotal == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb", "index.faiss"]
