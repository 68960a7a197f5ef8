"""The hostfile's backend wired as mlx.launch wires it: ring addresses, or
JACCL's coordinator and RDMA device matrix; a malformed hostfile, an
unavailable backend or one we do not start is one line, nothing started."""

from __future__ import annotations

import json
import os

import pytest

from mlxchat.cli import ranks
from mlxchat.cli.ranks import HostfileError, read_hostfile, wiring


def hostfile(tmp_path, hosts, backend=""):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"backend": backend, "hosts": hosts}))
    return read_hostfile(path)


MACS = [{"ssh": "m1", "ips": ["10.0.0.1"], "rdma": [None, "rdma_en3", "rdma_en4"]},
        {"ssh": "m2", "ips": ["10.0.0.2"], "rdma": ["rdma_en3", None, "rdma_en5"]},
        {"ssh": "m3", "ips": ["10.0.0.3"], "rdma": ["rdma_en4", "rdma_en5", None]}]


def test_ring_is_the_address_list(tmp_path):
    hf = hostfile(tmp_path, [{"ssh": "a", "ips": ["10.0.0.1"]},
                             {"ssh": "b", "ips": ["10.0.0.2", "10.0.1.2"]}])
    wired = wiring(hf, 5000)
    assert (wired.backend, wired.env) == ("ring", [])
    assert json.loads(wired.files["MLX_HOSTFILE"]) == [["10.0.0.1:5000"],
                                                       ["10.0.0.2:5001", "10.0.1.2:5002"]]


def test_jaccl_is_a_coordinator_and_the_rdma_matrix(tmp_path):
    wired = wiring(hostfile(tmp_path, MACS, "jaccl"), 5000)
    assert wired.backend == "jaccl"
    assert wired.env == ["MLX_JACCL_COORDINATOR=10.0.0.1:5000"]
    assert json.loads(wired.files["MLX_IBV_DEVICES"]) == [h["rdma"] for h in MACS]
    # A ring of Macs needs only each one's neighbours.
    ring = [dict(h, rdma=list(h["rdma"])) for h in MACS] + \
        [{"ssh": "m4", "ips": ["10.0.0.4"], "rdma": ["rdma_en6", None, "rdma_en7", None]}]
    for h, last in zip(ring[:3], ("rdma_en6", None, "rdma_en7")):
        h["rdma"].append(last)
    wired = wiring(hostfile(tmp_path, ring, "jaccl-ring"), 5000)
    assert wired.backend == "jaccl" and "MLX_JACCL_RING=1" in wired.env
    with pytest.raises(HostfileError, match="no RDMA device is listed from m2 to m4"):
        wiring(hostfile(tmp_path, ring, "jaccl"), 5000)  # all pairs: m2 has none to m4


@pytest.mark.parametrize("change,message", [
    (lambda h: h[0].update(rdma=[None, "x"]), "m1 lists 2 RDMA devices; JACCL needs one per "
                                              "host (3), null for itself"),
    (lambda h: h[1]["rdma"].__setitem__(1, "x"), "m2's RDMA device to itself must be null"),
    (lambda h: h[2]["rdma"].__setitem__(0, None), "no RDMA device is listed from m3 to m1"),
    (lambda h: h[0].update(ips=[]), "m1 (rank 0) has no \"ips\""),
])
def test_a_malformed_jaccl_hostfile_is_one_line(tmp_path, change, message):
    hosts = [dict(h, rdma=list(h["rdma"])) for h in MACS]
    change(hosts)
    with pytest.raises(HostfileError) as err:
        wiring(hostfile(tmp_path, hosts, "jaccl"), 5000)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_unavailable_or_unknown_backend_starts_nothing(tmp_path, monkeypatch):
    import mlx.core as mx

    before = dict(os.environ)
    if not mx.distributed.is_available(backend="jaccl"):  # this Linux machine
        with pytest.raises(HostfileError, match="the jaccl backend is not available"):
            ranks.start(hostfile(tmp_path, MACS, "jaccl"), ["--model", "x"])
    with pytest.raises(HostfileError, match="backend 'mpi': mlxchat --hosts starts ring, "
                                            "jaccl, jaccl-ring"):
        ranks.start(hostfile(tmp_path, MACS, "mpi"), ["--model", "x"])
    assert dict(os.environ) == before  # nothing set, nothing started
