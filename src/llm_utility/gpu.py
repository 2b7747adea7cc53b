"""Leasing GPU devices to local jobs, and standing aside when a scheduler already isolates them.

Snakemake's ``--resources gpu=N`` counts GPUs but does not say which ones a local job may use, and
vLLM takes ~90% of a device's memory by default, so two jobs on one device fail. A GPU job on a
machine without a scheduler therefore leases devices, one lock file per device (``flock``, released
by the kernel even when the job is killed), and sets ``CUDA_VISIBLE_DEVICES`` to them. This must
happen before torch or vLLM is imported: CUDA reads the variable once, when it initializes. So this
module never imports torch.

Under SLURM or Kubernetes the scheduler has already given the job its own devices, and renumbered
them (a job given physical GPU 1 sees ``CUDA_VISIBLE_DEVICES=0``): leasing by index there would make
two jobs on one node wait for each other's "GPU 0". So when a scheduler's allocation is exactly what
the job asked for, nothing is leased (see :func:`scheduler_isolation`). When leasing, lock files are
named by the GPU's UUID (from ``nvidia-smi``), which no renumbering changes, and live in a node-local
folder by default.

A lease ends only after every engine or encoder created under it has been closed (their ``close()``
shuts vLLM down and frees CUDA memory; see :func:`close_before_release`), so the next job never finds
a "free" device still holding the previous job's weights.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ENV = "CUDA_VISIBLE_DEVICES"
# auto (default): lease unless a scheduler isolates the job's devices; always; never.
LEASE_MODE_ENV = "LLM_UTILITY_GPU_LEASE"
LEASE_MODES = ("auto", "always", "never")
# Seconds a job waits for devices before giving up (unset: it waits as long as it takes). An
# environment variable, not a config key: where and how long a job waits does not change its results.
TIMEOUT_ENV = "LLM_UTILITY_GPU_LEASE_TIMEOUT"
# Errors a file system without working flock gives (NFS without lockd, some FUSE and Lustre mounts).
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}

log = logging.getLogger(__name__)


class GpuLeaseError(RuntimeError):
    """A lease that cannot work here (too few devices, or lock files that cannot be locked)."""


def default_lock_dir() -> Path:
    """The node-local folder for lock files: every job on this machine sees it, no other machine does."""
    return Path(tempfile.gettempdir()) / "llm-utility-gpu-locks"


def _nvidia_smi(*args: str) -> list[str] | None:
    """Output lines of ``nvidia-smi args``, or None when it is missing or fails."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def visible_devices(n_devices: int | None = None) -> list[str]:
    """The device ids a job on this machine may use, in order.

    ``n_devices`` given: ids 0..n_devices-1. Otherwise the ids already in ``CUDA_VISIBLE_DEVICES``
    when it is set (a scheduler such as SLURM may have set it to this job's allocation; set but
    empty means no GPU), else one id per GPU that ``nvidia-smi -L`` lists, else none.
    """
    if n_devices is not None:
        return [str(i) for i in range(n_devices)]
    current = os.environ.get(ENV)
    if current is not None:  # set, even empty (which hides every GPU)
        return [d.strip() for d in current.split(",") if d.strip()]
    listing = _nvidia_smi("-L") or []
    return [str(i) for i, _ in enumerate(ln for ln in listing if ln.startswith("GPU "))]


def check_visible_gpus(wanted: int, who: str) -> None:
    """Raise GpuLeaseError when this job sees fewer GPUs than ``wanted`` (a model's ``gpu`` setting).

    Snakemake lowers a job's ``gpu`` resource to the ``--resources gpu=N`` cap without a word, so a
    two-GPU model run under ``gpu=1`` would lease one device and fail deep inside vLLM. Only a set
    ``CUDA_VISIBLE_DEVICES`` (a lease's or a scheduler's) says how many devices the job has."""
    current = os.environ.get(ENV)
    if wanted <= 0 or current is None:
        return
    seen = [d for d in current.split(",") if d.strip()]
    if len(seen) < wanted:
        raise GpuLeaseError(
            f"{who} needs {wanted} GPU(s) but this job sees {len(seen)} ({ENV}={current!r}). Snakemake "
            f"caps a job's gpu resource at --resources gpu=N: run with gpu={wanted} or more."
        )


def device_uuids(devices: list[str]) -> dict[str, str]:
    """Map each device id (an index, or already a ``GPU-``/``MIG-`` UUID) to its UUID where known.

    Indices are looked up in ``nvidia-smi --query-gpu=index,uuid``; ids it does not list (or all of
    them, without nvidia-smi) are left out, and the caller falls back to a host-and-index name.
    """
    known = {d: d for d in devices if d.startswith(("GPU-", "MIG-"))}
    indices = [d for d in devices if d not in known]
    if indices:
        table = {}
        for line in _nvidia_smi("--query-gpu=index,uuid", "--format=csv,noheader") or []:
            index, _, uuid = (part.strip() for part in line.partition(","))
            if uuid:
                table[index] = uuid
        known.update({d: table[d] for d in indices if d in table})
    return known


