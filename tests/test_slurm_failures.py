"""Naming a job SLURM killed for its memory (llm_utility.workflow.failures), from logs written as
Snakemake 9 and SLURM 22.05 write them (tests/test_slurm.py makes SLURM kill one for real)."""

from llm_utility.workflow.failures import memory_kills

STARTED = """[Sat Dec  5 01:39:28 2026]
rule answer_candidates:
    input: results/wf-single/queries.parquet, results/wf-single/candidates.parquet
    output: results/wf-single/tiny-chat/answers/none.parquet
    log: logs/answer_candidates/wf-single/tiny-chat.log
    jobid: 3
    wildcards: dataset=wf-single, part_dir=, llm=tiny-chat
    resources: tmpdir=<TBD>, mem_mb=150, mem=150 MB, runtime=480, nodes=1, gpu=0

rule prepare_corpus:
    output: results/corpora/worldfacts/passages.parquet
    jobid: 7
    wildcards: corpus=worldfacts
"""


def _error(rule: str, jobid: str, slurm_id: str, slurm_log) -> str:
    return f"""[Sat Dec  5 01:39:40 2026]
Error in rule {rule}:
    message: SLURM-job '{slurm_id}' failed, SLURM status is: 'FAILED'. Detailed failure reason unavailable.
    jobid: {jobid}
    log: logs/{rule}/x.log, {slurm_log} (check log file(s) for error details)
    external_jobid: {slurm_id}
"""


def test_a_job_killed_for_its_memory_is_named_with_the_memory_and_the_key(tmp_path):
    killed = tmp_path / "6.log"
    killed.write_text(
        "slurmstepd-vm: error: StepId=6.0 exceeded memory limit (159453184 > 157286400), being killed\n"
        "slurmstepd-vm: error: StepId=6.0 exceeded memory limit (171966465 > 157286400), being killed\n"
        "slurmstepd-vm: error: Exceeded job memory limit\n"
    )
    other = tmp_path / "9.log"
    other.write_text("Traceback (most recent call last):\nValueError: not a memory problem\n")
    main = tmp_path / "snakemake.log"
    main.write_text(STARTED + _error("answer_candidates", "3", "6", killed) + _error("prepare_corpus", "7", "9", other))
    (kill,) = memory_kills([main])
    assert (kill.rule, kill.jobid, kill.slurm_jobid) == ("answer_candidates", "3", "6")
    # The largest it reached (171,966,465 bytes: 164 MiB and a byte, rounded up) and what it asked for.
    assert (kill.used_mb, kill.limit_mb) == (165, 150)
    message = kill.message()
    assert "rule answer_candidates (dataset=wf-single, part_dir=, llm=tiny-chat), job 3 (SLURM job 6)" in message
    assert "reached 165 MB of the 150 MB" in message and "raise llms.tiny-chat.mem_mb" in message


def test_a_job_without_an_llm_points_to_its_kind_of_resources(tmp_path):
    killed = tmp_path / "9.log"
    killed.write_text(
        "slurmstepd: error: StepId=9.batch exceeded memory limit (2147483648 > 1048576000), being killed\n"
    )
    main = tmp_path / "snakemake.log"
    main.write_text(STARTED + _error("prepare_corpus", "7", "9", killed))
    (kill,) = memory_kills(main)
    assert (kill.used_mb, kill.limit_mb, kill.wildcards) == (2048, 1000, "corpus=worldfacts")
    assert "resources.<kind>.mem_mb" in kill.message()


def test_other_failures_and_local_ones_are_not_memory_kills(tmp_path):
    main = tmp_path / "snakemake.log"
    # A local job's error has no external job id; a SLURM job's log may be gone.
    main.write_text(
        STARTED
        + "Error in rule table1:\n    jobid: 0\n    log: logs/table1.log (check log file(s) for error details)\n"
        + _error("answer_candidates", "3", "6", tmp_path / "missing" / "6.log")
    )
    assert memory_kills(main) == []
    assert memory_kills([tmp_path / "no-such.log"]) == []
