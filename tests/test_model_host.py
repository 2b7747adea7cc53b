"""Model hosts (llm_utility.generation.host): a job's model kept loaded in a process of its own.

The hosted generator must give what the job's own generator gives, whatever the host computed
before, and the hosts must come and go as the module says: one per slot, reused, idle ones gone,
dead ones replaced.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from llm_utility.generation import PromptTooLongError, load_generator, materialize
from llm_utility.generation.host import HOST_DIR_ENV, KERNEL_ENV, HostedGenerator, host_dir, host_key
from llm_utility.generation.specs import normalize_spec
from test_hf_backend import QUESTIONS, REPO, SPECS

SPEC = {**SPECS["smollm2-135m"], "dtype": "auto"}  # the demo's arithmetic, which hosts run in demo


@pytest.fixture()
def hosts(tmp_path, monkeypatch):
    monkeypatch.setenv(HOST_DIR_ENV, str(tmp_path / "hosts"))
    return tmp_path / "hosts"


@pytest.fixture(scope="module")
def manifest():
    return materialize("smollm2-135m", SPECS["smollm2-135m"], REPO / "resources" / "models" / "smollm2-135m")


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds (a zombie has ended: the host is a child
    of this test's process, which does not wait for it, as a job does not)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_a_hosts_name_changes_with_anything_that_changes_its_outputs(monkeypatch):
    manifest = {"slug": "m", "fingerprint": "f", "load_path": "/m"}
    for name in KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    base = host_key(manifest, SPEC, 1)
    assert base == host_key(dict(manifest), dict(SPEC), 1)
    assert base != host_key(manifest, SPEC, 2)
    assert base != host_key({**manifest, "fingerprint": "g"}, SPEC, 1)
    assert base != host_key(manifest, {**SPEC, "dtype": "float32"}, 1)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # torch's kernels capped: other numbers
    assert base != host_key(manifest, SPEC, 1)


def test_keep_loaded_is_for_the_transformers_backend_on_a_cpu_only():
    assert normalize_spec({**SPEC, "keep_loaded": 5})["keep_loaded"] == 5
    with pytest.raises(ValueError, match=r"llms\.m\.keep_loaded.*gpu 1"):
        normalize_spec({**SPEC, "keep_loaded": 5, "gpu": 1}, "m")
    with pytest.raises(ValueError, match=r"keep_loaded.*'vllm'"):
        normalize_spec({**SPEC, "keep_loaded": 5, "backend": "vllm"}, "m")


def test_the_host_folder_must_be_private(hosts):
    hosts.mkdir(mode=0o755)
    hosts.chmod(0o755)
    with pytest.raises(PermissionError, match="private"):
        host_dir()


@pytest.mark.slow
def test_a_hosted_model_answers_as_the_jobs_own_model_after_other_work(manifest, hosts):
    local = load_generator(manifest, SPEC, threads=1)
    prompts = [local.render(q) for q in QUESTIONS]
    pairs = [(prompts[0], " Paris"), ("", QUESTIONS[3])]
    expected = (local.generate(prompts, 12, ["\n"]), local.score(pairs), local.count_tokens(prompts))
    with load_generator(manifest, {**SPEC, "keep_loaded": 30}, threads=1) as hosted:
        assert isinstance(hosted, HostedGenerator)
        # Other calls first, in another order: the host's outputs must not depend on its history.
        hosted.generate(prompts[::-1][:3], 5, [])
        hosted.score(pairs[::-1])
        got = (hosted.generate(prompts, 12, ["\n"]), hosted.score(pairs), hosted.count_tokens(prompts))
        assert got == expected
        assert [hosted.render(q) for q in QUESTIONS] == prompts
        assert hosted.encode(prompts[1]) == local.encode(prompts[1])
        ids = hosted.tokenizer("Oslo is a city", add_special_tokens=False)["input_ids"]
        assert ids == local.tokenizer("Oslo is a city", add_special_tokens=False)["input_ids"]
        assert hosted.tokenizer.decode(ids) == "Oslo is a city"
        assert (hosted.dtype, hosted.store_key_extras(), hosted.context_length, hosted.fingerprint) == (
            local.dtype,
            local.store_key_extras(),
            local.context_length,
            local.fingerprint,
        )
        # The host's error, raised in the job as its own type; the host serves on.
        with pytest.raises(PromptTooLongError, match="exceeds the model's context"):
            hosted.check_fits(prompts[:1], ["q1"], 10**7)
        assert hosted.count_tokens(prompts[:1]) == expected[2][:1]


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST"])
def test_no_host_in_a_job_of_a_scheduler(manifest, hosts, monkeypatch, caplog, variable):
    """A host outlives the job that starts it: in a scheduler's job the model is the job's own."""
    monkeypatch.setenv(variable, "4711")
    with caplog.at_level("INFO", logger="llm_utility"):
        generator = load_generator(manifest, {**SPEC, "keep_loaded": 30}, threads=1)
    assert not isinstance(generator, HostedGenerator)
    assert not hosts.exists() or not any(hosts.iterdir())  # no host was started
    assert "keep_loaded is off under" in caplog.text


@pytest.mark.slow
def test_jobs_side_by_side_get_a_host_each_and_later_jobs_reuse_them(manifest, hosts):
    spec = {**SPEC, "keep_loaded": 2}
    first = load_generator(manifest, spec, threads=1)
    second = load_generator(manifest, spec, threads=1)  # while the first runs: slot 1, a host of its own
    assert (first.slot, second.slot) == (0, 1) and first.host_pid != second.host_pid
    first.close()
    third = load_generator(manifest, spec, threads=1)
    assert third.slot == 0 and third.host_pid == first.host_pid  # reused: no second load
    third.close()
    second.close()
    # Idle for keep_loaded seconds, each host leaves, and takes its socket with it.
    assert _gone(first.host_pid, 15) and _gone(second.host_pid, 15)
    assert not list(hosts.glob("*.sock"))


@pytest.mark.slow
def test_a_host_that_dies_fails_its_job_clearly_and_the_next_job_starts_another(manifest, hosts):
    spec = {**SPEC, "keep_loaded": 30}
    job = load_generator(manifest, spec, threads=1)
    prompt = job.render(QUESTIONS[0])
    os.kill(job.host_pid, signal.SIGKILL)
    assert _gone(job.host_pid, 10)
    with pytest.raises(RuntimeError, match=r"stopped during count_tokens: see its log, .*-0\.log"):
        job.count_tokens([prompt])
    job.close()
    again = load_generator(manifest, spec, threads=1)  # the dead host's socket is still there
    try:
        assert again.slot == 0 and again.host_pid != job.host_pid
        assert again.count_tokens([prompt]) == [len(again.encode(prompt))]
    finally:
        again.close()
        os.kill(again.host_pid, signal.SIGTERM)
