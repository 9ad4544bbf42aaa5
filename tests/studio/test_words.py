#!/usr/bin/python3
"""The studio's own words, in both languages (share/studio/studio.js, WORDS).

    test_words.py SOURCE_DIR [--self-test]

- English and Chinese have the same keys, and each key the same {placeholders} (a placeholder
  missing from one language would print as "{n}" or lose a number; English's plural {s} aside);
- the Chinese quotes with “” (and ‘’ inside them), never with ASCII " or ', and never with
  the corner brackets 「」 of other locales;
- every Chinese string that is prose holds Chinese characters (a string left in English is a
  string not written), except the formula labels listed in FORMULAS;
- the English uses typographic quotes as well (“”, ’), so that the two read alike;
- the words of REQUIRED (the empty input, errors, an unsure model, labels, the views of one query
  and one head, the newest checkpoint, the saved page) are there in both languages.
--self-test: the checks catch a table with each of these faults.
Exit 0 when every check passed.
"""
import re
import sys
from pathlib import Path

# Words the page must have in both languages: what it says of an empty input and of an error, of
# a model that is unsure, the opening sentence's shares, the labels and their legend, the view of
# one query in every head, the head's weights, the run's newest checkpoint and the saved page.
REQUIRED = {"empty_input", "empty_ids", "err_input", "err_server", "net_error", "unsure", "intro_textbook",
            "share_on", "labels_legend", "labels_off", "rows_title", "rows_hint", "hm_title", "hm_hint", "hm_cell",
            "hm_row", "newest", "newest_done", "newest_fail", "saved_note", "saved_no", "problems_title"}
# Keys whose text is a formula or a symbol in both languages.
FORMULAS = {"th_k", "th_s", "th_a", "th_e", "th_w", "th_wv", "s5", "list_sep"}
HAN = re.compile(r"[\u4e00-\u9fff]")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
ENTRY = re.compile(r"(\w+):\s*((?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")(?:\s*\+\s*(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"))*)")


def table(js, lang):
    """{key: text} of WORDS[lang] in the script's source."""
    start = js.index("const WORDS = {")
    m = re.search(r"\n  " + lang + r": \{\n(.*?)\n  \},", js[start:], re.S)
    if not m:
        raise SystemExit(f"studio.js: WORDS.{lang} not found")
    out = {}
    for key, lit in ENTRY.findall(m.group(1)):
        parts = re.findall(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"", lit)
        out[key] = "".join(a or b for a, b in parts).replace("\\'", "'").replace('\\"', '"')
    return out


def problems(en, zh, required=()):
    out = [f"{k}: missing (the page needs it in both languages)" for k in sorted(required) if k not in en or k not in zh]
    for k in sorted(set(en) ^ set(zh)):
        out.append(f"{k}: only in {'English' if k in en else 'Chinese'}")
    for k in sorted(set(en) & set(zh)):
        a, b = set(PLACEHOLDER.findall(en[k])), set(PLACEHOLDER.findall(zh[k]))
        # {s} may be English's plural ending, which Chinese has no use for.
        if (b - a) or (a - b) - {"s"}:
            out.append(f"{k}: placeholders differ: English {sorted(a)}, Chinese {sorted(b)}")
    for k, s in sorted(zh.items()):
        if '"' in s or re.search(r"'[^']*'", s):
            out.append(f"zh.{k}: ASCII quotes in {s!r}: Chinese quotes with “”")
        if "「" in s or "」" in s:
            out.append(f"zh.{k}: corner brackets in {s!r}: mainland Chinese quotes with “”")
        if s and k not in FORMULAS and not HAN.search(s):
            out.append(f"zh.{k}: no Chinese in {s!r}")
    for k, s in sorted(en.items()):
        if re.search(r"\"\w", s):
            out.append(f"en.{k}: a straight double quote in {s!r}: the page quotes with “”")
    return out


def self_test():
    en = {"a": "Hello {n}", "b": "say “hi”", "th_k": "k_j"}
    zh = {"a": "你好 {n}", "b": "说“你好”", "th_k": "k_j"}
    assert problems(en, zh) == [], problems(en, zh)
    faults = {
        "a key missing": (en, {"a": "你好 {n}", "th_k": "k_j"}, "only in English"),
        "a placeholder missing": (en, dict(zh, a="你好"), "placeholders differ"),
        "ASCII quotes": (en, dict(zh, b='说"你好"'), "ASCII quotes"),
        "corner brackets": (en, dict(zh, b="说「你好」"), "corner brackets"),
        "left in English": (en, dict(zh, b="say hi"), "no Chinese"),
        "a straight quote in English": (dict(en, b='say "hi"'), zh, "straight double quote"),
        "a required word missing": (en, zh, "missing (the page needs it"),
    }
    for what, (e, z, expect) in faults.items():
        found = problems(e, z, {"empty_input"} if what == "a required word missing" else ())
        assert any(expect in p for p in found), f"{what}: not caught ({found})"
    print(f"test_words --self-test: {len(faults)} faults caught")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = Path(argv[1] if len(argv) > 1 else ".")
    js = (root / "share" / "studio" / "studio.js").read_text(encoding="utf-8")
    en, zh = table(js, "en"), table(js, "zh")
    if len(en) < 50:
        print(f"FAIL: only {len(en)} English words read from studio.js: the parser no longer fits the table")
        return 1
    found = problems(en, zh, REQUIRED)
    print(f"test_words: {len(en)} English and {len(zh)} Chinese words checked")
    for p in found:
        print("FAIL:", p)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
