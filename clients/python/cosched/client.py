"""cosched.Client: csd's ControlPlane API for control planes written in
Python (Nova, Neutron, in-house ones).

Calls take plain arguments and return the API's messages
(cosched.v1.types_pb2 / control_plane_pb2, documented in
proto/cosched/v1/*.proto), so every field the API has is there without a
copy of the schema here. Levels and thread scopes are given by the names
csctl uses ("vm", "tenant", "none", "dedicated"; "vcpus", "emulator",
"full") or by their enum values.

A Client holds one gRPC channel and may be shared by threads. Close it, or
use it as a context manager.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Callable, TypeVar

import grpc

from cosched import errors, transport

try:
    from cosched.v1 import control_plane_pb2
    from cosched.v1 import control_plane_pb2_grpc
    from cosched.v1 import types_pb2
except ImportError as e:  # the modules are generated, never committed
    raise ImportError(
        "cosched: the generated modules cosched.v1 are missing: build the "
        "project (build/clients/python) or run clients/python/generate.sh "
        "into the directory that holds the cosched package "
        f"(docs/python-client.md): {e}") from e

DEFAULT_TIMEOUT_S = 10.0  # csctl's --timeout default

_ISOLATION = {
    "vm": types_pb2.ISOLATION_LEVEL_VM,
    "tenant": types_pb2.ISOLATION_LEVEL_TENANT,
    "none": types_pb2.ISOLATION_LEVEL_NONE,
    "dedicated": types_pb2.ISOLATION_LEVEL_DEDICATED,
}
_THREAD_SCOPE = {
    "vcpus": types_pb2.THREAD_SCOPE_VCPUS,
    "emulator": types_pb2.THREAD_SCOPE_EMULATOR,
    "full": types_pb2.THREAD_SCOPE_FULL,
}
_MODE = {"fixed": types_pb2.POLICY_MODE_FIXED, "auto": types_pb2.POLICY_MODE_AUTO}

Level = str | int  # a name csctl uses, or the enum value
_Response = TypeVar("_Response")


def isolation_name(level: int) -> str:
    """The name csctl uses for a level ("vm", ...); "default" for
    UNSPECIFIED (the tenant's default, in requests)."""
    for name, value in _ISOLATION.items():
        if value == level:
            return name
    return "default"


def _enum(field: str, value: Level | None, names: dict[str, int]) -> int:
    """The enum value of a name or value; 0 (UNSPECIFIED: the default) for
    None or 0."""
    if value is None or value == 0:
        return 0
    if isinstance(value, str):
        if value not in names:
            raise ValueError(
                f"{field} '{value[:64]}' must be one of {', '.join(names)}")
        return names[value]
    if value not in names.values():
        raise ValueError(f"{field} {value} is not a value of its enum")
    return value


class Client:
    """A connection to csd (see cosched.transport for the rules).

    server: host:port, [IPv6]:port or unix:PATH; default 127.0.0.1:7443.
    ca_file, cert_file, key_file: mutual TLS, as csctl's --ca/--cert/--key.
    token: a bearer token, sent as "authorization: Bearer <token>".
    insecure: allow plaintext to a non-loopback address.
    timeout: seconds each call waits for csd, unless the call says
    otherwise; default 10, as csctl.

    ValueError naming the setting for a refused combination or a file that
    cannot be read. Each call raises cosched.Error (a subclass by code) when
    csd refuses it or cannot be reached in time.
    """

    def __init__(
        self,
        server: str = transport.DEFAULT_SERVER,
        *,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        token: str | None = None,
        insecure: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout {timeout} must be more than 0 seconds")
        credentials = transport.channel_credentials(
            server, ca_file, cert_file, key_file, token, insecure)
        if credentials is None:
            self._channel = grpc.insecure_channel(server)
        else:
            self._channel = grpc.secure_channel(server, credentials)
        self._stub = control_plane_pb2_grpc.ControlPlaneStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._timeout = timeout
        self.server = server

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, method: Callable[..., _Response], request: object,
              timeout: float | None) -> _Response:
        try:
            return method(request,
                          timeout=self._timeout if timeout is None else timeout,
                          metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def _pages(self, method: Callable[..., _Response], request: object,
               items: str, timeout: float | None) -> Iterator:
        # Each page is a call of its own, with its own timeout.
        while True:
            response = self._call(method, request, timeout)
            yield from getattr(response, items)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    # VMs.

    def tag(
        self,
        vm_id: str,
        tenant_id: str = "",
        *,
        isolation: Level | None = None,
        interference_classes: Iterable[str] = (),
        thread_scope: Level | None = None,
        timeout: float | None = None,
    ) -> control_plane_pb2.TagVMResponse:
        """Tags a VM (an idempotent upsert): .vm is the VM with its
        assignment, .changed is False when nothing changed. vm_id is the
        name the VM runs under or its UUID. An empty tenant_id is "default";
        no isolation is the tenant's default level."""
        request = control_plane_pb2.TagVMRequest(
            vm_id=vm_id, tenant_id=tenant_id,
            isolation=_enum("isolation", isolation, _ISOLATION),
            interference_classes=list(interference_classes),
            thread_scope=_enum("thread_scope", thread_scope, _THREAD_SCOPE))
        return self._call(self._stub.TagVM, request, timeout)

    def untag(self, vm_id: str, *, timeout: float | None = None) -> int:
        """Removes a VM's tagging; the revision at which it was removed.
        NotFound when it is not tagged."""
        return self._call(self._stub.UntagVM, control_plane_pb2.UntagVMRequest(vm_id=vm_id),
                          timeout).revision

    def get(self, vm_id: str, *, timeout: float | None = None) -> types_pb2.VM:
        """A tagged VM; NotFound when it is not tagged."""
        return self._call(self._stub.GetVM, control_plane_pb2.GetVMRequest(vm_id=vm_id), timeout)

    def list(
        self,
        *,
        tenant_id: str = "",
        host_id: str = "",
        trust_group: str = "",
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[types_pb2.VM]:
        """Tagged VMs matching every filter given, fetched a page (of
        page_size, default 100) at a time as the iterator is consumed."""
        request = control_plane_pb2.ListVMsRequest(tenant_id=tenant_id, host_id=host_id,
                                    trust_group=trust_group, page_size=page_size)
        return self._pages(self._stub.ListVMs, request, "vms", timeout)

    # Tenant policies.

    def get_policy(self, tenant_id: str, *,
                   timeout: float | None = None) -> types_pb2.TenantPolicy:
        """A tenant's policy; the built-in default (explicitly_set False)
        when none was set."""
        return self._call(self._stub.GetTenantPolicy,
                          control_plane_pb2.GetTenantPolicyRequest(tenant_id=tenant_id), timeout)

    def set_policy(
        self,
        tenant_id: str,
        *,
        default_isolation: Level,
        allowed_isolation: Iterable[Level] = (),
        mode: str | int | None = None,
        forced_idle_budget_pct: float | None = None,
        apply: bool | None = None,
        timeout: float | None = None,
    ) -> types_pb2.TenantPolicy:
        """Replaces a tenant's policy (give every setting to keep). An empty
        allowed_isolation allows every level; mode is "fixed" (default) or
        "auto". Needs the admin role."""
        policy = types_pb2.TenantPolicy(
            tenant_id=tenant_id,
            default_isolation=_enum("default_isolation", default_isolation, _ISOLATION),
            allowed_isolation=[_enum("allowed_isolation", level, _ISOLATION)
                               for level in allowed_isolation],
            mode=_enum("mode", mode, _MODE))
        if forced_idle_budget_pct is not None:
            policy.forced_idle_budget_pct = forced_idle_budget_pct
        if apply is not None:
            policy.apply = apply
        return self._call(self._stub.SetTenantPolicy,
                          control_plane_pb2.SetTenantPolicyRequest(policy=policy), timeout)

    def list_policies(self, *, page_size: int = 0,
                      timeout: float | None = None) -> Iterator[types_pb2.TenantPolicy]:
        """Every tenant policy that was set, a page at a time."""
        return self._pages(self._stub.ListTenantPolicies,
                           control_plane_pb2.ListTenantPoliciesRequest(page_size=page_size),
                           "policies", timeout)

    # What agents measured, and what-if answers.

    def stats(
        self,
        *,
        vm_id: str | None = None,
        host_id: str | None = None,
        tenant: str | None = None,
        trust_group: str | None = None,
        window_seconds: int = 0,
        timeout: float | None = None,
    ) -> control_plane_pb2.GetStatsResponse:
        """Sibling-sharing stats of exactly one subject over the last
        window_seconds (default 300). NotFound when nothing was reported
        for it in that span."""
        subjects = {"vm_id": vm_id, "host_id": host_id, "tenant": tenant,
                    "trust_group": trust_group}
        given = {k: v for k, v in subjects.items() if v is not None}
        if len(given) != 1:
            raise ValueError(
                "stats needs exactly one of vm_id, host_id, tenant, trust_group; "
                f"got {', '.join(given) or 'none'}")
        request = control_plane_pb2.GetStatsRequest(window_seconds=window_seconds, **given)
        return self._call(self._stub.GetStats, request, timeout)

    def place(
        self,
        vcpus: int,
        tenant_id: str = "",
        *,
        isolation: Level | None = None,
        interference_classes: Iterable[str] = (),
        load: float | None = None,
        pin: bool | None = None,
        timeout: float | None = None,
    ) -> control_plane_pb2.PlaceResponse:
        """The best host (and cores to pin to) for a new VM; creates and
        reserves nothing. ResourceExhausted when no host fits; the message
        counts the hosts each constraint ruled out. Needs the operator
        role."""
        request = control_plane_pb2.PlaceRequest(
            tenant_id=tenant_id, vcpus=vcpus,
            interference_classes=list(interference_classes),
            isolation=_enum("isolation", isolation, _ISOLATION))
        if load is not None:
            request.load = load
        if pin is not None:
            request.pin = pin
        return self._call(self._stub.Place, request, timeout)

    def explain(self, vm_id: str, *,
                timeout: float | None = None) -> control_plane_pb2.ExplainVMResponse:
        """What the policy engine would decide for a tagged VM on its host,
        and who set its current assignment. NotFound for a VM not tagged;
        FailedPrecondition when no agent reported it yet."""
        return self._call(self._stub.ExplainVM, control_plane_pb2.ExplainVMRequest(vm_id=vm_id),
                          timeout)

    # Hosts and staged rollouts (docs/operating.md).

    def get_host(self, host_id: str, *, timeout: float | None = None) -> types_pb2.Host:
        """A registered host: its topology, whether its agent is connected
        (and to which csd replica), whether Place would choose it and why
        not. NotFound for a host never registered."""
        return self._call(self._stub.GetHost, control_plane_pb2.GetHostRequest(host_id=host_id),
                          timeout)

    def status(self, *, timeout: float | None = None) -> control_plane_pb2.GetStatusResponse:
        """csd's health, replica by replica (what `csctl status` shows): the
        replica asked first, each with its version, whether it leads, its
        store and revision and its agents; one that could not be asked has
        `unreachable` set. Needs the viewer role."""
        return self._call(self._stub.GetStatus, control_plane_pb2.GetStatusRequest(), timeout)

    def start_rollout(
        self,
        stage_percents: Iterable[int],
        soak_seconds: int,
        *,
        selector: str = "",
        timeout: float | None = None,
    ) -> types_pb2.Rollout:
        """Turns cookies on host by host: stage by stage (percents of the
        hosts matching `selector`, strictly increasing, up to 100), each
        soaking `soak_seconds` before the next, halting on a host that
        regresses. InvalidArgument naming the field for bad stages, soak or
        selector; FailedPrecondition while another rollout is active. Needs
        the admin role."""
        request = control_plane_pb2.StartRolloutRequest(
            stage_percents=list(stage_percents), soak_seconds=soak_seconds, selector=selector)
        return self._call(self._stub.StartRollout, request, timeout)

    def rollout(self, *, timeout: float | None = None) -> types_pb2.Rollout:
        """The current (or last) rollout, with the fleet's new_hosts
        setting (rollout_id empty when only that was set). NotFound when
        neither was."""
        return self._call(self._stub.GetRollout, control_plane_pb2.GetRolloutRequest(), timeout)

    def pause_rollout(self, *, rollout_id: str = "", reason: str = "",
                      timeout: float | None = None) -> types_pb2.Rollout:
        """Stops advancing stages; enabled hosts stay enabled. `rollout_id`
        (empty: the current one) guards against acting on a newer rollout
        than the caller saw: a different one is FailedPrecondition."""
        return self._change_rollout(self._stub.PauseRollout, rollout_id, reason, timeout)

    def resume_rollout(self, *, rollout_id: str = "", reason: str = "",
                       timeout: float | None = None) -> types_pb2.Rollout:
        """Goes on from a paused or halted rollout's current stage."""
        return self._change_rollout(self._stub.ResumeRollout, rollout_id, reason, timeout)

    def abort_rollout(self, *, rollout_id: str = "", reason: str = "",
                      timeout: float | None = None) -> types_pb2.Rollout:
        """Enables no more hosts; those enabled stay enabled (their cookies
        are not torn down under running VMs)."""
        return self._change_rollout(self._stub.AbortRollout, rollout_id, reason, timeout)

    def set_new_hosts(self, new_hosts: int, *, reason: str = "",
                      timeout: float | None = None) -> types_pb2.Rollout:
        """What a host that registers for the first time does:
        types_pb2.NEW_HOSTS_ENFORCE (the default) or
        types_pb2.NEW_HOSTS_WAIT_FOR_ROLLOUT (it makes no cookies until a
        rollout enables it). Changes no registered host. Needs the admin
        role; audited."""
        return self._call(self._stub.SetNewHosts, control_plane_pb2.SetNewHostsRequest(
            new_hosts=new_hosts, reason=reason), timeout)

    def set_host_enforcement(self, *, off: bool, reason: str, host_id: str = "",
                             selector: str = "", all_hosts: bool = False,
                             timeout: float | None = None
                             ) -> control_plane_pb2.SetHostEnforcementResponse:
        """The off switch: with off=True the agents of the hosts named (one
        host_id, a label selector, or all_hosts for the whole fleet, later
        hosts included) take every cookie off their VMs' threads until it
        is switched on again. Exactly one target; a reason is required.
        Needs the admin role; audited."""
        return self._call(self._stub.SetHostEnforcement,
                          control_plane_pb2.SetHostEnforcementRequest(
                              host_id=host_id, selector=selector, all=all_hosts, off=off,
                              reason=reason), timeout)

    def _change_rollout(self, method: Callable[..., _Response], rollout_id: str, reason: str,
                        timeout: float | None) -> _Response:
        return self._call(method, control_plane_pb2.ChangeRolloutRequest(
            rollout_id=rollout_id, reason=reason), timeout)
