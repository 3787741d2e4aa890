"""The record's hyper-parallel version and commit, read without importing it."""

import subprocess

from sweep.engines import hyper_parallel as hp


def _git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_commit_of_a_checkout_is_recorded(tmp_path, monkeypatch):
    (tmp_path / "hyper_parallel").mkdir()
    (tmp_path / "hyper_parallel" / "__init__.py").write_text('"""hyper parallel interface"""\n')
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.setattr(hp, "package_dir", lambda: tmp_path / "hyper_parallel")
    info = hp.installed_version()
    assert info["hyper_parallel_commit"] == _git(tmp_path, "rev-parse", "HEAD")
    assert info["hyper_parallel_source"] == str(tmp_path)
    assert hp.describe_version(info).endswith(f"(commit {info['hyper_parallel_commit'][:7]})")


def test_a_copy_without_git_has_no_commit(tmp_path, monkeypatch):
    (tmp_path / "src" / "hyper_parallel").mkdir(parents=True)
    monkeypatch.setattr(hp, "package_dir", lambda: tmp_path / "src" / "hyper_parallel")
    monkeypatch.setattr(hp, "_direct_url_commit", lambda dist: None)
    monkeypatch.delenv(hp.COMMIT_ENV, raising=False)
    info = hp.installed_version()
    assert info["hyper_parallel_commit"] is None and info["hyper_parallel_commit_from"] is None
    assert "commit unknown: not a git checkout, no COMMIT file" in hp.describe_version(info)


def test_an_archive_export_records_its_commit_from_a_commit_file_or_the_environment(tmp_path, monkeypatch):
    sha = "fdd0a80" + "0" * 33
    (tmp_path / "src" / "hyper_parallel").mkdir(parents=True)
    monkeypatch.setattr(hp, "package_dir", lambda: tmp_path / "src" / "hyper_parallel")
    monkeypatch.setattr(hp, "_direct_url_commit", lambda dist: None)
    monkeypatch.setenv(hp.COMMIT_ENV, "abc1234")
    (tmp_path / "src" / "COMMIT").write_text(sha + "\n")
    info = hp.installed_version()
    assert (info["hyper_parallel_commit"], info["hyper_parallel_commit_from"]) == (sha, "COMMIT file")
    assert hp.describe_version(info).endswith("(commit fdd0a80)")
    (tmp_path / "src" / "COMMIT").write_text("not a sha\n")
    info = hp.installed_version()
    assert (info["hyper_parallel_commit"], info["hyper_parallel_commit_from"]) == ("abc1234", "env")


def test_a_vcs_install_records_pips_commit():
    class Dist:
        def __init__(self, text):
            self.text = text

        def read_text(self, name):
            return self.text if name == "direct_url.json" else None

    vcs = '{"url": "https://github.com/x/hyper-parallel", "vcs_info": {"vcs": "git", "commit_id": "0123abcd"}}'
    assert hp._direct_url_commit(Dist(vcs)) == "0123abcd"
    assert hp._direct_url_commit(Dist('{"url": "file:///src", "dir_info": {"editable": true}}')) is None
    assert hp._direct_url_commit(None) is None


def test_mindspore_api_is_read_from_the_package(tmp_path, monkeypatch):
    """Decided by where fully_shard is, not by its name in the text of ``__init__.py``
    (each layout: tests/unit/test_hyper_parallel_entry.py)."""
    pkg = tmp_path / "hyper_parallel"
    pkg.mkdir()
    monkeypatch.setattr(hp, "package_dir", lambda: pkg)
    (pkg / "__init__.py").write_text("from hyper_parallel.core.hsdp.api import hsdp\n")
    assert hp.mindspore_api() == "hsdp"
    # the name in the text, but no such module and no MindSpore platform module: hsdp
    (pkg / "__init__.py").write_text("from hyper_parallel.core.fully_shard.api import fully_shard\n")
    assert hp.mindspore_api() == "hsdp"
    monkeypatch.setattr(hp, "package_dir", lambda: None)
    assert hp.mindspore_api() is None and hp.installed_version() == {}
