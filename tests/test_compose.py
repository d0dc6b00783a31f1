"""docker-compose.yml's cluster profile, run without Docker: the same server
arguments and the same ``redis-cli --cluster create`` line, on free loopback
ports, with Debian's redis-server. It must form three masters with a replica
each that the store finds from any node and can fail over."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agentplane_redis import RedisStore
from agentplane_redis.embedded import Cluster, Server, ServerUnavailable, free_port

from helpers import ev

pytestmark = pytest.mark.real
COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"


def test_the_cluster_profile_forms_three_masters_with_a_replica_each(request):
    if "redis7-cluster" not in request.config.getoption("--backends").split(","):
        pytest.skip("redis7-cluster not selected")
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    nodes = {
        name: s
        for name, s in services.items()
        if "cluster" in s.get("profiles", []) and s["command"][0] == "redis-server"
    }
    assert len(nodes) == 6
    cluster = Cluster("redis")
    ports: dict[str, int] = {}
    try:
        for service in nodes.values():
            args = list(service["command"][1:])
            at = args.index("--port")
            compose_port = args[at + 1]
            del args[at : at + 2]
            server = Server("redis", extra=(*args, "--cluster-port", str(free_port())))
            cluster.nodes.append(server.start())
            ports[compose_port] = server.port
        create = services["cluster-create"]["command"][-1].split("&&", 1)[1]
        line = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{ports[m[1]]}", create)
        cli = shutil.which("redis-cli")
        if cli is None:
            if request.config.getoption("--require-servers"):
                pytest.fail("redis-cli is not on PATH (apt-get install redis-tools)")
            pytest.skip("redis-cli is not on PATH")
        command = [cli, *line.split()[1:]]
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        cluster.wait_ok()
        masters = cluster.masters_now()
        assert len(masters) == 3
        assert all(len(cluster.replicas_of(m)) == 1 for m in masters)
        store = RedisStore.from_url(cluster.nodes[-1].url, tenant="acme", durability="acknowledged")
        assert store.events.buffer(ev("e1", "k/1")) is True
        store.close_connection()
    except ServerUnavailable as missing:
        if request.config.getoption("--require-servers"):
            pytest.fail(str(missing))
        pytest.skip(str(missing))
    finally:
        cluster.stop()
