"""The contract with the real vLLM: the arguments our backend passes still exist and mean what we think.

Opt-in: ``make vllm-contract`` builds ``.venv-vllm-gpu`` with vLLM's GPU build pinned as ``envs/llm-vllm.yaml`` pins
it and runs this file there; no GPU is needed (nothing is loaded onto a device). In the ordinary
suite vLLM is not installed and the file is skipped, the one skip of the suite. A renamed or removed
engine argument, sampling parameter, prompt format, output field or shutdown hook fails here, before
a GPU job finds it out.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest

vllm = pytest.importorskip(
    "vllm", reason="vLLM is not installed here; `make vllm-contract` runs this file in .venv-vllm-gpu"
)

from llm_utility.generation.specs import normalize_spec  # noqa: E402
from llm_utility.generation.vllm_backend import (  # noqa: E402
    engine_kwargs,
    sampling_kwargs,
    scoring_sampling_kwargs,
)

REPO = Path(__file__).resolve().parents[1]
PAPER_LIKE = {
    "backend": "vllm",
    "weights": {"hub": "Qwen/Qwen3-32B", "revision": "9216db5781bf21249d130ec9da846c4624c16137"},
    "prompt_format": "chat",
    "dtype": "bfloat16",
    "gpu": 2,
    "max_model_len": 2048,
    "gpu_memory_utilization": 0.85,
    "max_num_seqs": 64,
}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    """A Llama-architecture config and tokenizer, small enough for vLLM to read without weights."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    root = tmp_path_factory.mktemp("tiny-llama")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 4096,
        "vocab_size": 16,
        "rms_norm_eps": 1e-5,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }
    (root / "config.json").write_text(json.dumps(config))
    words = ["<unk>", "<s>", "</s>", "what", "is", "paris"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"})
    )
    return root


def test_installed_vllm_is_the_pinned_one():
    pin = re.search(r"vllm==([\w.*]+)", (REPO / "envs" / "llm-vllm.yaml").read_text()).group(1)
    assert re.fullmatch(pin.replace(".", r"\.").replace("*", r".*"), vllm.__version__), (pin, vllm.__version__)


def test_engine_arguments_exist_and_are_taken_as_given(tiny_llama):
    spec = normalize_spec(PAPER_LIKE, "qwen3-32b")
    kwargs = engine_kwargs(str(tiny_llama), spec, "bfloat16")
    assert {"gpu_memory_utilization", "max_num_seqs", "max_model_len"} <= set(kwargs)
    args = vllm.EngineArgs(**kwargs)  # an unknown field raises TypeError
    for name, value in kwargs.items():
        assert getattr(args, name) == value, name
    # vllm.LLM takes the same names (its own parameters, or **kwargs handed on to EngineArgs).
    inspect.signature(vllm.LLM.__init__).bind(None, **kwargs)
    # The model config accepts the values (dtype, context length) for a real architecture, on any machine.
    model_config = args.create_model_config()
    assert model_config.max_model_len == 2048 and "bfloat16" in str(model_config.dtype)


def test_sampling_parameters_including_prompt_logprobs():
    greedy = vllm.SamplingParams(**sampling_kwargs(64, ["\n"]))
    assert (greedy.temperature, greedy.max_tokens, greedy.stop) == (0.0, 64, ["\n"])
    assert vllm.SamplingParams(**sampling_kwargs(8)).stop == []
    for k in (0, 1):  # likelihood scoring: the prompt tokens' log-probabilities, plus k alternatives
        scoring = vllm.SamplingParams(**scoring_sampling_kwargs(k))
        assert scoring.prompt_logprobs == k and scoring.max_tokens == 1 and scoring.temperature == 0.0
    with pytest.raises(TypeError):
        vllm.SamplingParams(max_new_tokens=3)  # the check itself: unknown names are rejected


def test_generate_call_prompt_format_and_outputs():
    params = vllm.SamplingParams(**sampling_kwargs(4))
    requests = [{"prompt_token_ids": [1, 3, 4]}]
    inspect.signature(vllm.LLM.generate).bind(None, requests, params, use_tqdm=False)
    from vllm.inputs import TokensPrompt

    assert "prompt_token_ids" in TokensPrompt.__annotations__
    from vllm.outputs import CompletionOutput, RequestOutput

    assert {"outputs", "prompt_logprobs", "prompt_token_ids"} <= set(
        inspect.signature(RequestOutput.__init__).parameters
    )
    fields = (
        {f.name for f in dataclasses.fields(CompletionOutput)}
        if dataclasses.is_dataclass(CompletionOutput)
        else set(inspect.signature(CompletionOutput.__init__).parameters)
    )
    assert {"text", "token_ids"} <= fields


def test_shutdown_and_worker_start_method_hooks():
    """What VLLMGenerator.close() and its spawn setting rely on."""
    from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel
    from vllm.v1.engine.core_client import EngineCoreClient
    from vllm.v1.engine.llm_engine import LLMEngine

    assert (
        callable(EngineCoreClient.shutdown)
        and callable(destroy_model_parallel)
        and callable(destroy_distributed_environment)
    )
    assert "self.engine_core =" in inspect.getsource(LLMEngine.__init__)
    import vllm.envs as envs

    assert "VLLM_WORKER_MULTIPROC_METHOD" in envs.environment_variables
    assert "VLLM_NO_USAGE_STATS" in envs.environment_variables


def test_kernel_download_used_by_the_post_deploy_script():
    """envs/llm-vllm.post-deploy.sh calls what `vllm download-kernels` runs; a dry run needs no GPU."""
    import vllm.entrypoints.cli.main as cli
    from vllm.entrypoints.cli.download_kernels import DownloadKernelsSubcommand, _download_flashinfer_kernels

    assert DownloadKernelsSubcommand.name == "download-kernels"
    assert "download_kernels" in inspect.getsource(cli)  # registered as a subcommand of `vllm`
    assert list(inspect.signature(_download_flashinfer_kernels).parameters) == ["dry_run"]
    script = (REPO / "envs" / "llm-vllm.post-deploy.sh").read_text()
    assert "_download_flashinfer_kernels(dry_run=False)" in script
    assert _download_flashinfer_kernels(dry_run=True) == 0
