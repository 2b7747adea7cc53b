# Stage 1, data: configured data files (downloads, missing local files), config checks and the input
# functions of rules/data.smk. Nothing here defines a rule.

import sys

# The Snakefile itself reads file specs with the library's stdlib-only module (no polars needed).
sys.path.insert(0, _SRC)
from llm_utility.data.files import (
    CORPUS_FILES,
    DATASET_FILES,
    local_path,
    missing_message,
    normalize_spec,
)

BENCHMARKS = [
    d
    for d, c in config["datasets"].items()
    if c["source"] in ("kilt", "2wiki", "msmarco-qa")
]
MSMARCO_QA = [d for d in BENCHMARKS if config["datasets"][d]["source"] == "msmarco-qa"]
KILT_CORPORA = [c for c, v in config["corpora"].items() if v["source"] == "kilt"]


def _files_of(section, files_by_source):
    """{(section, name, key): (spec, kind)} for every configured data file."""
    out = {}
    for name, cfg in config[section].items():
        for key, kind in files_by_source.get(cfg["source"], {}).items():
            if cfg.get(key) is not None:
                out[(section, name, key)] = (normalize_spec(cfg[key]), kind)
    return out


DATA_FILES = {
    **_files_of("corpora", CORPUS_FILES),
    **_files_of("datasets", DATASET_FILES),
}
DOWNLOADS, MISSING = {}, {}
for (_section, _name, _key), (_spec, _kind) in DATA_FILES.items():
    _path = local_path(_spec, config["data_dir"])
    if _spec.get("url"):
        DOWNLOADS[_path] = _spec
    elif not os.path.exists(_path):
        MISSING[_path] = missing_message(_path, f"{_section}.{_name}.{_key}", _kind)


def _check_data_config():
    for name, ds in config["datasets"].items():
        corpus = config["corpora"][ds["corpus"]]
        where = f"config: datasets.{name}"
        if ds["source"] in ("kilt", "2wiki", "msmarco-qa"):
            if ds.get("file") is None:
                raise ValueError(f"{where}: source '{ds['source']}' needs `file`")
            if (
                corpus["source"] in ("worldfacts", "msmarco")
                and ds["source"] != "msmarco-qa"
            ):
                raise ValueError(
                    f"{where}: a Wikipedia dataset needs a Wikipedia corpus (kilt, dpr or local)"
                )
        if (ds.get("ranking_queries") is None) != (ds.get("ranking_qrels") is None):
            raise ValueError(
                f"{where}: ranking_queries and ranking_qrels go together (the passage-ranking "
                "queries and their qrels)"
            )
        if ds["source"] == "msmarco-qa" and ds.get("extractor") not in config["llms"]:
            raise ValueError(
                f"{where}.extractor = {ds.get('extractor')!r} must name an entry of llms"
            )
        if (
            ds["source"] == "kilt"
            and corpus["source"] != "kilt"
            and ds.get("knowledge_source") is None
        ):
            raise ValueError(
                f"{where}: KILT provenance on corpus '{ds['corpus']}' is mapped by title and text, "
                "which needs the provenance texts: set `knowledge_source` to the KILT knowledge source"
            )
    for name, cfg in config["corpora"].items():
        if cfg["source"] in ("dpr", "msmarco", "kilt") and cfg.get("file") is None:
            raise ValueError(
                f"config: corpora.{name}: source '{cfg['source']}' needs `file`"
            )


_check_data_config()


def data_file(section, name, key):
    spec, _ = DATA_FILES[(section, name, key)]
    return local_path(spec, config["data_dir"])


def corpus_inputs(wildcards):
    cfg = config["corpora"][wildcards.corpus]
    if cfg["source"] == "kilt":
        return {
            "shards": expand(
                "results/corpora/{corpus}/shards/{shard}.parquet",
                corpus=wildcards.corpus,
                shard=range(cfg["shards"]),
            )
        }
    key = "path" if cfg["source"] == "local" else "file"
    if (("corpora", wildcards.corpus, key)) in DATA_FILES:
        return {"file": data_file("corpora", wildcards.corpus, key)}
    return {}


def dataset_files(wildcards):
    """The benchmark files a dataset's loader reads (file, and questions/aliases/qrels when configured)."""
    return {
        key: data_file("datasets", wildcards.dataset, key)
        for key in ("file", "questions", "aliases", "ranking_queries", "ranking_qrels")
        if ("datasets", wildcards.dataset, key) in DATA_FILES
    }


def mapping_rule(dataset):
    ds = config["datasets"][dataset]
    corpus = config["corpora"][ds["corpus"]]
    if ds["source"] == "msmarco-qa":
        # Passage-ranking qrels name collection passages; QnA's selected passages only have texts.
        return "pid" if ds.get("ranking_qrels") else "text"
    if ds["source"] == "kilt" and corpus["source"] == "kilt":
        return "span"
    return "title-text"


def mapping_inputs(wildcards):
    d = wildcards.dataset
    ds = config["datasets"][d]
    inputs = {
        "evidence": f"results/{d}/source/evidence.parquet",
        "queries": f"results/{d}/source/queries.parquet",
        "summary": f"results/{d}/source/summary.json",
        "passages": f"results/corpora/{ds['corpus']}/passages.parquet",
    }
    if mapping_rule(d) == "span":
        inputs["spans"] = f"results/corpora/{ds['corpus']}/spans.parquet"
    if ds["source"] == "kilt" and mapping_rule(d) == "title-text":
        inputs["knowledge_source"] = data_file("datasets", d, "knowledge_source")
    return inputs


def prepare_queries_inputs(wildcards):
    d = wildcards.dataset
    ds = config["datasets"][d]
    if ds["source"] == "worldfacts":
        return {"passages": passages_of_dataset(wildcards)}
    if ds["source"] == "local":
        return {
            "passages": passages_of_dataset(wildcards),
            "queries": data_file("datasets", d, "queries"),
        }
    inputs = {
        "source": f"results/{d}/source/queries.parquet",
        "human": f"results/{d}/human_passages.parquet",
    }
    if ds["source"] == "msmarco-qa":
        inputs["short_answers"] = f"results/{d}/source/short_answers.parquet"
    return inputs


def extractor_of(wildcards):
    return config["datasets"][wildcards.dataset]["extractor"]


def extractor_cfg(wildcards):
    return config["llms"][extractor_of(wildcards)]


def _alternatives_or_none(names):
    # A constraint that matches nothing when the list is empty.
    return "|".join(re.escape(n) for n in names) if names else "(?!)"
