"""GPU leases: real processes competing for device lock files (no GPU needed).

A fake ``nvidia-smi`` on PATH stands in for the driver where a test needs device UUIDs.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import llm_utility.gpu as gpu
from llm_utility.gpu import ENV, GpuLeaseError, close_before_release, lease_gpus, scheduler_isolation, visible_devices

# Child processes import this checkout's library, not whichever one the environment has installed.
SRC = str(Path(__file__).resolve().parents[1] / "src")
SCHEDULER_VARS = ("SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST", "LLM_UTILITY_GPU_LEASE", "LLM_UTILITY_GPU_LEASE_TIMEOUT")
CHILD_ENV = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARS}
CHILD_ENV["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(autouse=True)
def _no_scheduler(monkeypatch):
    """Tests start outside any scheduler, whatever machine runs them."""
    for name in SCHEDULER_VARS:
        monkeypatch.delenv(name, raising=False)


# A job: lease `n` of `n_devices`, record when it held which devices and what CUDA saw, hold, exit.
HOLDER = """
import json, sys, time
from llm_utility.gpu import lease_gpus
lock_dir, n, n_devices, hold, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
with lease_gpus(n, lock_dir, n_devices=n_devices, poll=0.05) as ids:
    import os
    start = time.time()
    print("leased", flush=True)
    time.sleep(hold)
    rec = {"ids": ids, "cvd": os.environ["CUDA_VISIBLE_DEVICES"], "start": start, "end": time.time()}
with open(out, "w") as fh:
    json.dump(rec, fh)
"""


def _spawn(tmp_path: Path, name: str, n: int, n_devices: int, hold: float) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-c", HOLDER, str(tmp_path / "locks"), str(n), str(n_devices), str(hold), str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=CHILD_ENV), out


def _wait_leased(proc: subprocess.Popen) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "leased"


def test_a_device_is_never_held_twice(tmp_path):
    procs = [_spawn(tmp_path, f"job{i}", n=1, n_devices=2, hold=0.8) for i in range(4)]
    for proc, _ in procs:
        assert proc.wait(timeout=60) == 0
    records = [json.loads(out.read_text()) for _, out in procs]
    for rec in records:
        assert len(rec["ids"]) == 1 and rec["cvd"] == rec["ids"][0]
    by_device: dict[str, list[tuple[float, float]]] = {}
    for rec in records:
        by_device.setdefault(rec["ids"][0], []).append((rec["start"], rec["end"]))
    assert set(by_device) <= {"0", "1"}
    for spans in by_device.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 0.01, f"overlapping leases: {spans}"
    # Four jobs on two devices: two had to wait for the first two to finish.
    starts = sorted(r["start"] for r in records)
    first_end = min(r["end"] for r in records)
    assert starts[2] >= first_end - 0.01


def test_waiter_gets_the_devices_after_release(tmp_path):
    holder, holder_out = _spawn(tmp_path, "holder", n=2, n_devices=2, hold=1.0)
    _wait_leased(holder)
    waiter, waiter_out = _spawn(tmp_path, "waiter", n=1, n_devices=2, hold=0.0)
    assert holder.wait(timeout=60) == 0 and waiter.wait(timeout=60) == 0
    held, waited = json.loads(holder_out.read_text()), json.loads(waiter_out.read_text())
    assert held["ids"] == ["0", "1"] and held["cvd"] == "0,1"
    assert waited["start"] >= held["end"] - 0.01


def test_killed_holder_releases_its_lease(tmp_path):
    holder, _ = _spawn(tmp_path, "holder", n=1, n_devices=1, hold=60)
    _wait_leased(holder)
    with pytest.raises(TimeoutError), lease_gpus(1, tmp_path / "locks", n_devices=1, timeout=0.3, poll=0.05):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    with lease_gpus(1, tmp_path / "locks", n_devices=1, timeout=5, poll=0.05) as ids:
        assert ids == ["0"]


def test_environment_is_set_and_restored(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with lease_gpus(2, tmp_path, n_devices=3) as ids:
        assert ids == ["0", "1"] and os.environ[ENV] == "0,1"
        with lease_gpus(1, tmp_path, n_devices=3, timeout=1) as more:  # the next free one
            assert more == ["2"] and os.environ[ENV] == "2"
        assert os.environ[ENV] == "0,1"
    assert ENV not in os.environ
    # A scheduler's allocation is what gets leased from, and it comes back afterwards.
    monkeypatch.setenv(ENV, "5,7")
    assert visible_devices() == ["5", "7"]
    with lease_gpus(1, tmp_path) as ids:
        assert ids == ["5"] and os.environ[ENV] == "5"
    assert os.environ[ENV] == "5,7"


def test_zero_gpus_and_too_many(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "3")
    with lease_gpus(0, tmp_path) as ids:
        assert ids == [] and os.environ[ENV] == "3"
    with pytest.raises(RuntimeError, match="needs 2 GPU"), lease_gpus(2, tmp_path):
        pass
    started = time.monotonic()
    with pytest.raises(RuntimeError), lease_gpus(1, tmp_path, n_devices=0):
        pass
    assert time.monotonic() - started < 1  # an impossible lease fails at once, it does not wait
    monkeypatch.setenv(ENV, "")  # set but empty: GPUs hidden
    assert visible_devices() == []


def test_module_does_not_import_torch():
    code = "import sys, llm_utility.gpu; assert 'torch' not in sys.modules, 'gpu.py imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, env=CHILD_ENV)


# ---------------------------------------------------------------------------------------------------
# Schedulers, UUIDs, waiting, file systems without flock, closing engines first

# A job as a scheduler starts it (its allocation already in CUDA_VISIBLE_DEVICES): lease one GPU,
# hold it until the `release` file exists ("-": do not hold), record what it got.
SCHEDULED = """
import json, os, sys, time
from llm_utility.gpu import lease_gpus
lock_dir, release, out, timeout = sys.argv[1:5]
with lease_gpus(1, lock_dir, poll=0.05, timeout=None if timeout == "none" else float(timeout)) as ids:
    print("leased", flush=True)
    while release != "-" and not os.path.exists(release):
        time.sleep(0.02)
    rec = {"ids": ids, "cvd": os.environ["CUDA_VISIBLE_DEVICES"]}
