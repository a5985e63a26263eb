"""``gputopo queue`` finds its cluster as every command does (issue 34): ``--cluster FILE``,
else the kubeconfig or in-cluster account, else the embedded demo cluster, said on stderr
(it used to stop with an error where ``nodes``, ``mutate``, ``place`` and ``serve`` use the
demo). A kubeconfig that is there but unusable is an error, not a silent demo."""

from __future__ import annotations

import json

import pytest

from gputopo.cli import main


@pytest.fixture
def no_cluster_access(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_without_cluster_and_kubeconfig_it_uses_the_demo_and_says_so(no_cluster_access,
                                                                     capsys):
    assert main(["queue"]) == 0
    out, err = capsys.readouterr()
    assert out == "no gangs waiting for a placement\n"
    assert "using the embedded demo cluster" in err
    assert main(["queue", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == []
    assert err.count("\n") == 1 and "embedded demo cluster" in err


def test_an_unusable_kubeconfig_is_an_error_naming_it(no_cluster_access, tmp_path,
                                                      monkeypatch, capsys):
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(bad))
    assert main(["queue"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"gputopo: error: queue: found kubeconfig {bad}, but could not load it"
