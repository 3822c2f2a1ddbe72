"""Optional OpenTelemetry spans for fusee's runs and steps (the ``otel`` extra: ``opentelemetry-api``).

``Engine.open(path, workflows=fusee.tracing.traced([checkout, ...]))``: each execution of a run's
workflow function (its first, and each load after a park or an open, which replays what is
recorded) is a span ``fusee.run <type>``, and each attempt of a step body that runs is a child span
``fusee.step <name>``.  Attributes: ``fusee.workflow.type``, ``fusee.workflow.id``, ``fusee.run``,
and for steps ``fusee.step.name``, ``fusee.step.attempt`` and ``fusee.step.key``.  A step replayed
from the journal runs no body and makes no span.  Without ``opentelemetry-api`` installed and a
tracer provider configured (``opentelemetry.trace.set_tracer_provider``), :func:`traced` returns
the workflows unchanged: nothing else changes.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from .step_context import _takes_step_context
from .workflow import Workflow

__all__ = ["traced", "enabled"]

_INSTRUMENTATION = "fusee"


def _trace() -> Any:
    """The ``opentelemetry.trace`` module, or None if it is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def enabled() -> bool:
    """Whether spans would be made: ``opentelemetry-api`` is installed and a tracer provider is set."""
    trace = _trace()
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def traced(workflows: Iterable[Workflow], tracer: Any = None) -> list[Workflow]:
    """``workflows`` whose runs and steps make spans with ``tracer`` (default: the configured
    provider's ``"fusee"`` tracer); the same workflows, unchanged, when tracing is not
    :func:`enabled` and no ``tracer`` is given."""
    wfs = list(workflows)
    if tracer is None:
        if not enabled():
            return wfs
        tracer = _trace().get_tracer(_INSTRUMENTATION)
    return [_traced(wf, tracer) for wf in wfs]


def _traced(wf: Workflow, tracer: Any) -> Workflow:
    fn = wf.fn

    def run(ctx: Any, input: Any) -> Any:
        attrs = {"fusee.workflow.type": wf.name, "fusee.workflow.id": ctx.workflow_id, "fusee.run": ctx.run_id}
        with tracer.start_as_current_span(f"fusee.run {wf.name}", attributes=attrs, record_exception=False,
                                          set_status_on_exception=False) as span:
            try:
                out = fn(_TracingCtx(ctx, tracer, wf.name), input)
            except BaseException as exc:
                span.set_attribute("fusee.run.outcome", type(exc).__name__)
                if _is_failure(exc):
                    span.record_exception(exc)
                    span.set_status(_trace().Status(_trace().StatusCode.ERROR, str(exc)[:200]))
                raise
            span.set_attribute("fusee.run.outcome", "returned")
            return out

    run.__name__ = getattr(fn, "__name__", "run")
    run.__qualname__ = getattr(fn, "__qualname__", run.__name__)
    out = Workflow(wf.name, wf.version, run)
    for k, v in getattr(wf, "__dict__", {}).items():  # concurrency limits and other options ride along
        out.__dict__.setdefault(k, v)
    return out


def _is_failure(exc: BaseException) -> bool:
    """Whether ``exc`` leaving a workflow function is a failure, not fusee's control flow (a park,
    a continue-as-new, a deadline, a cancel or terminate) or the process being stopped."""
    name = type(exc).__name__
    return isinstance(exc, Exception) and not name.startswith("_") and name not in ("Cancelled", "Terminated")


class _TracingCtx:
    """A :class:`fusee.Ctx` whose ``step`` bodies run inside a span; everything else is the Ctx's own."""

    __slots__ = ("_ctx", "_tracer", "_type")

    def __init__(self, ctx: Any, tracer: Any, wtype: str) -> None:
        self._ctx = ctx
        self._tracer = tracer
        self._type = wtype

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def __repr__(self) -> str:
        return repr(self._ctx)

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ctx, tracer, wtype = self._ctx, self._tracer, self._type
        takes = _takes_step_context(fn)

        def body(s: Any) -> Any:
            attrs = {
                "fusee.workflow.type": wtype,
                "fusee.workflow.id": ctx.workflow_id,
                "fusee.run": ctx.run_id,
                "fusee.step.name": s.name,
                "fusee.step.attempt": s.attempt,
                "fusee.step.key": s.key,
            }
            with tracer.start_as_current_span(f"fusee.step {s.name}", attributes=attrs):
                return fn(s) if takes else fn()

        return ctx.step(name, body, *args, **kwargs)