with open(out, "w") as fh:
    json.dump(rec, fh)
"""

# nvidia-smi as a node with cgroup-isolated GPUs shows it: only the job's device, as index 0.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *query-gpu*) echo "0, $FAKE_GPU_UUID" ;;
  *-L*) echo "GPU 0: Fake GPU (UUID: $FAKE_GPU_UUID)" ;;
esac
"""


def _fake_nvidia_smi(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text(FAKE_NVIDIA_SMI)
    exe.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def _run_scheduled(tmp_path: Path, name: str, env: dict, release: str = "-", timeout: str = "none"):
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-c", SCHEDULED, str(tmp_path / "locks"), release, str(out), timeout]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**CHILD_ENV, **env})
    return proc, out


def test_slurm_renumbered_jobs_do_not_wait_for_each_other(tmp_path):
    """Two one-GPU SLURM jobs on one node both see CUDA_VISIBLE_DEVICES=0 (each its own physical
    GPU, renumbered). The second must run while the first holds its GPU: neither leases."""
    release = tmp_path / "release"
    first, _ = _run_scheduled(tmp_path, "a", {"SLURM_JOB_ID": "41", ENV: "0"}, release=str(release))
    _wait_leased(first)
    second, second_out = _run_scheduled(tmp_path, "b", {"SLURM_JOB_ID": "42", ENV: "0"}, timeout="20")
    assert second.wait(timeout=60) == 0, second.stderr.read()
    assert first.poll() is None  # the first job still holds its GPU
    release.touch()
    assert first.wait(timeout=60) == 0
    assert json.loads(second_out.read_text()) == {"ids": ["0"], "cvd": "0"}
    assert not (tmp_path / "locks").exists() or not list((tmp_path / "locks").iterdir())


def test_renumbered_devices_are_locked_by_uuid(tmp_path):
    """Leasing anyway (LLM_UTILITY_GPU_LEASE=always) under the same renumbering: locks are named by
    UUID, so a job on another physical GPU does not wait and one on the same GPU does."""
    base = {"SLURM_JOB_ID": "1", "LLM_UTILITY_GPU_LEASE": "always", ENV: "0", "PATH": _fake_nvidia_smi(tmp_path)}
    release = tmp_path / "release"
    first, _ = _run_scheduled(tmp_path, "a", {**base, "FAKE_GPU_UUID": "GPU-aaaa"}, release=str(release))
    _wait_leased(first)
    other, other_out = _run_scheduled(tmp_path, "b", {**base, "FAKE_GPU_UUID": "GPU-bbbb"}, timeout="20")
    same, _ = _run_scheduled(tmp_path, "c", {**base, "FAKE_GPU_UUID": "GPU-aaaa"}, timeout="0.5")
    assert other.wait(timeout=60) == 0, other.stderr.read()
    assert same.wait(timeout=60) != 0 and "TimeoutError" in same.stderr.read()
    assert first.poll() is None
    release.touch()
    assert first.wait(timeout=60) == 0
    assert json.loads(other_out.read_text()) == {"ids": ["0"], "cvd": "0"}
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["GPU-aaaa.lock", "GPU-bbbb.lock"]


def test_scheduler_detection(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    assert scheduler_isolation(1) is None  # a workstation: lease
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert scheduler_isolation(1) == "SLURM"
    monkeypatch.setenv(ENV, "0,1,2,3")  # local jobs sharing one 4-GPU allocation: lease among them
    assert scheduler_isolation(1) is None and scheduler_isolation(4) == "SLURM"
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert scheduler_isolation(4) == "Kubernetes"
    monkeypatch.setenv("LLM_UTILITY_GPU_LEASE", "always")
    assert scheduler_isolation(4) is None
    monkeypatch.setenv("LLM_UTILITY_GPU_LEASE", "sometimes")
    with pytest.raises(GpuLeaseError, match="LLM_UTILITY_GPU_LEASE"):
        scheduler_isolation(4)


def test_waiting_is_logged_and_the_timeout_names_the_holder(tmp_path, caplog):
    lock_dir = tmp_path / "locks"
    with lease_gpus(1, lock_dir, n_devices=1):
        caplog.set_level(logging.INFO, logger="llm_utility.gpu")
        started = time.monotonic()
        with (
            pytest.raises(TimeoutError) as err,
            lease_gpus(1, lock_dir, n_devices=1, timeout=0.4, poll=0.05, log_every=0.1),
        ):
            pass
        assert 0.4 <= time.monotonic() - started < 5
    message = str(err.value)
    assert "1 free GPU(s)" in message and f"pid {os.getpid()}" in message and str(lock_dir) in message
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for 1 free GPU")]
    assert len(waits) >= 2 and f"pid {os.getpid()}" in waits[0]


def test_the_timeout_can_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_UTILITY_GPU_LEASE_TIMEOUT", "0.2")
    with lease_gpus(1, tmp_path, n_devices=1):
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="gave up after"), lease_gpus(1, tmp_path, n_devices=1, poll=0.05):
            pass
        assert time.monotonic() - started < 5
    monkeypatch.setenv("LLM_UTILITY_GPU_LEASE_TIMEOUT", "soon")
    with pytest.raises(GpuLeaseError, match="not a number"), lease_gpus(1, tmp_path, n_devices=1):
        pass


def test_lock_folder_without_flock_is_a_clear_error(tmp_path, monkeypatch):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(gpu.fcntl, "flock", no_locks)
    with (
        pytest.raises(GpuLeaseError, match="does not support flock") as err,
        lease_gpus(1, tmp_path / "nfs", n_devices=2),
    ):
        pass
    assert str(tmp_path / "nfs") in str(err.value) and "gpu_lock_dir" in str(err.value)
    assert ENV not in os.environ or os.environ[ENV] != "0"  # nothing was set on the way out


def test_engines_close_before_the_lease_is_released(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    lock_file = tmp_path / f"{gpu.socket.gethostname()}-gpu0.lock"
    seen = []

    class Engine:
        def __init__(self, name):
            self.name = name
            close_before_release(self)

        def close(self):
            # The device must still be ours while the engine shuts down.
            still_held = gpu._try_lock(lock_file) is None
            seen.append((self.name, still_held, os.environ.get(ENV)))
            if self.name == "broken":
                raise RuntimeError("shutdown failed")

    Engine("outside")  # no lease active: nothing to close
    with lease_gpus(1, tmp_path, n_devices=1):
        Engine("first"), Engine("broken"), Engine("last")
    assert seen == [("last", True, "0"), ("broken", True, "0"), ("first", True, "0")]
    fd = gpu._try_lock(lock_file)
    assert fd is not None  # released afterwards
    gpu._release([fd])
    assert gpu._closers == []


def test_default_lock_dir_is_node_local(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu.tempfile, "gettempdir", lambda: str(tmp_path))
    with lease_gpus(1, None, n_devices=1):
        assert (tmp_path / "llm-utility-gpu-locks").is_dir()
        assert [p.name for p in (tmp_path / "llm-utility-gpu-locks").iterdir()] == [
            f"{gpu.socket.gethostname()}-gpu0.lock"
        ]


def test_a_job_that_sees_fewer_gpus_than_its_model_needs_stops_clearly(monkeypatch):
    # Snakemake lowers a gpu: 2 job to the --resources gpu=1 cap silently; the job must not go on.
    monkeypatch.setenv(ENV, "3")
    with pytest.raises(GpuLeaseError, match=r"needs 2 GPU\(s\) but this job sees 1 .*gpu=2 or more"):
        gpu.check_visible_gpus(2, "judge")
    monkeypatch.setenv(ENV, "3,5")
    gpu.check_visible_gpus(2, "judge")
    gpu.check_visible_gpus(0, "judge")  # a CPU model asks for nothing
    monkeypatch.delenv(ENV)
    gpu.check_visible_gpus(2, "judge")  # nothing says which devices the job has: the backend sees all


def test_model_session_checks_the_gpus_before_loading(monkeypatch, tmp_path):
    from llm_utility.pipeline.common import model_session

    monkeypatch.setenv(ENV, "0")
    with pytest.raises(GpuLeaseError, match="needs 2 GPU"):
        with model_session(manifest=str(tmp_path / "missing.json"), spec={"gpu": 2}, store=tmp_path, job="judge"):
            pass
