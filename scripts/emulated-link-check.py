#!/usr/bin/env python3
"""Plain TCP rate from emulated host 0 to host 1 (standard library only).

Run it through the emulated cluster with one rank per host; rank 1 listens on host 1's
address, rank 0 sends for SECONDS (default 5) and rank 1 prints the rate received:

    scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 1 --rate 1gbit -- \
        python3 scripts/emulated-link-check.py [SECONDS]
"""
import os
import socket
import sys
import time

rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
host1 = ("10.77.0.2", 5001)  # scripts/emulated-cluster.sh: host i is 10.77.0.(i+1)

if rank == 1:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(host1)
    server.listen(1)
    conn, _ = server.accept()
    received, start = 0, None
    while True:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        if start is None:
            start = time.time()
        received += len(chunk)
    secs = time.time() - (start or time.time())
    rate = received * 8 / secs / 1e6 if secs > 0 else 0.0
    print(f"tcp host 0 -> host 1: {received} bytes in {secs:.2f} s = {rate:.1f} Mbit/s")
elif rank == 0:
    for _ in range(100):
        try:
            conn = socket.create_connection(host1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("cannot connect to host 1")
    block = b"x" * (1 << 20)
    end = time.time() + seconds
    while time.time() < end:
        conn.sendall(block)
    conn.close()
