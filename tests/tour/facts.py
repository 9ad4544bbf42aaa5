"""Where each number the tours quote comes from (tests/tour/test_tour.py): a fact ID -> the
command whose output holds it (a part of the command line as the tours write it) and a regular
expression whose first group is the number (multi-line mode: ^ and $ match at every line). Both
tours quote the same facts."""

import re

SORT = "qkv train configs/sort.yaml --threads 2"
H1 = "--out runs/sort_h1 "
UNSCALED = "--out runs/sort_unscaled "
INDUCTION = "qkv train configs/induction.yaml"


def row(layer, head, column):
    """A number of `qkv heads`'s table: layer, head, then the column (0 entropy, 1 max_w, ...)."""
    return rf"^blocks\.{layer}\.attn\s+{head} \w+" + r"\s+[\d.-]+" * column + r"\s+([\d.]+)"


FACTS = {
    "cpu": {"command": "qkv info", "pattern": r"^CPU: (\S+ family \d+ model \d+)"},
    "kernel": {"command": "qkv info", "pattern": r"kernel (\w+)"},
    "sort_steps": {"command": SORT, "pattern": r"after (\d+) steps"},
    "sort_acc": {"command": SORT, "pattern": r"held-out token accuracy ([\d.]+)%"},
    "sort_h00_entropy": {"command": "qkv heads runs/sort/best.h5", "pattern": row(0, 0, 0)},
    "sort_h13_maxw": {"command": "qkv heads runs/sort/best.h5", "pattern": row(1, 3, 1)},
    "explain_top_key": {"command": "qkv explain runs/sort/best.h5", "pattern": r"4\. keys by weight\n\s+(\d+)"},
    "explain_top_weight": {"command": "qkv explain runs/sort/best.h5", "pattern": r"4\. keys by weight\n\s+\d+\s+\S+\s+([\d.]+)"},
    "h1_steps": {"command": H1, "pattern": r"after (\d+) steps"},
    "h1_acc": {"command": H1, "pattern": r"held-out token accuracy ([\d.]+)%"},
    "h1_entropy": {"command": "qkv heads runs/sort_h1/best.h5", "pattern": row(0, 0, 0)},
    "h1_maxw": {"command": "qkv heads runs/sort_h1/best.h5", "pattern": row(0, 0, 1)},
    "unscaled_acc": {"command": UNSCALED, "pattern": r"held-out token accuracy ([\d.]+)%"},
    "unscaled_maxw0": {"command": "qkv heads runs/sort_unscaled/best.h5", "pattern": row(0, 0, 1)},
    "unscaled_maxw1": {"command": "qkv heads runs/sort_unscaled/best.h5", "pattern": row(1, 0, 1)},
    "induction_first": {"command": "plot_snapshots.py runs/induction", "pattern": r"^layer 1 .*score ([\d.]+) at step 0"},
    "induction_last": {"command": "plot_snapshots.py runs/induction", "pattern": r"^layer 1 .*, ([\d.]+) at step \d+;"},
    "induction_step": {"command": "plot_snapshots.py runs/induction", "pattern": r"^layer 1 .*first >= 0.4 at step (\d+)"},
    "intact_loss": {"command": "--heads 1.0 ", "pattern": r"intact model: loss ([\d.]+)"},
    "ablate_10_loss": {"command": "--heads 1.0 ", "pattern": r"without 1\.0: loss ([\d.]+)"},
    "ablate_10_acc": {"command": "--heads 1.0 ", "pattern": r"without 1\.0: .*token accuracy ([\d.]+)%"},
    "ablate_all_acc": {"command": "--heads '1.*'", "pattern": r"without 1\.0,1\.1,1\.2,1\.3: .*token accuracy ([\d.]+)%"},
    "compiled_prev": {"command": "qkv heads induction.h5", "pattern": row(0, 0, 2)},
    "compiled_first": {"command": "qkv heads induction.h5", "pattern": row(1, 0, 3)},
    "compiled_ablate_acc": {"command": "qkv ablate induction.h5", "pattern": r"without 1\.0: .*token accuracy ([\d.]+)%"},
    "grade_labels": {"command": "qkv grade induction", "pattern": r"^induction\s+labels\s+\S+\s+([\d.]+)"},
    "grade_patching": {"command": "qkv grade induction", "pattern": r"^induction\s+patching\s+\S+\s+([\d.]+)"},
    "grade_eapig_prev": {"command": "qkv grade induction", "pattern": r"^induction\s+eap-ig\s.*0\.0 \(\d+, ([\d.e-]+)\)"},
}

