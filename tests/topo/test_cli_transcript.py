"""The README's `make run` transcript and how the end-to-end test compares it with the CLI's
output (tests/e2e/test_mininet_cli.py replays it): numbers may differ, addresses and words may
not, `...` stands for any lines."""

from __future__ import annotations

from opengate.target import repo_root
from tests.e2e.mininet_console import matches, readme_transcript


def test_readme_transcript_is_commands_with_their_output_ending_in_exit() -> None:
    steps = readme_transcript(repo_root() / "README.md")
    assert steps[0].command == "h1 curl -s http://198.51.100.20/whoami"
    assert steps[0].expected == ("198.51.100.1",)
    assert steps[-1].command == "exit" and steps[-1].expected == ()
    assert all(step.command.strip() for step in steps)


def test_numbers_may_differ_but_addresses_and_words_may_not() -> None:
    stats = "2 packets transmitted, 2 received, 0% packet loss, time 1001ms"
    assert matches([stats], ["2 packets transmitted, 1 received, 50% packet loss, time 1013ms"])
    assert not matches([stats], ["2 packets transmitted, 2 received, 0% packet loss"])
    assert not matches(["198.51.100.1"], ["198.51.100.2"])
    assert not matches(["out1 -> X X"], ["out1 -> h1 X"])
    assert matches(["ID  NPM   PROTO"], ["ID NPM PROTO   "])


def test_an_elision_stands_for_any_number_of_lines() -> None:
    assert matches(["a", "...", "b"], ["a", "b"])
    assert matches(["a", "...", "b"], ["a", "x", "y", "b"])
    assert not matches(["a", "...", "b"], ["a", "x"])
    assert not matches(["a"], ["a", "b"])
