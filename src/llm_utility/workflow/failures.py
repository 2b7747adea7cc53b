"""What a failed run's jobs died of, read from Snakemake's log and the scheduler's job logs, in one
line per job: today the jobs SLURM killed for exceeding their memory.

A job that SLURM kills for its memory fails like any other ("SLURM-job '12' failed, SLURM status is:
'FAILED'"); that it was the memory, and how much the job had reached, is written only in the job's
SLURM log (slurmstepd: "StepId=12.0 exceeded memory limit (2147483648 > 1048576000), being killed").
``memory_kills`` joins the two so the run can say which rule and job it was and what it needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Snakemake's report of a failed job, and its description of the job when it was started.
_ERROR = re.compile(r"^Error in rule (?P<rule>\S+):\n(?P<body>(?:[ \t]+.*\n?)+)", re.MULTILINE)
_STARTED = re.compile(r"^(?:local)?rule (?P<rule>\S+):\n(?P<body>(?:[ \t]+.*\n?)+)", re.MULTILINE)
_FIELD = re.compile(r"^[ \t]+(?P<key>[a-z_]+): (?P<value>.*)$", re.MULTILINE)
# slurmstepd's line when JobAcctGatherParams=OverMemoryKill (or cgroups) ends a step; bytes.
_EXCEEDED = re.compile(r"exceeded memory limit \((?P<used>\d+) > (?P<limit>\d+)\)")
MB = 1024 * 1024


@dataclass(frozen=True)
class MemoryKill:
    """One job SLURM killed for its memory: ``used_mb`` is what it had reached when it was killed
    (so it needs more), ``limit_mb`` what it had asked for."""

    rule: str
    jobid: str
    slurm_jobid: str
    used_mb: int
    limit_mb: int
    wildcards: str = ""

    def config_key(self) -> str:
        """The configuration key that sets this job's memory."""
        llm = re.search(r"(?:^|, )llm=([^,]+)", self.wildcards)
        if llm:
            return f"llms.{llm.group(1)}.mem_mb (or resources.llm.mem_mb for every LLM)"
        return "resources.<kind>.mem_mb of its kind of job (docs/configuration.md, `resources`)"

    def message(self) -> str:
        where = f" ({self.wildcards})" if self.wildcards else ""
        return (
            f"rule {self.rule}{where}, job {self.jobid} (SLURM job {self.slurm_jobid}), was killed by SLURM for "
            f"exceeding its memory: it had reached {self.used_mb:,} MB of the {self.limit_mb:,} MB it asked for "
            f"(mem_mb). It needs more than {self.used_mb:,} MB: raise {self.config_key()}."
        )


def _fields(body: str) -> dict[str, str]:
    return {m["key"]: m["value"].strip() for m in _FIELD.finditer(body)}


def memory_kills(snakemake_logs: str | Path | Iterable[str | Path]) -> list[MemoryKill]:
    """The jobs of the run logged in ``snakemake_logs`` (Snakemake's main log files, as its
    ``onerror`` handler gets them) that SLURM killed for exceeding their memory, in the order their
    failures were logged."""
    paths = [snakemake_logs] if isinstance(snakemake_logs, str | Path) else list(snakemake_logs)
    text = "\n".join(Path(p).read_text(encoding="utf-8", errors="replace") for p in paths if Path(p).is_file())
    started = {}
    for m in _STARTED.finditer(text):
        fields = _fields(m["body"])
        if "jobid" in fields:
            started[fields["jobid"]] = fields.get("wildcards", "")
    kills = []
    for m in _ERROR.finditer(text):
        fields = _fields(m["body"])
        slurm_jobid = fields.get("external_jobid")
        if not slurm_jobid:
            continue
        logs = re.sub(r"\s*\(check log file\(s\) for error details\)$", "", fields.get("log", ""))
        for path in (p.strip() for p in logs.split(",")):
            if not path.endswith(f"{slurm_jobid}.log") or not Path(path).is_file():
                continue
            exceeded = list(_EXCEEDED.finditer(Path(path).read_text(encoding="utf-8", errors="replace")))
            if exceeded:
                used = max(int(e["used"]) for e in exceeded)
                limit = int(exceeded[-1]["limit"])
                jobid = fields.get("jobid", "?")
                kills.append(
                    MemoryKill(m["rule"], jobid, slurm_jobid, -(-used // MB), limit // MB, started.get(jobid, ""))
                )
                break
    return kills