GRAMMAR_FILL = "qkv fill runs/grammar_zh"
EAT = "--text 我爱吃苹果 --query 2"
HIT = "--text 他打碎了花瓶 --query 1"
HEADS = "qkv heads runs/grammar_zh"
ROLE_ABLATE = "--relation verb-object"


def keys_of(head):
    """`qkv explain`'s survey: the heaviest key of head L.H, as (token, weight) groups."""
    layer, h = head.split(".")
    return rf"^\s+{layer}\.{h}\s+\d+ '(\S+)'\s+([\d.]+)"


# `qkv heads`' role tables, by a part of their titles: over every token, at the scored (masked)
# tokens, and at the scored tokens where the chosen offset misses the partner.
EVERY, SCORED, MISSED = "over every token", "at the scored tokens (a masked", "where that offset misses"


def role(head, column, table=EVERY):
    """A role score of one of `qkv heads`'s role tables (the first row of head L.H after the table's
    title), the relation's column (0-based). Its cells are shares written 0.123 (or -), which the
    position-or-role table's offsets (-1, +2, 0) are not."""
    layer, h = head.split(".")
    return (re.escape(table) + r"[^\n]*\n(?:[^\n]*\n)*?" + rf"\s+{layer}\.{h}" + r"\s+(?:\d\.\d{3}|-)" * column
            + r"\s+(\d\.\d{3})")


def offset_row(column, table=EVERY):
    """The share of the fixed offset of one of `qkv heads`'s role tables, the relation's column."""
    return (re.escape(table) + r"[^\n]*\n(?:[^\n]*\n)*?" + r"\s+offset" + r"\s+(?:\d\.\d{3} \(\S+\)|-)" * column
            + r"\s+(\d\.\d{3}) \(")


def position(head, group):
    """`qkv heads`' position-or-role table, head L.H: group 'offset' (the key offset most queries put
    their largest weight on), 'share' (their share) or 'label' (positional (...), role: R or empty)."""
    layer, h = head.split(".")
    cells = {"offset": r"[+-]?\d+", "share": r"\d\.\d{3}", "label": r".*?"}
    offset, share, label = (f"({v})" if k == group else v for k, v in cells.items())
    return rf"^\s+{layer}\.{h}\s+{offset}\s+{share}  {label}\s*$"


