"""A corpus of real English sentences, available offline, and their embeddings.

Synthetic clusters of random vectors make vector search look better or worse than it
is (ties, uniform density). This corpus is real text: the sentences of the docstrings
of every Python module installed beside convostore (the standard library and the
packages in the environment), cleaned, deduplicated and put in a fixed order, so every
run on the same environment gets the same corpus. They are embedded once with the
bundled all-MiniLM-L6-v2 (`convostore.SentenceTransformerEmbedder`) and cached outside
the repository, in ``$XDG_CACHE_HOME/convostore/benchmarks`` (``~/.cache`` by default).

    corpus = load_corpus(100_000, queries=200)   # embeds on the first call (minutes)
    corpus.vectors.shape                          # (100000, 384), unit length
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_WORD = re.compile(r"[A-Za-z]{2,}")
# A line of a docstring that is markup, code or a table rather than prose.
_NOT_PROSE = re.compile(r"^\s*(>>>|\.\.\.|[-=~*+#|:]{2,}|\.\. |:param|:return|:raises|@)")
_MIN_CHARS, _MAX_CHARS, _MIN_WORDS = 40, 300, 6
_EMBED_BATCH = 256


@dataclass(frozen=True, slots=True)
class Corpus:
    """``sentences[i]`` has the unit vector ``vectors[i]``; ``queries`` are other
    sentences of the same sources, never in ``sentences``."""

    model: str
    sentences: list[str]
    vectors: Matrix
    queries: list[str]
    query_vectors: Matrix


def cache_directory() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "convostore" / "benchmarks"


def source_roots() -> list[Path]:
    """The standard library and the environment's site-packages."""
    paths = sysconfig.get_paths()
    roots = {Path(paths["stdlib"]), Path(paths["purelib"]), Path(paths["platlib"])}
    return sorted(root for root in roots if root.is_dir())


# A triple-quoted string: a docstring, or prose kept in code; the filters below keep prose.
_TRIPLE_QUOTED = re.compile(r'''"""(.+?)"""|\'\'\'(.+?)\'\'\'''', re.DOTALL)


def _docstrings(path: Path) -> Iterator[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    for match in _TRIPLE_QUOTED.finditer(text):
        body = match.group(1) or match.group(2)
        # Dedent as a docstring is: the common indentation of the lines after the first.
        lines = body.expandtabs().splitlines()
        indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
        margin = min(indents, default=0)
        yield "\n".join([lines[0].strip(), *(line[margin:] for line in lines[1:])]).strip()


def _sentences(docstring: str) -> Iterator[str]:
    for paragraph in docstring.split("\n\n"):
        lines = paragraph.splitlines()
        if any(_NOT_PROSE.match(line) for line in lines):
            continue
        prose = " ".join(line.strip() for line in lines)
        for sentence in _SENTENCE_END.split(prose):
            sentence = sentence.strip()
            if not (_MIN_CHARS <= len(sentence) <= _MAX_CHARS) or not sentence[0].isupper():
                continue
            words = _WORD.findall(sentence)
            # Prose: enough words, and mostly words rather than symbols and numbers.
            if len(words) >= _MIN_WORDS and sum(map(len, words)) >= 0.6 * len(sentence):
                yield sentence


def real_sentences(count: int) -> list[str]:
    """``count`` distinct sentences from installed docstrings, in an order fixed by a hash
    of each sentence (so a larger corpus holds every smaller one's sentences in front)."""
    seen: dict[str, bytes] = {}
    for root in source_roots():
        for path in sorted(root.rglob("*.py")):
            for docstring in _docstrings(path):
                for sentence in _sentences(docstring):
                    if sentence not in seen:
                        seen[sentence] = hashlib.blake2b(sentence.encode(), digest_size=8).digest()
    if len(seen) < count:
        raise SystemExit(f"only {len(seen):,} sentences found, {count:,} asked for")
    return sorted(seen, key=seen.__getitem__)[:count]


def _embed(sentences: list[str]) -> tuple[str, Matrix]:
    from convostore.embedding import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    model = embedder._model
    started = time.perf_counter()
    parts: list[Matrix] = []
    for start in range(0, len(sentences), _EMBED_BATCH * 16):
        chunk = sentences[start : start + _EMBED_BATCH * 16]
        parts.append(
            np.asarray(
                model.encode(chunk, batch_size=_EMBED_BATCH, normalize_embeddings=True),
                dtype=np.float32,
            )
        )
        done = start + len(chunk)
        rate = done / (time.perf_counter() - started)
        print(f"  embedded {done:,}/{len(sentences):,} ({rate:.0f}/s)", file=sys.stderr)
    return embedder.name, np.concatenate(parts)


def _cached_sentences(count: int) -> list[str] | None:
    """The first ``count`` sentences of a larger list made before: the order is fixed by
    each sentence's hash, so its head is what `real_sentences` would give."""
    for listed in sorted(cache_directory().glob("docstrings-*.sentences.txt")):
        sentences = listed.read_text(encoding="utf-8").split("\n")
        if len(sentences) >= count:
            return sentences[:count]
    return None


def load_corpus(count: int, queries: int) -> Corpus:
    """The first ``count`` sentences and ``queries`` held-out ones, with their vectors;
    embedded on the first call for these sizes, then read from the cache."""
    cache = cache_directory() / f"docstrings-{count}-{queries}.npz"
    if cache.exists():
        saved = np.load(cache, allow_pickle=False)
        sentences = [str(s) for s in saved["sentences"]]
        return Corpus(
            model=str(saved["model"]),
            sentences=sentences[:count],
            vectors=saved["vectors"][:count],
            queries=sentences[count:],
            query_vectors=saved["vectors"][count:],
        )
    print(f"building the corpus ({count:,} + {queries} sentences), once", file=sys.stderr)
    cached = _cached_sentences(count + queries)
    if cached is None:
        cached = real_sentences(count + queries)
        listed = cache.with_suffix(".sentences.txt")
        listed.parent.mkdir(parents=True, exist_ok=True)
        listed.write_text("\n".join(cached), encoding="utf-8")
    model, vectors = _embed(cached)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial.npz")
    np.savez(partial, model=model, sentences=np.array(cached), vectors=vectors)
    partial.replace(cache)
    return load_corpus(count, queries)
