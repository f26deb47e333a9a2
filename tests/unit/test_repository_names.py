"""Model names from model control requests (load, unload): a name the repository could not hold
as a folder is the client's error (400 / INVALID_ARGUMENT), never a traceback, and error
messages quote a long name only in part."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rosettaserve.core.dataplane import MAX_MODEL_NAME_BYTES, DataPlane, check_model_name
from rosettaserve.core.errors import InvalidInput, ModelNotFound, ServingError
from rosettaserve.repository.manager import ModelRepository
from rosettaserve.runtimes import create_model


def plane(root: Path) -> DataPlane:
    repository = ModelRepository(root, create_model)
    return DataPlane(repository, control=repository)


def refusal(call: object) -> ServingError:
    with pytest.raises(ServingError) as caught:
        asyncio.run(call)  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize(
    "name",
    [
        "m" * (MAX_MODEL_NAME_BYTES + 1),
        "m" * 100_000,
        "é" * 128,  # 128 characters, 256 bytes
        "模" * 86,  # 86 characters, 258 bytes
    ],
)
def test_a_name_longer_than_a_folder_name_is_invalid_in_load_and_unload(
    tmp_path: Path, name: str
) -> None:
    dp = plane(tmp_path)
    for call in (dp.load_model(name), dp.unload_model(name)):
        error = refusal(call)
        assert isinstance(error, InvalidInput)
        assert (error.http_status, error.kind.grpc) == (400, 3)
        assert f"more than a folder name may have ({MAX_MODEL_NAME_BYTES})" in error.message
        assert len(error.message) < 300  # the name quoted in part


def test_a_name_of_exactly_the_limit_is_looked_up(tmp_path: Path) -> None:
    dp = plane(tmp_path)
    for name in ("m" * MAX_MODEL_NAME_BYTES, "é" * 127 + "m"):
        assert check_model_name(name) == name
        assert isinstance(refusal(dp.load_model(name)), ModelNotFound)
        assert isinstance(refusal(dp.unload_model(name)), ModelNotFound)


def test_the_repository_answers_an_os_error_from_a_name_as_invalid_input(
    tmp_path: Path,
) -> None:
    """ENAMETOOLONG from the repository itself (called past the data plane's check)."""
    error = refusal(ModelRepository(tmp_path, create_model).load_model("m" * 300))
    assert isinstance(error, InvalidInput)
    assert "failed to load 'mmm" in error.message
    assert "File name too long" in error.message
    assert str(tmp_path) not in error.message  # the repository's path is not the client's


def test_an_unknown_folder_is_still_not_found(tmp_path: Path) -> None:
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "a_file").write_text("")
    for name in ("missing", ".hidden", "a_file", "bad\udc80\ud800name"):
        assert isinstance(refusal(plane(tmp_path).load_model(name)), ModelNotFound)
