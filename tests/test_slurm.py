"""The cluster path on a real scheduler: a one-node SLURM 22.05 from Debian's packages
(tests/slurm/cluster.sh), started for this module and stopped after it, runs the workflow through
`profiles/slurm` exactly as a cluster user would (the profile's own settings; only the plugin's first
status check is brought forward, since its default of 40 s would cost minutes here).

What it shows, on a slice of the demo (one dataset, end to end, to Table 1, with a tiny LLM in the
demo's settings and the demo's `resources`):
- every result file equals a local run's, byte for byte, although a model job was cancelled mid-way
  (`scancel`) and a data job requeued (`scontrol requeue`) while they ran; the cancelled job's retry
  recomputed nothing the killed one had stored, the requeued one finished once;
- every job got the partition, CPUs and memory its rule declares (`scontrol show job`), a job whose
  rule asks for a GPU landed on the `gpu` partition with one device, and the jobs' logs are where
  docs/cluster.md says;
- no model host (`keep_loaded`, which the demo sets) outlives the run;
- a job that exceeds its memory is killed by SLURM and the run names the rule, the job and the memory;
- two model jobs of one LLM on one store at once (two workflows sharing `store_dir`) make each call once;
- job status works without accounting (`squeue`, the profile's) and with slurmdbd (`sacct`).

A test that cannot get its cluster fails; it does not skip. Every scheduler run has a timeout that
sends SIGINT (a run waiting on jobs does not stop on SIGTERM).
"""

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from llm_utility.generation.host import HOST_DIR_ENV
from tiny_models import write_tiny_model
from workflow_runner import REPO, snakemake_cmd

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
GPU_SNAKEFILE = REPO / "tests" / "slurm" / "gpu.smk"
PROFILE = REPO / "profiles" / "slurm"
LLM = "tiny-chat"
DATASET = "wf-single"
TABLE1 = ["results/tables/table1_rag.md", "results/tables/table1_rag.csv", "results/tables/table1_rag.tex"]
# The model job whose calls this module watches: every passage of U alone, and no passage.
CANDIDATES = "answer_candidates"
# The job requeued while it runs.
REQUEUED = "prepare_queries"
# The plugin's first status check after a submission (its default, 40 s, costs minutes on a chain of
# short jobs); it then waits 10 s longer after every check that finds no job finished.
FAST_POLLING = ("--slurm-init-seconds-before-status-checks", "1")
RUN_TIMEOUT = 480


# --- the cluster ----------------------------------------------------------------------------------
def _cluster(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLUSTER), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    home = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "LLM_UTILITY_SLURM_DIR": str(home)}
    started = _cluster(env, "start")
    assert started.returncode == 0, f"no SLURM for the tests: {started.stderr[-3000:]}"
    env["SLURM_CONF"] = str(home / "slurm.conf")
    cluster = SimpleNamespace(home=home, env=env)
    yield cluster
    stopped = _cluster(env, "stop")
    assert stopped.returncode == 0, stopped.stderr
    left = [p.name for p in home.glob("*.pid")]
    assert not left, f"daemons left running: {left}"


def _scontrol_job(cluster, jobid: str) -> dict[str, str]:
    """``scontrol show job -d``'s fields (the last value of a repeated name)."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-d", jobid], env=cluster.env, capture_output=True, text=True, check=True
    ).stdout
    return dict(re.findall(r"(\w[\w:/]*)=(\S*)", out))


def _squeue(cluster) -> list[tuple[str, str, str]]:
    """(job id, state, comment) of every job SLURM still lists."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%T|%k"], env=cluster.env, capture_output=True, text=True
    ).stdout
    return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") >= 2]


