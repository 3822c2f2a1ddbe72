"""The decisions of the process model and of OTP's behaviours, as pure functions.

Nothing here starts a process, touches a clock, a thread or a file: each function
takes what it needs (the mailbox, the signal, ``now``...) and answers what to do.
The effectful modules one level up carry the answers out.  Each module is named
for the module that asks it:

=====================  ==========================================================
``signal``             what an exit signal does to its receiver (``ensemble._process``)
``receive``            which message a selective receive takes
``life``               a process's life states (running, hibernated, exiting...)
``timer``              the timer table: when timers fire, in what order (``ensemble.timer``)
``request``            which message answers an asynchronous request (``gen_server``)
``gen_server``         what ``init`` and the callbacks' returns mean
``gen_statem``         a state machine's returns, event queue and timeouts
``gen_event``          what a handler's return means and who is told
``supervisor``         restart or not, how often, whom, and when to give up
``childspec``          whether supervisor flags and child specs are good
``application``        application spec checks, start order, what an exit means
``values``             the immutable answers' base and guarded equality (:func:`same`)
=====================  ==========================================================

Each has hypothesis laws in ``tests/ensemble``; ``tests/test_imports.py`` checks that
none imports anything effectful.  Their former top-level names (``ensemble.select``,
``ensemble.order``, ...) still import: see :data:`ensemble.FORMER_NAMES`.
"""
