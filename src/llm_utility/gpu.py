"""Leasing GPU devices to local jobs.

Snakemake's ``--resources gpu=N`` counts GPUs but does not say which ones a local job may use, and
vLLM takes ~90% of a device's memory by default, so two jobs on one device fail. A GPU job therefore
leases device ids, one lock file per device (``flock``, released by the kernel even when the job is
killed), and sets ``CUDA_VISIBLE_DEVICES`` to them. This must happen before torch or vLLM is
imported: CUDA reads the variable once, when it initializes. So this module never imports torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

ENV = "CUDA_VISIBLE_DEVICES"


def visible_devices(n_devices: int | None = None) -> list[str]:
    """The device ids a job on this machine may lease, in order.

    ``n_devices`` given: ids 0..n_devices-1. Otherwise the ids already in ``CUDA_VISIBLE_DEVICES``
    when it is set (a scheduler such as SLURM may have set it to this job's allocation; set but
    empty means no GPU), else one id per GPU that ``nvidia-smi -L`` lists, else none.
    """
    if n_devices is not None:
        return [str(i) for i in range(n_devices)]
    current = os.environ.get(ENV)
    if current is not None:  # set, even empty (which hides every GPU)
        return [d.strip() for d in current.split(",") if d.strip()]
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            return []
        return [str(i) for i, line in enumerate(ln for ln in listing.stdout.splitlines() if ln.startswith("GPU "))]
    return []


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive lock on ``path``, or None if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    # For people looking at the lock directory: who holds it. The lock is what counts, not the text.
    os.ftruncate(fd, 0)
    os.write(fd, f"{socket.gethostname()} pid {os.getpid()}\n".encode())
    return fd


def _release(fds: list[int]) -> None:
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    fds.clear()


@contextlib.contextmanager
def lease_gpus(
    n: int,
    lock_dir: str | os.PathLike,
    n_devices: int | None = None,
    timeout: float | None = None,
    poll: float = 1.0,
) -> Iterator[list[str]]:
    """Hold ``n`` free devices for the ``with`` block; yield their ids.

    Devices are tried in order; until ``n`` are free at once, the job releases what it got and polls
    every ``poll`` seconds (holding some while waiting for more could deadlock two jobs). Inside the
    block ``CUDA_VISIBLE_DEVICES`` names the leased ids; on exit it is restored and the locks are
    released. ``n == 0`` leases nothing and leaves the environment alone (a CPU job). Raises
    RuntimeError when fewer than ``n`` devices exist, TimeoutError after ``timeout`` seconds.
    """
    if n <= 0:
        yield []
        return
    devices = visible_devices(n_devices)
    if n > len(devices):
        raise RuntimeError(
            f"this job needs {n} GPU(s) but {len(devices)} are visible "
            f"({ENV}={os.environ.get(ENV)!r}, nvidia-smi {'found' if shutil.which('nvidia-smi') else 'not found'}); "
            "lower the model's `gpu` or run where GPUs are available"
        )
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    # The host name keeps jobs on different nodes apart when lock_dir is on a shared file system.
    host = socket.gethostname()
    deadline = None if timeout is None else time.monotonic() + timeout
    fds: list[int] = []
    leased: list[str] = []
    while True:
        for device in devices:
            fd = _try_lock(lock_dir / f"{host}-gpu{device}.lock")
            if fd is not None:
                fds.append(fd)
                leased.append(device)
                if len(leased) == n:
                    break
        if len(leased) == n:
            break
        _release(fds)
        leased.clear()
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"no {n} free GPU(s) among {devices} after {timeout} s (locks in {lock_dir})")
        time.sleep(poll)
    previous = os.environ.get(ENV)
    os.environ[ENV] = ",".join(leased)
    try:
        yield leased
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
        _release(fds)
