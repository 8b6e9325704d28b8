"""`opengate hsm compile` and `opengate hsm classify`."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from controller.hsm import schema
from controller.hsm.cli import limits_from_p4info
from opengate.cli import main
from opengate.fields import Packet

from .conftest import edge_packets, rule_packets


def _run(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: str = "",
         monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:  # fmt: skip
    if monkeypatch is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_stats_report_tables_lookups_and_time(
    classbench_dir: Path, community_rules: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        ["hsm", "compile", str(classbench_dir / "acl1_1k"), "--acl-limit", "300",
         "--ids", str(community_rules), "--include-commented", "--stats"],
        capsys,
    )  # fmt: skip
    assert code == 0
    assert "IDS rules: 3488 parsed" in out and "0 cannot be expressed" in out
    for table in ("sa_segment", "acl_verdict", "ids_classification", "total"):
        assert table in out
    assert "lookups per packet: 11 (two separate HSMs: 16)" in out
    assert "compile time:" in out and "profile: hsm" in out


def test_compile_writes_entries_as_json_lines(
    classbench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "entries.jsonl"
    code, _, _ = _run(
        ["hsm", "compile", str(classbench_dir / "fw1_1k"), "--acl-limit", "20",
         "--output", str(out_file)],
        capsys,
    )  # fmt: skip
    assert code == 0
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    tables = {r["table"] for r in records}
    assert {"sa_segment", "acl_addr_pair", "acl_verdict"} <= tables
    verdict = next(r for r in records if r["table"] == "acl_verdict")
    assert verdict["match"]["version"] == 0 and "rule_id" in verdict["params"]


@pytest.mark.parametrize("name", ["acl1_1k", "ipc1_1k"])
def test_classify_engines_agree(
    classbench_dir: Path, community_rules: Path, name: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from controller.hsm.rules import parse_classbench

    rules = parse_classbench(classbench_dir / name, limit=200)
    packets = [*rule_packets(rules, 150), *list(edge_packets(rules))[:150]]
    stdin = "# comment\n\n" + "".join(f"{p}\n" for p in packets)
    common = [str(classbench_dir / name), "--acl-limit", "200", "--ids", str(community_rules)]
    _, hsm_out, _ = _run(["hsm", "classify", *common], capsys, stdin, monkeypatch)
    _, lin_out, _ = _run(["hsm", "classify", *common, "--engine", "linear"], capsys, stdin,
                         monkeypatch)  # fmt: skip
    assert hsm_out == lin_out
    lines = hsm_out.splitlines()
    assert len(lines) == len(packets)
    assert all(len(line.split()) == 2 for line in lines)


def test_classify_prints_minus_one_and_class_zero_when_nothing_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "one"
    rules.write_text("@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0x0000\n")
    ids = tmp_path / "ids.rules"
    ids.write_text("alert udp any any -> any 53 (sid:1;)\n")
    packets = f"{Packet(0x0A000001, 1, 1, 80, 6)}\n11.0.0.1 1.1.1.1 1 53 17\n"
    code, out, _ = _run(["hsm", "classify", str(rules), "--ids", str(ids), "--verbose"],
                        capsys, packets, monkeypatch)  # fmt: skip
    assert code == 0
    assert out.splitlines() == ["0 0 acl_permit -1", "-1 1 - 0"]


def test_bad_input_exits_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "bad"
    rules.write_text("@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t90 : 80\t0x06/0xFF\t0x0000/0x0000\n")
    code, _, err = _run(["hsm", "compile", str(rules)], capsys)
    assert code == 2 and f"{rules}:1: dport: port range 90:80 is reversed" in err
    ids = tmp_path / "ids.rules"
    ids.write_text("\nalert tcp $HOME any -> any any (sid:1;)\n")
    good = tmp_path / "good"
    good.write_text("@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0x0000\n")
    code, _, err = _run(["hsm", "compile", str(good), "--ids", str(ids)], capsys)
    assert code == 2 and f"{ids}:2: source: unknown variable $HOME" in err
    code, _, err = _run(["hsm", "classify", str(good)], capsys, "1.2.3.4 5.6.7.8 1 2\n",
                        monkeypatch)  # fmt: skip
    assert code == 2 and "<stdin>:1:" in err


def test_variables_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good"
    good.write_text("@0.0.0.0/0\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x00/0x00\t0x0000/0x0000\n")
    ids = tmp_path / "ids.rules"
    ids.write_text("alert tcp $EXTERNAL_NET any -> $HOME_NET 80 (sid:1;)\n")
    argv = ["hsm", "classify", str(good), "--ids", str(ids),
            "--var", "HOME_NET=10.0.0.0/8", "--var", "EXTERNAL_NET=!$HOME_NET"]  # fmt: skip
    code, out, _ = _run(argv, capsys, "8.8.8.8 10.1.1.1 1 80 6\n10.2.2.2 10.1.1.1 1 80 6\n",
                        monkeypatch)  # fmt: skip
    assert code == 0 and out.splitlines() == ["0 1", "0 0"]


TOFINO_P4INFO = Path(__file__).parents[2] / "p4src/build/tofino/tofino-default.p4info.txtpb"


def test_compile_against_the_table_sizes_of_another_build(
    classbench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--p4info`: the Tofino build's tables are smaller (bf-p4c names them `pipe.<name>`); a
    rule set HSM fits on v1model overflows them, and the error gives the Tofino budget."""
    limits = limits_from_p4info(TOFINO_P4INFO)
    assert limits[schema.ACL_CHAIN.addr_pair] == TNA_SIZES["ACL_ADDR_PAIR_TABLE_SIZE"] // 2
    rules = str(classbench_dir / "acl1_1k")
    assert _run(["hsm", "compile", rules, "--no-fallback"], capsys)[0] == 0
    argv = ["hsm", "compile", rules, "--no-fallback", "--p4info", str(TOFINO_P4INFO)]
    code, _, err = _run(argv, capsys)
    budget = TNA_SIZES["ACL_ADDR_PAIR_TABLE_SIZE"] // 2
    assert code == 2 and f"acl_addr_pair needs at least 16390 entries, budget is {budget}" in err
    code, out, _ = _run([*argv, "--acl-limit", "100", "--stats"], capsys)
    assert code == 0 and "profile: hsm" in out
    broken = tmp_path / "broken.txtpb"
    broken.write_text("tables { preamble { name: ")
    code, _, err = _run(["hsm", "compile", rules, "--p4info", str(broken)], capsys)
    assert code == 2 and f"--p4info {broken}:" in err