def _run(cluster, workdir: Path, *args: str, snakefile: Path = REPO / "Snakefile") -> subprocess.Popen:
    """Snakemake through profiles/slurm in ``workdir``, in the background (targets before
    --configfile, which takes every word after it)."""
    cmd = snakemake_cmd("--snakefile", str(snakefile), "--directory", str(workdir), "--profile", str(PROFILE))
    return subprocess.Popen(
        [*cmd, *FAST_POLLING, *args],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = RUN_TIMEOUT) -> tuple[int, str]:
    """Wait for a run; past ``timeout`` it gets SIGINT (then, a minute on, SIGKILL) and the test fails."""
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"the run did not end in {timeout} s (stopped with SIGINT):\n{out[-4000:]}")


def _run_local(workdir: Path, *args: str) -> tuple[int, str]:
    cmd = snakemake_cmd("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2", *args)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    return out.returncode, out.stdout + out.stderr


# --- the slice ------------------------------------------------------------------------------------
def _slice_config(workdir: Path, models: Path, **llm: object) -> Path:
    """One demo dataset, end to end, on a tiny LLM in the demo's settings (its arithmetic, threads,
    limits and `keep_loaded`), with the demo's own `resources`. One call per store batch, so that a
    model job commits call by call and can be stopped between two."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["prompts"] = [str(REPO / p) for p in cfg["prompts"]]
    demo = cfg["llms"]["smollm2-135m"]
    spec = {k: v for k, v in demo.items() if k not in ("weights", "family", "prompt_format")}
    cfg["llms"] = {
        LLM: {
            **spec,
            "weights": {"path": str(models / LLM)},
            "prompt_format": "chat",
            "family": "tiny-llama",
            "batch_size": 1,
            **llm,
        }
    }
    cfg["corpora"]["worldfacts"].update(n_cities=20, n_countries=40)
    cfg["datasets"] = {DATASET: {**cfg["datasets"][DATASET], "n_queries": 4}}
    cfg["retrievers"] = {"minilm": cfg["retrievers"]["minilm"]}
    cfg["top_k"] = 3
    path = workdir / "slice.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-models")
    # Wide enough that a call takes tens of milliseconds: the cancel below lands between two calls.
    write_tiny_model(root / LLM, "llama", hidden_size=256, layers=4)
    return root


def _result_files(workdir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(workdir)): p.read_bytes()
        for p in sorted((workdir / "results").rglob("*"))
        if p.is_file() and p.name != "cost.csv" and p.name != "cost.md"
    }


def _store_keys(store: Path) -> dict[str, list[str]]:
    """Each shard's keys (of calls, not leases), read with sqlite3 itself."""
    keys = {}
    for path in sorted(store.glob("*.sqlite")):
        db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            keys[path.name] = [k for (k,) in db.execute("SELECT key FROM calls")]
        finally:
            db.close()
    return keys


def _store_stats(workdir: Path, rule: str) -> list[dict]:
    import json

    log = workdir / "logs" / rule / DATASET / f"{LLM}.log"
    return [json.loads(m) for m in re.findall(r"store_stats (\{.*\})", log.read_text())]


def _made(stats: dict) -> int:
    return sum(kind["made"] for kind in stats["calls"].values())


def _served(stats: dict) -> int:
    return sum(kind["served"] for kind in stats["calls"].values())


