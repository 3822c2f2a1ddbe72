%% The Erlang side of bench/ensemble_core.py and bench/behaviours.py: the same work, timed in Erlang.
%% bench/_erlang.py compiles this with erlc into a temporary directory and runs
%%   erl -noshell -pa DIR -eval 'ens_bench:run(What, N)' -s init stop
%% which prints one line: the seconds the work took (a float).
-module(ens_bench).
-behaviour(gen_server).
-export([run/2, init/1, handle_call/3, handle_cast/2]).

run(What, N) ->
    Seconds = best(3, fun() -> time_it(What, N) end),
    io:format("~.9f~n", [Seconds]).

best(Reps, F) -> lists:min([F() || _ <- lists:seq(1, Reps)]).

time_it(What, N) ->
    T0 = erlang:monotonic_time(),
    work(What, N),
    erlang:convert_time_unit(erlang:monotonic_time() - T0, native, nanosecond) / 1.0e9.

%% ping-pong: ping sends its pid, pong replies; N round trips
work(ping_pong, N) ->
    Pong = spawn(fun pong/0),
    ping(Pong, N),
    Pong ! stop;
%% one-way: this process sends N ints to a sink that receives them all, then waits for it
work(one_way, N) ->
    Self = self(),
    Sink = spawn(fun() -> sink(N, 0, Self) end),
    send_n(Sink, N),
    receive {sum, _} -> ok end;
%% gen_server:call round trips from this process
work(call, N) ->
    {ok, Pid} = gen_server:start(?MODULE, 0, []),
    calls(Pid, N),
    gen_server:stop(Pid).

pong() ->
    receive
        stop -> ok;
        From -> From ! pong, pong()
    end.

ping(_, 0) -> ok;
ping(Pong, N) ->
    Pong ! self(),
    receive pong -> ping(Pong, N - 1) end.

send_n(_, 0) -> ok;
send_n(Sink, N) -> Sink ! N, send_n(Sink, N - 1).

sink(0, Sum, Parent) -> Parent ! {sum, Sum};
sink(N, Sum, Parent) -> receive I -> sink(N - 1, Sum + I, Parent) end.

calls(_, 0) -> ok;
calls(Pid, N) -> _ = gen_server:call(Pid, add), calls(Pid, N - 1).

init(N) -> {ok, N}.
handle_call(add, _From, N) -> {reply, N + 1, N + 1}.
handle_cast(_, N) -> {noreply, N}.
