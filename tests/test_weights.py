"""Weights fetched once at a pinned revision, content fingerprints, and work folders of killed jobs.

The Hugging Face Hub is replaced by a stand-in (a local "repository" folder, its commit and file
list), so these tests need no network and check what we ask of the hub.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import huggingface_hub
import pytest

from llm_utility.generation import load_generator, materialize, normalize_spec
from llm_utility.retrieval.encoders import materialize_retriever, materialized_spec
from llm_utility.weights import (
    OWNER,
    Sha256Cache,
    content_fingerprint,
    has_chat_template,
    one_builder,
    remove_stale_work_folders,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SRC = str(Path(__file__).resolve().parents[1] / "src")
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}


def _model_folder(root: Path, weights: bytes = b"\x00" * 64, chat: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    tok = {"tokenizer_class": "PreTrainedTokenizerFast", **({"chat_template": "{{ messages }}"} if chat else {})}
    (root / "tokenizer_config.json").write_text(json.dumps(tok))
    (root / "tokenizer.json").write_text("{}")
    (root / "model.safetensors").write_bytes(weights)
    (root / "README.md").write_text("a model card")
    return root


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A hub holding one repository at COMMIT; records what was asked of it."""
    repo = _model_folder(tmp_path / "hub-repo")
    (repo / "original").mkdir()
    (repo / "original" / "consolidated.00.pth").write_bytes(b"duplicate weights")
    (repo / "onnx").mkdir()
    (repo / "onnx" / "model.onnx").write_bytes(b"export")
    (repo / "1_Pooling").mkdir()
    (repo / "1_Pooling" / "config.json").write_text("{}")
    calls = {"info": [], "download": []}

    def model_info(self, repo_id, revision=None, **kw):
        calls["info"].append((repo_id, revision))
        files = [p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()]
        return types.SimpleNamespace(sha=COMMIT, siblings=[types.SimpleNamespace(rfilename=f) for f in files])

    def snapshot_download(repo_id, revision=None, local_dir=None, allow_patterns=None, ignore_patterns=None, **kw):
        calls["download"].append(
            {
                "repo": repo_id,
                "revision": revision,
                "local_dir": Path(local_dir),
                "allow": allow_patterns,
                "ignore": ignore_patterns,
            }
        )
        for f in repo.rglob("*"):
            name = f.relative_to(repo).as_posix()
            if (
                f.is_file()
                and any(fnmatch.fnmatch(name, p) for p in allow_patterns)
                and not any(fnmatch.fnmatch(name, p) for p in ignore_patterns)
            ):
                (Path(local_dir) / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, Path(local_dir) / name)
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def hub_spec(revision="main", **extra):
    return {
        "backend": "vllm",
        "gpu": 1,
        "prompt_format": "chat",
        "weights": {"hub": "org/m", "revision": revision},
        **extra,
    }


# ---------------------------------------------------------------------------------------------------
# Spec validation


def test_a_hub_model_must_be_pinned_and_the_error_says_how():
    with pytest.raises(ValueError) as err:
        normalize_spec({"backend": "transformers", "weights": {"hub": "org/m"}, "prompt_format": "chat"}, "m")
    message = str(err.value)
    assert "llms.m.weights.revision is required" in message
    assert "hf models info org/m --expand sha" in message and "git ls-remote https://huggingface.co/org/m" in message
    with pytest.raises(ValueError, match=r"retrievers\.bge\.revision is required"):
        materialize_retriever("bge", {"backend": "flagembedding", "model": "BAAI/bge-m3"}, "/nonexistent/x")


