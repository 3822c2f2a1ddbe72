"""LLM-style token streaming on fusee: a step yields the tokens of a canned answer into a durable stream,
a reader prints them as they arrive, and the engine stops in the middle of the answer.

After the restart the run replays its journal: the step (its ``Step`` not recorded) runs again and goes
on after the tokens it had recorded (``Stream.resume()``), and the reader reconnects at the offset it
had reached.  Every token is printed once, in order; a token read is never taken back.

    python examples/fusee_stream.py
"""

from __future__ import annotations

import sys
import tempfile

import gevent

import fusee

ANSWER = (
    "Durable execution means every step's result is written to a journal before anyone sees it, "
    "so a crash loses nothing that was acknowledged and the run picks up where it stopped."
)
TOKENS = [w + " " for w in ANSWER.split(" ")]
TOKENS[-1] = TOKENS[-1].rstrip()


@fusee.workflow("chat")
def chat(ctx, question):
    out = ctx.stream("tokens")

    def generate(s):
        start = out.resume()  # tokens an earlier run of this step recorded: go on after them
        for token in TOKENS[start:]:
            gevent.sleep(0.005)  # the model thinking
            out.write(token)
        return len(TOKENS)

    n = ctx.step("llm", generate)
    out.close()
    return {"question": question, "tokens": n}


def read(engine: fusee.Engine, offset: int, stop_after: int | None = None) -> int:
    """Print tokens of the answer from ``offset`` as they arrive; return the new offset."""
    for token in engine.read_stream("q-1", "tokens", offset=offset, timeout=30):
        sys.stdout.write(token)
        sys.stdout.flush()
        offset += 1
        if stop_after is not None and offset >= stop_after:
            break
    return offset


def main() -> None:
    with tempfile.TemporaryDirectory() as path:
        engine = fusee.Engine.open(path, workflows=[chat])
        engine.start(chat, "q-1", "what is durable execution?")
        offset = read(engine, 0, stop_after=len(TOKENS) // 2)
        engine.shutdown()  # stops the run in the middle of its step
        print(f"\n-- engine stopped after {offset} tokens; reopening --")
        with fusee.Engine.open(path, workflows=[chat]) as engine:
            offset = read(engine, offset)
            print(f"\n-- stream closed after {offset} tokens --")
            print("result:", engine.result("q-1", timeout=30))
            chunks = list(engine.read_stream("q-1", "tokens"))
            print("again from offset 0:", "".join(chunks) == ANSWER, len(chunks), "tokens")


if __name__ == "__main__":
    main()