def scheduler_isolation(n: int, env: Mapping[str, str] | None = None) -> str | None:
    """The scheduler that gave this job exactly its ``n`` devices, or None when the job must lease.

    SLURM is recognised by ``SLURM_JOB_ID``, Kubernetes by ``KUBERNETES_SERVICE_HOST`` (set in every
    pod). Both isolate a job's GPUs: SLURM through its GPU allocation (``CUDA_VISIBLE_DEVICES``,
    cgroups), the NVIDIA device plugin by exposing only the pod's devices. A job that sees exactly
    the ``n`` devices it requested owns them, so it does not lease. A job that sees more (Snakemake
    running local jobs inside one multi-GPU ``salloc`` allocation or one big pod) shares them with
    its siblings and leases as on a workstation. ``LLM_UTILITY_GPU_LEASE=always`` or ``never``
    overrides the detection.
    """
    env = os.environ if env is None else env
    mode = env.get(LEASE_MODE_ENV, "auto") or "auto"
    if mode not in LEASE_MODES:
        raise GpuLeaseError(f"{LEASE_MODE_ENV}={mode!r}; expected one of {LEASE_MODES}")
    if mode != "auto":
        return None if mode == "always" else f"{LEASE_MODE_ENV}=never"
    scheduler = job_scheduler(env)
    if scheduler is None:
        return None
    return scheduler if len(visible_devices()) == n else None


def job_scheduler(env: Mapping[str, str] | None = None) -> str | None:
    """The scheduler this process runs under, by the variable it sets in every job: ``SLURM_JOB_ID``
    (SLURM), ``KUBERNETES_SERVICE_HOST`` (every Kubernetes pod); None outside one."""
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID"):
        return "SLURM"
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "Kubernetes"
    return None


# ---------------------------------------------------------------------------------------------------
# Closing engines before the devices are released

# One list per active lease (innermost last): objects whose close() must run before its locks go.
_closers: list[list[Any]] = []


def close_before_release(obj: Any) -> None:
    """Have the innermost active lease call ``obj.close()`` before it releases its devices.

    Generators and encoders register themselves when they are created, so a job's ``with
    lease_gpus(...)`` block never hands its devices on while an engine (vLLM's worker processes,
    CUDA memory cached by torch) still occupies them. Outside a lease this does nothing.
    """
    if _closers:
        _closers[-1].append(obj)


def _close_all(objs: list[Any]) -> None:
    for obj in reversed(objs):
        try:
            obj.close()
        except Exception:  # one engine failing to shut down must not keep the others up
            log.exception("closing %r before releasing its GPUs failed", obj)
    objs.clear()
    gc.collect()


# ---------------------------------------------------------------------------------------------------
# Lock files