def test_vllm_spec_errors_name_the_key():
    with pytest.raises(ValueError, match=r"llms\.big\.gpu_memory_utilization must be in \(0, 1\]"):
        normalize_spec(hub_spec(COMMIT, gpu_memory_utilization=1.5), "big")
    with pytest.raises(ValueError, match=r"llms\.big\.max_num_seqs must be >= 1"):
        normalize_spec(hub_spec(COMMIT, max_num_seqs=0), "big")
    with pytest.raises(ValueError, match=r"llms\.big\.cpu_kv_cache_gib must be > 0"):
        normalize_spec(hub_spec(COMMIT, gpu=0, cpu_kv_cache_gib=0), "big")
    with pytest.raises(ValueError, match=r"llms\.big\.dtype int8 is the transformers backend's CPU arithmetic"):
        normalize_spec(hub_spec(COMMIT, dtype="int8"), "big")
    spec = normalize_spec(hub_spec(COMMIT, gpu_memory_utilization=0.8, max_num_seqs=64), "big")
    assert spec["gpu_memory_utilization"] == 0.8 and spec["max_num_seqs"] == 64
    # gpu: 0 (the default) runs vLLM's CPU build, with the schema's KV cache size and eager by default.
    cpu = normalize_spec({k: v for k, v in hub_spec(COMMIT).items() if k != "gpu"}, "small")
    assert cpu["gpu"] == 0 and cpu["cpu_kv_cache_gib"] == 2 and cpu["enforce_eager"] is None
    # A transformers model may run on a CPU.
    assert normalize_spec({**hub_spec(COMMIT), "backend": "transformers", "gpu": 0}, "small")["gpu"] == 0


# ---------------------------------------------------------------------------------------------------
# Hub weights


def test_hub_weights_are_fetched_once_at_the_resolved_commit(fake_hub, tmp_path):
    out = tmp_path / "models" / "m"
    manifest = materialize("m", hub_spec("main"), out)
    assert fake_hub["info"] == [("org/m", "main")]
    (download,) = fake_hub["download"]
    assert download["revision"] == COMMIT  # the commit, not the moving branch name
    assert "*.safetensors" in download["allow"] and "original/*" in download["ignore"]
    assert manifest["commit"] == COMMIT and manifest["revision"] == "main"
    assert manifest["fingerprint"] == f"hub:org/m@{COMMIT}"
    assert manifest["load_path"] == str(out.resolve()) and manifest["materialized"] and manifest["has_chat_template"]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert files == [
        "1_Pooling/config.json",
        "config.json",
        "manifest.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert not list(out.parent.glob(".m.tmp-*"))  # the download folder was renamed into place
    # Rerun, and rerun after Snakemake deleted the manifest (it does before running a job): no download.
    again = materialize("m", hub_spec("main"), out)
    (out / "manifest.json").unlink()
    third = materialize("m", hub_spec("main"), out)
    assert len(fake_hub["download"]) == 1
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in third.items() if k != "seconds"}
    # A file gone missing is fetched again.
    (out / "model.safetensors").unlink()
    materialize("m", hub_spec("main"), out)
    assert len(fake_hub["download"]) == 2 and (out / "model.safetensors").exists()


def test_a_second_builder_waits_for_the_first_and_reuses_its_folder(fake_hub, tmp_path):
    """Two jobs materializing one folder (two workflows sharing resources/models): the second waits
    for the first's build lock instead of dequantizing or downloading the same weights beside it."""
    import threading

    out = tmp_path / "models" / "m"
    results = []
    with one_builder(out):  # another job is building this folder
        waiting = threading.Thread(target=lambda: results.append(materialize("m", hub_spec("main"), out)))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and fake_hub["download"] == []  # it waits, and fetches nothing yet
    waiting.join(30)
    assert not waiting.is_alive() and len(fake_hub["download"]) == 1 and results[0]["commit"] == COMMIT
    # The folder is there now: the next job takes the lock, finds it, and fetches nothing.
    assert materialize("m", hub_spec("main"), out)["fingerprint"] == results[0]["fingerprint"]
    assert len(fake_hub["download"]) == 1


