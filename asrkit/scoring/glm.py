"""GLM word-mapping rules applied as NIST's ``csrfilt.sh`` applies them before scoring.

A GLM (global mapping) file, e.g. the Hub5 ``en20000405_hub5.glm``, holds header lines
(``* name "..."``, ``* case_sensitive = 'F'`` ...), comments (``;;``) and rules::

    I'M => I AM / [ ] __ [ ]
    GONNA => { GOING TO / GONNA } / [ ] __ [ ]
    UH => %HESITATION / [ ] __ [ ]

A rule's left side is one or more words; its right side words, alternations ``{ a / b c /
@ }`` (``@``: nothing) and optionally deletable words ``(w)``; ``[ ] __ [ ]`` is the only
context this reader accepts (any word on either side). ``;; INPUT_DEPENDENT_APPLICATION =
"<regex>"`` switches the rules after it on or off by the input's format (``stm``, ``ctm``)
or purpose (``ref``, ``hyp``), as ``csrfilt.sh -i FORMAT -t PURPOSE`` does.

:func:`filter_text` is csrfilt's pipeline on one line of text, in its order: upper-case,
parentheses as words of their own, one left-to-right pass of the rules (at each word the
first rule in file order whose words follow; its replacement is not filtered again),
hyphens between letters made spaces (``-dh``: ``UH-HUH`` → ``UH HUH``; fragments such as
``FR-`` keep theirs), ``( A B )`` spread to ``(A) (B)``. A CTM is filtered one word (line)
at a time, so a rule of several words never joins two CTM words: as in csrfilt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from asrkit.errors import DataError

_HEADER = re.compile(r"^\*\s*(\w+)\s*(?:=\s*)?(.*)$")
_APPLICATION = re.compile(r'^;;\s+INPUT_DEPENDENT_APPLICATION\s*=\s*"([^"]*)"')
_HYPHEN = re.compile(r"([^( ])-(?=[^) ])")


@dataclass(frozen=True)
class Rule:
    """One mapping: ``lhs`` words become the ``rhs`` text (words, ``{ / }``, ``(w)``)."""

    lhs: tuple[str, ...]
    rhs: tuple[str, ...]
    #: The regular expression of the ``INPUT_DEPENDENT_APPLICATION`` section it is in.
    applies_to: str | None = None
    line: int = 0


@dataclass
class Glm:
    """A GLM file's rules (:func:`read_glm`)."""

    rules: list[Rule] = field(default_factory=list)
    case_sensitive: bool = False
    path: str = ""

    def active(self, input_type: str, purpose: str) -> list[Rule]:
        """The rules that apply to ``input_type`` (``stm``/``ctm``) data of ``purpose``."""
        out = []
        for rule in self.rules:
            if rule.applies_to is None:
                out.append(rule)
                continue
            pattern = re.compile(rule.applies_to.lower())
            if pattern.search(input_type.lower()) or (purpose and pattern.search(purpose.lower())):
                out.append(rule)
        return out


def _words(text: str) -> list[str]:
    """Words of a rule side or a transcript, with ``{``, ``}``, ``/``, ``(``, ``)`` apart."""
    return re.sub(r"([{}/()])", r" \1 ", text).split()


def read_glm(path: str | Path) -> Glm:
    """Read a GLM file.

    Raises:
        DataError: a line that is neither a header, a comment nor a rule, or a rule with a
            context other than ``[ ] __ [ ]`` (file and line named).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="latin-1").splitlines()
    except OSError as err:
        raise DataError(f"{path}: cannot read the GLM file ({err.strerror}); check the path") from err
    glm = Glm(path=str(path))
    applies_to: str | None = None
    for number, line in enumerate(lines, 1):
        text = line.strip()
        section = _APPLICATION.match(text)
        if section:
            applies_to = section.group(1)
            continue
        if not text or text.startswith(";;"):
            continue
        header = _HEADER.match(text)
        if header:
            if header.group(1).lower() == "case_sensitive":
                glm.case_sensitive = header.group(2).strip().strip("'\"").upper() == "T"
            continue
        if "=>" not in text:
            raise DataError(
                f"{path}:{number}: not a GLM rule, header or comment: {text!r}; "
                "a rule reads `LEFT => RIGHT / [ ] __ [ ]`"
            )
        left, right = text.split("=>", 1)
        context = ""
        if " / [" in right or right.rstrip().endswith("]"):
            right, _, context = right.rpartition(" / ")
        if context and context.split() != ["[", "]", "__", "[", "]"]:
            raise DataError(
                f"{path}:{number}: rule context {context.strip()!r} is not supported (only "
                "`[ ] __ [ ]`); rewrite the rule without a context"
            )
        lhs, rhs = tuple(_words(left)), tuple(_words(right))
        if not lhs:
            raise DataError(f"{path}:{number}: a rule without words on its left side; remove the line")
        if not glm.case_sensitive:
            lhs, rhs = tuple(w.upper() for w in lhs), tuple(w.upper() for w in rhs)
        glm.rules.append(Rule(lhs, rhs, applies_to, number))
    return glm


def apply_rules(words: list[str], rules: list[Rule]) -> list[str]:
    """One left-to-right pass: at each word the first rule (file order) that matches."""
    out: list[str] = []
    i = 0
    while i < len(words):
        for rule in rules:
            n = len(rule.lhs)
            if tuple(words[i : i + n]) == rule.lhs:
                out.extend(rule.rhs)
                i += n
                break
        else:
            out.append(words[i])
            i += 1
    return out


def _spread_optional(words: list[str]) -> list[str]:
    """``( A B )`` → ``( A ) ( B )``: each word of a deletable group deletable alone."""
    out: list[str] = []
    depth = 0
    for word in words:
        if word == "(":
            depth += 1
            out.append(word)
        elif word == ")":
            depth -= 1
            out.append(word)
        elif depth > 0 and out and out[-1] not in ("(",):
            out.extend([")", "(", word])
        else:
            out.append(word)
    return out


def filter_text(text: str, rules: list[Rule], *, upcase: bool = True, split_hyphens: bool = True) -> str:
    """csrfilt's filter of one line of transcript text (see the module docstring)."""
    if upcase:
        text = text.upper()
    words = apply_rules(re.sub(r"([()])", r" \1 ", text).split(), rules)
    joined = " " + " ".join(words) + " "
    if split_hyphens:
        joined = _HYPHEN.sub(r"\1 ", joined)
    words = _spread_optional(joined.split())
    return re.sub(r"\s+\)", ")", re.sub(r"\(\s+", "(", " ".join(words))).strip()