def _open_lock_file(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file: flock works on a read-only descriptor too
        return os.open(path, os.O_RDONLY)


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive lock on ``path``, or None if another process holds it."""
    fd = _open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as err:
        os.close(fd)
        if err.errno in _NO_FLOCK:
            raise GpuLeaseError(
                f"cannot lock {path}: the file system of {path.parent} does not support flock "
                f"({os.strerror(err.errno)}). Point `gpu_lock_dir` at a node-local folder (the default, "
                f"{default_lock_dir()}, is one), or set {LEASE_MODE_ENV}=never when a scheduler "
                "already gives each job its own GPUs."
            ) from err
        raise
    # For people looking at the lock directory: who holds it. The lock is what counts, not the text.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.write(fd, f"{socket.gethostname()} pid {os.getpid()}\n".encode())
    return fd


def _holders(paths: list[Path]) -> str:
    notes = []
    for path in paths:
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace").strip()
            if text:
                notes.append(f"{path.name}: {text}")
    return "; ".join(notes) or "unknown"


def _release(fds: list[int]) -> None:
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    fds.clear()


def _lock_names(devices: list[str], n_devices: int | None) -> dict[str, str]:
    """Lock file name per device: its UUID where known, else this host's name and the index."""
    uuids = {} if n_devices is not None else device_uuids(devices)
    host = socket.gethostname()
    return {d: f"{uuids[d]}.lock" if d in uuids else f"{host}-gpu{d}.lock" for d in devices}


def _prepare_lock_dir(lock_dir: str | os.PathLike | None) -> Path:
    path = Path(lock_dir) if lock_dir else default_lock_dir()
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        if not lock_dir:  # the shared default: let every user of the machine create lock files
            with contextlib.suppress(OSError):
                path.chmod(0o1777)
    return path


@contextlib.contextmanager
def lease_gpus(
    n: int,
    lock_dir: str | os.PathLike | None = None,
    n_devices: int | None = None,
    timeout: float | None = None,
    poll: float = 1.0,
    log_every: float = 60.0,
) -> Iterator[list[str]]:
    """Hold ``n`` devices for the ``with`` block; yield their ids (as ``CUDA_VISIBLE_DEVICES`` names them).

    Under a scheduler that isolates the job's devices (:func:`scheduler_isolation`) nothing is
    locked and the allocation is yielded as it is. Otherwise devices are tried in order; until ``n``
    are free at once, the job releases what it got and polls every ``poll`` seconds (holding some
    while waiting for more could deadlock two jobs), logging who holds them every ``log_every``
    seconds. Lock files are ``<GPU UUID>.lock`` in ``lock_dir`` (default: :func:`default_lock_dir`).
    Inside the block ``CUDA_VISIBLE_DEVICES`` names the leased ids; on exit every engine registered
    with :func:`close_before_release` is closed, then the environment is restored and the locks
    released. ``n == 0`` does nothing (a CPU job).

    Raises GpuLeaseError when fewer than ``n`` devices exist or the lock folder cannot be locked,
    TimeoutError after ``timeout`` seconds without ``n`` free devices (None: the
    ``LLM_UTILITY_GPU_LEASE_TIMEOUT`` environment variable, else no limit).
    """
    if n <= 0:
        yield []
        return
    if timeout is None and os.environ.get(TIMEOUT_ENV):
        try:
            timeout = float(os.environ[TIMEOUT_ENV])
        except ValueError:
            raise GpuLeaseError(f"{TIMEOUT_ENV}={os.environ[TIMEOUT_ENV]!r} is not a number of seconds") from None
    devices = visible_devices(n_devices)
    if n > len(devices):
        raise GpuLeaseError(
            f"this job needs {n} GPU(s) but {len(devices)} are visible "
            f"({ENV}={os.environ.get(ENV)!r}, nvidia-smi {'found' if shutil.which('nvidia-smi') else 'not found'}); "
            "lower the model's `gpu` or run where GPUs are available"
        )
    scheduler = scheduler_isolation(n) if n_devices is None else None
    fds: list[int] = []
    previous = os.environ.get(ENV)
    previous_order = os.environ.get("CUDA_DEVICE_ORDER")
    if scheduler:
        log.info("%s gave this job its own GPU(s) %s: no lease", scheduler, devices)
        leased = devices
    else:
        leased = _acquire(n, devices, _prepare_lock_dir(lock_dir), n_devices, timeout, poll, log_every, fds)
        os.environ[ENV] = ",".join(leased)
        if previous is None and n_devices is None:
            # The ids came from nvidia-smi, which numbers devices in PCI bus order; make CUDA agree.
            os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    _closers.append([])
    try:
        yield leased
    finally:
        _close_all(_closers.pop())
        for name, value in ((ENV, previous), ("CUDA_DEVICE_ORDER", previous_order)):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _release(fds)


def _acquire(
    n: int,
    devices: list[str],
    lock_dir: Path,
    n_devices: int | None,
    timeout: float | None,
    poll: float,
    log_every: float,
    fds: list[int],
) -> list[str]:
    """Lock ``n`` of ``devices`` (fds appended to ``fds``); return their ids."""
    names = _lock_names(devices, n_devices)
    paths = {d: lock_dir / names[d] for d in devices}
    started = time.monotonic()
    next_log = started
    leased: list[str] = []
    while True:
        for device in devices:
            fd = _try_lock(paths[device])
            if fd is not None:
                fds.append(fd)
                leased.append(device)
                if len(leased) == n:
                    log.info("leased GPU(s) %s (locks %s)", leased, [paths[d].name for d in leased])
                    return leased
        _release(fds)
        leased.clear()
        waited = time.monotonic() - started
        if timeout is not None and waited >= timeout:
            raise TimeoutError(
                f"gave up after {waited:.0f} s waiting for {n} free GPU(s) among {devices}: held by "
                f"{_holders(list(paths.values()))} (lock files in {lock_dir}). Wait for those jobs, stop "
                "them, or run fewer GPU jobs at once (snakemake --resources gpu=N)."
            )
        if time.monotonic() >= next_log:
            log.info(
                "waiting for %d free GPU(s) among %s for %.0f s; held by %s",
                n,
                devices,
                waited,
                _holders(list(paths.values())),
            )
            next_log += log_every
        time.sleep(poll)
