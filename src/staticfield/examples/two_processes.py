"""A jax.distributed job of two processes on one machine, and processes that agree.

Start it twice, as process 0 and process 1 (two shells, or one line):

    PROCESS_ID=0 python two_processes.py & PROCESS_ID=1 python two_processes.py; wait

Each process gets two CPU devices, and the two together hold one batch of 8 rows,
sharded over all 4 devices. With MISMATCH=1, process 1 calls the method with another
static value: both processes raise sf.HostMismatchError in seconds instead of hanging
in the program's first collective.

On a cluster (Cloud TPU, SLURM, Open MPI, Kubernetes) jax.distributed.initialize()
finds the coordinator, the process count and this process's id itself, and the two
CPU settings below are not needed.
"""

import os

# Before JAX starts: this process's CPU devices (2). One machine's CPU is one device
# unless this flag asks for more.
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU devices of two processes talk
jax.distributed.initialize(
    coordinator_address=os.environ.get("COORDINATOR_ADDRESS", "127.0.0.1:12355"),  # process 0 serves it
    num_processes=int(os.environ.get("NUM_PROCESSES", "2")),
    process_id=int(os.environ["PROCESS_ID"]),  # 0 or 1
)

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import staticfield as sf  # noqa: E402


class Scaler(sf.Struct):
    n: sf.Static[int] = 2

    @sf.jit_method
    def total(self, batch):
        return (batch * self.n).sum()


def run():
    me = jax.process_index()
    mesh = jax.make_mesh((jax.device_count(),), ("x",))  # all 4 devices, of both processes
    rows = np.ones((4, 3), np.float32)  # this process's 4 rows of the global batch
    batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), rows)
    n = 3 if os.environ.get("MISMATCH") and me == 1 else 2
    try:
        print(f"process {me}: total {float(Scaler(n=n).total(batch))}")
    except sf.HostMismatchError as exc:
        print(f"process {me}: sf.HostMismatchError: {exc}")


if __name__ == "__main__":
    run()
