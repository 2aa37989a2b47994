"""``attnlab demo``: the summary counts greedy and beam search separately."""

import re

from attnlab.cli.main import main


def test_demo_counts_greedy_and_beam_apart(capsys):
    assert main(["demo", "--steps", "30", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "->  greedy" in line]
    assert len(rows) == 8
    match = re.search(r"reversed exactly: greedy (\d)/8, beam search (\d)/8, both (\d)/8", out)
    assert match, out
    greedy, beam, both = map(int, match.groups())
    assert both == sum(row.endswith(" ok") for row in rows)
    assert greedy == 8 - sum("greedy" in row.split("WRONG")[-1] for row in rows if "WRONG" in row)
    assert beam == 8 - sum("beam" in row.split("WRONG")[-1] for row in rows if "WRONG" in row)
