"""GPU leases: real processes competing for device lock files (no GPU needed)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_utility.gpu import ENV, lease_gpus, visible_devices

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
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True), out


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
    subprocess.run([sys.executable, "-c", code], check=True)
