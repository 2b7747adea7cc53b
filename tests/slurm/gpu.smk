# Two jobs for tests/test_slurm.py, run through profiles/slurm: one whose rule asks for a GPU and one
# that asks for none. Each writes where SLURM put it: its partition, the devices it sees, its job id.


rule all:
    input:
        "on_gpu.txt",
        "on_cpu.txt",


rule on_gpu:
    output:
        "on_gpu.txt",
    log:
        "logs/on_gpu.log",
    threads: 1
    resources:
        gpu=1,
        mem_mb=500,
        runtime=5,
    shell:
        "echo partition=$SLURM_JOB_PARTITION devices=${{CUDA_VISIBLE_DEVICES:-}} job=$SLURM_JOB_ID > {output} 2> {log}"


rule on_cpu:
    output:
        "on_cpu.txt",
    log:
        "logs/on_cpu.log",
    threads: 2
    resources:
        mem_mb=700,
        runtime=5,
    shell:
        "echo partition=$SLURM_JOB_PARTITION devices=${{CUDA_VISIBLE_DEVICES:-}} job=$SLURM_JOB_ID > {output} 2> {log}"