def test_jobs_load_the_local_copy_offline(fake_hub, tmp_path, monkeypatch):
    out = tmp_path / "models" / "m"
    materialize("m", hub_spec(COMMIT), out)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "vllm", None)  # stops load_generator right after it went offline
    moved = tmp_path / "elsewhere"
    shutil.move(out, moved)  # a moved checkout: the weights are looked for beside the manifest
    with pytest.raises(ImportError):
        load_generator(moved / "manifest.json", hub_spec(COMMIT))
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_a_killed_download_is_resumed_and_other_leftovers_removed(fake_hub, tmp_path):
    out = tmp_path / "models" / "m"
    out.parent.mkdir(parents=True)
    resumable = out.parent / f".m.tmp-{COMMIT}"  # what a killed download of this commit leaves
    resumable.mkdir()
    (resumable / "model.safetensors.incomplete").write_bytes(b"\x00")
    (resumable / OWNER).write_text("node1 123\n")  # its owner is gone: nobody holds the lock
    other_commit = out.parent / ".m.tmp-ffffffffffffffffffffffffffffffffffffffff"
    other_commit.mkdir()
    (other_commit / OWNER).write_text("node1 124\n")
    old_layout = out.parent / ".m.tmp-abc123"  # from an older release: no owner file
    old_layout.mkdir()
    os.utime(old_layout, (time.time() - 7 * 3600, time.time() - 7 * 3600))
    recent_old_layout = out.parent / ".m.tmp-def456"  # maybe a job of an older release, still running
    recent_old_layout.mkdir()
    unrelated = out.parent / ".other.tmp-1"
    unrelated.mkdir()
    materialize("m", hub_spec("main"), out)
    assert fake_hub["download"][0]["local_dir"] == resumable.resolve()  # resumed where it stopped
    assert not resumable.exists() and not other_commit.exists() and not old_layout.exists()
    assert unrelated.exists()  # another model's business
    assert recent_old_layout.exists()  # no owner file and recent: perhaps alive, left alone


