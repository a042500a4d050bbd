"""Every call of cosched.Client against a real csd (conftest.py)."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

import cosched
from cosched.v1 import agent_pb2, types_pb2

from conftest import Csd, FakeAgent


def test_tag_get_untag(client: cosched.Client) -> None:
    tagged = client.tag("vm-py-1", "acme", interference_classes=["avx512"],
                        thread_scope="vcpus")
    assert tagged.changed
    assert tagged.vm.vm_id == "vm-py-1"
    assert tagged.vm.tenant_id == "acme"
    assert tagged.vm.assignment.isolation == types_pb2.ISOLATION_LEVEL_VM
    assert tagged.vm.assignment.trust_group
    assert tagged.vm.thread_scope == types_pb2.THREAD_SCOPE_VCPUS
    assert not client.tag("vm-py-1", "acme", interference_classes=["avx512"],
                          thread_scope="vcpus").changed

    vm = client.get("vm-py-1")
    assert vm.tenant_id == "acme"
    assert list(vm.interference_classes) == ["avx512"]
    assert vm.assignment.trust_group == tagged.vm.assignment.trust_group

    assert client.untag("vm-py-1") > tagged.vm.assignment.revision
    with pytest.raises(cosched.NotFound):
        client.get("vm-py-1")


def test_tag_at_a_level_by_name_and_by_value(client: cosched.Client) -> None:
    by_name = client.tag("vm-py-level-1", "levels", isolation="tenant")
    by_value = client.tag("vm-py-level-2", "levels",
                          isolation=types_pb2.ISOLATION_LEVEL_TENANT)
    assert by_name.vm.assignment.isolation == types_pb2.ISOLATION_LEVEL_TENANT
    assert by_name.vm.assignment.trust_group == by_value.vm.assignment.trust_group
    assert cosched.isolation_name(by_name.vm.assignment.isolation) == "tenant"


def test_list_follows_pages_and_filters(client: cosched.Client) -> None:
    ids = [f"vm-py-list-{i}" for i in range(5)]
    for vm_id in ids:
        client.tag(vm_id, "lister")
    client.tag("vm-py-list-other", "someone-else")
    listed = [vm.vm_id for vm in client.list(tenant_id="lister", page_size=2)]
    assert sorted(listed) == ids


def test_policy_set_get_list(client: cosched.Client) -> None:
    assert not client.get_policy("tenant-py").explicitly_set
    policy = client.set_policy("tenant-py", default_isolation="tenant",
                               allowed_isolation=["vm", "tenant"], mode="auto",
                               forced_idle_budget_pct=10, apply=False)
    assert policy.explicitly_set
    assert policy.default_isolation == types_pb2.ISOLATION_LEVEL_TENANT
    assert list(policy.allowed_isolation) == [types_pb2.ISOLATION_LEVEL_VM,
                                              types_pb2.ISOLATION_LEVEL_TENANT]
    assert policy.mode == types_pb2.POLICY_MODE_AUTO
    assert policy.forced_idle_budget_pct == 10
    assert policy.HasField("apply") and not policy.apply

    assert client.get_policy("tenant-py") == policy
    assert "tenant-py" in [p.tenant_id for p in client.list_policies(page_size=1)]
    assert client.tag("vm-py-policy", "tenant-py").vm.assignment.isolation == \
        types_pb2.ISOLATION_LEVEL_TENANT


def test_level_the_policy_forbids_is_failed_precondition(client: cosched.Client) -> None:
    client.set_policy("strict-py", default_isolation="vm", allowed_isolation=["vm"])
    with pytest.raises(cosched.FailedPrecondition) as refused:
        client.tag("vm-py-strict", "strict-py", isolation="none")
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "strict-py" in refused.value.message


def test_bad_id_is_invalid_argument_naming_the_field(client: cosched.Client) -> None:
    with pytest.raises(cosched.InvalidArgument) as refused:
        client.tag("bad id!", "acme")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.message.startswith("vm_id 'bad id!' must be")
    with pytest.raises(cosched.InvalidArgument, match="tenant_id"):
        client.tag("vm-py-ok", "bad tenant!")


def test_unknown_vm_is_not_found(client: cosched.Client) -> None:
    for call in (client.get, client.untag, client.explain):
        with pytest.raises(cosched.NotFound) as refused:
            call("vm-py-never-tagged")
        assert refused.value.code == grpc.StatusCode.NOT_FOUND
        assert "vm-py-never-tagged" in refused.value.message


def test_bad_names_are_refused_before_sending(client: cosched.Client) -> None:
    with pytest.raises(ValueError, match="isolation 'strict' must be one of "
                       "vm, tenant, none, dedicated"):
        client.tag("vm-py-x", isolation="strict")
    with pytest.raises(ValueError, match="isolation 9 is not a value of its enum"):
        client.place(2, isolation=9)
    with pytest.raises(ValueError, match="mode 'manual' must be one of fixed, auto"):
        client.set_policy("t", default_isolation="vm", mode="manual")
    with pytest.raises(ValueError, match="exactly one of vm_id, host_id, tenant, "
                       "trust_group; got vm_id, tenant"):
        client.stats(vm_id="a", tenant="b")


def test_each_call_has_a_deadline() -> None:
    # A listener that accepts connections and never answers: only the call's
    # own deadline can end it. (A 1 us deadline against a real csd was racy:
    # a fast answer on loopback could beat it.)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with cosched.Client(address, timeout=30) as client:
            started = time.monotonic()
            with pytest.raises(cosched.DeadlineExceeded) as refused:
                client.get("vm-py-deadline", timeout=0.5)
            waited = time.monotonic() - started
    assert refused.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    # The call's timeout, not the client's 30 s default, bounded the wait.
    assert waited < 20


def test_unreachable_csd_is_unavailable() -> None:
    # Port 1 on loopback: nothing listens there.
    with cosched.Client("127.0.0.1:1", timeout=5) as client:
        with pytest.raises(cosched.Unavailable):
            client.get("vm-py-1")


def test_viewer_token_reads_and_may_not_tag(csd: Csd, client: cosched.Client) -> None:
    client.tag("vm-py-token", "acme")
    with cosched.Client(csd.address, token=csd.viewer_token) as viewer:
        assert viewer.get("vm-py-token").tenant_id == "acme"
        with pytest.raises(cosched.PermissionDenied) as refused:
            viewer.tag("vm-py-token", "acme", isolation="tenant")
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "token:python-test" in refused.value.message
    assert "viewer" in refused.value.message and "operator" in refused.value.message


def test_unknown_token_is_unauthenticated(csd: Csd) -> None:
    with cosched.Client(csd.address, token="not-a-token-csd-knows") as stranger:
        with pytest.raises(cosched.Unauthenticated):
            stranger.get("vm-py-token")


def test_place_chooses_a_host_that_fits(client: cosched.Client, agent: FakeAgent) -> None:
    placed = client.place(2, "acme", isolation="dedicated")
    # Other tests' hosts are alike: any of them may win, with one whole core.
    assert placed.host_id.startswith("hv-test-")
    assert len(placed.cores) == 1
    assert sorted(placed.cpus) in ([0, 2], [1, 3])
    assert placed.isolation == types_pb2.ISOLATION_LEVEL_DEDICATED
    assert agent.host_id in [c.host_id for c in placed.candidates]

    with pytest.raises(cosched.ResourceExhausted):
        client.place(1024, "acme", isolation="dedicated")


def test_explain_a_reported_vm(client: cosched.Client, agent: FakeAgent) -> None:
    client.tag("vm-py-explain", "acme")
    with pytest.raises(cosched.FailedPrecondition):
        client.explain("vm-py-explain")  # tagged, but on no host yet
    agent.report("vm-py-explain", vcpus=2)
    explained = client.explain("vm-py-explain")
    assert explained.vm_id == "vm-py-explain"
    assert explained.host_id == agent.host_id
    assert explained.vcpus == 2
    assert explained.reasons
    assert explained.current.vm_id == "vm-py-explain"


def test_stats_of_a_reported_vm(client: cosched.Client, agent: FakeAgent) -> None:
    client.tag("vm-py-stats", "acme")
    with pytest.raises(cosched.NotFound):
        client.stats(vm_id="vm-py-stats")
    end = time.time_ns()
    share = types_pb2.SiblingShare(run_ns=10**9, same_ns=4 * 10**8, idle_ns=3 * 10**8,
                                   foreign_ns=2 * 10**8, unknown_ns=10**8)
    window = agent_pb2.StatsWindow(
        start_unix_ns=end - 10**9, end_unix_ns=end, events=100,
        vms=[types_pb2.VMStats(vm_id="vm-py-stats", share=share)])
    agent.report("vm-py-stats", vcpus=2, stats=[window])
    # csd sums reported windows in the background: wait for this one.
    deadline = time.monotonic() + 10
    while True:
        try:
            stats = client.stats(vm_id="vm-py-stats", window_seconds=600)
            break
        except cosched.NotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert stats.windows == 1
    assert stats.total.run_ns == 10**9
    assert stats.total.foreign_ns == 2 * 10**8
    assert [v.vm_id for v in stats.vms] == ["vm-py-stats"]


def _load_example():
    path = Path(__file__).parent.parent / "examples" / "tag_on_create.py"
    spec = importlib.util.spec_from_file_location("tag_on_create", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nova_notification(event_type: str, uuid: str, project: str,
                       extra_specs: dict[str, str]) -> dict:
    flavor = {"nova_object.name": "FlavorPayload",
              "nova_object.data": {"name": "m1.large", "vcpus": 4,
                                   "extra_specs": extra_specs}}
    return {"event_type": event_type,
            "publisher_id": "nova-compute:compute-1",
            "payload": {"nova_object.name": "InstanceActionPayload",
                        "nova_object.data": {"uuid": uuid, "tenant_id": project,
                                             "host": "compute-1", "flavor": flavor}}}


def test_example_tags_instances_as_nova_creates_them(client: cosched.Client) -> None:
    example = _load_example()
    uuid = "5b7d6c6e-3f7b-4c8a-9a61-0d8f3c1e2a10"
    project = "9a1c3e7b2f5d4c6e8a0b1d3f5e7c9a2b"
    example.handle_notification(client, _nova_notification(
        "instance.create.end", uuid, project, {"cosched:isolation": "dedicated"}))
    vm = client.get(uuid)
    assert vm.tenant_id == project
    assert vm.assignment.isolation == types_pb2.ISOLATION_LEVEL_DEDICATED

    other = "0e4f2a9c-7d1b-4e3a-8c5f-6b2d9e1a7c34"
    example.handle_notification(client, _nova_notification(
        "instance.create.end", other, project, {}))
    assert client.get(other).assignment.isolation == types_pb2.ISOLATION_LEVEL_VM

    example.handle_notification(client, _nova_notification(
        "instance.update", other, project, {}))  # ignored
    example.handle_notification(client, _nova_notification(
        "instance.delete.end", uuid, project, {}))
    with pytest.raises(cosched.NotFound):
        client.get(uuid)
    example.handle_notification(client, _nova_notification(
        "instance.delete.end", uuid, project, {}))  # untagged already: no error


def test_example_script_reads_notifications_from_stdin(csd: Csd,
                                                     client: cosched.Client) -> None:
    uuid = "c3a9e1f0-2b4d-4e6f-8a1c-3e5f7a9b1d2e"
    lines = ["not json",
             json.dumps(_nova_notification("instance.create.end", uuid, "proj-a", {})),
             ""]
    script = Path(__file__).parent.parent / "examples" / "tag_on_create.py"
    run = subprocess.run([sys.executable, str(script), "--server", csd.address],
                         input="\n".join(lines), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert "notification not applied: 'not json'" in run.stderr
    assert f"tagged {uuid} (flavor m1.large) for project proj-a: vm" in run.stderr
    assert client.get(uuid).tenant_id == "proj-a"


def test_docs_show_the_tested_example() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "python-client.md").read_text()
    shown = docs.split("```python\ndef handle_notification", 1)[1].split("```", 1)[0]
    source = (Path(__file__).parent.parent / "examples" / "tag_on_create.py").read_text()
    assert "def handle_notification" + shown in source


def test_the_off_switch_is_audited_and_checks_its_target(client: cosched.Client,
                                                        agent: FakeAgent) -> None:
    with pytest.raises(cosched.InvalidArgument, match="exactly one of"):
        client.set_host_enforcement(off=True, reason="x")
    with pytest.raises(cosched.InvalidArgument, match="reason is required"):
        client.set_host_enforcement(off=True, reason="", host_id=agent.host_id)
    with pytest.raises(cosched.NotFound):
        client.set_host_enforcement(off=True, reason="x", host_id="hv-nowhere")
    off = client.set_host_enforcement(off=True, reason="python client test",
                                      host_id=agent.host_id)
    assert [h.host_id for h in off.hosts] == [agent.host_id]
    assert client.get_host(agent.host_id).enablement.state == types_pb2.HostEnablement.STATE_OFF
    client.set_host_enforcement(off=False, reason="python client test", host_id=agent.host_id)
    assert client.get_host(agent.host_id).enablement.state == \
        types_pb2.HostEnablement.STATE_ENFORCE


def test_a_rollout_starts_pauses_resumes_and_aborts(csd: Csd, client: cosched.Client,
                                                    agent: FakeAgent) -> None:
    # Last in this file: hosts an aborted rollout did not enable get no
    # cookies, which would change what Place answers the tests above.
    with pytest.raises(cosched.NotFound):
        client.rollout()
    with pytest.raises(cosched.InvalidArgument, match="stage_percents"):
        client.start_rollout([50, 10], 3600)
    # Every registered host enforces: a rollout only enables, so there is
    # nothing for it to do.
    with pytest.raises(cosched.FailedPrecondition, match="already enforces"):
        client.start_rollout([50, 100], 3600)
    setting = client.set_new_hosts(types_pb2.NEW_HOSTS_WAIT_FOR_ROLLOUT, reason="staged")
    assert setting.new_hosts == types_pb2.NEW_HOSTS_WAIT_FOR_ROLLOUT
    assert client.rollout().rollout_id == ""
    waiting = FakeAgent(csd.address, "hv-waits")
    try:
        assert client.get_host("hv-waits").waits_for_rollout
    finally:
        waiting.close()
    started = client.start_rollout([50, 100], 3600)
    assert started.state == types_pb2.Rollout.STATE_RUNNING
    assert list(started.stage_percents) == [50, 100]
    # csd's own health: one replica on SQLite, leading.
    status = client.status()
    assert [r.store for r in status.replicas] == ["sqlite"]
    assert status.replicas[0].leader and status.replicas[0].store_reachable
    # The one waiting host is stage 1's: its record names the rollout.
    assert started.enabled_count == 1
    assert client.get_host("hv-waits").enabled_by_rollout == started.rollout_id
    with pytest.raises(cosched.FailedPrecondition):
        client.start_rollout([100], 3600)

    paused = client.pause_rollout(reason="python client test")
    assert paused.state == types_pb2.Rollout.STATE_PAUSED
    assert client.rollout().rollout_id == started.rollout_id
    with pytest.raises(cosched.FailedPrecondition):
        client.resume_rollout(rollout_id="not-the-current-one")
    resumed = client.resume_rollout(rollout_id=started.rollout_id)
    assert resumed.state == types_pb2.Rollout.STATE_RUNNING
    aborted = client.abort_rollout(reason="python client test")
    assert aborted.state == types_pb2.Rollout.STATE_ABORTED

    host = client.get_host(agent.host_id)
    assert host.host_id == agent.host_id
    assert host.connected_replica == ""  # SQLite: one csd, no replicas
    with pytest.raises(cosched.NotFound):
        client.get_host("hv-never-registered")
