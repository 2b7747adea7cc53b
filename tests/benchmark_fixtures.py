"""Small files in the publishers' own formats (KILT, 2WikiMultihopQA, MS MARCO, DPR), written by tests."""

from __future__ import annotations

import json
from pathlib import Path

# A KILT knowledge-source page (the layout of kilt_knowledgesource.json), text from the KILT README's
# NQ example: paragraph 0 is the title, headings and list items are paragraphs of their own.
SUPER_BOWL = {
    "_id": "5e1",
    "wikipedia_id": "45267196",
    "wikipedia_title": "Super Bowl 50 halftime show",
    "text": [
        "Super Bowl 50 halftime show\n",
        "The Super Bowl 50 Halftime Show took place on February 7, 2016, at Levi's Stadium in Santa Clara, "
        "California as part of Super Bowl 50. It was headlined by the British rock group Coldplay with special "
        "guest performers Beyoncé and Bruno Mars, who previously had headlined the Super Bowl XLVII and Super "
        "Bowl XLVIII halftime shows, respectively.\n",
        "Section::::Background.\n",
        "BULLET::::- Coldplay announced the show in December 2015.\n",
        "The show was watched by 115.5 million viewers.\n",
    ],
    "anchors": [],
    "categories": "Super Bowl halftime shows",
    "history": {"pageid": 45267196, "revid": 1},
    "wikidata_info": {"wikidata_id": "Q21707926"},
}
COLDPLAY = {
    "_id": "5e2",
    "wikipedia_id": "6009",
    "wikipedia_title": "Coldplay",
    "text": ["Coldplay\n", "Coldplay are a British rock band formed in London in 1996.\n"],
    "anchors": [],
    "categories": "",
}


def write_knowledge_source(path: Path, pages) -> Path:
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), encoding="utf-8")
    return path


def prov(wid, title, sp, sc, ep, ec, bleu=1.0, **meta):
    return {
        "wikipedia_id": wid,
        "title": title,
        "section": "Section::::Abstract.",
        "start_paragraph_id": sp,
        "start_character": sc,
        "end_paragraph_id": ep,
        "end_character": ec,
        "bleu_score": bleu,
        "meta": meta,
    }


# NQ dev lines in KILT's layout: answers with provenance, an answer without provenance, a provenance
# without answer (a long-answer annotation), a whole-paragraph span (-1 characters), and a span on a
# page the corpus lacks.
NQ_LINES = [
    {
        "id": "-5004457603684974952",
        "input": "who is playing the halftime show at super bowl 2016",
        "output": [
            {"answer": "Coldplay", "provenance": [prov("45267196", "Super Bowl 50 halftime show", 1, 178, 1, 186)]},
            {"answer": "Beyoncé", "provenance": [prov("45267196", "Super Bowl 50 halftime show", 1, 217, 1, 224)]},
            {"answer": "Coldplay with special guest performers Beyoncé and Bruno Mars", "provenance": []},
            {"answer": "", "provenance": [prov("45267196", "Super Bowl 50 halftime show", 1, 0, 1, 341, 0.97)]},
            {"provenance": [prov("45267196", "Super Bowl 50 halftime show", 4, -1, 4, -1, -1.0)]},
        ],
        "meta": {},
    },
    {
        "id": "42",
        "input": "when was coldplay formed",
        "output": [
            {"answer": "1996", "provenance": [prov("6009", "Coldplay", 1, 53, 1, 57)]},
            {"answer": "1996", "provenance": [prov("999999", "A page not in the corpus", 1, 0, 1, 10)]},
        ],
    },
]
FEVER_LINES = [
    {
        "id": 137334,
        "input": "Coldplay were formed in London.",
        "output": [{"answer": "SUPPORTS", "provenance": [prov("6009", "Coldplay", 1, 0, 1, 60, fever_sentence_id=0)]}],
    },
    {"id": 111897, "input": "Coldplay is a jazz trio.", "output": [{"answer": "REFUTES"}, {"answer": "REFUTES"}]},
]


def write_jsonl(path: Path, records) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records),
        encoding="utf-8",
    )
    return path


# 2WikiMultihopQA dev.json: one JSON array.
TWOWIKI = [
    {
        "_id": "8813f87c0bdd11eba7f7acde48001122",
        "type": "compositional",
        "question": "Where was the band that headlined the Super Bowl 50 halftime show formed?",
        "context": [
            ["Coldplay", ["Coldplay are a British rock band formed in London in 1996."]],
            [
                "Super Bowl 50 halftime show",
                [
                    "The Super Bowl 50 Halftime Show took place on February 7, 2016.",
                    "It was headlined by the British rock group Coldplay "
                    "with special guest performers Beyoncé and Bruno Mars.",
                ],
            ],
        ],
        "supporting_facts": [["Super Bowl 50 halftime show", 1], ["Coldplay", 0], ["Coldplay", 0], ["Missing page", 0]],
        "evidences": [["Super Bowl 50 halftime show", "performer", "Coldplay"]],
        "answer": "London",
        "answer_id": "Q84",
    }
]

# MS MARCO QnA v2.1: parallel columns keyed by row number.
MSMARCO_DEV = {
    "query": {
        "0": "where was coldplay formed",
        "1": "what is a rock band",
        "2": "how many viewers watched super bowl 50 halftime",
        "3": "who headlined",
    },
    "query_id": {"0": 1001, "1": 1002, "2": 1003, "3": 1004},
    "query_type": {"0": "LOCATION", "1": "DESCRIPTION", "2": "NUMERIC", "3": "PERSON"},
    "answers": {
        "0": ["Coldplay was formed in London, England."],
        "1": ["A band that plays rock."],
        "2": ["115.5 million viewers watched it."],
        "3": ["No Answer Present."],
    },
    "wellFormedAnswers": {"0": "[]", "1": "[]", "2": ["The show was watched by 115.5 million viewers."], "3": "[]"},
    "passages": {
        "0": [
            {
                "is_selected": 1,
                "passage_text": "Coldplay are a British rock band formed in London in 1996.",
                "url": "http://a",
            },
            {"is_selected": 0, "passage_text": "Unrelated text.", "url": "http://b"},
        ],
        "1": [{"is_selected": 1, "passage_text": "A rock band plays rock music.", "url": "http://c"}],
        "2": [
            {"is_selected": 1, "passage_text": "The show was watched by  115.5 million viewers.", "url": "http://d"},
            {"is_selected": 1, "passage_text": "A selected passage the collection does not hold.", "url": "http://e"},
        ],
        "3": [],
    },
}
# MS MARCO collection.tsv: id<TAB>text, no header, quotes literal.
COLLECTION = (
    '0\t"Quoted" text at the start stays literal.\n'
    "7\tColdplay are a British rock band formed in London in 1996.\n"
    "8\tThe show was watched by 115.5 million viewers.\n"
)