class _Faults(threading.Thread):
    """While the slice runs: cancel the candidates' model job once it has stored a few calls and is
    still running (`scancel`), and requeue the queries' preparation while it runs (`scontrol
    requeue`; a requeued job waits out SLURM's cred_expire before it starts again, and this one runs
    beside the corpus's encoding and index, off the run's longest chain)."""

    def __init__(self, cluster, workdir: Path):
        super().__init__(daemon=True)
        self.cluster, self.workdir = cluster, workdir
        self.store = workdir / "resources" / "cache" / "generation" / LLM
        self.cancelled: dict = {}
        self.requeued: dict = {}
        self.done = threading.Event()
        self.error: str | None = None

    def _job(self, rule: str, state: str = "RUNNING") -> str | None:
        """A job of ``rule`` of this run (its SLURM log is in the run's folder) in ``state``."""
        for jobid, job_state, comment in _squeue(self.cluster):
            if comment.startswith(f"rule_{rule}_") and job_state == state:
                if _scontrol_job(self.cluster, jobid).get("StdOut", "").startswith(str(self.workdir)):
                    return jobid
        return None

    def _stored(self, rule: str) -> int:
        rows = 0
        for path in self.store.glob(f"{rule}+*.open.sqlite"):
            try:
                db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.05)
                rows += db.execute("SELECT count(*) FROM calls").fetchone()[0]
                db.close()
            except sqlite3.Error:
                pass
        return rows

    def run(self) -> None:
        try:
            while not self.done.is_set() and not (self.cancelled and self.requeued):
                if not self.cancelled:
                    jobid = self._job(CANDIDATES)
                    if jobid and self._stored(CANDIDATES) >= 3:
                        subprocess.run(["scancel", jobid], env=self.cluster.env, check=True)
                        # Still open: the job had not finished when it was cancelled.
                        self.cancelled = {"jobid": jobid, "open": any(self.store.glob(f"{CANDIDATES}+*.open.sqlite"))}
                if not self.requeued:
                    jobid = self._job(REQUEUED)
                    if jobid:
                        subprocess.run(["scontrol", "requeue", jobid], env=self.cluster.env, check=True)
                        self.requeued = {"jobid": jobid}
                time.sleep(0.02)
        except Exception as err:  # noqa: BLE001 - reported by the test
            self.error = repr(err)


