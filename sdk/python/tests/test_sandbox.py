"""The SDK against a live `krt up`."""

import pytest

from kruntimes import KruntimesError, Sandbox


def test_commands_files_and_streams_round_trip(stack):
    sb = Sandbox.create("sdk-sandbox", env={"GREETING": "hi"}, state_dir=stack)
    r = sb.exec(shell="echo $GREETING; echo err >&2; exit 2")
    assert (r.state, r.exit_code, r.stdout, r.stderr) == ("Failed", 2, "hi\n", "err\n")
    assert sb.exec(argv=["cat"], stdin="piped").stdout == "piped"

    sb.mkdir("data")
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    sb.write_file("data/blob.bin", payload)
    assert sb.read_file("data/blob.bin") == payload
    sb.rename("data/blob.bin", "data/moved.bin")
    listing = sb.list_files("data")
    assert [(e["name"], e["type"], e["size"]) for e in listing["entries"]] == [("moved.bin", "file", len(payload))]
    sb.delete("data/moved.bin")
    assert sb.list_files("data")["entries"] == []

    events = list(sb.stream(shell="for i in 1 2; do echo line$i; done"))
    assert events[0]["type"] == "accepted" and events[-1]["type"] == "completed"
    assert [e["sequence"] for e in events] == sorted({e["sequence"] for e in events})
    assert "".join(e["data"] for e in events if e["type"] == "output") == "line1\nline2\n"

    assert Sandbox.open("sdk-sandbox", state_dir=stack).exec(argv=["true"]).state == "Succeeded"
    ended = sb.close()
    assert ended["phase"] == "Succeeded"


def test_errors_are_typed_and_carry_status_and_code(stack):
    sb = Sandbox.create("sdk-errors", state_dir=stack)
    with pytest.raises(KruntimesError) as e:
        sb.write_file("../escape", b"x")
    assert (e.value.status, e.value.code) == (400, "InvalidPath")
    with pytest.raises(KruntimesError) as e:
        sb.read_file("missing.txt")
    assert (e.value.status, e.value.code) == (404, "NotFound")
    with pytest.raises(ValueError):
        sb.exec(argv=["a"], shell="b")
    with pytest.raises(KruntimesError) as e:
        Sandbox.open("no-such-sandbox", state_dir=stack)
    assert e.value.code == "NotFound"
    assert sb.cancel()["phase"] == "Cancelled"
