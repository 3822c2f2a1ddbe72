"""The child of test_offload's SIGKILL test: runs with big inputs, results and signals, offloaded to
blobs; prints ``ack <id> <expected result>`` after each result it has (durable), until killed."""

from __future__ import annotations

import sys

import fusee

THRESHOLD = 200
sig = fusee.signal("more")


def big(tag: str, n: int) -> str:
    return (tag * (n // len(tag) + 1))[:n]


@fusee.workflow("offload.big")
def bigflow(ctx, inp):
    a = ctx.step("a", lambda: big("a" + inp["k"], 700))
    b = ctx.step("b", lambda: {"same": big("shared", 900)})  # the same content in every run: one blob
    extra = ctx.wait_for(sig)
    return {"len": len(inp["body"]) + len(a) + len(b["same"]) + len(extra), "tail": extra[-5:]}


def expected(i: int) -> dict:
    return {"len": 1000 + 700 + 900 + 600, "tail": big(f"s{i}", 600)[-5:]}


def main() -> None:
    path = sys.argv[1]
    with fusee.Engine.open(path, [bigflow], shards=2, segment_size=1 << 16, payload_offload_bytes=THRESHOLD) as eng:
        print("ready", flush=True)
        i = 0
        while True:
            wid = f"w{i}"
            eng.start(bigflow, wid, {"k": str(i), "body": big(f"in{i}", 1000)}, fusee.IdPolicy.ATTACH)
            eng.signal(wid, sig, big(f"s{i}", 600), dedup=wid)
            got = eng.result(wid, timeout=30)
            print("ack", wid, "ok" if got == expected(i) else f"WRONG {got!r}", flush=True)
            i += 1


if __name__ == "__main__":
    main()
