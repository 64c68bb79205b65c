"""Orchestrate bench.py: start server process(es), then the client; repeat; report medians.

usage: run.py [--reps 3] [--rounds 5000] [--warmup 500] [--size 512] [--only aio,sync,asyncio]
              [--patterns pingpong,burst3,peers3] [--out results.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
PATTERNS = {  # name -> (k frames per peer per round, number of peers)
    "pingpong": (1, 1),
    "burst3": (3, 1),  # 3 frames back to back on one stream, 3 replies
    "peers3": (1, 3),  # 1 frame to each of 3 peers (3 server processes), 1 reply from each
}


def one_run(transport, k, peers, a):
    extra = []
    if transport == "asyncio-notls":  # calibration: same code as asyncio, plain TCP
        transport, extra = "asyncio", ["--notls"]
    common = [
        *extra,
        "--k",
        str(k),
        "--size",
        str(a.size),
        "--rounds",
        str(a.rounds),
        "--warmup",
        str(a.warmup),
    ]
    servers, ports = [], []
    for _ in range(peers):
        p = subprocess.Popen(
            [PY, os.path.join(HERE, "bench.py"), "server", transport, *common],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = p.stdout.readline()
        assert line.startswith("READY"), line
        ports.append(line.split()[1])
        servers.append(p)
    c = subprocess.run(
        [PY, os.path.join(HERE, "bench.py"), "client", transport, *common, "--ports", ",".join(ports)],
        stdout=subprocess.PIPE,
        text=True,
        timeout=600,
        check=True,
    )
    cres = json.loads(c.stdout.strip().splitlines()[-1])
    sres = []
    for p in servers:
        out, _ = p.communicate(timeout=60)
        sres.append(json.loads(out.strip().splitlines()[-1]))
    return cres, sres


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--only", default="aio,sync,asyncio")
    ap.add_argument("--patterns", default="pingpong,burst3,peers3")
    ap.add_argument("--out", default=os.path.join(HERE, "results.json"))
    a = ap.parse_args()
    import grpc

    print(
        f"python {sys.version.split()[0]}  grpcio {grpc.__version__}  size={a.size} "
        f"rounds={a.rounds} warmup={a.warmup} reps={a.reps}"
    )
    allres = []
    rows = []
    for pat in a.patterns.split(","):
        k, peers = PATTERNS[pat]
        for tr in a.only.split(","):
            runs = []
            for rep in range(a.reps):
                cres, sres = one_run(tr, k, peers, a)
                runs.append((cres, sres))
                allres.append(dict(pattern=pat, transport=tr, rep=rep, client=cres, servers=sres))
                print(
                    f"  {pat:8s} {tr:7s} rep{rep}: wall/round {cres['wall_us_per_round']:8.1f} us  "
                    f"cpu/msg P {cres['cpu_us_per_msg']:7.1f} us  Q "
                    + " ".join(f"{s['cpu_us_per_msg']:7.1f}" for s in sres)
                    + " us",
                    flush=True,
                )

            def med(f, runs=runs):
                return statistics.median(f(r) for r in runs)

            rows.append(
                (
                    pat,
                    tr,
                    med(lambda r: r[0]["wall_us_per_round"]),
                    med(lambda r: r[0]["cpu_us_per_msg"]),
                    med(lambda r: statistics.mean(s["cpu_us_per_msg"] for s in r[1])),
                )
            )
    with open(a.out, "w") as f:
        json.dump(allres, f, indent=1)
    print(
        f"\nmedian of {a.reps} runs; cpu/msg = process CPU / messages sent by that process "
        "(each message sent is matched by one received)"
    )
    print(
        f"{'pattern':9s} {'transport':9s} {'wall/round us':>14s} {'P cpu/msg us':>13s} {'Q cpu/msg us':>13s}"
    )
    for pat, tr, w, cp, cq in rows:
        print(f"{pat:9s} {tr:9s} {w:14.1f} {cp:13.1f} {cq:13.1f}")


if __name__ == "__main__":
    main()
