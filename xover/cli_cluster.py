"""`xover cluster up|status|down`: an emulated cluster on this machine (xover/emulation/cluster.py).

Each command imports emulation.cluster (and the process supervisor it uses) itself: this module loads
with every `xover` command line, `--help` included. Its failures end as every command's (cli_common.user_errors):
Ctrl-C and SIGTERM alike (interruptible), once the command has cleaned up after itself, say what was left."""

from __future__ import annotations

import shlex
from typing import Annotated, Any

import typer

from .cli_common import App, user_errors
from .console import console, counted, print_json, print_table
from .flags import whole_flag
from .run.supervise import interruptible

cluster_app = App(
    help="An emulated cluster on this machine: each host a network namespace with its own "
    "NIC shaped to a rate, reached over ssh like a real host (needs root).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

NODE_COLUMNS = [
    ("host", "name"),
    ("address", "address"),
    ("slots", "slots"),
    ("cores", "cores"),
    ("gpus", "gpus"),
    ("NIC", "rate"),
    ("namespace", "namespace"),
    ("sshd", "sshd"),
]


def _node_rows(status: dict[str, Any]) -> list[dict[str, Any]]:
    def listed(values: list[int]) -> str:
        return ",".join(map(str, values)) or "-"

    return [
        {
            **node,
            "cores": listed(node["cores"]),
            "gpus": listed(node["gpus"]),
            "namespace": "ok" if node["namespace"] else "MISSING",
            "sshd": "running" if node["sshd"] else "DOWN",
        }
        for node in status["nodes"]
    ]


@cluster_app.command()
def up(
    hosts: Annotated[
        int, typer.Option("--hosts", parser=whole_flag, help="How many emulated hosts (xo-h1, xo-h2, ...).")
    ] = 2,
    devices_per_host: Annotated[
        int,
        typer.Option(
            "--devices-per-host",
            parser=whole_flag,
            help="Devices (slots) per host: CPU cores, or GPUs on a GPU machine, given to each host in turn.",
        ),
    ] = 1,
    bandwidth: Annotated[
        str, typer.Option("--bandwidth", help="Rate of every host's NIC, each direction (e.g. 1gbit, 200mbit, 10gbit).")
    ] = "1gbit",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the cluster as one JSON object (its -H spec in 'hosts').")
    ] = False,
) -> None:
    """Build HOSTS emulated hosts (namespaces with a shaped NIC and a sshd each); prints their -H spec last."""
    from .emulation.cluster import cluster_up

    with (
        user_errors(interrupted="what was built of the cluster was removed (`xover cluster status` to see)"),
        interruptible(),
    ):
        status = cluster_up(hosts, devices_per_host, bandwidth)
    if json_out:
        print_json(status)
        return
    print_table(
        f"emulated cluster: {len(status['nodes'])} hosts, NICs shaped to {status['rate']} each way",
        NODE_COLUMNS,
        _node_rows(status),
    )
    if status["shared_devices"]:
        console.print(
            "[yellow]note:[/] more devices than this machine has: hosts share some (see the table), "
            "so their figures are not those of separate machines"
        )
    console.print(
        f"head node {status['head']} ({status['head_address']}): launchers run there through "
        f"`{shlex.join(status['launch_prefix'])} ...`; `xover cluster down` removes everything"
    )
    typer.echo(status["hosts"])


@cluster_app.command()
def status(json_out: Annotated[bool, typer.Option("--json", help="Print the state as JSON.")] = False) -> None:
    """Show the emulated hosts, their addresses, slots, NIC rate and health; exit 1 when none is up or it is broken."""
    from .emulation.cluster import cluster_status

    with user_errors(interrupted="the cluster was left as it was"), interruptible():
        state = cluster_status()
    if json_out:
        print_json(state)
    elif state["hosts"] is None:
        leftovers = state["leftover_namespaces"]
        console.print(
            "no emulated cluster is up"
            + (
                f"; namespaces left by a crash: {', '.join(leftovers)} (`xover cluster down` removes them)"
                if leftovers
                else ""
            )
        )
    else:
        print_table(
            f"emulated cluster: NICs at {state['rate']} each way, head {state['head']} "
            f"({state['head_address']}), subnet {state['subnet']}",
            NODE_COLUMNS,
            _node_rows(state),
        )
        if state["problem"]:
            console.print(f"[red]{state['problem']}[/]")
        typer.echo(state["hosts"])
    raise typer.Exit(0 if state["up"] else 1)


@cluster_app.command()
def down(json_out: Annotated[bool, typer.Option("--json", help="Print what was removed as JSON.")] = False) -> None:
    """Remove the emulated cluster and everything it started; safe to repeat, and after a crash."""
    from .emulation.cluster import cluster_down

    with user_errors(interrupted="the cluster may be half removed: run `xover cluster down` again"), interruptible():
        removed = cluster_down()
    if json_out:
        print_json(removed)
    elif removed["removed_namespaces"] or removed["removed_state_dir"]:
        console.print(
            f"removed namespaces {', '.join(removed['removed_namespaces']) or '-'}; stopped "
            f"{counted(removed['stopped_processes'], 'process', 'processes')}; removed the state directory"
        )
    else:
        console.print("no emulated cluster was up: nothing to remove")