@pytest.fixture(scope="module")
def slice_runs(slurm, models, tmp_path_factory):
    """Everything that can run at once does: the slice through SLURM (with the faults), a GPU rule
    through SLURM, MariaDB and slurmdbd coming up for the accounting test, the slice locally and,
    once that has made the data, a model job over its memory through SLURM."""
    local = tmp_path_factory.mktemp("slice-local")
    remote = tmp_path_factory.mktemp("slice-slurm")
    gpu = tmp_path_factory.mktemp("gpu-rule")
    memory = tmp_path_factory.mktemp("over-memory")
    local_cfg, remote_cfg = _slice_config(local, models), _slice_config(remote, models)
    # Model hosts the SLURM run's jobs would start go here (this run's own folder); the local run,
    # as `make demo` does, starts hosts, which idle for a while after it.
    hosts = tmp_path_factory.mktemp("hosts") / "slurm-run"
    remote_env = SimpleNamespace(env={**slurm.env, HOST_DIR_ENV: str(hosts)})
    started = time.monotonic()
    accounting = subprocess.Popen(
        [str(CLUSTER), "accounting-db"], env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    faults = _Faults(slurm, remote)
    faults.start()
    proc = _run(remote_env, remote, *TABLE1, "--configfile", str(remote_cfg))
    gpu_proc = _run(slurm, gpu, snakefile=GPU_SNAKEFILE)
    local_rc, local_out = _run_local(local, *TABLE1, "--configfile", str(local_cfg))
    local_seconds = time.monotonic() - started
    assert local_rc == 0, local_out[-4000:]
    _copy_inputs(local, memory)
    memory_cfg = _slice_config(memory, models, mem_mb=150)  # below what importing torch takes
    memory_proc = _run(
        slurm,
        memory,
        f"results/{DATASET}/{LLM}/answers/none.parquet",
        "--retries",
        "0",
        "--configfile",
        str(memory_cfg),
    )
    gpu_rc, gpu_out = _finish(gpu_proc)
    memory_rc, memory_out = _finish(memory_proc)
    rc, out = _finish(proc)
    seconds = time.monotonic() - started
    faults.done.set()
    faults.join(5)
    accounting_out, _ = accounting.communicate(timeout=300)
    return SimpleNamespace(
        local=local,
        remote=remote,
        gpu=gpu,
        rc=rc,
        out=out,
        gpu_rc=gpu_rc,
        gpu_out=gpu_out,
        memory_rc=memory_rc,
        memory_out=memory_out,
        accounting_rc=accounting.returncode,
        accounting_out=accounting_out,
        faults=faults,
        hosts=hosts,
        seconds=seconds,
        local_seconds=local_seconds,
    )


def test_the_slice_through_slurm_equals_a_local_run(slice_runs):
    s = slice_runs
    assert s.rc == 0, s.out[-6000:]
    print(f"slice: {s.seconds:.0f} s through SLURM, {s.local_seconds:.0f} s locally")
    local, remote = _result_files(s.local), _result_files(s.remote)
    assert any(name.endswith("gold_U.parquet") for name in local) and "results/tables/table1_rag.md" in local
    assert sorted(remote) == sorted(local)
    differ = [name for name in local if local[name] != remote[name]]
    assert not differ, f"differ from the local run: {differ}"


def _submitted(out: str) -> dict[str, dict]:
    """Each job Snakemake submitted, by SLURM job id: its rule, wildcards, threads and resources as
    Snakemake printed them when it started the job."""
    blocks = {}
    for m in re.finditer(r"^rule (\S+):\n((?:[ \t]+.*\n)+)", out, re.MULTILINE):
        fields = dict(re.findall(r"^[ \t]+(\w+): (.*)$", m.group(2), re.MULTILINE))
        blocks[fields["jobid"]] = {"rule": m.group(1), **fields}
    jobs = {}
    for jobid, slurm_id in re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", out):
        jobs[slurm_id] = blocks[jobid]
    return jobs


def test_each_job_got_what_its_rule_declares(slurm, slice_runs):
    s = slice_runs
    assert s.rc == 0, s.out[-3000:]
    jobs = _submitted(s.out)
    # Tables and the models' materialization are local rules (they run where Snakemake runs).
    assert {job["rule"] for job in jobs.values()} >= {"prepare_corpus", "build_index", CANDIDATES, "gold_sets"}
    demo = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for slurm_id, job in jobs.items():
        got = _scontrol_job(slurm, slurm_id)
        declared = dict(re.findall(r"(\w+)=([^,]+)", job["resources"]))
        threads = int(job.get("threads", 1))
        assert got["Partition"] == "cpu", (job["rule"], got["Partition"])
        assert int(got["NumCPUs"]) == threads, (job["rule"], got["NumCPUs"], threads)
        assert got["MinMemoryNode"] == f"{declared['mem_mb']}M", (job["rule"], got["MinMemoryNode"], declared)
        assert "gpu" not in got.get("TresPerJob", "") and got.get("TresPerNode", "(null)") in ("(null)", "")
        # The demo's resources are what SLURM was asked for.
        if job["rule"] == CANDIDATES:
            assert int(declared["mem_mb"]) == demo["resources"]["llm"]["mem_mb"]
            assert threads == demo["llms"]["smollm2-135m"]["threads"]
        if job["rule"] == "build_index":
            assert threads == demo["resources"]["index"]["threads"] and int(declared["mem_mb"]) == 2000
    # The logs: the rule's own under logs/<rule>/, SLURM's under logs/slurm/ (profiles/slurm, docs/cluster.md).
    for slurm_id, job in jobs.items():
        assert list((s.remote / "logs" / "slurm").glob(f"rule_{job['rule']}/**/{slurm_id}.log")), (
            job["rule"],
            slurm_id,
        )
    assert (s.remote / "logs" / CANDIDATES / DATASET / f"{LLM}.log").is_file()


def test_a_gpu_rule_lands_on_the_gpu_partition_with_one_device(slurm, slice_runs):
    s = slice_runs
    assert s.gpu_rc == 0, s.gpu_out[-3000:]
    on_gpu = dict(re.findall(r"(\w+)=(\S*)", (s.gpu / "on_gpu.txt").read_text()))
    on_cpu = dict(re.findall(r"(\w+)=(\S*)", (s.gpu / "on_cpu.txt").read_text()))
    assert on_gpu["partition"] == "gpu" and on_gpu["devices"] == "0", on_gpu
    assert on_cpu["partition"] == "cpu" and on_cpu["devices"] == "", on_cpu
    job = _scontrol_job(slurm, on_gpu["job"])
    assert job["Partition"] == "gpu" and (job.get("TresPerJob") or job.get("TresPerNode")) == "gres:gpu:1", job


def test_a_cancelled_model_job_recomputes_nothing_it_stored(slice_runs):
    s = slice_runs
    assert s.faults.error is None, s.faults.error
    assert s.faults.cancelled, "the candidates' model job was never seen running with stored calls"
    assert s.faults.cancelled["open"], "the job had finished before it was cancelled"
    assert s.rc == 0, s.out[-3000:]
    assert f"SLURM-job '{s.faults.cancelled['jobid']}' failed" in s.out  # its retry finished the job
    stats = _store_stats(s.remote, CANDIDATES)
    assert len(stats) == 1, stats  # the killed attempt logged no summary; its retry did
    retry = stats[0]
    local = _store_stats(s.local, CANDIDATES)[0]
    # The retry was served every call the killed job had stored, and made only the rest.
    assert _served(retry) >= 3 and _made(retry) + _served(retry) == _made(local) + _served(local)
    keys = _store_keys(s.remote / "resources" / "cache" / "generation" / LLM)
    candidates = {name: k for name, k in keys.items() if name.startswith(f"{CANDIDATES}+")}
    assert len(candidates) == 2, list(candidates)  # the killed job's shard, sealed by the retry, and the retry's
    counts = [len(k) for k in candidates.values()]
    assert sorted(counts) == sorted([_served(retry), _made(retry)])
    every = [k for ks in keys.values() for k in ks]
    assert len(every) == len(set(every)), "a call was computed twice"


def test_a_requeued_job_finishes_once(slurm, slice_runs):
    s = slice_runs
    assert s.faults.requeued, f"no {REQUEUED} job was seen running"
    assert s.rc == 0, s.out[-3000:]
    job = _scontrol_job(slurm, s.faults.requeued["jobid"])
    assert int(job["Restarts"]) >= 1 and job["JobState"] == "COMPLETED", job
    finished = re.findall(rf"Finished jobid: \d+ \(Rule: {REQUEUED}\)", s.out)
    assert len(finished) == 1 and f"Error in rule {REQUEUED}" not in s.out


def _model_hosts(host_dir: Path) -> list[int]:
    """PIDs of the processes serving model hosts from ``host_dir`` (the run's $LLM_UTILITY_HOST_DIR)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
                environ = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"llm_utility.generation.host" in cmdline and f"{HOST_DIR_ENV}={host_dir}".encode() in environ:
                pids.append(int(proc.name))
    return pids


def test_no_model_host_outlives_the_slice(slice_runs):
    s = slice_runs
    assert s.rc == 0, s.out[-3000:]
    spec = yaml.safe_load((s.remote / "slice.yaml").read_text())["llms"][LLM]
    assert spec["keep_loaded"]  # the demo's setting: hosts, were it not for the scheduler
    assert _model_hosts(s.hosts) == []
    assert not s.hosts.exists() or not any(s.hosts.iterdir())  # none was ever started
    log = (s.remote / "logs" / CANDIDATES / DATASET / f"{LLM}.log").read_text()
    assert "keep_loaded is off under SLURM" in log


def _copy_inputs(src: Path, dst: Path) -> None:
    """A workflow directory with ``src``'s results before the model jobs (data, retrieval, candidates)."""
    for name in ("results", ".snakemake/metadata", "resources/retrievers"):
        if (src / name).exists():
            shutil.copytree(src / name, dst / name, symlinks=True)
    shutil.rmtree(dst / "results" / DATASET / LLM, ignore_errors=True)
    shutil.rmtree(dst / "results" / "tables", ignore_errors=True)


def test_a_job_over_its_memory_is_killed_and_named(slurm, slice_runs):
    s = slice_runs
    assert s.memory_rc != 0
    named = re.search(
        r"Killed for its memory: rule answer_candidates \(.*llm=tiny-chat\), job \d+ \(SLURM job (\d+)\)", s.memory_out
    )
    assert named, s.memory_out[-4000:]
    used = int(re.search(r"it had reached ([\d,]+) MB of the 150 MB", s.memory_out).group(1).replace(",", ""))
    assert used > 150 and "raise llms.tiny-chat.mem_mb" in s.memory_out
    job = _scontrol_job(slurm, named.group(1))
    assert job["JobState"] in ("FAILED", "OUT_OF_MEMORY", "CANCELLED"), job["JobState"]


def test_two_model_jobs_on_one_store_make_each_call_once(slurm, slice_runs, models, tmp_path):
    """Two workflows share one store (`store_dir`) and run the same model job at the same moment: the
    node is drained until both jobs wait for it, then resumed."""
    store = tmp_path / "store"
    runs = []
    node = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"], env=slurm.env, capture_output=True, text=True
    ).stdout.split()[0]
    subprocess.run(
        ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=two-jobs-test"], env=slurm.env, check=True
    )
    try:
        for name in ("first", "second"):
            workdir = tmp_path / name
            workdir.mkdir()
            _copy_inputs(slice_runs.local, workdir)
            cfg = yaml.safe_load(_slice_config(workdir, models).read_text())
            cfg["store_dir"] = str(store)
            (workdir / "slice.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            target = f"results/{DATASET}/{LLM}/answers/none.parquet"
            runs.append((workdir, _run(slurm, workdir, target, "--configfile", str(workdir / "slice.yaml"))))
        deadline = time.monotonic() + 120
        while (
            sum(1 for _, state, c in _squeue(slurm) if c.startswith(f"rule_{CANDIDATES}_") and state == "PENDING") < 2
        ):
            assert time.monotonic() < deadline, "the two model jobs were not both submitted"
            time.sleep(0.2)
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=slurm.env, check=True)
    for workdir, proc in runs:
        rc, out = _finish(proc, timeout=240)
        assert rc == 0, out[-3000:]
    made = [_made(_store_stats(workdir, CANDIDATES)[0]) for workdir, _ in runs]
    local = _store_stats(slice_runs.local, CANDIDATES)[0]
    keys = _store_keys(store / LLM)
    every = [k for ks in keys.values() for k in ks]
    assert len(every) == len(set(every)), "a call was computed twice"
    assert sum(made) == len(every) == _made(local) + _served(local)
    assert all(m > 0 for m in made), f"the jobs did not run at once: {made}"
    for workdir, _ in runs:
        for name in ("none", "single"):
            path = f"results/{DATASET}/{LLM}/answers/{name}.parquet"
            assert (workdir / path).read_bytes() == (slice_runs.local / path).read_bytes()


def test_status_from_sacct_with_accounting(slurm, slice_runs, tmp_path):
    """Last: the cluster restarts with slurmdbd (MariaDB, started beside the slice), and a run checks
    its jobs with sacct."""
    assert slice_runs.accounting_rc == 0, slice_runs.accounting_out[-3000:]
    started = _cluster(slurm.env, "start", "--accounting")
    assert started.returncode == 0, f"no accounting: {started.stderr[-3000:]}"
    rc, out = _finish(_run(slurm, tmp_path, "--slurm-status-command", "sacct", snakefile=GPU_SNAKEFILE), timeout=240)
    assert rc == 0, out[-3000:]
    on_gpu = dict(re.findall(r"(\w+)=(\S*)", (tmp_path / "on_gpu.txt").read_text()))
    listed = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", on_gpu["job"], "-o", "JobID,State,Partition,AllocTRES"],
        env=slurm.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    jobid, state, partition, tres = listed.strip().split("|")
    assert (jobid, state, partition) == (on_gpu["job"], "COMPLETED", "gpu") and "gres/gpu=1" in tres, listed
