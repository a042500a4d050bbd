"""A real csd for the tests: the binary in $COSCHED_CSD (the build's, set by
ctest), on a port of its choosing on 127.0.0.1, with a fresh data dir.

Its csd.yaml sets plaintext_role: admin itself rather than rely on the
default, and binds one viewer token. Without a csd the tests fail; a skipped
test fails the run too, so a green run always ran every test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import cosched
from cosched.v1 import agent_pb2, agent_pb2_grpc, types_pb2

START_TIMEOUT_S = 30


@dataclasses.dataclass
class Csd:
    address: str
    viewer_token: str
    log: Path


def _csd_binary() -> str:
    path = os.environ.get("COSCHED_CSD", "")
    if not path:
        pytest.fail("COSCHED_CSD is not set: it names the csd binary to test "
                    "against (ctest sets it to the build's)", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"COSCHED_CSD {path} is not an executable: build csd first "
                    "(cmake --build build --target csd)", pytrace=False)
    return path


def _wait_for_address(process: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        match = re.search(r"csd serving on (\S+),", log.read_text())
        if match:
            return match.group(1)
        if process.poll() is not None:
            pytest.fail(f"csd exited with {process.returncode} at start:\n"
                        f"{log.read_text()}", pytrace=False)
        time.sleep(0.05)
    pytest.fail(f"csd did not say where it serves within {START_TIMEOUT_S} s:\n"
                f"{log.read_text()}", pytrace=False)


@contextlib.contextmanager
def running_csd(root: Path, settings: str) -> Iterator[str]:
    """A csd with its store in root and csd.yaml settings (YAML lines)
    beside its own; yields the address it serves on."""
    config = root / "csd.yaml"
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"data_dir: {root / 'data'}\n"
        "metrics_listen: \"off\"\n" + settings)
    log = root / "csd.log"
    with open(log, "wb") as log_file:
        # No Unix socket: /run/cosched/csd.sock belongs to the host's csd.
        process = subprocess.Popen([_csd_binary(), "--config", str(config), "--socket", "off"],
                                   stdout=log_file, stderr=subprocess.STDOUT)
    try:
        yield _wait_for_address(process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def csd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Csd]:
    root = tmp_path_factory.mktemp("csd")
    viewer_token = secrets.token_hex(32)
    settings = (
        "plaintext_role: admin\n"
        "plaintext_agents: true\n"  # the fake agent below speaks over plaintext
        "tokens:\n"
        "  - role: viewer\n"
        "    name: python-test\n"
        f"    sha256: {hashlib.sha256(viewer_token.encode()).hexdigest()}\n")
    with running_csd(root, settings) as address:
        yield Csd(address, viewer_token, root / "csd.log")


@pytest.fixture
def client(csd: Csd) -> Iterator[cosched.Client]:
    with cosched.Client(csd.address) as c:
        yield c


class FakeAgent:
    """Speaks for a host as cs-agent would (plaintext callers may act for
    any host): a 2-core, 2-way SMT host that can isolate."""

    def __init__(self, address: str, host_id: str) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)
        self.host_id = host_id
        topology = types_pb2.Topology(cores=[
            types_pb2.Core(package_id=0, core_id=0, cpus=[0, 2]),
            types_pb2.Core(package_id=0, core_id=1, cpus=[1, 3])])
        capabilities = types_pb2.HostCapabilities(
            smt_active=True, core_sched=types_pb2.CORE_SCHED_SUPPORT_SUPPORTED,
            schedstats_enabled=True)
        self._stub.Register(agent_pb2.RegisterRequest(
            host_id=host_id, topology=topology, capabilities=capabilities,
            agent_version="python-test"), timeout=10)

    def report(self, vm_id: str, vcpus: int,
               stats: list[agent_pb2.StatsWindow] = ()) -> None:
        enforcement = types_pb2.VMEnforcement(
            state=types_pb2.ENFORCEMENT_STATE_ENFORCED, vcpus=vcpus)
        self._stub.Report(agent_pb2.ReportRequest(
            host_id=self.host_id,
            vms=[agent_pb2.VMObservation(vm_id=vm_id, enforcement=enforcement)],
            stats=stats), timeout=10)

    def close(self) -> None:
        self._channel.close()


@pytest.fixture
def agent(csd: Csd, request: pytest.FixtureRequest) -> Iterator[FakeAgent]:
    fake = FakeAgent(csd.address, f"hv-{request.node.name[:40].replace('_', '-')}")
    yield fake
    fake.close()


# A skipped test would let a run pass without testing anything.
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and exitstatus == 0:
        session.exitstatus = 1
        print(f"\nfailing the run: tests were skipped: {', '.join(_skipped)}")
