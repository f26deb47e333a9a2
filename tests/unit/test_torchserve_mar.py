"""The .mar reader (runtimes/torchserve/mar.py): archives are unpacked whole or not at all, and
nothing in one may land outside its folder or grow past its bounds; the worker's frames are read
whole, and a handler's answers are encoded as TorchServe's frame encodes them (predict.py)."""

from __future__ import annotations

import io
import json
import stat
import uuid
import zipfile
from pathlib import Path

import pytest

from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes.torchserve import frames, predict
from rosettaserve.runtimes.torchserve.mar import Limits, open_archive, safe_member_path

MANIFEST = {"runtime": "python", "model": {"modelName": "m", "handler": "handler.py"}}


def mar(path: Path, members: dict[str, bytes], manifest: object = MANIFEST) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        if manifest is not None:
            zf.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest))
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_an_archive_unpacks_with_its_manifest(tmp_path: Path) -> None:
    path = mar(tmp_path / "m.mar", {"handler.py": b"x = 1\n", "sub/extra.txt": b"e"})
    archive = open_archive(path)
    try:
        assert archive.handler == "handler.py"
        assert (archive.folder / "handler.py").read_bytes() == b"x = 1\n"
        assert (archive.folder / "sub" / "extra.txt").read_bytes() == b"e"
    finally:
        archive.remove()
    assert not archive.folder.exists()


def test_an_unpacked_folder_is_served_in_place(tmp_path: Path) -> None:
    (tmp_path / "MAR-INF").mkdir()
    (tmp_path / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(MANIFEST))
    archive = open_archive(tmp_path)
    archive.remove()  # not ours: left alone
    assert archive.folder == tmp_path
    assert tmp_path.exists()


@pytest.mark.parametrize("name", ["../evil.py", "/etc/evil", "a/../../evil", "C:/evil", "..\\x"])
def test_members_that_leave_the_folder_are_refused(tmp_path: Path, name: str) -> None:
    path = mar(tmp_path / "m.mar", {name: b"x"})
    with pytest.raises(ConfigError, match="outside its folder"):
        open_archive(path)
    assert not (tmp_path / "evil.py").exists()


def test_a_safe_member_path_keeps_its_parts() -> None:
    assert safe_member_path("a/b/c.py").parts == ("a", "b", "c.py")


def test_links_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.mar"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("MAR-INF/MANIFEST.json", json.dumps(MANIFEST))
        link = zipfile.ZipInfo("link")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(ConfigError, match="symbolic link"):
        open_archive(path)


def test_bounds_on_members_and_bytes(tmp_path: Path) -> None:
    path = mar(tmp_path / "m.mar", {f"f{i}": b"x" * 100 for i in range(5)})
    with pytest.raises(ConfigError, match="members"):
        open_archive(path, Limits(members=3))
    with pytest.raises(ConfigError, match="bytes"):
        open_archive(path, Limits(unpacked_bytes=200))


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, "no MAR-INF/MANIFEST.json"),
        ({"model": {}}, "names no handler"),
        ([1, 2], "names no handler"),
        ({"model": {"handler": 3}}, "names no handler"),
    ],
)
def test_a_bad_manifest_says_why(tmp_path: Path, manifest: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_archive(mar(tmp_path / "m.mar", {"h.py": b""}, manifest))


def test_a_manifest_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "m.mar"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("MAR-INF/MANIFEST.json", "{nope")
    with pytest.raises(ConfigError, match="not JSON"):
        open_archive(path)


def test_a_file_that_is_no_zip(tmp_path: Path) -> None:
    (tmp_path / "m.mar").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="not a model archive"):
        open_archive(tmp_path / "m.mar")
    assert not list(tmp_path.glob("rosettaserve-*"))


def frame(code: int, message: bytes, replies: list[bytes]) -> bytes:
    def field(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data

    out = code.to_bytes(4, "big") + field(message)
    for i, body in enumerate(replies):
        out += field(f"id{i}".encode()) + field(b"text/plain") + (200).to_bytes(4, "big")
        out += field(b"OK") + (1).to_bytes(4, "big") + field(b"k") + field(b"v") + field(body)
    return out + (-1).to_bytes(4, "big", signed=True)


def test_a_predict_response_frame_is_read_whole() -> None:
    got = frames.parse(frame(200, b"Prediction success", [b"a", b"bc"]))
    assert (got.code, got.message) == (200, "Prediction success")
    assert [(r.request_id, r.body, r.headers) for r in got.replies] == [
        ("id0", b"a", {"k": "v"}),
        ("id1", b"bc", {"k": "v"}),
    ]
    assert got.replies[0].content_type == "text/plain"


@pytest.mark.parametrize("cut", [1, 5, 20, 40])
def test_a_cut_or_padded_frame_is_refused(cut: int) -> None:
    whole = frame(200, b"ok", [b"body"])
    with pytest.raises(frames.FrameError):
        frames.parse(whole[:-cut])
    with pytest.raises(frames.FrameError):
        frames.parse(whole + b"\x00")


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (b"\x00raw", b"\x00raw"),
        (bytearray(b"buf"), b"buf"),
        ("t\u00e9xt", "t\u00e9xt".encode()),
        ([[1.5, -2.0]], b"[\n  [\n    1.5,\n    -2.0\n  ]\n]"),
        ({"a": "\u00e9", "n": None}, b'{\n  "a": "\\u00e9",\n  "n": null\n}'),
        (float("nan"), b"NaN"),
    ],
)
def test_answers_are_encoded_as_torchserves_frame_encodes_them(answer: object, body: bytes) -> None:
    assert predict.encode(answer) == body


def test_a_tensor_answer_is_what_torch_save_writes() -> None:
    torch = pytest.importorskip("torch")
    got = torch.load(io.BytesIO(predict.encode(torch.tensor([1.5, -2.0]))))
    assert got.tolist() == [1.5, -2.0]


def test_an_answer_no_rule_encodes_is_refused() -> None:
    with pytest.raises(predict.Unencodable):
        predict.encode(object())


def test_request_ids_are_uuids_and_never_repeat() -> None:
    ids = [predict.request_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(str(uuid.UUID(i)) == i for i in ids)