FACTS.update({
    "fill_token": {"command": GRAMMAR_FILL, "pattern": r"mask 1 \(position 3\):\s+(\S+)"},
    "fill_p": {"command": GRAMMAR_FILL, "pattern": r"mask 1 \(position 3\):\s+\S+ ([\d.]+)"},
    "eat_h00_token": {"command": EAT, "pattern": keys_of("0.0")},
    "eat_h00_weight": {"command": EAT, "pattern": keys_of("0.0").replace("'(\\S+)'", "'\\S+'")},
    "eat_h02_token": {"command": EAT, "pattern": keys_of("0.2")},
    "eat_h02_weight": {"command": EAT, "pattern": keys_of("0.2").replace("'(\\S+)'", "'\\S+'")},
    "hit_h02_token": {"command": HIT, "pattern": keys_of("0.2")},
    "hit_h02_weight": {"command": HIT, "pattern": keys_of("0.2").replace("'(\\S+)'", "'\\S+'")},
    "hit_h00_token": {"command": HIT, "pattern": keys_of("0.0")},
    "role_22_object": {"command": HEADS, "pattern": role("2.2", 1)},
    "role_02_subject": {"command": HEADS, "pattern": role("0.2", 0)},
    "role_object_offset": {"command": HEADS, "pattern": offset_row(1)},
    "role_subject_offset": {"command": HEADS, "pattern": offset_row(0)},
    "pos_00_label": {"command": HEADS, "pattern": position("0.0", "label")},
    "pos_00_share": {"command": HEADS, "pattern": position("0.0", "share")},
    "pos_02_label": {"command": HEADS, "pattern": position("0.2", "label")},
    "pos_02_share": {"command": HEADS, "pattern": position("0.2", "share")},
    "pos_22_label": {"command": HEADS, "pattern": position("2.2", "label")},
    "role_22_scored": {"command": HEADS, "pattern": role("2.2", 1, SCORED)},
    "role_scored_offset": {"command": HEADS, "pattern": offset_row(1, SCORED)},
    "role_22_missed": {"command": HEADS, "pattern": role("2.2", 1, MISSED)},
    "pos_23_label": {"command": HEADS, "pattern": position("2.3", "label")},
    "pos_23_share": {"command": HEADS, "pattern": position("2.3", "share")},
    "role_23_missed": {"command": HEADS, "pattern": role("2.3", 1, MISSED)},
    "role_11_label": {"command": HEADS, "pattern": r"^blocks\.1\.attn\s+1 self.*?(\S+)\s*$"},
    "ablate_intact_acc": {"command": ROLE_ABLATE, "pattern": r"intact model: .*token accuracy ([\d.]+)%"},
    "ablate_02_acc": {"command": ROLE_ABLATE, "pattern": r"^\s+0\.2\s+[\d.]+\s+[+-][\d.]+\s+([\d.]+)%"},
    "ablate_11_acc": {"command": ROLE_ABLATE, "pattern": r"^\s+1\.1\s+[\d.]+\s+[+-][\d.]+\s+([\d.]+)%"},
    "ablate_22_acc": {"command": ROLE_ABLATE, "pattern": r"^\s+2\.2\s+[\d.]+\s+[+-][\d.]+\s+([\d.]+)%"},
})


# The README's results of the shipped configs: the command (run in the tour's directory, where
# configs/ points into the source tree; "qkv" is the binary under test), the pattern, and whether
# it takes minutes (checked by `make tour` only).
def trained(config, what, long=False, extra=""):
    pattern = {"steps": r"after (\d+) steps", "acc": r"held-out token accuracy ([\d.]+)%"}[what]
    return {"command": f"qkv train configs/{config} --threads 2{extra}", "pattern": pattern, "long": long}


README_FACTS = {
    "sort_steps": trained("sort.yaml", "steps"),
    "sort_acc": trained("sort.yaml", "acc"),
    "reverse_steps": trained("reverse.yaml", "steps", extra=" --out runs/reverse"),
    "reverse_acc": trained("reverse.yaml", "acc", extra=" --out runs/reverse"),
    "copy_steps": trained("copy.yaml", "steps", extra=" --out runs/copy"),
    "recall_steps": trained("recall.yaml", "steps", long=True, extra=" --out runs/recall"),
    "recall_acc": trained("recall.yaml", "acc", long=True, extra=" --out runs/recall"),
    "s2s_steps": trained("seq2seq_reverse.yaml", "steps", extra=" --out runs/seq2seq_reverse"),
    "s2s_acc": trained("seq2seq_reverse.yaml", "acc", extra=" --out runs/seq2seq_reverse"),
    "induction_acc": {"command": "qkv eval runs/induction/best.h5", "pattern": r"^\s+token accuracy\s+[\d.]+%\s+([\d.]+)%"},
    "mqar_steps": trained("mqar.yaml", "steps", long=True, extra=" --out runs/mqar"),
    "grammar_test_acc": {"command": "qkv eval runs/grammar_zh/best.h5", "pattern": r"^\s+masked accuracy\s+[\d.]+%\s+([\d.]+)%",
                         "long": True},
    "grammar_fill": {"command": 'qkv fill runs/grammar_zh/best.h5 --text "猫喜欢追逐[MASK]鼠"',
                     "pattern": r"mask 1 \(position 5\):\s+(\S+ [\d.]+)", "long": True},
}