def test_a_live_job_s_work_folder_is_left_alone(tmp_path):
    target = tmp_path / "m"
    live = tmp_path / ".m.tmp-live"
    live.mkdir()
    fd = os.open(live / OWNER, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert remove_stale_work_folders(target) == []
        assert live.exists()
    finally:
        os.close(fd)
    assert remove_stale_work_folders(target) == [live]


BUILDER = """
import sys, time
from pathlib import Path
from llm_utility.weights import work_folder
with work_folder(Path(sys.argv[1])) as tmp:
    (tmp / "model.safetensors").write_bytes(b"0" * 1000)
    print(tmp, flush=True)
    time.sleep(60)
"""


def test_a_killed_materialization_leaves_nothing_at_the_next_start(tmp_path):
    """issue 6 item 9: a killed materialize_model left a hidden folder of up to the model's size."""
    out = tmp_path / "models" / "m"
    proc = subprocess.Popen([sys.executable, "-c", BUILDER, str(out)], stdout=subprocess.PIPE, text=True, env=CHILD_ENV)
    tmp = Path(proc.stdout.readline().strip())
    assert tmp.is_dir() and tmp.name.startswith(".m.tmp-")
    assert remove_stale_work_folders(out) == []  # alive: left alone
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert tmp.exists()  # a SIGKILL runs no cleanup...
    spec = {
        "backend": "transformers",
        "prompt_format": "chat",
        "weights": {"path": str(_model_folder(tmp_path / "local"))},
    }
    materialize("m", spec, out)
    assert not tmp.exists()  # ...the next materialization does
    assert sorted(p.name for p in out.parent.iterdir()) == [".sha256-cache.json", "m"]


# ---------------------------------------------------------------------------------------------------
# Content fingerprints


def test_a_local_folder_is_fingerprinted_by_content_hashed_once(tmp_path):
    a = _model_folder(tmp_path / "a", weights=b"\x01" * 64)
    b = _model_folder(tmp_path / "b", weights=b"\x02" * 64)  # same names and sizes, other weights
    cache_file = tmp_path / "cache.json"
    fp_a, fp_b = content_fingerprint(a, cache_file), content_fingerprint(b, cache_file)
    assert fp_a.startswith("local:") and fp_a != fp_b
    (a / "README.md").write_text("a longer model card")  # documentation does not change outputs
    assert content_fingerprint(a, cache_file) == fp_a
    cache = Sha256Cache(cache_file)
    assert content_fingerprint(a, cache) == fp_a and cache.hashed == 0  # all from the cache
    entries = json.loads(cache_file.read_text())
    assert str((a / "model.safetensors").resolve()) in entries and not any(k.endswith("README.md") for k in entries)
    (a / "model.safetensors").write_bytes(b"\x03" * 64)  # replaced in place: new mtime, new hash
    cache = Sha256Cache(cache_file)
    assert content_fingerprint(a, cache) not in (fp_a, fp_b) and cache.hashed == 1
    before = content_fingerprint(a, cache_file)
    (a / "tokenizer_config.json").write_text(json.dumps({"chat_template": "other"}))  # the tokenizer counts
    assert content_fingerprint(a, cache_file) != before
    (tmp_path / "no-weights").mkdir()
    (tmp_path / "no-weights" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="no weight files"):
        content_fingerprint(tmp_path / "no-weights")


def test_local_weights_manifest_and_chat_template(tmp_path):
    folder = _model_folder(tmp_path / "weights")
    spec = {"backend": "transformers", "prompt_format": "chat", "weights": {"path": str(folder)}}
    manifest = materialize("m", spec, tmp_path / "models" / "m")
    assert manifest["fingerprint"] == content_fingerprint(folder) and not manifest["materialized"]
    assert manifest["load_path"] == str(folder.resolve())
    assert has_chat_template(folder) and not has_chat_template(_model_folder(tmp_path / "base", chat=False))
    with pytest.raises(ValueError, match="no chat template"):
        materialize("b", {**spec, "weights": {"path": str(tmp_path / "base")}}, tmp_path / "models" / "b")


def test_retriever_weights_fetched_once_and_used_offline(fake_hub, tmp_path, monkeypatch):
    spec = {"backend": "flagembedding", "model": "org/m", "revision": COMMIT, "pooling": "cls"}
    out = tmp_path / "retrievers" / "bge"
    manifest = materialize_retriever("bge", spec, out)
    assert manifest["fingerprint"] == f"hub:org/m@{COMMIT}" and manifest["materialized"]
    assert "1_Pooling/*" in fake_hub["download"][0]["allow"] and (out / "1_Pooling" / "config.json").exists()
    materialize_retriever("bge", spec, out)
    assert len(fake_hub["download"]) == 1
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    local = materialized_spec(spec, out / "manifest.json")
    assert local == {**spec, "model": str(out.resolve())} and os.environ["HF_HUB_OFFLINE"] == "1"
    assert materialized_spec(spec, None) == spec
    # Local weights stay where they are.
    folder = _model_folder(tmp_path / "minilm")
    described = materialize_retriever(
        "minilm", {"backend": "sentence-transformers", "model": str(folder)}, tmp_path / "retrievers" / "minilm"
    )
    assert described["load_path"] == str(folder.resolve()) and described["fingerprint"].startswith("local:")
    assert materialized_spec({"model": "x"}, tmp_path / "retrievers" / "minilm" / "manifest.json")["model"] == str(
        folder.resolve()
    )


def test_weights_on_a_separate_volume_are_found_through_the_manifest(fake_hub, tmp_path, monkeypatch):
    """Kubernetes: only the manifest travels as a declared file; the weights sit on a shared volume."""
    out, volume = tmp_path / "resources" / "models" / "m", tmp_path / "pvc" / "llms" / "m"
    manifest = materialize("m", hub_spec(COMMIT), out, weights_dir=volume)
    assert manifest["load_path"] == str(volume.resolve()) and (volume / "model.safetensors").exists()
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]
    seen = {}
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setattr(
        "llm_utility.generation.vllm_backend.VLLMGenerator.__init__",
        lambda self, m, s, threads=None: seen.update(m) or None,
    )
    load_generator(out / "manifest.json", hub_spec(COMMIT))
    assert seen["load_path"] == str(volume.resolve())
    spec = {"backend": "flagembedding", "model": "org/m", "revision": COMMIT}
    materialize_retriever(
        "bge", spec, tmp_path / "resources" / "retrievers" / "bge", weights_dir=tmp_path / "pvc" / "retrievers" / "bge"
    )
    local = materialized_spec(spec, tmp_path / "resources" / "retrievers" / "bge" / "manifest.json")
    assert local["model"] == str((tmp_path / "pvc" / "retrievers" / "bge").resolve())


def test_materializing_reads_only_the_weights_and_the_prompt_format(fake_hub, tmp_path):
    """What rule materialize_model passes (Plan.weights_spec): no backend, and the manifest names none,
    so the same weights serve both backends."""
    spec = {k: v for k, v in hub_spec("main").items() if k in ("weights", "prompt_format")}
    manifest = materialize("m", spec, tmp_path / "m")
    assert "backend" not in manifest and manifest["fingerprint"] == f"hub:org/m@{COMMIT}"
    assert materialize("m", {**spec, "backend": "vllm", "gpu": 0}, tmp_path / "m") == manifest
