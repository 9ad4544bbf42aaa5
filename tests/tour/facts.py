"""Where each number the tours quote comes from (tests/tour/test_tour.py): a fact ID -> the
command whose output holds it (a part of the command line as the tours write it) and a regular
expression whose first group is the number. Both tours quote the same facts."""

FACTS = {
    "kernel": {"command": "qkv info", "pattern": r"kernel (\w+)"},
}
