#!/usr/bin/env python3
"""Starts inflight-server for a tensor/pipeline-parallel model, as the reference's
launch_triton_server.py does for tritonserver.

Leader mode (the default): `--world_size N` runs N copies of the server under mpirun; rank 0
serves HTTP/gRPC/metrics and the other ranks follow the model whose
tensor_parallel_size x pipeline_parallel_size is N. Across hosts, pass --hostfile (one line per
host, "host slots=K"); mpirun reaches the other hosts over ssh.

Orchestrator mode (--multi-model): one server process, which spawns tp x pp - 1 workers per
parallel model itself (MPI_Comm_spawn); --world_size must then be 1.

    scripts/launch_inflight_server.py --world_size 2 --model_repo repo
    scripts/launch_inflight_server.py --world_size 4 --model_repo repo --hostfile hosts -- --log-verbose 1
    scripts/launch_inflight_server.py --multi-model --model_repo repo
"""
import argparse
import os
import shlex
import shutil
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world_size", type=int, default=1, help="MPI ranks: tensor_parallel_size x pipeline_parallel_size")
    p.add_argument("--model_repo", required=True, help="the model repository")
    p.add_argument("--server", default=None, help="the inflight-server binary (default: build/apps/inflight-server)")
    p.add_argument("--http_port", type=int, default=None, help="default: the server's (8000)")
    p.add_argument("--grpc_port", type=int, default=None, help="default: the server's (8001)")
    p.add_argument("--metrics_port", type=int, default=None, help="default: the server's (8002)")
    p.add_argument("--hostfile", default=None, help="mpirun hostfile for several hosts")
    p.add_argument("--multi-model", dest="multi_model", action="store_true",
                   help="orchestrator mode: the server spawns each parallel model's workers itself")
    p.add_argument("--oversubscribe", action="store_true", help="allow more ranks than cores (tests, small machines)")
    p.add_argument("--dry-run", dest="dry_run", action="store_true", help="print the command instead of running it")
    p.add_argument("server_args", nargs=argparse.REMAINDER, help="-- then more inflight-server flags (other unknown flags pass too)")
    args, unknown = p.parse_known_args(argv)
    if args.world_size < 1:
        p.error("--world_size must be at least 1")
    if args.multi_model and args.world_size != 1:
        p.error("--multi-model (orchestrator mode) spawns the workers itself: --world_size must be 1")
    if args.server_args and args.server_args[0] == "--":
        args.server_args = args.server_args[1:]
    args.server_args = unknown + args.server_args
    return args


def build_command(args):
    here = os.path.dirname(os.path.abspath(__file__))
    server = args.server or os.path.join(here, "..", "build", "apps", "inflight-server")
    command = [server, "--model-repository", args.model_repo]
    for flag, port in (("--http-port", args.http_port), ("--grpc-port", args.grpc_port), ("--metrics-port", args.metrics_port)):
        if port is not None:
            command += [flag, str(port)]
    command += args.server_args
    env = {}
    if os.geteuid() == 0:
        # Open MPI's own opt-in for root (containers run as root).
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    if args.world_size == 1:
        return command, env
    # --enable-recovery: a rank that dies does not take the leader down; the leader reports
    # not ready and fails its requests instead.
    # --bind-to none: each rank runs several threads (compute, engine, and on rank 0 the
    # serving threads); binding a rank to one core makes them take turns at the scheduler tick.
    mpirun = ["mpirun", "-np", str(args.world_size), "--enable-recovery", "--bind-to", "none"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    if args.oversubscribe:
        mpirun.append("--oversubscribe")
    if args.hostfile:
        mpirun += ["--hostfile", args.hostfile]
    return mpirun + command, env


def main(argv):
    args = parse_args(argv)
    command, env = build_command(args)
    if args.dry_run:
        print(" ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "") + shlex.join(command))
        return 0
    if command[0] == "mpirun" and shutil.which("mpirun") is None:
        print("launch_inflight_server: mpirun is missing (apt-get install openmpi-bin)", file=sys.stderr)
        return 1
    os.environ.update(env)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
