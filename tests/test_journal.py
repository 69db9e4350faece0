"""The journal of a run (pytest_attn.core.journal) and ``pytest-attn recover``: each case kept as it ends, read
back whole or with its cut-short last line left out, held by its process while it lives, and turned into a run's
JSON marked partial that merge and a gate read as any run. Pure, and the command in-process: no child process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import CPU, record

from pytest_attn.core import journal as journal_module
from pytest_attn.core.files import InputError
from pytest_attn.core.journal import (
    DIED,
    Header,
    JournalWriter,
    case_line,
    decode,
    header_line,
    held,
    is_orphan,
    orphans,
    read_journal,
    recovered_run,
)
from pytest_attn.core.record import Record
from pytest_attn.plugin.benchjson import benchmark_entry
from pytest_attn.verdicts import cli
from pytest_attn.verdicts.baseline import check_run
from pytest_attn.verdicts.runs import partial_headline, records

HEADER = Header("ci-7", 4242, "2026-11-27T10:00:00+00:00", 5, {"node": "ci-7", "attn_device": CPU.as_machine_info()},
                {"id": "abc"}, "5.3.1")


def _entries(count: int = 2) -> list[dict]:
    return [benchmark_entry(record("sdpa-math", (i + 1) * 1e-3, device=CPU, test=f"test_suite.py::test_attn[c{i}]"))
            for i in range(count)]


def test_a_journal_reads_back_and_the_line_the_process_died_writing_is_left_out():
    entries = _entries(3)
    text = header_line(HEADER) + "".join(case_line(e) for e in entries)
    whole = decode(text, "j")
    assert whole.header == HEADER and list(whole.benchmarks) == entries and not whole.torn
    cut = decode(text + case_line(entries[0])[:40], "j")  # the fourth case, half written when the process died
    assert list(cut.benchmarks) == entries and cut.torn
    unterminated = decode(text + case_line(entries[0]).rstrip("\n"), "j")  # all but its newline: whole, kept
    assert len(unterminated.benchmarks) == 4 and not unterminated.torn


@pytest.mark.parametrize(("text", "message"), [
    ("", "j is empty: the run died before it kept anything"),
    ('{"benchmarks": []}\n', "j is not a pytest-attn journal"),
    (header_line(HEADER) + "{not json\n" + case_line({"name": "x"}), "j: line 2 is not JSON"),
    (header_line(HEADER) + '{"other": 1}\n', "j: line 2 is not a kept case"),
    ('{"format": "pytest-attn journal 1", "host": "h"}\n', "j: its header is unreadable (KeyError: 'pid')"),
])
def test_a_damaged_or_foreign_journal_is_refused_naming_it(text, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode(text, "j")


def test_a_recovered_run_is_marked_partial_and_reads_as_a_run():
    entries = _entries(2)
    run = recovered_run(decode(header_line(HEADER) + "".join(map(case_line, entries)), "j"))
    assert check_run(run, "recovered") is run  # what a gate and a merge accept
    assert run["attn_partial"] == {"reason": f"{DIED} (pid 4242 on ci-7, started 2026-11-27T10:00:00+00:00)",
                                   "cases_measured": 2, "cases_selected": 5}
    assert [r.median_s for r in records(run)] == [1e-3, 2e-3]
    assert partial_headline(run) == "the process died after 2 of 5 cases: partial"
    assert run["machine_info"]["attn_device"]["kind"] == "cpu" and run["commit_info"] == {"id": "abc"}


def test_the_writer_holds_its_journal_while_it_lives_and_removes_it_when_the_run_ends(tmp_path):
    folder = tmp_path / "journals"
    writer = JournalWriter.open(folder, HEADER)
    for entry in _entries(2):
        writer.keep(entry)
    assert writer.path.parent == folder and writer.path.name.startswith("ci-7-4242-")
    assert held(writer.path) and not is_orphan(writer.path) and orphans(folder) == []  # its run goes on
    assert len(read_journal(writer.path).benchmarks) == 2  # on disk already
    writer.close(remove=False)  # as a process that dies leaves it: the lock gone with it
    assert not held(writer.path) and orphans(folder) == [writer.path]
    ended = JournalWriter.open(folder, HEADER)
    ended.close()  # a run that ended: its journal gone
    assert not ended.path.exists() and orphans(folder) == [writer.path]


def test_a_journal_is_never_opened_through_a_link_planted_at_its_name(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_module.secrets, "token_hex", lambda n: "00000000")
    target = tmp_path / "precious"
    target.write_text("keep me")
    folder = tmp_path / "journals"
    folder.mkdir()
    (folder / "ci-7-4242-00000000.jsonl").symlink_to(target)
    with pytest.raises(FileExistsError):
        JournalWriter.open(folder, HEADER)
    assert target.read_text() == "keep me"


def _orphan(folder: Path, count: int = 2) -> Path:
    writer = JournalWriter.open(folder, HEADER)
    for entry in _entries(count):
        writer.keep(entry)
    writer.close(remove=False)
    return writer.path


def test_recover_writes_the_run_marked_partial_and_removes_the_journal(tmp_path, capsys):
    path = _orphan(tmp_path / "journals")
    with path.open("a") as fh:
        fh.write('{"benchmark": {"na')  # the case it was writing when it died
    out = tmp_path / "out" / "recovered.json"
    assert cli.main(["recover", str(path), "--json", str(out)]) == cli.OK
    said = capsys.readouterr().out
    assert f"recovered 2 measured case(s) of the run that died ({DIED} (pid 4242" in said
    assert "the case it was writing when the process died was cut short: left out" in said
    assert not path.exists()
    run = json.loads(out.read_text())
    assert run["attn_partial"]["cases_measured"] == 2 and len(run["benchmarks"]) == 2
    assert Record.from_json(run["benchmarks"][0]["extra_info"]).median_s == 1e-3
    # pytest-attn merge reads it as any run, and its report says it is partial, never "no regression"
    assert cli.main(["merge", str(out), "--report", str(tmp_path / "rep"), "--baseline", "off"]) == cli.OK
    assert "the process died after 2 cases: partial (" in capsys.readouterr().out  # (a merge: of how many unknown)
    head = (tmp_path / "rep" / "summary.md").read_text().splitlines()[0]
    assert head == "### pytest-attn: the process died after 2 cases: partial; not gated: no baseline (2 NEW)"


def test_recover_finds_the_one_orphan_above_the_current_folder(tmp_path, monkeypatch, capsys):
    path = _orphan(tmp_path / ".pytest-attn" / "journals")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert cli.main(["recover", "--json", "r.json"]) == cli.OK
    assert (tmp_path / "sub" / "r.json").is_file() and not path.exists()
    assert cli.main(["recover", "--json", "r.json"]) == cli.USAGE
    assert "0 journals of runs that died in" in capsys.readouterr().out


def test_recover_refuses_a_journal_its_run_still_holds(tmp_path, capsys):
    writer = JournalWriter.open(tmp_path, HEADER)
    writer.keep(_entries(1)[0])
    try:
        assert cli.main(["recover", str(writer.path), "--json", str(tmp_path / "r.json")]) == cli.USAGE
        assert "is held by a run that is still going" in capsys.readouterr().out
        assert writer.path.exists() and not (tmp_path / "r.json").exists()
    finally:
        writer.close()
    empty = JournalWriter.open(tmp_path, HEADER)
    empty.close(remove=False)
    assert cli.main(["recover", str(empty.path), "--json", str(tmp_path / "r.json")]) == cli.USAGE
    assert "holds no measured case" in capsys.readouterr().out

