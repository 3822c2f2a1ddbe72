"""Schedules on fusee: a cron schedule and an interval schedule, paused, triggered and listed.

The engine runs on a virtual clock (fusee.testing.VirtualClock), so a working day of schedule
passes in well under a second; with the real clock (the default) the same code fires in real time.

    python examples/fusee_schedule.py
"""

from __future__ import annotations

from datetime import datetime, timezone

import fusee
from fusee.testing import VirtualClock, wait_until

MONDAY = datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()  # 2024-01-01, a Monday, 00:00 UTC


@fusee.workflow("report")
def report(ctx, kind):
    return ctx.step("build", lambda: f"{kind} report built by {ctx.workflow_id}")


def show(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%a %H:%M")


def settle(engine: fusee.Engine, clock: VirtualClock) -> None:
    """Wait until every active schedule has handled what is due and waits for its next time (a virtual
    clock should not jump while a schedule arms its wait: that wait would end late)."""
    wait_until(
        lambda: all(d["next"] is None or d["next"] in clock.waiting() for d in engine.schedules()),
        what="the schedules waiting",
    )


def main() -> None:
    clock = VirtualClock(MONDAY)
    with fusee.Engine.open(None, workflows=[report], clock=clock) as engine:
        daily = engine.schedule("standup", report, cron="30 9 * * mon-fri", timezone="Europe/Paris", input="standup")
        hourly = engine.schedule("metrics", report, every="1h", input="metrics", overlap="allow")
        for d in engine.schedules():
            print(f"schedule {d['name']}: next {show(d['next'])} UTC")
        for hour in range(1, 13):  # half a day passes, an hour at a time
            settle(engine, clock)
            clock.advance_to(MONDAY + hour * 3600)
            settle(engine, clock)
            if hour == 6:
                hourly.pause()
                print("metrics paused at 06:00")
            if hour == 10:
                print("metrics triggered by hand:", hourly.trigger())
                hourly.resume()
        fired = [x["id"] for s in (daily, hourly) for x in s.describe()["recent"]]
        for id in sorted(fired):
            print("fired", id, "->", (daily if id.startswith("standup") else hourly).result(id, timeout=10))
        for d in engine.schedules():
            print(f"schedule {d['name']}: {d['state']}, fired {d['fired']}, next {show(d['next'])} UTC")
        daily.delete()
        print("after delete:", [d["name"] for d in engine.schedules()])


if __name__ == "__main__":
    main()
