"""``python -m agentplane_redis``: the operator CLI."""

from .cli import main

main(prog_name="agentplane-redis")