COMPACT_P4INFO = Path(__file__).parents[2] / "p4src/build/compact/opengate.p4info.txtpb"


def test_the_compact_build_holds_acl1_1k_in_its_other_partitions(
    classbench_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The compact build (`make run BUILD=compact`) gives the HSM chains' tables 32,768 entries
    a bank: acl1_1k, which HSM alone fits in the default build (241,472 entries in
    acl_verdict), takes the other ACL partitions there, and every table stays within the
    compact budget."""
    rules = str(classbench_dir / "acl1_1k")
    code, out, _ = _run(["hsm", "compile", rules, "--no-fallback", "--stats"], capsys)
    assert code == 0 and "hybrid:" not in out
    argv = ["hsm", "compile", rules, "--no-fallback", "--stats", "--p4info", str(COMPACT_P4INFO)]
    code, out, _ = _run(argv, capsys)
    assert code == 0 and "in acl2_*" in out, out
    limits = limits_from_p4info(COMPACT_P4INFO)
    assert limits[schema.ACL_CHAIN.final] == 32768
    rows = re.findall(r"^(\w+)\s+(\d+)\s+\d+$", out, re.MULTILINE)
    assert rows
    for table, entries in rows:
        if table != "total":
            assert int(entries) <= limits[table], (table, entries)


TNA_SIZES = {
    name: int(size)
    for name, size in re.findall(
        r"^#define (\w+_TABLE_SIZE)\s+(\d+)$",
        (Path(__file__).parents[2] / "p4src/include/arch/tna_sizes.p4").read_text(),
        re.MULTILINE,
    )
}
